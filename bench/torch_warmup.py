#!/usr/bin/env python3
"""bench/torch_warmup.py — time to ready of kiln.torch.dist.warmup in a
torch.distributed job (gloo on 127.0.0.1), against one process building alone.

For each N (default 2, 4, 8) it starts N ranks, each with its own cold cache
directory, a file-store rendezvous and init_process_group("gloo"); every rank
then calls kiln.torch.dist.warmup(arch=..., kernels=...) (the GPU-less fill,
so it runs anywhere). The baseline is one process calling kiln.build with
the same arch and kernels into a cold cache, run right before each job
(the machines are shared and their load drifts). Printed per N:

- ready: from the moment every rank had joined the process group to the last
  rank's return from warmup (the job's time to ready; process start-up and
  `import torch` are not in it, and are shown apart as "start"), with rank
  0's compile CPU seconds (a ratio far from 1 at equal CPU seconds is the
  machine's load changing between the two runs);
- alone: the baseline's kiln.build call (and its compile CPU seconds), and
  ready's ratio against it;
- compiles per target: compile runs recorded in all the ranks' cache indexes
  (the `builds` table) divided by the number of (unit, target) pairs;
- the longest single collective wait over all ranks and which one, against
  the heartbeat.

  PYTHONPATH=python KILN_LIBRARY=build/libkiln.so bench/torch_warmup.py \\
      [--ranks 2,4,8] [--arch 90] [--kernels GLOB] [--heartbeat-ms 500] [--timeout-s 600]

Needs torch and NVRTC (KILN_CUDA_LIBRARY may point at tests/fakecuda: no GPU
is touched). Every cache is a new temp directory, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(spec_path: str, rank: int) -> None:
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    res: dict[str, object] = {"rank": rank}
    t_launch = time.time()
    import kiln

    if spec["size"] == 0:  # the baseline: one process, plain kiln.build
        t0 = time.time()
        rep = kiln.build(arch=spec["arch"], kernels=spec["kernels"], cache=spec["caches"][0])
        res.update(
            ok=rep.failed == 0, t0=t0, t1=time.time(), built=rep.built, targets=rep.targets, cpu=rep.compile_cpu_s
        )
    else:
        from dataclasses import asdict
        from datetime import timedelta

        import torch.distributed as dist

        import kiln.torch.dist as kd

        dist.init_process_group(
            "gloo",
            init_method="file://" + spec["store"],
            rank=rank,
            world_size=spec["size"],
            timeout=timedelta(seconds=spec["pg_timeout_s"]),
        )
        t0 = time.time()
        try:
            rep = kd.warmup(
                arch=spec["arch"],
                kernels=spec["kernels"],
                heartbeat_ms=spec["heartbeat_ms"],
                timeout_s=spec["timeout_s"],
                cache=spec["caches"][rank],
            )
            res.update(ok=True, report=asdict(rep))
        except Exception as e:  # noqa: BLE001 - reported by the parent
            res.update(ok=False, error=f"{type(e).__name__}: {e}")
        res.update(t0=t0, t1=time.time())
    res["t_launch_in"] = t_launch
    (out / f"{rank}.json").write_text(json.dumps(res))


def builds(cache: str) -> int:
    if not os.path.exists(os.path.join(cache, "index.sqlite")):
        return 0
    db = sqlite3.connect(f"file:{cache}/index.sqlite?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM builds").fetchone()[0])
    finally:
        db.close()


def run(tmp: Path, size: int, a: argparse.Namespace) -> tuple[float, list[dict], list[str]]:
    """size 0: the alone baseline. Returns (launch time, results, caches)."""
    tmp.mkdir(parents=True)
    (tmp / "out").mkdir()
    caches = [str(tmp / f"cache{r}") for r in range(max(size, 1))]
    spec = {
        "size": size,
        "arch": a.arch,
        "kernels": a.kernels,
        "heartbeat_ms": a.heartbeat_ms,
        "timeout_s": a.timeout_s,
        "pg_timeout_s": a.pg_timeout_s,
        "caches": caches,
        "store": str(tmp / "store"),
        "out": str(tmp / "out"),
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    launched = time.time()
    procs = []
    for r in range(max(size, 1)):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(size))
        log = open(tmp / "out" / f"{r}.log", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(tmp / "spec.json"), str(r)],
                env=e,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    end = time.monotonic() + a.deadline_s
    try:
        for p in procs:
            p.wait(timeout=max(end - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        sys.exit(f"torch_warmup: N={size}: not done within {a.deadline_s} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    results = []
    for r in range(max(size, 1)):
        f = tmp / "out" / f"{r}.json"
        if not f.exists():
            log = (tmp / "out" / f"{r}.log").read_text(errors="replace")[-2000:]
            sys.exit(f"torch_warmup: N={size}: rank {r} left no result:\n{log}")
        res = json.loads(f.read_text())
        if not res["ok"]:
            sys.exit(f"torch_warmup: N={size}: rank {r} failed: {res.get('error')}")
        results.append(res)
    return launched, results, caches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8", help="comma list of job sizes")
    ap.add_argument("--arch", default="90")
    ap.add_argument("--kernels", default=None, help="unit glob (default: every unit)")
    ap.add_argument("--heartbeat-ms", type=float, default=500.0)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="kiln's silence limit")
    ap.add_argument("--pg-timeout-s", type=float, default=10.0, help="the process group's timeout")
    ap.add_argument("--deadline-s", type=float, default=900.0, help="per job")
    a = ap.parse_args()
    sizes = [int(x) for x in a.ranks.split(",") if x]
    root = Path(tempfile.mkdtemp(prefix="kiln-torch-warmup-"))
    try:
        import torch

        print(
            f"# torch {torch.__version__}, {os.cpu_count()} CPUs, arch {a.arch}, kernels {a.kernels or 'all'}, "
            f"heartbeat {a.heartbeat_ms:.0f} ms, process group timeout {a.pg_timeout_s:.0f} s, gloo on 127.0.0.1, "
            "one cold cache per rank"
        )
        print(
            f"{'N':>3} {'alone s':>8} {'CPU s':>6} {'start s':>8} {'ready s':>8} {'CPU s':>6} {'vs alone':>9} "
            f"{'compiles/target':>16} "
            f"{'received':>9} {'longest wait ms':>16} {'/ heartbeat':>12}  which"
        )
        for n in sizes:
            # the baseline right before each job: this machine's load drifts
            _, alone, caches = run(root / f"alone{n}", 0, a)
            alone_s = alone[0]["t1"] - alone[0]["t0"]
            targets = alone[0]["targets"]
            if builds(caches[0]) != targets:
                sys.exit(f"torch_warmup: the alone build made {builds(caches[0])} compiles for {targets} pairs")
            launched, res, caches = run(root / f"n{n}", n, a)
            joined = max(r["t0"] for r in res)  # every rank in the process group
            ready = max(r["t1"] for r in res) - joined
            compiles = sum(builds(c) for c in caches)
            worst = max(res, key=lambda r: r["report"]["longest_wait_ms"])["report"]
            fps = {r["report"]["fingerprint"] for r in res}
            received = sum(r["report"]["received"] for r in res)
            print(
                f"{n:>3} {alone_s:>8.2f} {alone[0]['cpu']:>6.1f} {joined - launched:>8.2f} {ready:>8.2f} "
                f"{res[0]['report']['compile_cpu_s']:>6.1f} {ready / alone_s:>8.2f}x "
                f"{compiles / targets:>16.2f} {received:>9} {worst['longest_wait_ms']:>16.1f} "
                f"{worst['longest_wait_ms'] / a.heartbeat_ms:>12.2f}  rank {worst['rank']}: {worst['longest_what']}"
                + ("" if len(fps) == 1 else "  FINGERPRINTS DIFFER")
            )
            sys.stdout.flush()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
