#!/usr/bin/env python3
"""The coordination protocol's cost at scale, analytically (docs/coordination.md, "At scale").

For each transport's collective algorithms, from a per-hop latency alpha and a per-byte cost beta:

    nccl       broadcast: ring, pipelined in 4 KiB slices   max-reduce: ring (reduce-scatter + all-gather)
    gloo       broadcast: binomial tree (gloo/broadcast.cc)  max-reduce: kiln's binomial tree up, then that broadcast
                                                              (kiln.torch.dist since issue 28)
    gloo-ring  broadcast: binomial tree                      max-reduce: torch's all_reduce, a ring on gloo
                                                              (gloo/allreduce.cc; kiln.torch.dist before issue 28)
    mpi        broadcast: binomial tree                      max-reduce: recursive doubling

and the protocol's collectives (loader/coord*.c): cold = the exchange (16,640 B max-reduce), a 4,096 B
status frame every heartbeat until the root's fetch of build_ms ended, "what is still needed" (16,640 B),
per artifact a 1,024 B header and its payload, the final fingerprint (256 B); warm = the exchange alone.

    coord_model.py [--alpha-us A] [--beta-ns B] [--ranks N,N] [--build-ms D] [--heartbeat-ms H]
                   [--artifact-bytes P] [--check RESULTS]

--check reads coord_scale's table (tests/sim/coord_scale.c) and prints, for each of its rows, the
model's protocol time (ready less the fetch), longest wait and bytes per rank next to the simulation's,
with the relative error. The simulation's names map as ring -> nccl, rd -> mpi; tree (binomial
broadcast, reduce-then-broadcast max-reduce) is modelled as itself.
"""
import argparse
import math
import sys

EXCHANGE, FRAME, HEADER, FINGERPRINT = 16640, 4096, 1024, 256
RING_CHUNK, ART_CHUNK = 4 << 10, 1 << 20  # ring slices (tests/sim/sim_comm.c), artifact chunks


def hop(a, b, n):
    return a + b * n


def lg(n):
    return math.ceil(math.log2(n)) if n > 1 else 0


def bcast(alg, n, size, a, b):
    """(time until the last rank has it, bytes the root sends, mean bytes a rank sends)."""
    if n == 1:
        return 0.0, 0, 0.0
    if alg == "ring":
        chunks = max(1, math.ceil(size / RING_CHUNK))
        h = hop(a, b, min(size, RING_CHUNK))
        return (n - 1) * h + (chunks - 1) * h, size, size * (n - 1) / n
    return lg(n) * hop(a, b, size), lg(n) * size, size * (n - 1) / n


def allreduce(alg, n, size, a, b):
    """(time from the last arrival, mean bytes a rank sends)."""
    if n == 1:
        return 0.0, 0.0
    if alg == "ring":
        part = math.ceil(size / n)
        return 2 * (n - 1) * hop(a, b, part), 2 * (n - 1) * part
    if alg == "tree":
        return 2 * lg(n) * hop(a, b, size), 2 * size
    p = int(math.floor(math.log2(n)))
    extra = (1 << p) < n
    return (p + 2 * extra) * hop(a, b, size), (p + extra) * size


def chunks(size):
    return [min(ART_CHUNK, size - at) for at in range(0, size, ART_CHUNK)] or [0]


def model(bc, ar, n, a, b, build_ms, hb_ms, payloads):
    """Times in ms; bytes."""
    a, b = a / 1e3, b / 1e6  # us -> ms, ns per byte -> ms per byte
    frames = math.ceil(build_ms / hb_ms) + 1 if build_ms > 0 else 1
    t_x, by_x = allreduce(ar, n, EXCHANGE, a, b)
    t_f, root_f, by_f = bcast(bc, n, FRAME, a, b)
    t_fp, by_fp = allreduce(ar, n, FINGERPRINT, a, b)
    t_art, by_art = 0.0, 0.0
    for p in payloads:
        for size in [HEADER] + chunks(p):
            t, _, by = bcast(bc, n, size, a, b)
            t_art += t
            by_art += by
    # the READY frame leaves a heartbeat-multiple after the exchange; then the last rank's copy of
    # it, the second exchange, the artifacts, the fingerprint
    over = t_x + t_f + t_x + t_art + t_fp + (math.ceil(build_ms / hb_ms) * hb_ms - build_ms)
    # a rank waits a heartbeat for each frame; the root waits, in "what is still needed", for the
    # last rank to get the READY frame and the max-reduce to run
    wait = max(hb_ms, t_f + t_x) if frames > 1 else t_f + t_x
    sent = 2 * by_x + frames * by_f + by_art + by_fp
    return {
        "over_ms": over,
        "wait_ms": wait,
        "bytes_per_rank": sent,
        "root_bytes_per_hb": root_f,
        "warm_ms": t_x,
        "warm_collectives": 1,
    }


