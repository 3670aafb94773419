"""Starting the ranks of the multi-process tests (test_dist.py,
test_ops_tp.py, test_megatron_dist.py).

Ranks are forked from a multiprocessing forkserver that imported torch (and
the modules a file adds) once: a fresh interpreter spends about 5
CPU-seconds importing torch, and on the 2-core CI machine the tests' dozens
of ranks spent most of their time there. A forked rank still imports kiln
itself, after its environment is set, and runs in a process of its own.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable


def context(*preload: str) -> Any:
    """The forkserver context, its server importing torch, torch.distributed
    and preload when it starts (once per pytest process: the first call's
    preload counts)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", *preload])
    return ctx


def run(fn: Callable[..., None], nprocs: int, args: tuple, deadline_s: float, preload: tuple[str, ...] = ()) -> None:
    """fn(rank, *args) on nprocs ranks (torch.multiprocessing.start_processes,
    forkserver); raises when a rank fails, and kills every rank and raises
    when they have not all finished within deadline_s."""
    import torch.multiprocessing as mp

    context(*preload)
    ctx = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="forkserver")
    deadline = time.monotonic() + deadline_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError(f"{nprocs} ranks did not finish in {deadline_s:.0f} s")
