"""kiln.torch's ops at their edges (issue 31): double backward (computed or a
clear error, never zeros), empty batches, every tensor argument of the
backward ops checked against the others, the mean cross-entropy with every
target ignored, and eval-mode dropout with p = 1. Fake driver, CPU tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kiln
import kiln.torch as kt
from kiln.torch import _runtime
from kiln.torch import ops as kops

class _Ops:
    """kiln's op callables (kiln.torch.ops._<name>), what kiln.torch's
    functions call: they raise the KilnError subclass on both paths (a raw
    torch.ops.kiln call on the fast path raises torch's RuntimeError with the
    same message: test_ops_fast.py)."""

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(kops, "_" + name)


ops = _Ops()


@pytest.fixture(autouse=True)
def cpu_tensors():
    _runtime.enable_cpu_tensors(True)
    yield
    _runtime.enable_cpu_tensors(False)


def second_grad(fn, x, *others):
    """d/dx of sum(grad(fn(x), x, create_graph=True) * v)."""
    x = x.detach().clone().requires_grad_()
    y = fn(x, *others)
    (g,) = torch.autograd.grad(y, x, torch.randn_like(y), create_graph=True)
    (gg,) = torch.autograd.grad(g, x, torch.randn_like(g))
    return gg


# ---- double backward ---------------------------------------------------------------------


def _angles():
    return torch.arange(4, dtype=torch.float32)[:, None] * torch.tensor([1.0, 0.1])


COMPUTED = {
    "scaled_softmax": (lambda t: kt.scaled_softmax(t, 0.7), lambda t: F.softmax(t * 0.7, -1), (3, 16)),
    "scaled_upper_triang_masked_softmax": (
        lambda t: kt.scaled_upper_triang_masked_softmax(t, 0.5),
        lambda t: F.softmax((t * 0.5).masked_fill(torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), float("-inf")), -1),
        (2, 5, 5),
    ),
    "rope": (lambda t: kt.rope(t, _angles()) ** 2, None, (4, 2, 1, 8)),
}


@pytest.mark.parametrize("name", list(COMPUTED))
def test_double_backward_is_computed_and_matches_torch(name):
    fn, ref, shape = COMPUTED[name]
    x = torch.randn(*shape)
    torch.manual_seed(5)
    got = second_grad(fn, x)
    if ref is None:  # rope: against the same math in torch ops
        from test_ops import rope_ref

        ref = lambda t: rope_ref(t, _angles(), "sbhd", False) ** 2  # noqa: E731
    torch.manual_seed(5)
    want = second_grad(ref, x)
    assert got.abs().sum() > 0
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_dropout_double_backward_applies_the_mask_again():
    x = (torch.randn(8, 32) + 5).requires_grad_()
    r = torch.randn(8, 32)
    y = kt.bias_dropout_add(x, None, r, 0.4) ** 2
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    keep = (y.detach() != r**2).float()
    # y = (x * keep / 0.6 + r)^2: d2y/dx2 = 2 * keep / 0.36
    torch.testing.assert_close(gg, 2 * keep / 0.36, rtol=1e-4, atol=1e-4)


REFUSED = {
    "layer_norm": lambda t: kt.layer_norm(t, torch.ones(16), torch.zeros(16)),
    "rms_norm": lambda t: kt.rms_norm(t, torch.ones(16)),
    "bias_gelu": lambda t: kt.bias_gelu(t),
    "bias_swiglu": lambda t: kt.bias_swiglu(t),
    "cross_entropy": lambda t: kt.cross_entropy(t, torch.tensor([1, 2, 3, 4]), reduction="none"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_double_backward_is_a_clear_error_not_zeros(name):
    with pytest.raises(kiln.KilnUnsupported, match=rf"kiln.torch.{name}: double backward .* not supported"):
        second_grad(REFUSED[name], torch.randn(4, 16))


def test_embedding_double_backward_is_a_clear_error():
    w = torch.randn(10, 4, requires_grad=True)
    y = kt.embedding(torch.tensor([1, 2, 2]), w)
    (g,) = torch.autograd.grad((y**2).sum(), w, create_graph=True)
    with pytest.raises(kiln.KilnUnsupported, match="kiln.torch.embedding: double backward"):
        torch.autograd.grad(g.sum(), w)


def test_first_order_grad_with_create_graph_still_works():
    x = torch.randn(4, 16, requires_grad=True)
    (g,) = torch.autograd.grad(kt.layer_norm(x, torch.ones(16), torch.zeros(16)).sum(), x, create_graph=True)
    assert g.requires_grad and g.shape == x.shape


# ---- empty batches -----------------------------------------------------------------------


EMPTY = {
    "scaled_softmax": (lambda t: kt.scaled_softmax(t, 0.5), (0, 16)),
    "scaled_masked_softmax": (lambda t: kt.scaled_masked_softmax(t, torch.zeros(1, 1, 3, 8, dtype=torch.bool)), (0, 2, 3, 8)),
    "scaled_upper_triang_masked_softmax": (kt.scaled_upper_triang_masked_softmax, (0, 4, 4)),
    "layer_norm": (lambda t: kt.layer_norm(t, torch.ones(16, requires_grad=True), torch.zeros(16)), (0, 16)),
    "rms_norm": (lambda t: kt.rms_norm(t, torch.ones(16)), (2, 0, 16)),
    "bias_gelu": (lambda t: kt.bias_gelu(t, torch.zeros(16)), (0, 16)),
    "bias_swiglu": (lambda t: kt.bias_swiglu(t, torch.zeros(16)), (0, 16)),
    "bias_dropout_add": (lambda t: kt.bias_dropout_add(t, torch.zeros(16), torch.zeros(0, 16), 0.3), (0, 16)),
    "rope": (lambda t: kt.rope(t, torch.zeros(0, 2)), (0, 2, 2, 8)),
    "cross_entropy": (lambda t: kt.cross_entropy(t, torch.zeros(0, dtype=torch.int64), reduction="sum"), (0, 20)),
}


@pytest.mark.parametrize("name", list(EMPTY))
def test_empty_batch_gives_empty_output_and_grad(name):
    fn, shape = EMPTY[name]
    x = torch.randn(*shape, requires_grad=True)
    y = fn(x)
    assert y.numel() == 0 or name == "cross_entropy"
    (g,) = torch.autograd.grad(y.sum(), x)
    assert g.shape == x.shape


def test_empty_batch_weight_grads_are_zeros():
    w, b = torch.randn(16, requires_grad=True), torch.randn(16, requires_grad=True)
    dw, db = torch.autograd.grad(kt.layer_norm(torch.randn(0, 16), w, b).sum(), (w, b))
    assert torch.equal(dw, torch.zeros(16)) and torch.equal(db, torch.zeros(16))
    (dw,) = torch.autograd.grad(kt.rms_norm(torch.randn(0, 16), w).sum(), (w,))
    assert torch.equal(dw, torch.zeros(16))
    emb = torch.randn(10, 4, requires_grad=True)
    y = kt.embedding(torch.zeros(2, 0, dtype=torch.int64), emb)
    assert y.shape == (2, 0, 4)
    (g,) = torch.autograd.grad(y.sum(), emb)
    assert torch.equal(g, torch.zeros(10, 4))


def test_empty_batch_mean_cross_entropy_is_nan_as_torch():
    logits = torch.randn(0, 20)
    t = torch.zeros(0, dtype=torch.int64)
    assert torch.isnan(kt.cross_entropy(logits, t)) and torch.isnan(F.cross_entropy(logits, t))


# ---- the backward ops check every argument ------------------------------------------------


def bad(call, needle):
    with pytest.raises(kiln.KilnInvalidArgument, match=needle):
        call()


def test_backward_ops_check_dy_against_y():
    y = torch.softmax(torch.randn(8, 40), -1).half()
    bad(lambda: ops.scaled_softmax_backward(torch.randn(8, 40), y, 1.0), "dy is torch.float32 .*y torch.float16")
    bad(lambda: ops.scaled_softmax_backward(torch.randn(2, 40).half(), y, 1.0), r"dy .*\(2, 40\).*\(8, 40\)")
    ym = torch.rand(2, 2, 3, 8)
    bad(lambda: ops.scaled_masked_softmax_backward(torch.randn(1, 2, 3, 8), ym, 1.0), "must match")
    bad(lambda: ops.scaled_upper_triang_masked_softmax_backward(torch.randn(2, 4, 4), ym, 1.0), "want y")
    x, w = torch.randn(4, 16), torch.ones(16)
    mean, rstd = torch.zeros(4), torch.ones(4)
    bad(lambda: ops.layer_norm_backward(torch.randn(3, 16), x, mean, rstd, w), "dy")
    bad(lambda: ops.layer_norm_backward(torch.randn(4, 16), x, mean[:2], rstd, w), "mean")
    bad(lambda: ops.layer_norm_backward(torch.randn(4, 16), x, mean, rstd.half(), w), "rstd")
    bad(lambda: ops.rms_norm_backward(torch.randn(4, 16).bfloat16(), x, rstd, w), "dy")
    bad(lambda: ops.embedding_backward(torch.randn(3, 8), torch.zeros(2, dtype=torch.int64), 30, 0, True), "does not fit ids")
    bad(lambda: ops.bias_gelu_backward(torch.randn(3, 16), x, None), "dy")
    bad(lambda: ops.bias_gelu_backward(torch.randn(4, 16), x, torch.ones(8)), "bias")
    bad(lambda: ops.bias_swiglu_backward(torch.randn(4, 16), x, None), "dy")
    bad(lambda: ops.bias_dropout_add_backward(torch.randn(4, 16), 0.3, True, torch.zeros(3, dtype=torch.int64)), "seed_offset")
    bad(lambda: ops.bias_dropout_add_backward(torch.randn(4, 16), 1.0, True, torch.zeros(2, dtype=torch.int64)), "p = 1.0")
    bad(lambda: ops.rope_backward(torch.randn(4, 2, 2, 8), torch.zeros(3, 2), "sbhd", False), "angles")
    logits, tgt = torch.randn(4, 20), torch.tensor([1, 2, 3, 4])
    bad(lambda: ops.cross_entropy_backward(logits, torch.zeros(2), torch.ones(4), tgt, 0, -100), "lse")
    bad(lambda: ops.cross_entropy_backward(logits, torch.zeros(4), torch.ones(4).half(), tgt, 0, -100), "dloss")


def test_integers_reaching_c_are_range_checked_not_wrapped():
    # ctypes wraps an int64 argument silently (2**64 -> 0): each is checked first
    ids, w = torch.tensor([0, 1]), torch.randn(4, 8)
    bad(lambda: kt.embedding(ids, w, vocab_start=2**64), r"vocab_start 18446744073709551616 is outside")
    bad(lambda: kt.embedding(ids, w, vocab_start=-1), "vocab_start -1 is outside")
    bad(lambda: kt.embedding(ids, w, vocab_size=2**63), "vocab_size")
    bad(lambda: kt.embedding(ids, w, vocab_start=1.5), "vocab_start must be an integer")
    logits, tgt = torch.randn(2, 8), torch.tensor([1, 2])
    bad(lambda: kt.cross_entropy(logits, tgt, ignore_index=2**63), "ignore_index")
    bad(lambda: kt.cross_entropy(logits, tgt, ignore_index=True), "ignore_index must be an integer")
    so = torch.tensor([-5, 0], dtype=torch.int64)
    bad(lambda: ops.bias_dropout_add_backward(torch.randn(4, 16), 0.3, True, so), "must not be negative")


# ---- cross-entropy and dropout ----------------------------------------------------------------


def test_mean_cross_entropy_with_every_target_ignored_is_nan_as_torch():
    logits = torch.randn(3, 10)
    t = torch.full((3,), -100)
    assert torch.isnan(F.cross_entropy(logits, t))
    assert torch.isnan(kt.cross_entropy(logits, t))


def test_dropout_eval_accepts_p_1_as_the_identity():
    x, b, r = torch.randn(8, 16), torch.randn(16), torch.randn(8, 16)
    torch.testing.assert_close(kt.bias_dropout_add(x, b, r, 1.0, training=False), (x + b) + r)
    with pytest.raises(kiln.KilnInvalidArgument, match="p = 1.0"):
        kt.bias_dropout_add(x, b, r, 1.0, training=True)
