"""bench/torch_overhead.py in a smoke mode (every op, one round of two
calls): it runs to the end on the fake driver, checks every path's result
before it times, and prints a full table per op. The figures are not checked
(docs/performance.md has them); that the bench works is."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OPS = (
    "scaled_softmax scaled_masked_softmax scaled_upper_triang_masked_softmax layer_norm rms_norm "
    "embedding bias_gelu bias_swiglu bias_dropout_add rope cross_entropy"
).split()


def test_every_op_gets_a_table_with_every_mode_timed_and_kernels_not_run():
    r = subprocess.run(
        [sys.executable, os.path.join(_ROOT, "bench", "torch_overhead.py"), "--op", "all", "--rounds", "1", "--calls", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=_ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert re.findall(r"^# op (\S+)$", out, re.M) == _OPS, out
    assert out.count("KILN_FAKE_CUDA_RUN=0: kernels validated, not run") == len(_OPS), out
    tables = re.split(r"^# op \S+$", out, flags=re.M)[1:]
    for name, table in zip(_OPS, tables):
        head = re.search(r"^mode\s+(.*)$", table, re.M)
        assert head is not None, (name, table)
        cols = head.group(1).split()
        assert cols[:7] == ["torch", "fast", "boxed", "fallback", "apex", "megatron", "function"], cols
        for mode in ("nograd", "grad", "inference", "fwd+bwd"):
            row = re.search(rf"^{re.escape(mode)}\s+(.*)$", table, re.M)
            assert row is not None, (name, mode, table)
            v = dict(zip(cols, row.group(1).split()))
            for c in ("torch", "fast", "fallback"):  # every op times these in every mode
                float(v[c])
                assert v[c + "/t" if c != "torch" else "torch"] != "nan", (name, mode, v)
            softmax_only = ("apex", "megatron", "function")
            if name == "scaled_softmax":
                for c in softmax_only:
                    if c == "megatron" and importlib.util.find_spec("megatron") is None:
                        assert v[c] == "-", v  # no megatron-core in this venv
                        continue
                    float(v[c])
                if "ops have C kernels" in out:  # the fast path is on: boxed is its op, in every mode
                    float(v["boxed"])
            else:
                assert all(v[c] == "-" for c in softmax_only + ("boxed",)), (name, mode, v)
