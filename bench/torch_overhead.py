#!/usr/bin/env python3
"""bench/torch_overhead.py — host cost per op call through kiln.torch, against
torch's own eager op and the paths kiln replaces.

For one op on a tiny tensor (--op; default scaled_softmax, fp16 [1, 1, 1,
16]; --op all: every op, a table each), in one run, in interleaved rounds,
microseconds per call:
  torch     torch's own eager op or its eager composition (torch.softmax;
            F.layer_norm; F.embedding; r + F.dropout(x + b); rotate-half in
            torch ops; F.cross_entropy ...: the baseline)
  fast      kiln.torch.<op> on the fast path (the C kernel of
            libkiln_torch, registered through torch's stable C shim; a
            torch.autograd.Function only when the input requires grad)
  boxed     (scaled_softmax only) kiln's C kernels with no kiln Python
            around them: the op's C++ callable (torch's boxed call into a
            kernel registered through its stable C shim); with grad, inside
            a bare torch.autograd.Function whose backward calls the backward
            op's callable. The floor of the fast path's design in every
            mode: fast - boxed is what kiln's Python adds
  fallback  the same call on the Python path (KILN_TORCH_FAST=0's: the Python
            impl, with register_autograd's autograd kernel)
  apex      (scaled_softmax only) an Apex-style call: a
            torch.autograd.Function whose forward and backward call kiln's C
            launchers through ctypes
  megatron  (scaled_softmax only) megatron-core's FusedScaleMaskSoftmax (its
            autograd Function around the scaled_softmax_cuda extension, which
            kiln.megatron provides on kiln's op)
  function  (scaled_softmax only) a torch.autograd.Function around torch's
            own softmax and its backward (torch._softmax_backward_data): what
            any op whose gradient comes from a Python autograd Function
            costs at least, the floor under kiln's grad and fwd+bwd columns
            (a package with no C++ build against torch has no other way to
            give an op its gradient)
in four modes: nograd (the input does not require grad), grad (it does;
forward only), inference (under torch.inference_mode), fwd+bwd (forward and
backward). kiln's figures are overhead: the call minus the C launchers' own
time (the forward launcher, + the backward one in fwd+bwd, timed in the same
round through ctypes, less ctypes' own cost: the same call with a NULL
loader, which returns at its first check); torch's and function's are the
whole call. Each is the median over the rounds, printed with its ratio to
torch in the same mode. Runs on CUDA tensors when a GPU is there, else on
the fake driver (KILN_CUDA_LIBRARY, KILN_FAKE_CUDA_HOST_MEMORY=1) with CPU
tensors: every path's result is checked against torch's first, then the
timing runs with KILN_FAKE_CUDA_RUN=0 (the fake driver validates each
launch and skips the emulated kernel, whose tens of microseconds drift by
more than the overheads measured).

  bench/torch_overhead.py [--op NAME|all] [--calls 200] [--rounds 41]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F

import kiln.torch as kt
from kiln._lib import lib
from kiln.api import check
from kiln.torch import _fast
from kiln.torch import _runtime as rt

MODES = ("nograd", "grad", "inference", "fwd+bwd")
COLUMNS = ("torch", "fast", "boxed", "fallback", "apex", "megatron", "function")


def per_call_us(fn, calls: int, sync, mode: str) -> float:
    sync()
    if mode == "inference":
        with torch.inference_mode():
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
    else:
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
    sync()
    return (time.perf_counter_ns() - t0) / calls / 1000


def megatron_softmax():  # type: ignore[no-untyped-def]
    """FusedScaleMaskSoftmax (no mask, scale 1) on kiln's scaled_softmax_cuda, or
    None without megatron-core."""
    try:
        from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
        from megatron.core.transformer.enums import AttnMaskType
        from megatron.core.transformer.utils import attention_mask_func
    except ImportError:
        return None
    import kiln.megatron as km

    km.apply()
    return FusedScaleMaskSoftmax(
        input_in_fp16=True,
        input_in_bf16=False,
        attn_mask_type=AttnMaskType.padding,
        scaled_masked_softmax_fusion=True,
        mask_func=attention_mask_func,
        softmax_in_fp32=True,
        scale=None,
    )


class Spec:
    """One op's benchmark: its inputs (args without grad, args_grad with the
    differentiable one requiring grad), torch's eager call and kiln's on the
    same args, and kiln's C launchers on preallocated tensors (fwd, bwd)."""

    def __init__(self, args, grad_at, torch_fn, kiln_fn, fwd, bwd, exact=True, keep=None):  # type: ignore[no-untyped-def]
        self.keep = keep  # what the launchers write into and the Spec must keep alive (a workspace)
        self.args = args
        self.args_grad = tuple(a.clone().requires_grad_() if i == grad_at else a for i, a in enumerate(args))
        self.torch_fn, self.kiln_fn, self.fwd, self.bwd, self.exact = torch_fn, kiln_fn, fwd, bwd, exact