TRANSPORTS = {
    "nccl": ("ring", "ring"),
    "gloo": ("tree", "tree"),
    "gloo-ring": ("tree", "ring"),
    "mpi": ("tree", "rd"),
    "tree": ("tree", "tree"),
}
SIM = {"ring": "nccl", "rd": "mpi", "tree": "tree"}


def check(path, args):
    print(f"# model vs simulation ({path}); alpha {args.alpha_us} us, beta {args.beta_ns} ns/B")
    print(f"{'alg':5} {'N':>6} | {'sim_over':>9} {'model':>9} {'err%':>7} | {'sim_wait':>9} {'model':>9} "
          f"{'err%':>7} | {'sim_B':>9} {'model':>9} {'err%':>7} | {'sim_warm':>9} {'model':>9} {'err%':>7}")
    worst = 0.0
    for line in open(path):
        sec = [x.split() for x in line.split("|")]
        if len(sec) < 5 or len(sec[0]) != 2 or sec[0][0] not in SIM or not sec[0][1].isdigit():
            continue
        alg, n = sec[0][0], int(sec[0][1])
        over, wait, bpr, art = float(sec[1][1]), float(sec[1][3]), float(sec[1][-4]), int(sec[1][-1])
        warm = float(sec[2][1])
        bc, ar = TRANSPORTS[SIM[alg]]
        m = model(bc, ar, n, args.alpha_us, args.beta_ns, args.build_ms, args.heartbeat_ms, [art])
        errs = [(m["over_ms"] - over) / over * 100, (m["wait_ms"] - wait) / wait * 100,
                (m["bytes_per_rank"] - bpr) / bpr * 100, (m["warm_ms"] - warm) / warm * 100 if warm else 0.0]
        worst = max(worst, *(abs(e) for e in errs))
        print(f"{alg:5} {n:6d} | {over:9.3f} {m['over_ms']:9.3f} {errs[0]:7.2f} | {wait:9.1f} {m['wait_ms']:9.1f} "
              f"{errs[1]:7.2f} | {bpr:9.0f} {m['bytes_per_rank']:9.0f} {errs[2]:7.2f} | {warm:9.3f} "
              f"{m['warm_ms']:9.3f} {errs[3]:7.2f}")
    print(f"# largest error: {worst:.2f} %")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--alpha-us", type=float, default=0.5)
    p.add_argument("--beta-ns", type=float, default=1.0)
    p.add_argument("--ranks", default="1024,4096,16384,100000")
    p.add_argument("--build-ms", type=float, default=2000)
    p.add_argument("--heartbeat-ms", type=float, default=500)
    p.add_argument("--artifact-bytes", type=int, default=82000, help="payload per artifact (blob + log)")
    p.add_argument("--artifacts", type=int, default=1)
    p.add_argument("--check", metavar="RESULTS")
    args = p.parse_args()
    if args.alpha_us < 0 or args.beta_ns < 0 or args.heartbeat_ms <= 0 or args.build_ms < 0:
        p.error("alpha, beta and the fetch must be >= 0, the heartbeat > 0")
    if args.check:
        check(args.check, args)
        return
    try:
        ranks = [int(x) for x in args.ranks.split(",")]
    except ValueError:
        p.error(f"--ranks {args.ranks}: a comma-separated list of integers")
    print(f"# model: alpha {args.alpha_us} us, beta {args.beta_ns} ns/B, fetch {args.build_ms:.0f} ms, "
          f"heartbeat {args.heartbeat_ms:.0f} ms, {args.artifacts} artifact(s) of {args.artifact_bytes} B")
    print(f"{'transport':9} {'N':>7} | {'ready_ms':>9} {'over_ms':>9} {'wait_ms':>8} {'B/rank':>9} "
          f"{'root_B/hb':>9} | {'warm_ms':>8} {'warm_c':>6}")
    for name, (bc, ar) in TRANSPORTS.items():
        if name == "tree":  # the same algorithms as gloo's
            continue
        for n in ranks:
            m = model(bc, ar, n, args.alpha_us, args.beta_ns, args.build_ms, args.heartbeat_ms,
                      [args.artifact_bytes] * args.artifacts)
            print(f"{name:9} {n:7d} | {args.build_ms + m['over_ms']:9.1f} {m['over_ms']:9.2f} {m['wait_ms']:8.1f} "
                  f"{m['bytes_per_rank']:9.0f} {m['root_bytes_per_hb']:9d} | {m['warm_ms']:8.2f} "
                  f"{m['warm_collectives']:6d}")


if __name__ == "__main__":
    sys.exit(main())
