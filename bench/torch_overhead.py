#!/usr/bin/env python3
"""bench/torch_overhead.py — host cost per op call through kiln.torch, against
torch's own eager op and the paths kiln replaces.

For a tiny tensor (scaled_softmax, fp16 [1, 1, 1, 16]), in one run, in
interleaved rounds, best round of each, microseconds per call:
  torch     torch's own eager op (torch.softmax; the baseline)
  fast      kiln.torch.scaled_softmax on the fast path (the C kernel of
            libkiln_torch, registered through torch's stable C shim; a
            torch.autograd.Function only when the input requires grad)
  fallback  the same call on the Python path (KILN_TORCH_FAST=0's: the Python
            impl, with register_autograd's autograd kernel)
  apex      an Apex-style call: a torch.autograd.Function whose forward and
            backward call kiln's C launchers through ctypes
  megatron  megatron-core's FusedScaleMaskSoftmax (its autograd Function
            around the scaled_softmax_cuda extension, which kiln.megatron
            provides on kiln's op)
in four modes: nograd (the input does not require grad), grad (it does;
forward only), inference (under torch.inference_mode), fwd+bwd (forward and
backward). kiln's figures are overhead: the call minus the C launchers' own
time (the forward launcher, + the backward one in fwd+bwd, timed in the same
round), which on the fake driver includes the emulated kernel; torch's is the
whole call. Each is the median over the rounds, printed with its ratio to
torch in the same mode. Runs on CUDA tensors when
a GPU is there, else on the fake driver (KILN_CUDA_LIBRARY,
KILN_FAKE_CUDA_HOST_MEMORY=1) with CPU tensors.

  bench/torch_overhead.py [--calls 200] [--rounds 41]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import kiln.torch as kt
from kiln._lib import lib
from kiln.api import check
from kiln.torch import _fast
from kiln.torch import _runtime as rt

MODES = ("nograd", "grad", "inference", "fwd+bwd")
COLUMNS = ("torch", "fast", "fallback", "apex", "megatron")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=41)
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        dev, sync = torch.device("cuda"), torch.cuda.synchronize
    else:
        rt.enable_cpu_tensors()
        dev, sync = torch.device("cpu"), lambda: None
    kt.init(dev)
    shape = (1, 1, 1, 16)
    rows, cols = 1, 16
    x0 = torch.randn(shape, device=dev).half()
    xg = x0.clone().requires_grad_()
    g = torch.randn_like(x0)
    h, s = rt.loader(rt.ordinal(dev)), rt.stream(x0)
    y1, dx1 = torch.empty_like(x0), torch.empty_like(x0)

    def launch_fwd():  # type: ignore[no-untyped-def]
        return lib.kiln_scaled_softmax_fwd(h, 1, y1.data_ptr(), x0.data_ptr(), rows, cols, 1.0, s)

    def launch_bwd():  # type: ignore[no-untyped-def]
        return lib.kiln_scaled_softmax_bwd(h, 1, dx1.data_ptr(), y1.data_ptr(), g.data_ptr(), rows, cols, 1.0, s)

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

    mega = megatron_softmax()
    fwd = {
        "torch": lambda t: torch.softmax(t, -1),
        "fast": lambda t: kt.scaled_softmax(t, 1.0),
        "fallback": lambda t: kt.scaled_softmax(t, 1.0),
        "apex": lambda t: ApexStyle.apply(t, 1.0),
        "megatron": (lambda t: mega(t, None)) if mega is not None else None,
    }

    def call(col: str, mode: str):  # type: ignore[no-untyped-def]
        f = fwd[col]
        if f is None:
            return None
        if mode == "grad":
            return lambda: f(xg)
        if mode == "fwd+bwd":
            return lambda: f(xg).backward(g)
        return lambda: f(x0)

    for n in ("fast", "fallback", "apex", "megatron"):  # the same numbers on every path
        if fwd[n] is not None:
            _fast.set_enabled(n != "fallback")
            torch.testing.assert_close(fwd[n](x0).float(), torch.softmax(x0.float(), -1), rtol=2e-3, atol=2e-3)
    _fast.set_enabled(True)

    # Per round and mode, the launchers are timed next to the calls and each
    # column's overhead is its call minus them in that round; the median over
    # rounds is printed. On the fake driver the emulated kernel's time drifts
    # by several microseconds over a run, more than the overheads measured:
    # pairing within a round cancels the drift, the median the outliers.
    per: dict[tuple[str, str], list[float]] = {(c, m): [] for c in COLUMNS for m in MODES}
    launches: dict[str, list[float]] = {"fwd": [], "bwd": []}
    for _ in range(a.rounds):
        for mode in MODES:
            lf = per_call_us(launch_fwd, a.calls, sync, "nograd")
            lb = per_call_us(launch_bwd, a.calls, sync, "nograd") if mode == "fwd+bwd" else 0.0
            launches["fwd"].append(lf)
            if mode == "fwd+bwd":
                launches["bwd"].append(lb)
            for col in COLUMNS:
                fn = call(col, mode)
                if fn is None:
                    continue
                _fast.set_enabled(col != "fallback")
                for _ in range(5):
                    fn()
                t = per_call_us(fn, a.calls, sync, mode)
                per[col, mode].append(t if col == "torch" else t - lf - lb)
            _fast.set_enabled(True)

    def median(v: list[float]) -> float:
        return statistics.median(v) if v else float("nan")

    lf, lb = median(launches["fwd"]), median(launches["bwd"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# torch {torch.__version__}, device "
        f"{'cuda: ' + torch.cuda.get_device_name() if cuda else 'fake driver (CPU tensors)'}, "
        f"scaled_softmax fp16 {list(shape)}, fast path: {_fast.info()['reason']}"
    )
    print(f"# {a.calls} calls per timing, {a.rounds} interleaved rounds, median of each (kiln: call - launchers of its round), microseconds per call; load {load:.2f}")
    print(f"# launchers alone (medians): forward {lf:.2f}, backward {lb:.2f} (subtracted from kiln's columns: overhead)")
    print(f"{'mode':10} " + " ".join(f"{c:>9}" for c in COLUMNS) + "   " + " ".join(f"{c + '/t':>11}" for c in COLUMNS[1:]))
    for mode in MODES:
        vals = {c: median(per[c, mode]) for c in COLUMNS}
        base = vals["torch"]
        print(
            f"{mode:10} "
            + " ".join(f"{vals[c]:9.2f}" for c in COLUMNS)
            + "   "
            + " ".join(f"{vals[c] / base:10.2f}x" for c in COLUMNS[1:])
        )


if __name__ == "__main__":
    main()
