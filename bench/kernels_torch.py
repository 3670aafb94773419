#!/usr/bin/env python3
"""kernels_torch — PyTorch eager baselines for bench/kernels_bw.

The same ops on the same shapes and dtypes as kernels_bw (bf16 by default),
timed the same way (CUDA events around one call, the median of --reps after
--warmup calls), with GB/s over the same byte counts (the least each op must
read and write, formulas in kernels.c), so kiln GB/s / torch GB/s = torch
time / kiln time. Each baseline is the eager code Megatron-LM runs when its
fusions are off (several kernels where it has no fused one); where torch has
a one-call op too, both are timed (column `impl`):

  layer_norm fwd     F.layer_norm (fp32 weights as given when torch accepts
                     mixed dtypes, else cast to x's dtype: impl says which)
             bwd     torch.autograd.grad of it, for dx, dgamma, dbeta
  rms_norm   fwd     eager: (xf * rsqrt(mean(xf^2) + eps) * w).to(dt), xf = x.float()
                     F.rms_norm, where torch has it
             bwd     torch.autograd.grad of each, for dx, dgamma
  embedding  fwd     Megatron's VocabParallelEmbedding: at tp > 1 mask the ids
                     outside the partition, subtract vocab_start, zero them,
                     F.embedding, zero the masked rows (at tp = 1 F.embedding)
             bwd     torch.autograd.grad of that for the weight, then
                     main_grad.add_(grad) into the fp32 main_grad; the same
                     figure is listed against bwd_atomic and bwd_det
  bias_gelu  fwd     Megatron's bias_gelu formula, unjitted (several kernels);
                     F.gelu(x + bias, approximate="tanh")
             bwd     Megatron's bias_gelu_back formula, unjitted;
                     aten.gelu_backward(dy, x + bias, approximate="tanh")
  bias_swiglu fwd    a, b = chunk(x + bias, 2, -1); F.silu(a) * b
             bwd     Megatron's swiglu_back formula on x + bias
  bias_dropout_add fwd  residual + F.dropout(x + bias, p=0.1, training=True)
             bwd     torch.autograd.grad of it for x (dropout's backward)
  rope       fwd     Megatron/TE's eager rotate-half formula
                     (t * cos + rotate_half(t) * sin, cos/sin of the angles)
             bwd     torch.autograd.grad of it
  cross_entropy fwd  Megatron's vocab-parallel eager steps at TP = 1 (float(),
                     max, subtract, target mask, gather, exp, sum, log, and
                     the softmax it saves for the backward); F.cross_entropy
                     (reduction="none")
             stats   the same steps on this rank's partition, up to the sums
                     that go into the all-reduces
             bwd     Megatron's backward from its saved softmax (subtract 1 at
                     the target, scale by dloss, cast back to the dtype);
                     torch.autograd.grad of F.cross_entropy

Embedding: D and N (distinct ids in the partition, ids in it) are counted on
the ids this script draws, uniform the same way as kernels_bw's; the
backward also with kernels_bw's skewed ids ("zipf1.1": Zipf by id, exponent
1.1; "rep2048": uniform with one id at 2048 positions). The norms run at
hidden 4096, 8192, 12288 and 16384 unless --hidden is given.

usage: kernels_torch.py [--ops LIST] [--dtypes bf16,f16,f32] [--tokens N]
                        [--hidden LIST] [--vocab LIST] [--tp N] [--reps N]
                        [--warmup N] [--csv] [--smoke]
Without torch, or without a CUDA device, it prints why and exits 0.
"""
import argparse
import sys

from softmax_torch import time_ms  # CUDA events, median of reps: one timer for both

FAMILIES = ["layer_norm", "rms_norm", "embedding", "bias_gelu", "bias_swiglu",
            "bias_dropout_add", "rope", "cross_entropy"]
ROPE_B, ROPE_D, P, EPS = 4, 128, 0.1, 1e-5


def esize(torch, dt):
    return torch.tensor([], dtype=dt).element_size()


def dtype_name(torch, dt):
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[dt]


