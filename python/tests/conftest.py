"""pytest's set-up for python/tests: where the tensors live.

CI runs every file on CPU tensors through the fake driver (run_pytest.sh:
KILN_FAKE_CUDA_HOST_MEMORY=1; the files' ``cpu_tensors`` fixtures). The GPU
bundle's torch step (scripts/gpu-bundle-run, docs/gpu.md) runs the op files
with ``KILN_TEST_DEVICE=cuda``: torch's default device is then the GPU, so
the same tests build their tensors there and compare kiln's ops with torch's
eager ones on CUDA tensors, and ``COMPILE_BACKEND`` is inductor (the default
torch.compile backend; on CPU tensors the tests keep ``aot_eager``, which
needs no C++ compiler)."""

from __future__ import annotations

import os

DEVICE = os.environ.get("KILN_TEST_DEVICE", "cpu")
if DEVICE not in ("cpu", "cuda"):
    raise SystemExit(f"KILN_TEST_DEVICE={DEVICE!r}: expected cpu or cuda")
if DEVICE == "cuda":
    import torch  # only here: test_api.py and test_binding.py need no torch

    if not torch.cuda.is_available():
        raise SystemExit(f"KILN_TEST_DEVICE=cuda, but torch {torch.__version__} sees no CUDA device")
    torch.set_default_device("cuda")
COMPILE_BACKEND = "inductor" if DEVICE == "cuda" else "aot_eager"
