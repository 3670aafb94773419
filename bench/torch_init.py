#!/usr/bin/env python3
"""bench/torch_init.py — time from `import kiln.torch` to every unit loaded,
on a warm cache, in fresh processes.

Each trial is a new interpreter that imports torch (the baseline, timed
inside it), then kiln.torch, then calls kiln.torch.init() (every unit
resolved from the cache and loaded). The first trial fills the cache and is
not counted. Prints the median of each phase and init's time as a ratio
against `import torch` in the same processes. On a GPU it loads for the GPU;
without one, on the fake driver (KILN_CUDA_LIBRARY) with its test mode.

  bench/torch_init.py [--trials 5] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import kiln.torch as kt
from kiln.torch import _runtime
t2 = time.perf_counter()
dev = "cuda" if torch.cuda.is_available() else "cpu"
if dev == "cpu":
    _runtime.enable_cpu_tensors()
loaded = kt.init(dev)
t3 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "import": t2 - t1, "init": t3 - t2,
                  "sources": sorted(set(loaded.values())), "units": len(loaded)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--cache", help="cache directory (default: a new temp dir, filled by trial 0)")
    a = ap.parse_args()
    cache = a.cache or tempfile.mkdtemp(prefix="kiln-init-")
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    rows = []
    for i in range(a.trials + 1):
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=1800)
        if p.returncode:
            sys.exit(f"torch_init: trial {i} failed: {p.stderr.strip().splitlines()[-1:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        if i == 0:
            print(f"# cold fill (not counted): init {r['init'] * 1000:.0f} ms, sources {r['sources']}")
            continue
        rows.append(r)
    med = {k: statistics.median(r[k] for r in rows) * 1000 for k in ("torch", "import", "init")}
    print(f"# {a.trials} warm trials, {rows[0]['units']} units, loaded as {rows[0]['sources']}")
    print(f"import torch        {med['torch']:8.1f} ms (baseline)")
    print(f"import kiln.torch   {med['import']:8.1f} ms  {med['import'] / med['torch']:.2f}x")
    print(f"kiln.torch.init()   {med['init']:8.1f} ms  {med['init'] / med['torch']:.2f}x")
    print(f"import + init       {med['import'] + med['init']:8.1f} ms")


if __name__ == "__main__":
    main()
