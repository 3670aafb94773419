#!/usr/bin/env python3
"""softmax_torch — PyTorch eager baselines for bench/softmax_bw.

The same ops on the same shapes as softmax_bw, timed the same way (CUDA
events around one call, the median of --reps after --warmup calls), with
GB/s over the same byte counts (what the op must read and write at least,
see softmax_bw.c), so kiln GB/s / torch GB/s = torch time / kiln time:

  softmax_fwd  torch.softmax(x, -1)
  masked_fwd   torch.softmax(x.masked_fill(mask, -inf), -1), mask [B,1,SQ,SK] bool
  causal_fwd   torch.softmax(x.masked_fill(triu(ones(SQ,SK), 1), -inf), -1)
  *_bwd        torch._softmax_backward_data(dy, y, -1, x.dtype)

torch gets no scale (kiln's ops apply scale=0.125 in the same pass; eager
torch would need another kernel for it), and its backward is only the softmax
backward (autograd would add masked_fill's backward for the masked and causal
ops): both choices favour torch.

usage: softmax_torch.py [--shape B,H,SQ,SK] [--dtypes bf16,f16,f32] [--reps N]
                        [--warmup N] [--csv]
Without torch, or without a CUDA device, it prints why and exits 0.
"""
import argparse
import statistics
import sys


def op_bytes(op, b, h, sq, sk, es):
    """Bytes the op must move, exactly as softmax_bw.c counts them."""
    n = b * h * sq * sk
    lower = b * h * sum(min(i + 1, sk) for i in range(sq))
    return {
        "softmax_fwd": 2 * n * es,
        "masked_fwd": 2 * n * es + b * sq * sk,
        "softmax_bwd": 3 * n * es,
        "masked_bwd": 3 * n * es,
        "causal_fwd": (lower + n) * es,
        "causal_bwd": (2 * lower + n) * es,
    }[op]


def time_ms(torch, fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_dtype(torch, name, args, emit):
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]
    b, h, sq, sk = args.shape
    es = torch.tensor([], dtype=dtype).element_size()
    n = b * h * sq * sk
    total = torch.cuda.get_device_properties(0).total_memory
    # x, y, dy (= x), an output and masked_fill's temporary
    if 4 * n * es + b * sq * sk > 0.9 * total:
        print(f"{name}: skipped, needs {4 * n * es / 2**30:.1f} GiB of {total / 2**30:.1f} GiB")
        return
    dev = "cuda"
    neg_inf = float("-inf")
    x = torch.empty((b, h, sq, sk), dtype=dtype, device=dev).uniform_(-4, 4)
    mask = torch.rand((b, 1, sq, sk), device=dev) < 0.125
    causal = torch.ones((sq, sk), dtype=torch.bool, device=dev).triu(1)
    y = torch.softmax(x, -1)
    dy = x
    ops = [
        ("softmax_fwd", lambda: torch.softmax(x, -1)),
        ("softmax_bwd", lambda: torch._softmax_backward_data(dy, y, -1, dtype)),
        ("masked_fwd", lambda: torch.softmax(x.masked_fill(mask, neg_inf), -1)),
        ("masked_bwd", lambda: torch._softmax_backward_data(dy, y, -1, dtype)),
        ("causal_fwd", lambda: torch.softmax(x.masked_fill(causal, neg_inf), -1)),
        ("causal_bwd", lambda: torch._softmax_backward_data(dy, y, -1, dtype)),
    ]
    with torch.no_grad():
        for op, fn in ops:
            nbytes = op_bytes(op, b, h, sq, sk, es)
            ms = time_ms(torch, fn, args.warmup, args.reps)
            emit(op, name, nbytes, ms)
    del x, mask, causal, y, dy
    torch.cuda.empty_cache()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="32,16,2048,2048",
                   type=lambda s: tuple(int(v) for v in s.split(",")))
    p.add_argument("--dtypes", default="bf16,f16,f32")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--csv", action="store_true")
    a = p.parse_args(argv)
    if len(a.shape) != 4 or min(a.shape) < 1 or a.reps < 1 or a.warmup < 0:
        p.error("--shape takes B,H,SQ,SK (all >= 1); --reps >= 1, --warmup >= 0")
    return a


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"softmax_torch: skipped: torch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"softmax_torch: skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    props = torch.cuda.get_device_properties(0)
    b, h, sq, sk = args.shape
    print(f"# softmax_torch: torch {torch.__version__} (CUDA {torch.version.cuda}), {props.name}; "
          f"x [{b}, {h}, {sq}, {sk}]; median of {args.reps} after {args.warmup} warm-up; no scale")
    if args.csv:
        print("op,dtype,bytes,torch_ms,torch_gbps")
        emit = lambda op, dt, nb, ms: print(f"{op},{dt},{nb},{ms:.4f},{nb / ms / 1e6:.1f}")
    else:
        print(f"{'op':<12} {'dtype':<5} {'MB moved':>10} {'torch ms':>10} {'GB/s':>10}")
        emit = lambda op, dt, nb, ms: print(
            f"{op:<12} {dt:<5} {nb / 1e6:10.1f} {ms:10.3f} {nb / ms / 1e6:10.1f}")
    for name in args.dtypes.split(","):
        if name not in ("f32", "f16", "bf16"):
            print(f"softmax_torch: unknown dtype '{name}' (bf16, f16, f32)", file=sys.stderr)
            continue
        run_dtype(torch, name, args, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