class Bench:
    def __init__(self, torch, args, emit):
        self.torch, self.args, self.emit = torch, args, emit
        self.F = torch.nn.functional

    def rand(self, shape, dtype, lo, hi):
        return self.torch.empty(shape, dtype=dtype, device="cuda").uniform_(lo, hi)

    def time(self, op, d, dt, shape, impl, nbytes, fn, grad=True):
        torch = self.torch
        try:
            with torch.enable_grad() if grad else torch.no_grad():
                ms = time_ms(torch, fn, self.args.warmup, self.args.reps)
        except torch.cuda.OutOfMemoryError:
            print(f"{op} {d} {shape} {impl}: skipped, out of memory")
            torch.cuda.empty_cache()
            return
        self.emit(op, d, dt, shape, impl, nbytes, ms)

    # ---- families: each takes the dtype's name and torch dtype, and a hidden or vocabulary

    def norm(self, dn, dt, h, wdt, rms):
        torch, F, t = self.torch, self.F, self.args.tokens
        es, ws = esize(torch, dt), esize(torch, wdt)
        name = "rms_norm" if rms else "layer_norm"
        shape = f"{t}x{h} w={dtype_name(torch, wdt)}"
        x = self.rand((t, h), dt, -4, 4).requires_grad_()
        w = self.rand((h,), wdt, 0.5, 1.5).requires_grad_()
        b = self.rand((h,), wdt, -0.5, 0.5).requires_grad_()
        dy = self.rand((t, h), dt, -1, 1)
        impls = []
        if rms:
            def eager(x, w):
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w).to(x.dtype)
            impls.append(("eager formula", eager, (x, w)))
            if hasattr(F, "rms_norm"):
                try:
                    F.rms_norm(x[:1], (h,), w, EPS)
                    impls.append(("F.rms_norm", lambda x, w: F.rms_norm(x, (h,), w, EPS).to(x.dtype),
                                  (x, w)))
                except RuntimeError:
                    pass
            fwd_b = 2 * t * h * es + h * ws + 4 * t
            bwd_b = 3 * t * h * es + 2 * h * ws + 4 * t
        else:
            try:
                F.layer_norm(x[:1], (h,), w, b, EPS)
                impls.append(("F.layer_norm", lambda x, w, b: F.layer_norm(x, (h,), w, b, EPS),
                              (x, w, b)))
            except RuntimeError:
                impls.append((f"F.layer_norm, weights cast to {dn}",
                              lambda x, w, b: F.layer_norm(x, (h,), w.to(dt), b.to(dt), EPS),
                              (x, w, b)))
            fwd_b = 2 * t * h * es + 2 * h * ws + 8 * t
            bwd_b = 3 * t * h * es + 3 * h * ws + 8 * t
        for impl, fn, ins in impls:
            self.time(name, "fwd", dn, shape, impl, fwd_b, lambda: fn(*ins), grad=False)
            y = fn(*ins)
            self.time(name, "bwd", dn, shape, f"autograd of {impl}", bwd_b,
                      lambda: torch.autograd.grad(y, ins, dy, retain_graph=True))
            y = None  # frees the graph

    def embedding(self, dn, dt, h, v):
        torch, F, t, tp = self.torch, self.F, self.args.tokens, self.args.tp
        es, shape = esize(torch, dt), f"{t}x{h} V={v} tp={tp}"
        start, end = 0, v  # this rank: rank 0 of tp
        ids = torch.randint(0, v * tp, (t,), dtype=torch.int64, device="cuda")
        inside = ids[ids < end]
        n_in, d = inside.numel(), torch.unique(inside).numel()
        weight = self.rand((v, h), dt, -1, 1).requires_grad_()
        main_grad = torch.zeros((v, h), dtype=torch.float32, device="cuda")
        dy = self.rand((t, h), dt, -1, 1)

        def fwd():  # megatron.core.tensor_parallel.layers.VocabParallelEmbedding.forward
            if tp > 1:
                input_mask = (ids < start) | (ids >= end)
                masked = ids.clone() - start
                masked[input_mask] = 0
            else:
                masked = ids
            out = F.embedding(masked, weight)
            if tp > 1:
                out[input_mask, :] = 0.0
            return out

        impl = "VocabParallelEmbedding eager" if tp > 1 else "F.embedding"
        self.time("embedding", "fwd", dn, shape, impl, 8 * t + d * h * es + t * h * es, fwd,
                  grad=False)
        y = fwd()

        def bwd():
            (g,) = torch.autograd.grad(y, weight, dy, retain_graph=True)
            main_grad.add_(g)

        # uniform ids, then kernels_bw's skewed ones: Zipf by id, one id at 2048 positions
        rep = min(t, 2048)
        for mark in ("", " zipf1.1", f" rep{rep}"):
            if mark == " zipf1.1":
                w = torch.arange(1, v * tp + 1, dtype=torch.float64, device="cuda") ** -1.1
                ids = torch.multinomial(w, t, replacement=True)
            elif mark:
                ids = torch.randint(0, v * tp, (t,), dtype=torch.int64, device="cuda")
                ids[torch.randperm(t, device="cuda")[:rep]] = v // 3
            if mark:
                inside = ids[ids < end]
                n_in, d = inside.numel(), torch.unique(inside).numel()
                y = fwd()
            b_bytes = 8 * t + n_in * h * es + 2 * d * h * 4
            try:
                ms = time_ms(torch, bwd, self.args.warmup, self.args.reps)
            except torch.cuda.OutOfMemoryError:
                print(f"embedding bwd {shape}{mark}: skipped, out of memory")
                return
            for d_name in ("bwd_atomic", "bwd_det"):
                self.emit("embedding", d_name, dn, shape + mark,
                          f"autograd of {impl} + main_grad.add_", b_bytes, ms)

    def elementwise(self, dn, dt, h, name):
        torch, F, t = self.torch, self.F, self.args.tokens
        es, shape = esize(torch, dt), f"{t}x{h}"
        dy = self.rand((t, h), dt, -1, 1)
        if name == "bias_gelu":
            x, bias = self.rand((t, h), dt, -4, 4), self.rand((h,), dt, -0.5, 0.5)

            def gelu_fwd(b, y):  # megatron/core/fusions/fused_bias_gelu.py, unjitted
                x = b + y
                return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

            def gelu_back(g, b, y):
                x = b + y
                tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
                ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + \
                    0.5 * (1 + tanh_out)
                return ff * g

            fb, bb = 2 * t * h * es + h * es, 3 * t * h * es + h * es
            self.time(name, "fwd", dn, shape, "Megatron bias_gelu formula", fb,
                      lambda: gelu_fwd(bias, x), grad=False)
            self.time(name, "fwd", dn, shape, "F.gelu(x + bias, tanh)", fb,
                      lambda: F.gelu(x + bias, approximate="tanh"), grad=False)
            self.time(name, "bwd", dn, shape, "Megatron bias_gelu_back formula", bb,
                      lambda: gelu_back(dy, bias, x), grad=False)
            self.time(name, "bwd", dn, shape, "aten.gelu_backward(dy, x + bias, tanh)", bb,
                      lambda: torch.ops.aten.gelu_backward(dy, x + bias, approximate="tanh"),
                      grad=False)
        elif name == "bias_swiglu":
            x, bias = self.rand((t, 2 * h), dt, -4, 4), self.rand((2 * h,), dt, -0.5, 0.5)

            def swiglu(y):
                a, b = torch.chunk(y, 2, -1)
                return F.silu(a) * b

            def swiglu_back(g, y):  # megatron/core/fusions/fused_bias_swiglu.py, unjitted
                y_1, y_2 = torch.chunk(y, 2, -1)
                return torch.cat((g * torch.sigmoid(y_1) * (1 + y_1 * (1 - torch.sigmoid(y_1))) * y_2,
                                  g * F.silu(y_1)), -1)

            self.time(name, "fwd", dn, shape, "F.silu(a) * b after the bias add",
                      3 * t * h * es + 2 * h * es, lambda: swiglu(x + bias), grad=False)
            self.time(name, "bwd", dn, shape, "Megatron swiglu_back formula",
                      5 * t * h * es + 2 * h * es, lambda: swiglu_back(dy, x + bias), grad=False)
        else:
            x = self.rand((t, h), dt, -4, 4).requires_grad_()
            bias, res = self.rand((h,), dt, -0.5, 0.5), self.rand((t, h), dt, -2, 2)
            fwd = lambda: res + F.dropout(x + bias, p=P, training=True)
            self.time(name, "fwd", dn, shape, "residual + F.dropout(x + bias)",
                      3 * t * h * es + h * es, fwd, grad=False)
            y = fwd()
            self.time(name, "bwd", dn, shape, "autograd of it (dropout backward)", 2 * t * h * es,
                      lambda: torch.autograd.grad(y, x, dy, retain_graph=True))

    def rope(self, dn, dt, h):
        torch, t = self.torch, self.args.tokens
        s, heads, es = t // ROPE_B, h // ROPE_D, esize(torch, dt)
        shape = f"s{s} b{ROPE_B} h{heads} d{ROPE_D}"
        x = self.rand((s, ROPE_B, heads, ROPE_D), dt, -4, 4).requires_grad_()
        dy = self.rand((s, ROPE_B, heads, ROPE_D), dt, -1, 1)
        angles = self.rand((s, ROPE_D // 2), torch.float32, 0, 6.28)
        freqs = torch.cat((angles, angles), -1).view(s, 1, 1, ROPE_D)

        def rotate_half(x):
            x1, x2 = torch.chunk(x, 2, dim=-1)
            return torch.cat((-x2, x1), dim=-1)

        def apply(t):  # megatron/core/models/common/embeddings/rope_utils.py, unfused
            rot_dim = freqs.shape[-1]
            t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
            cos_, sin_ = torch.cos(freqs).to(t.dtype), torch.sin(freqs).to(t.dtype)
            t = (t * cos_) + (rotate_half(t) * sin_)
            return torch.cat((t, t_pass), dim=-1)

        nbytes = 2 * t * h * es + s * (ROPE_D // 2) * 4
        self.time("rope", "fwd", dn, shape, "Megatron eager rotate-half", nbytes, lambda: apply(x),
                  grad=False)
        y = apply(x)
        self.time("rope", "bwd", dn, shape, "autograd of it", nbytes,
                  lambda: torch.autograd.grad(y, x, dy, retain_graph=True))

    def cross_entropy(self, dn, dt, v):
        torch, F, t, tp = self.torch, self.F, self.args.tokens, self.args.tp
        es = esize(torch, dt)
        logits = self.rand((t, v), dt, -4, 4)
        target = torch.randint(0, v, (t,), dtype=torch.int64, device="cuda")
        target_tp = torch.randint(0, v * tp, (t,), dtype=torch.int64, device="cuda")
        dloss = self.rand((t,), torch.float32, 0.1, 1)
        arange = torch.arange(t, device="cuda")

        def stats(logits, target, start, end):  # _VocabParallelCrossEntropy.forward's steps
            # f32 logits: float() is no copy and the steps overwrite them, as in Megatron; the
            # values stay finite, so later baselines time the same work
            lf = logits.float()
            logits_max = torch.max(lf, dim=-1)[0]
            lf -= logits_max.unsqueeze(dim=-1)
            target_mask = (target < start) | (target >= end)
            masked_target = target.clone() - start
            masked_target[target_mask] = 0
            predicted = lf[arange, masked_target].clone().contiguous()
            predicted[target_mask] = 0.0
            torch.exp(lf, out=lf)
            return logits_max, lf.sum(dim=-1), predicted, lf, target_mask, masked_target

        def megatron_fwd():
            _, sum_exp, predicted, exp_logits, mask, masked = stats(logits, target, 0, v)
            loss = torch.log(sum_exp) - predicted
            exp_logits.div_(sum_exp.unsqueeze(dim=-1))
            return loss, exp_logits, mask, masked

        shape = f"{t}x{v}"
        fb = t * v * es + 16 * t
        self.time("cross_entropy", "fwd", dn, shape, "Megatron vocab-parallel steps", fb,
                  megatron_fwd, grad=False)
        self.time("cross_entropy", "fwd", dn, shape, "F.cross_entropy", fb,
                  lambda: F.cross_entropy(logits, target, reduction="none"), grad=False)
        self.time("cross_entropy", "stats", dn, f"{t}x{v} tp={tp}",
                  "Megatron vocab-parallel steps before the all-reduces", t * v * es + 20 * t,
                  lambda: stats(logits, target_tp, 0, v), grad=False)
        bb = 2 * t * v * es + 16 * t
        _, softmax, mask, masked = megatron_fwd()
        update = 1.0 - mask.view(-1).float()

        def megatron_bwd():  # _VocabParallelCrossEntropy.backward, then .float()'s backward
            grad_input = softmax
            grad_input[arange, masked] -= update
            grad_input.mul_(dloss.unsqueeze(dim=-1))
            return grad_input.to(dt)

        self.time("cross_entropy", "bwd", dn, shape, "Megatron backward from its saved softmax",
                  bb, megatron_bwd, grad=False)
        softmax = None  # frees it before the next baseline
        lg = logits.detach().requires_grad_()
        loss = F.cross_entropy(lg, target, reduction="none")  # in the logits' dtype
        dloss_t = dloss.to(loss.dtype)
        self.time("cross_entropy", "bwd", dn, shape, "autograd of F.cross_entropy", bb,
                  lambda: torch.autograd.grad(loss, lg, dloss_t, retain_graph=True))

    def run(self, dn, dt):
        """Every op at every shape, in kernels_bw's order; False when one raised."""
        a, torch, ok = self.args, self.torch, True
        for f in a.ops:
            calls = []
            norm = f in ("layer_norm", "rms_norm")
            for n in a.vocab if f == "cross_entropy" else a.norm_hidden if norm else a.hidden:
                if norm:
                    for wdt in [torch.float32] + ([dt] if dt != torch.float32 else []):
                        calls.append((self.norm, (dn, dt, n, wdt, f == "rms_norm")))
                elif f == "embedding":
                    calls += [(self.embedding, (dn, dt, n, v)) for v in a.vocab]
                elif f == "rope":
                    calls.append((self.rope, (dn, dt, n)))
                elif f == "cross_entropy":
                    calls.append((self.cross_entropy, (dn, dt, n)))
                else:
                    calls.append((self.elementwise, (dn, dt, n, f)))
            for fn, fargs in calls:
                try:
                    fn(*fargs)
                except Exception as e:  # one baseline failing must not hide the others
                    print(f"kernels_torch: {f} {dn} {fargs[2:]}: {type(e).__name__}: {e}",
                          file=sys.stderr)
                    ok = False
                torch.cuda.empty_cache()
        return ok


def parse_args(argv):
    ints = lambda s: [int(v) for v in s.split(",")]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default=",".join(FAMILIES), type=lambda s: s.split(","))
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--hidden", type=ints, default=None)
    p.add_argument("--vocab", type=ints, default=None)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--csv", action="store_true")
    p.add_argument("--smoke", action="store_true", help="T 64, H 256, V 1000, 2 reps, no warm-up")
    a = p.parse_args(argv)
    # kernels_bw's defaults; --smoke's where not given
    # the norms also at the largest hidden sizes, unless --hidden names them
    a.norm_hidden = a.hidden or ([256] if a.smoke else [4096, 8192, 12288, 16384])
    for k, big, small in (("tokens", 16384, 64), ("hidden", [4096, 8192], [256]),
                          ("vocab", [32000, 128000], [1000]), ("reps", 20, 2), ("warmup", 5, 0)):
        if getattr(a, k) is None:
            setattr(a, k, small if a.smoke else big)
    bad = [o for o in a.ops if o not in FAMILIES]
    if bad:
        p.error(f"unknown op(s) {','.join(bad)} ({', '.join(FAMILIES)})")
    if (a.tokens < ROPE_B or a.tokens % ROPE_B or min(a.hidden) < ROPE_D or
            any(h % ROPE_D for h in a.hidden) or min(a.vocab) < 1 or a.tp < 1 or a.reps < 1 or
            a.warmup < 0):
        p.error("--tokens a multiple of 4, --hidden multiples of 128, --vocab >= 1, --tp >= 1, "
                "--reps >= 1, --warmup >= 0")
    return a


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"kernels_torch: skipped: torch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"kernels_torch: skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    props = torch.cuda.get_device_properties(0)
    print(f"# kernels_torch: torch {torch.__version__} (CUDA {torch.version.cuda}), {props.name}; "
          f"tokens {args.tokens}; median of {args.reps} after {args.warmup} warm-up; "
          f"embedding/CE stats partition tp={args.tp}")
    if args.csv:
        print("op,dir,dtype,shape,impl,bytes,torch_ms,torch_gbps")
        emit = lambda op, d, dt, shape, impl, nb, ms: print(
            f"{op},{d},{dt},{shape},{impl.replace(',', ';')},{nb},{ms:.4f},{nb / ms / 1e6:.1f}",
            flush=True)
    else:
        print(f"{'op':<16} {'dir':<10} {'dtype':<5} {'shape':<28} {'MB moved':>10} {'torch ms':>9} "
              f"{'GB/s':>8}  impl")
        emit = lambda op, d, dt, shape, impl, nb, ms: print(
            f"{op:<16} {d:<10} {dt:<5} {shape:<28} {nb / 1e6:10.1f} {ms:9.3f} {nb / ms / 1e6:8.1f}"
            f"  {impl}", flush=True)
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    bench, rc = Bench(torch, args, emit), 0
    for name in args.dtypes.split(","):
        if name not in dtypes:
            print(f"kernels_torch: unknown dtype '{name}' (bf16, f16, f32)", file=sys.stderr)
            rc = 1
        elif not bench.run(name, dtypes[name]):
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
