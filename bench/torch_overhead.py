#!/usr/bin/env python3
"""bench/torch_overhead.py — host time per op call through kiln.torch.

For a tiny tensor, in one run, interleaved rounds, best round of each:
  torch   torch's own eager op (the baseline: its dispatch on this device)
  kiln    the kiln.torch op (custom op dispatch + the Python impl + the launch)
  launch  the C launcher alone, called through the binding with the same
          pointers (what kiln's op costs below Python: on a GPU the launch, on
          the fake driver the emulated kernel too)
  impl    the op's Python impl called directly (no torch dispatcher)
overhead = kiln - launch is what kiln.torch adds; it is printed as a ratio
against torch's own op. Runs on CUDA tensors when a GPU is there, else on the
fake driver (KILN_CUDA_LIBRARY, KILN_FAKE_CUDA_HOST_MEMORY=1) with CPU tensors.

  bench/torch_overhead.py [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import kiln.torch as kt
from kiln._lib import lib
from kiln.torch import _runtime as rt
from kiln.torch import ops


def per_call_us(fn, calls: int, sync) -> float:
    sync()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter_ns() - t0) / calls / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        dev, sync = torch.device("cuda"), torch.cuda.synchronize
    else:
        rt.enable_cpu_tensors()
        dev, sync = torch.device("cpu"), lambda: None
    kt.init(dev)
    cases = {}
    x = torch.randn(1, 32, device=dev)
    y = torch.empty_like(x)
    h, s = rt.loader(rt.ordinal(dev)), rt.stream(x)
    cases["scaled_softmax"] = (
        lambda: F.softmax(x, -1),
        lambda: kt.scaled_softmax(x, 1.0),
        lambda: lib.kiln_scaled_softmax_fwd(h, 0, y.data_ptr(), x.data_ptr(), 1, 32, 1.0, s),
        lambda: ops._scaled_softmax._init_fn(x, 1.0),
    )
    b = torch.randn(32, device=dev)
    cases["bias_gelu"] = (
        lambda: F.gelu(x, approximate="tanh"),
        lambda: kt.bias_gelu(x, b),
        lambda: lib.kiln_bias_gelu_fwd(h, 0, y.data_ptr(), x.data_ptr(), b.data_ptr(), 1, 32, s),
        lambda: ops._bias_gelu._init_fn(x, b),
    )
    names = ("torch", "kiln", "launch", "impl")
    print(f"# torch {torch.__version__}, device {'cuda: ' + torch.cuda.get_device_name() if cuda else 'fake driver (CPU tensors)'}")
    print(f"# {a.calls} calls per round, best of {a.rounds} interleaved rounds, microseconds per call")
    print(f"{'op':16} {'torch':>8} {'kiln':>8} {'launch':>8} {'impl':>8} {'overhead':>9} {'ovh/torch':>10}")
    for op, fns in cases.items():
        for fn in fns:
            for _ in range(50):
                fn()
        best = {n: float("inf") for n in names}
        for _ in range(a.rounds):
            for n, fn in zip(names, fns):
                best[n] = min(best[n], per_call_us(fn, a.calls, sync))
        ovh = best["kiln"] - best["launch"]
        print(
            f"{op:16} {best['torch']:8.2f} {best['kiln']:8.2f} {best['launch']:8.2f} {best['impl']:8.2f} "
            f"{ovh:9.2f} {ovh / best['torch']:9.2f}x"
        )


if __name__ == "__main__":
    main()
