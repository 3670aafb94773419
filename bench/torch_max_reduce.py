#!/usr/bin/env python3
"""bench/torch_max_reduce.py — kiln's max-reduce over torch.distributed (gloo
on 127.0.0.1): kiln's binomial tree of point-to-point messages plus gloo's
broadcast (kiln.torch.dist, the default since issue 28) against torch's
all_reduce(MAX), which gloo runs as a ring (what kiln called before).

For each N (default 2, 4, 8, 16, 32) it starts N ranks (forked from a
forkserver that imported torch once), each makes kiln's communicator over
the world group (kiln.torch.dist._Comm, the object warmup uses) and times,
--reps times and in alternating order, one max-reduce of --bytes (default
16,640: the protocol's first exchange, the only collective of a warm start)
each way, between barriers. A repetition's time is the slowest rank's.
Printed per N: the median of each, their ratio (ring / tree), and the hops
each takes (ring 2(N-1), tree 2 ceil(log2 N)). Each rank checks that both
give the same bytes.

  PYTHONPATH=python KILN_LIBRARY=build/libkiln.so bench/torch_max_reduce.py \\
      [--ranks 2,4,8,16,32] [--reps 30] [--bytes 16640]

On a 2-core machine, N processes take turns on the cores: every hop is a
context switch, so both columns measure the scheduler as much as gloo; the
trend of the ratio with N is the result, and docs/coordination.md ("At
scale") gives the model at 1k to 100k ranks from alpha and beta.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, size: int, port: int, reps: int, nbytes: int, out: str) -> None:
    import torch.distributed as dist

    import kiln.torch.dist as kd

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=timedelta(seconds=120)
    )
    comm = kd._Comm(dist.group.WORLD, own_group=False)
    data = bytes((i * 7 + rank * 13) % 256 for i in range(nbytes))
    times: dict[str, list[float]] = {"tree": [], "ring": []}
    results: dict[str, bytes] = {}
    for rep in range(reps + 2):  # 2 warm-ups: connections, first-call costs
        order = ("tree", "ring") if rep % 2 == 0 else ("ring", "tree")
        for alg in order:
            comm.tree = alg == "tree"
            buf = (ctypes.c_uint8 * nbytes).from_buffer_copy(data)
            dist.barrier()
            t0 = time.perf_counter()
            st = comm._max_reduce(None, ctypes.addressof(buf), nbytes, 60.0)
            dt = time.perf_counter() - t0
            if st != 0:
                raise RuntimeError(f"rank {rank}: {alg} max-reduce failed ({st})")
            results[alg] = bytes(buf)
            if rep >= 2:
                times[alg].append(dt)
    if results["tree"] != results["ring"]:
        raise RuntimeError(f"rank {rank}: the tree and the ring disagree")
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump(times, f)
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8,16,32", help="comma-separated N (default 2,4,8,16,32)")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions of each (default 30)")
    ap.add_argument("--bytes", type=int, default=16640, help="bytes reduced (default 16640, the exchange)")
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.ranks.split(",")]
    except ValueError:
        ap.error(f"--ranks: not a comma-separated list of integers: {args.ranks!r}")
    if any(n < 2 for n in sizes) or args.reps < 1 or args.bytes < 1:
        ap.error("--ranks must be >= 2, --reps and --bytes >= 1")
    import multiprocessing

    import torch
    import torch.multiprocessing as mp

    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "torch.distributed"])
    print(f"torch {torch.__version__}, gloo on 127.0.0.1, {os.cpu_count()} CPUs; max-reduce of {args.bytes} bytes, "
          f"median of {args.reps}, the slowest rank per repetition")
    print(f"{'N':>4} {'tree ms':>9} {'ring ms':>9} {'ring/tree':>9} {'tree hops':>9} {'ring hops':>9}")
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-max-reduce-") as out:
            ctx = mp.start_processes(_rank, args=(n, _free_port(), args.reps, args.bytes, out), nprocs=n,
                                     join=False, start_method="forkserver")
            deadline = time.monotonic() + 600
            while not ctx.join(timeout=1):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    print(f"N={n}: did not finish within 600 s", file=sys.stderr)
                    return 1
            per = [json.load(open(os.path.join(out, f"{r}.json"))) for r in range(n)]
        med = {}
        for alg in ("tree", "ring"):
            slowest = [max(p[alg][i] for p in per) for i in range(args.reps)]
            med[alg] = statistics.median(slowest) * 1e3
        hops_tree = 2 * math.ceil(math.log2(n))
        print(f"{n:>4} {med['tree']:>9.3f} {med['ring']:>9.3f} {med['ring'] / med['tree']:>9.2f} "
              f"{hops_tree:>9} {2 * (n - 1):>9}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