def _p(t):  # type: ignore[no-untyped-def]
    return t.data_ptr()


def specs(dev, h, s):  # type: ignore[no-untyped-def]
    """name -> a function making its Spec (fp16 softmaxes as before, fp32 the rest)."""
    f32 = torch.float32

    def e(*shape, dtype=f32):  # type: ignore[no-untyped-def]
        return torch.empty(*shape, dtype=dtype, device=dev)

    def r(*shape, dtype=f32):  # type: ignore[no-untyped-def]
        return torch.randn(*shape, device=dev).to(dtype)

    def softmax():  # type: ignore[no-untyped-def]
        x, y, dx, g = r(1, 1, 1, 16, dtype=torch.half), e(1, 1, 1, 16, dtype=torch.half), e(1, 1, 1, 16, dtype=torch.half), r(1, 1, 1, 16, dtype=torch.half)
        return Spec(
            (x,), 0, lambda t: torch.softmax(t, -1), lambda t: kt.scaled_softmax(t, 1.0),
            lambda: lib.kiln_scaled_softmax_fwd(h, 1, _p(y), _p(x), 1, 16, 1.0, s),
            lambda: lib.kiln_scaled_softmax_bwd(h, 1, _p(dx), _p(y), _p(g), 1, 16, 1.0, s),
        )

    def masked():  # type: ignore[no-untyped-def]
        x, m = r(1, 1, 1, 16, dtype=torch.half), torch.zeros(1, 1, 1, 16, dtype=torch.bool, device=dev)
        y, dx, g = e(1, 1, 1, 16, dtype=torch.half), e(1, 1, 1, 16, dtype=torch.half), r(1, 1, 1, 16, dtype=torch.half)
        return Spec(
            (x, m), 0, lambda t, m: torch.softmax(t.masked_fill(m, float("-inf")), -1),
            lambda t, m: kt.scaled_masked_softmax(t, m, 1.0),
            lambda: lib.kiln_scaled_masked_softmax_fwd(h, 1, _p(y), _p(x), _p(m), 1, 1, 1, 16, 1, 1.0, s),
            lambda: lib.kiln_scaled_masked_softmax_bwd(h, 1, _p(dx), _p(y), _p(g), 1, 1, 1, 16, 1.0, s),
        )

    def causal():  # type: ignore[no-untyped-def]
        x, y, dx, g = r(1, 4, 4, dtype=torch.half), e(1, 4, 4, dtype=torch.half), e(1, 4, 4, dtype=torch.half), r(1, 4, 4, dtype=torch.half)
        tri = torch.ones(4, 4, dtype=torch.bool, device=dev).triu(1)
        return Spec(
            (x,), 0, lambda t: torch.softmax(t.masked_fill(tri, float("-inf")), -1),
            lambda t: kt.scaled_upper_triang_masked_softmax(t, 1.0),
            lambda: lib.kiln_scaled_upper_triang_masked_softmax_fwd(h, 1, _p(y), _p(x), 1, 4, 4, 1.0, s),
            lambda: lib.kiln_scaled_upper_triang_masked_softmax_bwd(h, 1, _p(dx), _p(y), _p(g), 1, 4, 4, 1.0, s),
        )

    def layer_norm():  # type: ignore[no-untyped-def]
        x, w, b, y, dx, g = r(1, 16), r(16), r(16), e(1, 16), e(1, 16), r(1, 16)
        mean, rstd, dw, db = e(1), e(1), e(16), e(16)
        n = lib.kiln_layer_norm_bwd_workspace_size(1, 16)
        ws = e(n + 256, dtype=torch.uint8)
        wp = _p(ws) + (-_p(ws) % 256)
        return Spec(
            (x, w, b), 0, lambda t, w, b: F.layer_norm(t, (16,), w, b), lambda t, w, b: kt.layer_norm(t, w, b),
            lambda: lib.kiln_layer_norm_fwd(h, 0, 0, _p(y), _p(mean), _p(rstd), _p(x), _p(w), _p(b), 1, 16, 1e-5, s),
            lambda: lib.kiln_layer_norm_bwd(
                h, 0, 0, _p(dx), _p(dw), _p(db), _p(g), _p(x), _p(mean), _p(rstd), _p(w), 1, 16, wp, n, s
            ),
            keep=ws,
        )

    def rms_norm():  # type: ignore[no-untyped-def]
        x, w, y, dx, g, rstd, dw = r(1, 16), r(16), e(1, 16), e(1, 16), r(1, 16), e(1), e(16)
        n = lib.kiln_rms_norm_bwd_workspace_size(1, 16)
        ws = e(n + 256, dtype=torch.uint8)
        wp = _p(ws) + (-_p(ws) % 256)
        return Spec(
            (x, w), 0, lambda t, w: F.rms_norm(t, (16,), w, 1e-5), lambda t, w: kt.rms_norm(t, w, 1e-5),
            lambda: lib.kiln_rms_norm_fwd(h, 0, 0, _p(y), _p(rstd), _p(x), _p(w), 1, 16, 1e-5, s),
            lambda: lib.kiln_rms_norm_bwd(h, 0, 0, _p(dx), _p(dw), _p(g), _p(x), _p(rstd), _p(w), 1, 16, wp, n, s),
            keep=ws,
        )

    def embedding():  # type: ignore[no-untyped-def]
        ids, w = torch.randint(0, 32, (1, 16), device=dev), r(32, 16)
        y, g, dw = e(1, 16, 16), r(1, 16, 16), e(32, 16)
        n = lib.kiln_embedding_bwd_workspace_size(16, 0, 32, 1)
        ws = e(n + 256, dtype=torch.uint8)
        wp = _p(ws) + (-_p(ws) % 256)
        return Spec(
            (w, ids), 0, lambda w, i: F.embedding(i, w), lambda w, i: kt.embedding(i, w),
            lambda: lib.kiln_embedding_fwd(h, 0, _p(y), _p(ids), _p(w), 16, 16, 0, 32, 32, 0, s),
            lambda: lib.kiln_embedding_bwd(h, 0, _p(dw), _p(g), _p(ids), 16, 16, 0, 32, 1, wp, n, s),
            keep=ws,
        )

    def bias_gelu():  # type: ignore[no-untyped-def]
        x, b, y, dx, g = r(1, 16), r(16), e(1, 16), e(1, 16), r(1, 16)
        return Spec(
            (x, b), 0, lambda t, b: F.gelu(t + b, approximate="tanh"), lambda t, b: kt.bias_gelu(t, b),
            lambda: lib.kiln_bias_gelu_fwd(h, 0, _p(y), _p(x), _p(b), 1, 16, s),
            lambda: lib.kiln_bias_gelu_bwd(h, 0, _p(dx), _p(g), _p(x), _p(b), 1, 16, s),
        )

    def swiglu(t, b):  # type: ignore[no-untyped-def]
        a, c = (t + b).chunk(2, -1)
        return F.silu(a) * c

    def bias_swiglu():  # type: ignore[no-untyped-def]
        x, b, y, dx, g = r(1, 32), r(32), e(1, 16), e(1, 32), r(1, 16)
        return Spec(
            (x, b), 0, swiglu, lambda t, b: kt.bias_swiglu(t, b),
            lambda: lib.kiln_bias_swiglu_fwd(h, 0, _p(y), _p(x), _p(b), 1, 16, s),
            lambda: lib.kiln_bias_swiglu_bwd(h, 0, _p(dx), _p(g), _p(x), _p(b), 1, 16, s),
        )

    def bias_dropout_add():  # type: ignore[no-untyped-def]
        x, b, res, y, dx, g = r(1, 16), r(16), r(1, 16), e(1, 16), e(1, 16), r(1, 16)
        return Spec(
            (x, b, res), 0, lambda t, b, q: q + F.dropout(t + b, 0.1, True),
            lambda t, b, q: kt.bias_dropout_add(t, b, q, 0.1),
            lambda: lib.kiln_bias_dropout_add_fwd(h, 0, _p(y), _p(x), _p(b), _p(res), 1, 16, 0.1, 7, 0, 1, s),
            lambda: lib.kiln_bias_dropout_add_bwd(h, 0, _p(dx), _p(g), 1, 16, 0.1, 7, 0, 1, s),
            exact=False,  # a mask each: compared at p = 0 below
        )

    def rope():  # type: ignore[no-untyped-def]
        x, ang, y, dx, g = r(4, 1, 1, 16), torch.rand(4, 8, device=dev), e(4, 1, 1, 16), e(4, 1, 1, 16), r(4, 1, 1, 16)
        cos, sin = ang.cos()[:, None, None, :], ang.sin()[:, None, None, :]

        def ref(t, a):  # type: ignore[no-untyped-def]
            x1, x2 = t[..., :8], t[..., 8:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)

        return Spec(
            (x, ang), 0, ref, lambda t, a: kt.rope(t, a),
            lambda: lib.kiln_rope_fwd(h, 0, 0, 0, _p(y), _p(x), _p(ang), 4, 1, 1, 16, 16, s),
            lambda: lib.kiln_rope_bwd(h, 0, 0, 0, _p(dx), _p(g), _p(ang), 4, 1, 1, 16, 16, s),
        )

    def cross_entropy():  # type: ignore[no-untyped-def]
        lg, tg = r(4, 32), torch.randint(0, 32, (4,), device=dev)
        loss, lse, grad, dl = e(4), e(4), r(4, 32), torch.full((4,), 0.25, device=dev)
        return Spec(
            (lg, tg), 0, lambda t, i: F.cross_entropy(t, i), lambda t, i: kt.cross_entropy(t, i),
            lambda: lib.kiln_cross_entropy_fwd(h, 0, _p(loss), _p(lse), _p(lg), _p(tg), 4, 32, -100, 0, s),
            lambda: lib.kiln_cross_entropy_bwd(h, 0, _p(grad), _p(lse), _p(dl), _p(tg), 4, 32, 0, -100, s),
        )

    return {
        "scaled_softmax": softmax,
        "scaled_masked_softmax": masked,
        "scaled_upper_triang_masked_softmax": causal,
        "layer_norm": layer_norm,
        "rms_norm": rms_norm,
        "embedding": embedding,
        "bias_gelu": bias_gelu,
        "bias_swiglu": bias_swiglu,
        "bias_dropout_add": bias_dropout_add,
        "rope": rope,
        "cross_entropy": cross_entropy,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--op", default="scaled_softmax", help="an op of kiln.torch, or all")
    ap.add_argument(
        "--threads", type=int, default=1,
        help="torch's intra-op threads (default 1: on tiny tensors a pool only waits; on 2 shared "
        "cores torch's eager cross_entropy and masked_fill took 7.6 ms a call with the default pool)",
    )
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    cuda = torch.cuda.is_available()
    if cuda:
        dev, sync = torch.device("cuda"), torch.cuda.synchronize
    else:
        rt.enable_cpu_tensors()
        dev, sync = torch.device("cpu"), lambda: None
    kt.init(dev)
    h = rt.loader(rt.ordinal(dev))
    s = rt.stream(torch.empty(0, device=dev))
    table = specs(dev, h, s)
    nulls = specs(dev, None, s)  # the same launcher calls with a NULL loader: ctypes' own cost
    names = list(table) if a.op == "all" else [a.op]
    for name in names:
        if name not in table:
            raise SystemExit(f"torch_overhead: --op {name}: want one of {', '.join(table)} or all")
    for name in names:
        run_op(name, table[name](), nulls[name](), a, dev, h, s, sync, cuda)


def run_op(name, sp, null, a, dev, h, s, sync, cuda) -> None:  # type: ignore[no-untyped-def]
    """One op's table: every column in every mode, interleaved rounds."""
    x0 = sp.args[0]
    rows, cols = 1, 16
    launch_fwd, launch_bwd = sp.fwd, sp.bwd

    class ApexStyle(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):  # type: ignore[no-untyped-def]
            y = torch.empty_like(x)
            check(lib.kiln_scaled_softmax_fwd(h, 1, y.data_ptr(), x.data_ptr(), rows, cols, scale, rt.stream(x)))
            ctx.save_for_backward(y)
            ctx.scale = scale
            return y

        @staticmethod
        def backward(ctx, dy):  # type: ignore[no-untyped-def]
            (y,) = ctx.saved_tensors
            dx = torch.empty_like(y)
            check(
                lib.kiln_scaled_softmax_bwd(
                    h, 1, dx.data_ptr(), y.data_ptr(), dy.data_ptr(), rows, cols, ctx.scale, rt.stream(y)
                )
            )
            return dx, None

    class TorchFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            y = torch.softmax(x, -1)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):  # type: ignore[no-untyped-def]
            (y,) = ctx.saved_tensors
            return torch._softmax_backward_data(dy, y, -1, y.dtype)

    class BoxedFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def]
            y = torch.ops.kiln.scaled_softmax.default._op(x, 1.0)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):  # type: ignore[no-untyped-def]
            (y,) = ctx.saved_tensors
            return torch.ops.kiln.scaled_softmax_backward.default._op(dy, y, 1.0)

    softmax = name == "scaled_softmax"
    mega = megatron_softmax() if softmax else None
    fwd = {
        "torch": sp.torch_fn,
        "fast": sp.kiln_fn,
        "boxed": (lambda t: torch.ops.kiln.scaled_softmax.default._op(t, 1.0)) if softmax and _fast.active() else None,
        "fallback": sp.kiln_fn,
        "apex": (lambda t: ApexStyle.apply(t, 1.0)) if softmax else None,
        "megatron": (lambda t: mega(t, None)) if mega is not None else None,
        "function": TorchFunction.apply if softmax else None,
    }
    out0 = sp.torch_fn(*sp.args)
    g = torch.randn_like(out0) if out0.dim() else torch.ones_like(out0)

    def call(col: str, mode: str):  # type: ignore[no-untyped-def]
        f = fwd[col]
        if f is None:
            return None
        if col == "boxed" and mode in ("grad", "fwd+bwd"):  # the op has no autograd kernel
            f = BoxedFunction.apply
        if mode == "grad":
            return lambda: f(*sp.args_grad)
        if mode == "fwd+bwd":
            return lambda: f(*sp.args_grad).backward(g)
        return lambda: f(*sp.args)

    os.environ.pop("KILN_FAKE_CUDA_RUN", None)  # the checks run the kernels (an earlier op's timing did not)
    for n in COLUMNS[1:]:  # the same numbers on every path
        if fwd[n] is not None and sp.exact:
            _fast.set_enabled(n != "fallback")
            want = sp.torch_fn(*sp.args).float()
            torch.testing.assert_close(fwd[n](*sp.args).float(), want, rtol=2e-3, atol=2e-3)
    if not sp.exact:  # dropout: the identity at p = 0 on both paths
        for on in (True, False):
            _fast.set_enabled(on)
            x, b, q = sp.args
            torch.testing.assert_close(kt.bias_dropout_add(x, b, q, 0.0), q + (x + b))
    if softmax:  # the function and boxed columns' gradients are torch's
        xg = sp.args_grad[0]
        (want,) = torch.autograd.grad(torch.softmax(xg, -1), xg, g)
        (got,) = torch.autograd.grad(TorchFunction.apply(xg), xg, g)
        torch.testing.assert_close(got, want)
        if fwd["boxed"] is not None:
            (got,) = torch.autograd.grad(BoxedFunction.apply(xg), xg, g)
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=2e-3)
    _fast.set_enabled(True)
    if not cuda:  # results checked: from here on the fake driver validates launches, runs none
        os.environ["KILN_FAKE_CUDA_RUN"] = "0"

    # Per round and mode, the launchers are timed next to the calls and each
    # column's overhead is its call minus them in that round; the median over
    # rounds is printed. On the fake driver the emulated kernel's time drifts
    # by several microseconds over a run, more than the overheads measured:
    # pairing within a round cancels the drift, the median the outliers.
    per: dict[tuple[str, str], list[float]] = {(c, m): [] for c in COLUMNS for m in MODES}
    launches: dict[str, list[float]] = {"fwd": [], "bwd": []}
    for _ in range(a.rounds):
        for mode in MODES:
            lf = per_call_us(launch_fwd, a.calls, sync, "nograd") - per_call_us(null.fwd, a.calls, sync, "nograd")
            lb = 0.0
            if mode == "fwd+bwd":
                lb = per_call_us(launch_bwd, a.calls, sync, "nograd") - per_call_us(null.bwd, a.calls, sync, "nograd")
            launches["fwd"].append(lf)
            if mode == "fwd+bwd":
                launches["bwd"].append(lb)
            for col in COLUMNS:
                fn = call(col, mode)
                if fn is None:
                    continue
                _fast.set_enabled(col != "fallback")  # boxed: the fast path's kernel
                for _ in range(5):
                    fn()
                t = per_call_us(fn, a.calls, sync, mode)
                per[col, mode].append(t if col in ("torch", "function") else t - lf - lb)
            _fast.set_enabled(True)

    def median(v: list[float]) -> float:
        return statistics.median(v) if v else float("nan")

    lf, lb = median(launches["fwd"]), median(launches["bwd"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# torch {torch.__version__}, device "
        f"{'cuda: ' + torch.cuda.get_device_name() if cuda else 'fake driver (CPU tensors)'}, "
        f"{name} {x0.dtype} {list(x0.shape)}, fast path: {_fast.info()['reason']}"
    )
    print(f"# {a.calls} calls per timing, {a.rounds} interleaved rounds, {torch.get_num_threads()} intra-op thread(s), median of each (kiln: call - launchers of its round), microseconds per call; load {load:.2f}")
    print(
        f"# launchers' own time (medians, ctypes' cost taken off): forward {lf:.2f}, backward {lb:.2f} "
        f"(subtracted from kiln's columns: overhead){'' if cuda else '; KILN_FAKE_CUDA_RUN=0: kernels validated, not run'}"
    )
    print(f"# op {name}")
    print(f"{'mode':10} " + " ".join(f"{c:>9}" for c in COLUMNS) + "   " + " ".join(f"{c + '/t':>11}" for c in COLUMNS[1:]))
    for mode in MODES:
        vals = {c: median(per[c, mode]) for c in COLUMNS}
        base = vals["torch"]
        # a column with no such path for this op (apex, megatron: softmax only) is "-"
        print(
            f"{mode:10} "
            + " ".join(f"{'-':>9}" if math.isnan(vals[c]) else f"{vals[c]:9.2f}" for c in COLUMNS)
            + "   "
            + " ".join(f"{'-':>11}" if math.isnan(vals[c]) else f"{vals[c] / base:10.2f}x" for c in COLUMNS[1:])
        )


if __name__ == "__main__":
    main()
