"""kiln.torch's ops against torch's own implementation of the same math, on
the same tensors: every op x dtype x direction. The ops run on CPU tensors
through the fake driver (tests/fakecuda, KILN_FAKE_CUDA_HOST_MEMORY=1), which
executes kiln's own kernel sources; shapes stay small (a CUDA thread is a
fiber there)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint  # not imported by torch itself before 2.5

import kiln
import kiln.torch as kt
from kiln.torch import _fast, _runtime

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


@pytest.fixture(autouse=True)
def cpu_tensors():
    _runtime.enable_cpu_tensors(True)
    yield
    _runtime.enable_cpu_tensors(False)


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol * scale, atol=atol * scale)


def grads(fn, inputs, dy):
    """(outputs, input grads) of fn in autograd."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    want = [t for t in leaves if t.requires_grad]
    return out, torch.autograd.grad(out, want, dy, allow_unused=True)


def check_both(kiln_fn, ref_fn, inputs, dtype, out_scale=1.0, grad_scale=1.0):
    """Forward and backward of kiln_fn against ref_fn evaluated in float32 on
    the same values (the reference's inputs are the kiln inputs upcast)."""
    ref_inputs = [t.float() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad():
        shape_dtype = kiln_fn(*inputs)
    dy = torch.randn_like(shape_dtype.float()).to(shape_dtype.dtype)
    y, g = grads(kiln_fn, inputs, dy)
    y_ref, g_ref = grads(ref_fn, ref_inputs, dy.float())
    close(y, y_ref, dtype, out_scale)
    for a, b in zip(g, g_ref):
        if b is None:
            continue
        close(a, b, dtype, grad_scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_softmax_matches_torch(dtype):
    x = torch.randn(3, 40).to(dtype)
    check_both(lambda t: kt.scaled_softmax(t, 0.7), lambda t: F.softmax(t * 0.7, -1), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_batches", [1, 2])
def test_scaled_masked_softmax_matches_torch(dtype, mask_batches):
    x = torch.randn(2, 2, 3, 24).to(dtype)
    mask = torch.rand(mask_batches, 1, 3, 24) < 0.3
    mask[..., 0] = False  # no fully masked row: torch gives NaN there, kiln zeros
    check_both(
        lambda t: kt.scaled_masked_softmax(t, mask, 0.5),
        lambda t: F.softmax((t * 0.5).masked_fill(mask, float("-inf")), -1),
        [x],
        dtype,
    )


def test_fully_masked_row_is_zeros_not_nan():
    x = torch.randn(1, 1, 2, 8)
    mask = torch.zeros(1, 1, 2, 8, dtype=torch.bool)
    mask[0, 0, 1] = True
    y = kt.scaled_masked_softmax(x, mask, 1.0)
    assert torch.equal(y[0, 0, 1], torch.zeros(8))
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_softmax_matches_torch(dtype):
    x = torch.randn(3, 5, 5).to(dtype)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    check_both(
        lambda t: kt.scaled_upper_triang_masked_softmax(t, 0.9),
        lambda t: F.softmax((t * 0.9).masked_fill(causal, float("-inf")), -1),
        [x],
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fp32_weights", [False, True])
def test_layer_norm_matches_torch(dtype, fp32_weights):
    if fp32_weights and dtype == torch.float32:
        pytest.skip("same as the float32 case")
    wdt = torch.float32 if fp32_weights else dtype
    x = torch.randn(6, 40).to(dtype)
    w, b = (1 + 0.1 * torch.randn(40)).to(wdt), (0.1 * torch.randn(40)).to(wdt)
    check_both(
        lambda t, w_, b_: kt.layer_norm(t, w_, b_, 1e-5),
        lambda t, w_, b_: F.layer_norm(t, (40,), w_, b_, 1e-5),
        [x, w, b],
        dtype,
        grad_scale=4,
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_torch(dtype):
    x = torch.randn(5, 48).to(dtype)
    w = (1 + 0.1 * torch.randn(48)).to(dtype)
    check_both(
        lambda t, w_: kt.rms_norm(t, w_, 1e-6),
        lambda t, w_: F.rms_norm(t, (48,), w_, 1e-6),
        [x, w],
        dtype,
        grad_scale=4,
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_matches_torch(dtype):
    weight = torch.randn(50, 16).to(dtype)
    ids = torch.randint(0, 50, (2, 5))
    ids[0, :3] = 7  # repeated ids accumulate in the backward
    check_both(
        lambda w: kt.embedding(ids, w),
        lambda w: F.embedding(ids, w),
        [weight],
        dtype,
        grad_scale=2,
    )


def test_embedding_vocab_partition_gives_zero_rows_for_other_ranks():
    full = torch.randn(40, 8)
    ids = torch.tensor([0, 19, 20, 39, 25])
    part = kt.embedding(ids, full[20:].clone(), vocab_start=20, vocab_size=40, sync_check=True)
    want = F.embedding(ids, full) * (ids >= 20).unsqueeze(1)
    torch.testing.assert_close(part, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_bias_gelu_matches_torch(dtype, with_bias):
    x = torch.randn(4, 24).to(dtype)
    b = (0.5 * torch.randn(24)).to(dtype)
    if with_bias:
        check_both(
            lambda t, b_: kt.bias_gelu(t, b_),
            lambda t, b_: F.gelu(t + b_, approximate="tanh"),
            [x, b],
            dtype,
            grad_scale=2,
        )
    else:
        check_both(kt.bias_gelu, lambda t: F.gelu(t, approximate="tanh"), [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_swiglu_matches_torch(dtype):
    x = torch.randn(3, 2 * 20).to(dtype)
    b = (0.5 * torch.randn(40)).to(dtype)

    def ref(t, b_):
        u = t + b_
        a, g = u.chunk(2, -1)
        return F.silu(a) * g

    check_both(lambda t, b_: kt.bias_swiglu(t, b_), ref, [x, b], dtype, grad_scale=2)


def rope_ref(x, angles, layout, interleaved):
    if layout == "bshd":
        x = x.transpose(0, 1)
    rot = 2 * angles.shape[1]
    cos = angles.cos()[:, None, None, :]
    sin = angles.sin()[:, None, None, :]
    r, tail = x[..., :rot], x[..., rot:]
    if interleaved:
        a, b = r[..., 0::2], r[..., 1::2]
        out = torch.stack((a * cos - b * sin, b * cos + a * sin), -1).flatten(-2)
    else:
        a, b = r[..., : rot // 2], r[..., rot // 2 :]
        out = torch.cat((a * cos - b * sin, b * cos + a * sin), -1)
    y = torch.cat((out, tail), -1)
    return y.transpose(0, 1) if layout == "bshd" else y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["sbhd", "bshd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_matches_torch(dtype, layout, interleaved):
    s, b, h, d, rot = 5, 2, 3, 16, 12
    x = torch.randn((s, b, h, d) if layout == "sbhd" else (b, s, h, d)).to(dtype)
    pos = torch.arange(s, dtype=torch.float32)[:, None]
    angles = pos * 10000 ** (-torch.arange(rot // 2, dtype=torch.float32) * 2 / rot)
    check_both(
        lambda t: kt.rope(t, angles, layout, interleaved),
        lambda t: rope_ref(t, angles, layout, interleaved),
        [x],
        dtype,
        out_scale=2,
        grad_scale=2,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_matches_torch(dtype, reduction):
    logits = (3 * torch.randn(6, 50)).to(dtype)
    target = torch.randint(0, 50, (6,))
    target[2] = -100
    check_both(
        lambda t: kt.cross_entropy(t, target, reduction=reduction),
        lambda t: F.cross_entropy(t, target, reduction=reduction),
        [logits],
        dtype,
        out_scale=2,
        grad_scale=2,
    )


def test_non_contiguous_input_is_made_contiguous():
    x = torch.randn(24, 6).t()  # [6, 24], strides (1, 6)
    assert not x.is_contiguous()
    torch.testing.assert_close(kt.scaled_softmax(x, 1.0), F.softmax(x, -1))
    y = torch.randn(6, 48)[:, ::2]
    torch.testing.assert_close(kt.bias_gelu(y), F.gelu(y, approximate="tanh"), rtol=2e-5, atol=2e-5)


# ---- dropout ---------------------------------------------------------------------------------


def bda(x, b, r, p=0.3, training=True):
    return kt.bias_dropout_add(x, b, r, p, training)


def test_dropout_is_reproducible_from_the_seed_and_keeps_1_minus_p():
    x, b, r = torch.randn(64, 64) + 3, torch.randn(64), torch.randn(64, 64)
    torch.manual_seed(1234)
    y1 = bda(x, b, r)
    torch.manual_seed(1234)
    y2 = bda(x, b, r)
    y3 = bda(x, b, r)
    assert torch.equal(y1, y2)
    assert not torch.equal(y2, y3)  # the generator moved on
    kept = (y1 != r).float().mean().item()
    assert abs(kept - 0.7) < 0.03, kept
    k = y1 != r
    torch.testing.assert_close(y1[k], ((x + b) / 0.7 + r)[k], rtol=1e-5, atol=1e-5)


def test_dropout_backward_uses_the_forward_mask():
    x = (torch.randn(32, 48) + 5).requires_grad_()
    b = torch.randn(48).requires_grad_()
    r = torch.randn(32, 48).requires_grad_()
    y = bda(x, b, r, p=0.4)
    dy = torch.randn(32, 48)
    dx, db, dr = torch.autograd.grad(y, (x, b, r), dy)
    keep = y.detach() != r.detach()
    torch.testing.assert_close(dx, torch.where(keep, dy / 0.6, torch.zeros_like(dy)))
    torch.testing.assert_close(db, dx.sum(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dr, dy)


def test_dropout_recomputation_restores_the_mask():
    x, r = torch.randn(16, 32), torch.randn(16, 32)
    state = torch.get_rng_state()
    y1 = bda(x, None, r)
    torch.set_rng_state(state)
    y2 = bda(x, None, r)
    assert torch.equal(y1, y2)
    # torch.utils.checkpoint replays the forward under the saved RNG state
    xx = x.clone().requires_grad_()
    torch.manual_seed(7)
    y = torch.utils.checkpoint.checkpoint(lambda t: bda(t, None, r) * 2, xx, use_reentrant=False)
    (g,) = torch.autograd.grad(y.sum(), xx)
    keep = (y.detach() / 2) != r
    torch.testing.assert_close(g, torch.where(keep, torch.full_like(x, 2 / 0.7), torch.zeros_like(x)))


def test_dropout_eval_is_the_identity():
    x, b, r = torch.randn(8, 16), torch.randn(16), torch.randn(8, 16)
    torch.testing.assert_close(bda(x, b, r, training=False), (x + b) + r)
    with pytest.raises(kiln.KilnInvalidArgument, match="p = 1.0"):
        bda(x, b, r, p=1.0)


# ---- data errors: bad token ids and targets ------------------------------------------------------


def test_bad_token_id_raises_at_check_and_context_keeps_working():
    weight = torch.randn(32000, 4)
    ids = torch.randint(0, 32000, (20,))
    ids[17] = 32001
    y = kt.embedding(ids, weight)  # no error yet: the kernel noted it
    assert torch.equal(y[17], torch.zeros(4))
    with pytest.raises(kiln.KilnInvalidArgument) as e:
        kt.check()
    assert "token id 32001 at position 17 is outside the vocabulary [0, 32000)" in str(e.value)
    assert isinstance(e.value, ValueError)
    kt.check()  # cleared
    ok = kt.embedding(ids.clamp(max=31999), weight)  # the context still works
    torch.testing.assert_close(ok, F.embedding(ids.clamp(max=31999), weight))


@pytest.mark.parametrize("tp", [1, 2])
def test_bad_token_id_sync_check_same_at_tp1_and_tp2(tp):
    vocab = 32000
    part = vocab // tp
    weight = torch.randn(part, 4)
    ids = torch.zeros(20, dtype=torch.int64)
    ids[17] = 32001
    with pytest.raises(kiln.KilnInvalidArgument, match="token id 32001 at position 17 is outside"):
        kt.embedding(ids, weight, vocab_start=vocab - part, vocab_size=vocab, sync_check=True)


def test_bad_target_raises():
    logits = torch.randn(4, 10)
    target = torch.tensor([1, 2, 10, -100])
    with pytest.raises(kiln.KilnInvalidArgument, match="target"):
        kt.cross_entropy(logits, target, sync_check=True)
    loss = kt.cross_entropy(logits, torch.tensor([1, 2, 3, -100]))
    assert torch.isfinite(loss)


# ---- bad input -------------------------------------------------------------------------------------


def test_bad_inputs_are_clear_errors():
    with pytest.raises(kiln.KilnInvalidArgument, match="float64"):
        kt.scaled_softmax(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(kiln.KilnInvalidArgument, match="mask"):
        kt.scaled_masked_softmax(torch.randn(2, 2, 3, 8), torch.zeros(2, 1, 3, 7, dtype=torch.bool))
    with pytest.raises(kiln.KilnInvalidArgument, match="int64"):
        kt.embedding(torch.zeros(3, dtype=torch.int32), torch.randn(5, 4))
    with pytest.raises(kiln.KilnInvalidArgument, match="even"):
        kt.bias_swiglu(torch.randn(2, 7))
    with pytest.raises(kiln.KilnInvalidArgument, match="weight/bias"):
        kt.layer_norm(torch.randn(2, 8), torch.ones(7), torch.zeros(7))
    with pytest.raises(kiln.KilnInvalidArgument, match="layout"):
        kt.rope(torch.randn(2, 2, 2, 4), torch.zeros(2, 2), layout="hbsd")


def test_cpu_tensors_are_refused_outside_test_mode():
    _runtime.enable_cpu_tensors(False)
    with pytest.raises(kiln.KilnInvalidArgument, match="CUDA device"):
        kt.scaled_softmax(torch.randn(2, 8))


def test_resolving_during_graph_capture_is_refused(monkeypatch):
    """On whichever path the run is on (python.ops: the fast path where torch
    has the shim; python.ops_fallback: the Python impls): a capture the driver
    reports (the fake's KILN_FAKE_CUDA_CAPTURE=1) with rope not loaded is
    KilnUnsupported naming kiln.torch.init(); after init() the op runs."""
    _runtime.close_all()  # rope unloaded
    monkeypatch.setenv("KILN_FAKE_CUDA_CAPTURE", "1")
    with pytest.raises(kiln.KilnUnsupported, match=r"unit 'rope' is not loaded yet .*kiln.torch.init\(\)"):
        kt.rope(torch.randn(2, 1, 1, 4), torch.zeros(2, 2))
    monkeypatch.delenv("KILN_FAKE_CUDA_CAPTURE")
    kt.init("cpu")
    monkeypatch.setenv("KILN_FAKE_CUDA_CAPTURE", "1")
    assert kt.rope(torch.randn(2, 1, 1, 4), torch.zeros(2, 2)).shape == (2, 1, 1, 4)


def test_a_capture_torch_reports_is_refused_before_any_load(monkeypatch):
    """The Python impls' guard: torch's own capture flag is checked before
    the loader is asked (no load is tried, so the capture is not invalidated)."""
    _runtime.close_all()
    monkeypatch.setattr(_runtime, "capturing", lambda: True)
    monkeypatch.setattr(_runtime.lib, "kiln_loader_resolve", None)  # any load attempt: TypeError
    _fast.set_enabled(False)
    try:
        with pytest.raises(kiln.KilnUnsupported, match=r"kiln.torch.init\(\)"):
            kt.rope(torch.randn(2, 1, 1, 4), torch.zeros(2, 2))
    finally:
        _fast.set_enabled(True)


def test_init_loads_every_unit():
    loaded = kt.init("cpu")
    assert set(loaded) == set(_runtime.UNITS)
    assert all(v != "not loaded" for v in loaded.values())
