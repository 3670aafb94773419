"""Start-up of an N-rank megatron-core job: kiln.megatron.initialize() against
megatron-core's own start-up path for the same ops, in the same run.

- kiln: every rank imports megatron-core, joins the gloo job, builds
  Megatron's parallel state, kiln.megatron.apply(), kiln.megatron.initialize()
  (the coordinated warmup: rank 0 builds the bias-gelu, bias-swiglu and
  bias-dropout-add units once and sends the bytes; kernels="bias_*").
- baseline: the same, then Megatron-LM's _warmup_jit_function body (megatron/
  training/initialize.py, which pretrain() runs on every rank): megatron-core's
  torch.compile'd bias_gelu or bias_swiglu and bias_dropout_add_fused_train,
  5 calls each in both grad modes, on every rank.

Cold: empty caches (kiln: one cache directory per rank; torch: a fresh
TORCHINDUCTOR_CACHE_DIR per rank). Warm: the same directories again. The time
is from the launch of a rank's process to "ready" (the slowest rank is the
job's), and the CPU seconds spent compiling are summed over the job (kiln:
the report's compile_cpu_s; baseline: the CPU time of the warmup calls,
this process and the compiler processes it waited for, with inductor's
compile kept in-process by TORCHINDUCTOR_COMPILE_THREADS=1). Ratios are kiln / baseline of this run.

    PYTHONPATH=python KILN_LIBRARY=build/libkiln.so KILN_EXE=build/kiln \\
      KILN_CUDA_LIBRARY=build/tests/fakecuda/libkiln_fakecuda.so KILN_FAKE_CUDA_HOST_MEMORY=1 \\
      python bench/megatron_startup.py [--ranks 4] [--swiglu]

No GPU needed: kiln runs on the fake driver and torch.compile on the CPU
(inductor's C++ backend), with bf16 tensors of Megatron's warmup shapes
scaled down (seq 256, micro-batch 1, hidden 256, ffn 1024).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from datetime import timedelta

import torch.multiprocessing as mp

SEQ, MB, HIDDEN, FFN = 256, 1, 256, 1024


def _cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (the C++
    compiler inductor runs: TORCHINDUCTOR_COMPILE_THREADS=1 keeps its compile
    in this process instead of a worker pool whose time would not be seen)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _rank(rank: int, mode: str, size: int, port: int, work: str, t_launch: float, swiglu: bool) -> None:
    if mode == "baseline":
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, f"inductor{rank}")
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    import warnings

    warnings.simplefilter("ignore")
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=timedelta(seconds=600)
    )
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(1, 1)
    res: dict[str, float] = {}
    if mode == "kiln":
        import kiln.megatron as km

        km.apply()
        rep = km.initialize(kernels="bias_*", cache=os.path.join(work, f"cache{rank}"))
        res["compile_cpu_s"] = rep.compile_cpu_s
        res["compiled"] = rep.compiled
    else:
        from megatron.core.fusions.fused_bias_dropout import bias_dropout_add_fused_train
        from megatron.core.fusions.fused_bias_gelu import bias_gelu
        from megatron.core.fusions.fused_bias_swiglu import bias_swiglu

        c0 = _cpu_s()
        dtype = torch.bfloat16
        # Megatron-LM's _warmup_jit_function, as it runs on every rank
        bias = torch.rand(FFN, dtype=dtype)
        x = torch.rand((SEQ, MB, FFN), dtype=dtype)
        for bias_grad, input_grad in zip([True, True], [False, True]):
            bias.requires_grad, x.requires_grad = bias_grad, input_grad
            for _ in range(5):
                out = bias_swiglu(x, bias) if swiglu else bias_gelu(bias, x)
        del bias, x, out
        x = torch.rand((SEQ, MB, HIDDEN), dtype=dtype)
        residual = torch.rand((SEQ, MB, HIDDEN), dtype=dtype)
        bias = torch.rand(HIDDEN, dtype=dtype).expand_as(residual)
        for input_grad, bias_grad, residual_grad in zip([False, True], [True, True], [True, True]):
            x.requires_grad, bias.requires_grad, residual.requires_grad = input_grad, bias_grad, residual_grad
            for _ in range(5):
                out = bias_dropout_add_fused_train([x, bias], residual, 0.1)
        res["compile_cpu_s"] = _cpu_s() - c0
    res["ready_s"] = time.time() - t_launch
    dist.barrier()
    with open(os.path.join(work, f"{mode}.{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode: str, size: int, work: str, swiglu: bool, deadline_s: float = 580) -> dict[str, float]:
    t = time.time()
    ctx = mp.start_processes(
        _rank, args=(mode, size, _port(), work, t, swiglu), nprocs=size, join=False, start_method="spawn"
    )
    end = time.monotonic() + deadline_s
    while not ctx.join(timeout=1):
        if time.monotonic() > end:
            for p in ctx.processes:
                p.kill()
            raise SystemExit(f"{mode}: {size} ranks did not finish in {deadline_s:.0f} s")
    rs = [json.load(open(os.path.join(work, f"{mode}.{r}.json"))) for r in range(size)]
    return {
        "ready_s": max(r["ready_s"] for r in rs),
        "compile_cpu_s": sum(r["compile_cpu_s"] for r in rs),
        "compiled": sum(r.get("compiled", 0) for r in rs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--swiglu", action="store_true", help="warm bias_swiglu instead of bias_gelu (--swiglu)")
    a = ap.parse_args()
    import megatron.core
    import torch

    work = tempfile.mkdtemp(prefix="kiln-megatron-startup-")
    try:
        print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}, {a.ranks} ranks, "
              f"{os.cpu_count()} CPUs, bf16 seq {SEQ} mb {MB} hidden {HIDDEN} ffn {FFN}, "
              f"{'swiglu' if a.swiglu else 'gelu'}")
        rows = {}
        for temp in ("cold", "warm"):
            for mode in ("kiln", "baseline"):
                rows[(mode, temp)] = r = run(mode, a.ranks, work, a.swiglu)
                extra = f", {r['compiled']:.0f} kernels compiled in the job" if mode == "kiln" else ""
                print(f"{mode:8s} {temp}: ready after {r['ready_s']:6.2f} s (slowest rank), "
                      f"compiling {r['compile_cpu_s']:6.2f} CPU s across the job{extra}", flush=True)
        print("ratios kiln / baseline (this run):")
        for temp in ("cold", "warm"):
            k, b = rows[("kiln", temp)], rows[("baseline", temp)]
            cpu = k["compile_cpu_s"] / b["compile_cpu_s"] if b["compile_cpu_s"] > 0 else float("nan")
            print(f"  {temp}: start-up {k['ready_s'] / b['ready_s']:.2f}x, compile CPU {cpu:.3f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
