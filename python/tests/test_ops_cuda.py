"""CUDA graph capture and replay of every kiln:: op of test_ops_compile.cases()
(forward and backward), on CUDA tensors: each op runs once eagerly (which loads
its unit: an op never loads or builds during a capture), is captured into a
torch.cuda.CUDAGraph on a side stream, replayed, and must give exactly the
eager result (the same kernels on the same inputs).

Needs a GPU: the GPU bundle's torch step runs it with KILN_TEST_DEVICE=cuda
(conftest.py, scripts/gpu-bundle-run); everywhere else every test is
skipped, saying why (CUDA graphs have no fake-driver double)."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE

if DEVICE != "cuda":
    pytest.skip("CUDA graphs need CUDA tensors (KILN_TEST_DEVICE=cuda on a GPU)", allow_module_level=True)

from test_ops_compile import cases  # noqa: E402 (after the skip: its tensors are built at import)


def _flat(out):
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("op,args", cases(), ids=lambda v: str(v) if not isinstance(v, tuple) else "")
def test_graph_capture_replays_the_eager_result(op, args):
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        want = [t.clone() for t in _flat(op(*args))]  # eager, and the unit loaded
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = _flat(op(*args))
    for t in out:
        t.fill_(float("nan") if t.is_floating_point() else -1)  # replay must write every element
    graph.replay()
    torch.cuda.synchronize()
    assert len(out) == len(want)
    for got, ref in zip(out, want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
