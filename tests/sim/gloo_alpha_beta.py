#!/usr/bin/env python3
"""alpha and beta of torch.distributed's gloo over loopback TCP, for the model (docs/coordination.md, "At scale").

Two processes ping-pong tensors of 8 B .. 4 MiB (send/recv); half a round trip is alpha + beta * bytes: alpha is
the fastest of the sizes up to 4 KiB (the very first messages pay gloo's set-up, and a loaded machine adds
noise), beta the least-squares slope over the sizes >= 64 KiB. Then a 4 KiB broadcast and a
16,640-byte MAX all_reduce over the same two ranks. Needs torch (scripts/python-env's venv).

    python3 tests/sim/gloo_alpha_beta.py [--reps 200]
"""
import argparse
import os
import socket
import sys
import time

SIZES = [8, 64, 512, 4096, 16640, 65536, 262144, 1048576, 4194304]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, port, reps, out):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    times = []
    for size in SIZES:
        t = torch.zeros(size, dtype=torch.uint8)
        n = max(5, reps // 10) if size >= 1048576 else reps
        for i in range(n + 20):
            if i == 20:
                dist.barrier()
                t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
        times.append((time.perf_counter() - t0) / n / 2)
    coll = {}
    for name, size in (("bcast_4096", 4096), ("allreduce_max_16640", 16640)):
        t = torch.zeros(size, dtype=torch.uint8)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            if name.startswith("bcast"):
                dist.broadcast(t, 0)
            else:
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
        coll[name] = (time.perf_counter() - t0) / reps
    dist.destroy_process_group()
    if rank == 0:
        out.put((times, coll))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    if not 1 <= args.reps <= 100000:
        p.error("--reps: 1 to 100000")
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, port, args.reps, out)) for r in range(2)]
    for pr in procs:
        pr.start()
    times, coll = out.get(timeout=300)
    for pr in procs:
        pr.join(timeout=60)
    big = [(s, t) for s, t in zip(SIZES, times) if s >= 65536]
    n = len(big)
    sx = sum(s for s, _ in big)
    sy = sum(t for _, t in big)
    sxx = sum(s * s for s, _ in big)
    sxy = sum(s * t for s, t in big)
    beta = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    alpha = min(t for s, t in zip(SIZES, times) if s <= 4096)
    print("# gloo (torch.distributed) loopback TCP, 2 processes; one-way time = half a send/recv round trip")
    print(f"{'bytes':>10} {'measured_us':>12} {'model_us':>12} {'ratio':>8}")
    for s, t in zip(SIZES, times):
        m = alpha + beta * s
        print(f"{s:10d} {t * 1e6:12.2f} {m * 1e6:12.2f} {t / m:8.3f}")
    print(f"alpha_us {alpha * 1e6:.3f}\nbeta_ns {beta * 1e9:.4f}")
    for k, v in coll.items():
        print(f"{k}_us {v * 1e6:.2f} (2 ranks)")


if __name__ == "__main__":
    sys.exit(main())
