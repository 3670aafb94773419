"""kiln.torch's fast path (issue 29): the ops with a C kernel in
libkiln_torch, registered through torch's stable C shim, against the Python
impls they replace (the fallback). One process switches between the two
(kiln.torch._fast.set_enabled), so each comparison is on the same inputs:
outputs and gradients bit-identical, the same KilnError subclass and message
for bad input, the Python impl never entered on the fast path. Fake driver,
CPU tensors, the smallest shapes that reach every branch of the C kernels."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

import kiln
import kiln.torch as kt
from kiln.torch import _fast, _runtime
from kiln.torch import ops as kops

# The optional shim symbols and the ops whose arguments need them
# (docs/python.md, "What each op needs from the shim"): on a torch without
# one (2.8 lacks both) those ops stay on their Python impl. Looked up here in
# torch's own library, apart from libkiln_torch's lookup.
_OPTIONAL = {
    "torch_string_c_str": {"rope", "rope_backward"},  # torch >= 2.10
    "torch_delete_stable_ivalue": {  # torch >= 2.13
        "bias_gelu",
        "bias_gelu_backward",
        "bias_swiglu",
        "bias_swiglu_backward",
        "bias_dropout_add",
    },
}


def _torch_lacks() -> set[str]:
    """The ops the running torch's shim cannot serve."""
    import os

    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    return {op for sym, ops in _OPTIONAL.items() if not hasattr(lib, sym) for op in ops}


def _expected_c_ops() -> set[str]:
    """Every kiln:: op but philox_seed_offset (no shim call reads a
    generator's state), less what this torch cannot serve."""
    return {op.name for op in kops._OPS} - {"philox_seed_offset"} - _torch_lacks()

pytestmark = pytest.mark.skipif(not _fast.available(), reason=f"no fast path here: {_fast.info()['reason']}")


@pytest.fixture(autouse=True, scope="module")
def cpu_tensors():
    _runtime.enable_cpu_tensors(True)
    yield
    _fast.set_enabled(True)
    _runtime.enable_cpu_tensors(False)


def _g(*shape, dtype=torch.float32, grad=True):
    t = torch.randn(*shape).to(dtype)
    return t.requires_grad_(grad)


def _cases():
    """(name, fn): fn() builds its inputs from the seeded generator, calls
    kiln.torch and returns every output and every input gradient."""
    f16, bf16 = torch.float16, torch.bfloat16

    def grads(out, *inputs):
        outs = out if isinstance(out, tuple) else (out,)
        need = [t for t in inputs if t is not None and t.requires_grad]
        if not need:
            return list(outs)
        gs = torch.autograd.grad(outs, need, [torch.randn_like(o) for o in outs])
        return list(outs) + list(gs)

    def softmax(dtype, t):
        x = _g(3, 5, dtype=dtype)
        x = x.t() if t else x  # non-contiguous: the C kernel's copy
        return grads(kt.scaled_softmax(x, 0.7), x)

    def masked(mask_b, dtype):
        x = _g(2, 2, 3, 5)
        mask = torch.rand(mask_b, 1, 3, 5) < 0.3
        return grads(kt.scaled_masked_softmax(x, mask if dtype is None else mask.to(dtype), 0.5), x)

    def causal():
        x = _g(2, 4, 4, dtype=f16)
        return grads(kt.scaled_upper_triang_masked_softmax(x, 0.9), x)

    def layer_norm(dtype, wdtype):
        x, w, b = _g(3, 6, dtype=dtype), _g(6, dtype=wdtype), _g(6, dtype=wdtype)
        return grads(kt.layer_norm(x, w, b, 1e-5), x, w, b)

    def rms_norm(dtype, wdtype, t):
        x, w = (_g(6, 3, dtype=dtype).t() if t else _g(3, 6, dtype=dtype)), _g(6, dtype=wdtype)
        return grads(kt.rms_norm(x, w, 1e-6), x, w)

    def gelu(bias):
        x = _g(3, 4, dtype=bf16)
        b = _g(4, dtype=bf16) if bias else None
        return grads(kt.bias_gelu(x, b), x, b)

    def swiglu(bias):
        x = _g(2, 3, 8)
        b = _g(8) if bias else None
        return grads(kt.bias_swiglu(x, b), x, b)

    def embedding(dtype, start, t):
        ids = torch.randint(0, 12, (3, 4))
        w = _g(8, 5, dtype=dtype)
        # rows [start, start + 8) of a vocabulary of 12: the others' ids give zero rows
        return grads(kt.embedding(ids.t() if t else ids, w, vocab_start=start, vocab_size=12), w)

    def rope(dtype, layout, interleaved, t):
        x = _g(3, 2, 4, 2, dtype=dtype).transpose(0, 2) if t else _g(2, 3, 2, 4, dtype=dtype)
        s = x.shape[0] if layout == "sbhd" else x.shape[1]
        return grads(kt.rope(x, torch.rand(s, 1) * 6, layout, interleaved), x)

    def cross_entropy(dtype, reduction, t):
        logits = _g(7, 4, dtype=dtype).t() if t else _g(4, 7, dtype=dtype)
        target = torch.tensor([1, -100, 6, 0])
        return grads(kt.cross_entropy(logits, target, reduction=reduction), logits)

    def ce_stats():
        logits = _g(3, 5, dtype=bf16, grad=False)
        return list(kops._cross_entropy_stats(logits, torch.tensor([5, 9, -1]), 5, 10, -1, False))

    def dropout(dtype, bias, p, training):
        x, r = _g(3, 6, dtype=dtype), _g(3, 6, dtype=dtype)
        b = _g(6, dtype=dtype) if bias else None
        return grads(kt.bias_dropout_add(x, b, r, p, training), x, b, r)

    def empty():
        x, w, b = _g(0, 6), _g(6), _g(6)
        out = [kt.scaled_softmax(_g(0, 5), 1.0), kt.scaled_masked_softmax(_g(0, 2, 3, 5), torch.zeros(1, 1, 3, 5, dtype=torch.bool))]
        ew, lg, dx, dr = _g(4, 3), _g(0, 5), _g(0, 6), _g(0, 6)
        rx = _g(0, 2, 2, 4)
        out += grads(kt.embedding(torch.zeros(0, 2, dtype=torch.int64), ew), ew)
        out += grads(kt.cross_entropy(lg, torch.zeros(0, dtype=torch.int64), reduction="sum"), lg)
        out += grads(kt.rope(rx, torch.zeros(0, 2)), rx)
        out += grads(kt.bias_dropout_add(dx, None, dr, 0.5), dx, dr)
        return out + grads(kt.layer_norm(x, w, b), x, w, b) + grads(kt.rms_norm(x, w), x, w)

    def no_grad():
        with torch.no_grad():
            return [kt.scaled_softmax(_g(2, 5), 2.0), kt.layer_norm(_g(2, 6), _g(6), _g(6))]

    return [
        ("softmax_f32", lambda: softmax(torch.float32, False)),
        ("softmax_f16_transposed", lambda: softmax(f16, True)),
        ("masked_bool_b1", lambda: masked(1, None)),
        ("masked_uint8_b", lambda: masked(2, torch.uint8)),
        ("causal_f16", causal),
        ("layer_norm_f32", lambda: layer_norm(torch.float32, torch.float32)),
        ("layer_norm_bf16_f32w", lambda: layer_norm(bf16, torch.float32)),
        ("rms_norm_f16_transposed", lambda: rms_norm(f16, f16, True)),
        ("rms_norm_f32", lambda: rms_norm(torch.float32, torch.float32, False)),
        ("gelu_bias", lambda: gelu(True)),
        ("gelu_no_bias", lambda: gelu(False)),
        ("swiglu_bias", lambda: swiglu(True)),
        ("swiglu_no_bias", lambda: swiglu(False)),
        ("embedding_f32", lambda: embedding(torch.float32, 0, False)),
        ("embedding_bf16_partition_transposed", lambda: embedding(bf16, 4, True)),
        ("rope_sbhd_half", lambda: rope(torch.float32, "sbhd", False, False)),
        ("rope_bshd_interleaved_f16_transposed", lambda: rope(f16, "bshd", True, True)),
        ("cross_entropy_mean_f32", lambda: cross_entropy(torch.float32, "mean", False)),
        ("cross_entropy_none_bf16_transposed", lambda: cross_entropy(bf16, "none", True)),
        ("cross_entropy_stats_partition", ce_stats),
        ("dropout_train_bias_f16", lambda: dropout(f16, True, 0.4, True)),
        ("dropout_train_no_bias", lambda: dropout(torch.float32, False, 0.25, True)),
        ("dropout_eval_p1", lambda: dropout(bf16, True, 1.0, False)),
        ("empty_batches", empty),
        ("no_grad", no_grad),
    ]


def _on(fast: bool, fn):  # type: ignore[no-untyped-def]
    _fast.set_enabled(fast)
    torch.manual_seed(5)
    try:
        return fn()
    finally:
        _fast.set_enabled(True)


def test_fast_and_fallback_outputs_and_gradients_are_bit_identical():
    assert _fast.info()["fast"], _fast.info()
    for name, fn in _cases():
        fast, slow = _on(True, fn), _on(False, fn)
        assert len(fast) == len(slow), name
        for a, b in zip(fast, slow):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert a.is_contiguous(), name
            assert torch.equal(a, b), f"{name}: the paths differ"


def _entries(codes, run) -> list[tuple[object, str]]:  # type: ignore[no-untyped-def]
    """(code, its caller's name) for each call of a code object in codes
    while run() runs (sys.setprofile)."""
    seen: list[tuple[object, str]] = []

    def prof(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code in codes:
            seen.append((frame.f_code, frame.f_back.f_code.co_name))

    sys.setprofile(prof)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def _run_cases() -> None:
    for _, fn in _cases():
        fn()


def test_fast_path_never_enters_the_python_impl():
    """The fast path is the one in use: no op with a C kernel runs its Python
    impl (counted through sys.setprofile); the same calls on the fallback do."""
    impls = {op._init_fn.__code__: op.name for op in kops._OPS if op.name in _fast.ops()}
    assert set(impls.values()) == _expected_c_ops(), sorted(_fast.ops())

    def entered(fast: bool) -> set[str]:
        return {impls[code] for code, _ in _entries(impls, lambda: _on(fast, _run_cases))}

    assert entered(True) == set()
    assert entered(False) == set(impls.values())


def test_eager_calls_reach_the_c_kernel_past_the_opoverload_and_dynamo_sees_the_opoverload(monkeypatch):
    """An eager call (forward, with grad, backward) calls the op's C++
    callable directly, or on the fallback its Python impl: neither
    OpOverload.__call__ nor _Op.traced runs. While
    Dynamo traces (is_dynamo_compiling() true) every call goes through
    traced() and the OpOverload, which Dynamo can trace; ops_compile checks
    that torch.compile(fullgraph=True) does."""
    if kops._dynamo_compiling is None:
        pytest.skip("this torch has no torch.compiler.is_dynamo_compiling: every call is traced()")
    codes = {torch._ops.OpOverload.__call__.__code__: "OpOverload", kops._Op.traced.__code__: "traced"}

    def entered() -> dict[str, int]:
        seen = {"OpOverload": 0, "traced": 0}
        for code, _ in _entries(codes, _run_cases):
            seen[codes[code]] += 1
        return seen

    assert entered() == {"OpOverload": 0, "traced": 0}
    assert _on(False, entered) == {"OpOverload": 0, "traced": 0}
    # the fallback's Python impls run in place, not from the dispatcher
    impls = {op._init_fn.__code__ for op in kops._OPS}
    callers = {caller for _, caller in _entries(impls, lambda: _on(False, _run_cases))}
    assert callers == {"in_place"}, callers
    monkeypatch.setattr(kops, "_dynamo_compiling", lambda: True)
    kops._register()
    try:
        seen = entered()
    finally:
        monkeypatch.undo()
        kops._register()
    assert seen["traced"] > 0 and seen["OpOverload"] >= seen["traced"], seen
    assert entered() == {"OpOverload": 0, "traced": 0}


def test_dropouts_draw_runs_in_place_eagerly_and_is_an_op_under_a_dispatch_mode():
    """bias_dropout_add's (seed, offset) draw, the one op left in Python on
    the fast path, runs its impl in place in eager (no dispatcher round
    trip), with the same draws as through the op; under a TorchDispatchMode
    (make_fx, export, a profiler mode) it is still the
    kiln::philox_seed_offset op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    if kops._dynamo_compiling is None:
        pytest.skip("this torch has no torch.compiler.is_dynamo_compiling: every call is traced()")
    impl = kops._philox_seed_offset._init_fn.__code__
    x, b, r = torch.randn(2, 16), torch.randn(16), torch.randn(2, 16)
    torch.manual_seed(7)
    out: list[torch.Tensor] = []
    callers = [c for _, c in _entries({impl}, lambda: out.append(kt.bias_dropout_add(x, b, r, 0.5)))]
    eager = out[0]
    assert callers == ["in_place"], callers
    torch.manual_seed(7)
    assert torch.equal(kt.bias_dropout_add(x, b, r, 0.5), eager)
    torch.manual_seed(7)
    through_op = [torch.ops.kiln.philox_seed_offset(x) for _ in range(2)]
    torch.manual_seed(7)
    in_place = [kops._philox_seed_offset.call(x) for _ in range(2)]
    assert all(torch.equal(a, c) for a, c in zip(through_op, in_place)), (through_op, in_place)
    assert not torch.equal(in_place[0], in_place[1])  # each draw advances the generator

    seen: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(7)
    with Record():
        moded = kt.bias_dropout_add(x, b, r, 0.5)
    assert "kiln.philox_seed_offset.default" in seen, seen
    assert torch.equal(moded, eager)


def _bad_calls():
    x, w = torch.randn(4, 16), torch.ones(16)
    mean, rstd = torch.zeros(4), torch.ones(4)
    y = torch.softmax(torch.randn(8, 40), -1).half()
    return [
        lambda: kt.scaled_softmax(torch.randn(2, 3, dtype=torch.float64)),
        lambda: kt.scaled_softmax(torch.randn(2, 0)),
        lambda: kt.scaled_softmax(torch.tensor(1.0)),
        lambda: kt.scaled_masked_softmax(torch.randn(2, 2, 3, 5), torch.zeros(2, 1, 3, 4, dtype=torch.bool)),
        lambda: kt.scaled_masked_softmax(torch.randn(2, 2, 3, 5), torch.zeros(3, 1, 3, 5, dtype=torch.bool)),
        lambda: kt.scaled_masked_softmax(torch.randn(2, 2, 3, 5), torch.zeros(2, 1, 3, 5)),
        lambda: kt.scaled_masked_softmax(torch.randn(2, 3, 5), torch.zeros(2, 3, 5, dtype=torch.bool)),
        lambda: kt.scaled_masked_softmax(torch.randn(2, 2, 3, 0), torch.zeros(2, 1, 3, 0, dtype=torch.bool)),
        lambda: kt.scaled_upper_triang_masked_softmax(torch.randn(2, 4)),
        lambda: kt.scaled_upper_triang_masked_softmax(torch.randn(2, 4, 0)),
        lambda: kt.scaled_upper_triang_masked_softmax(torch.randn(2, 4, 4).to(torch.int32)),
        lambda: kt.layer_norm(x, torch.ones(8), torch.zeros(8)),
        lambda: kt.layer_norm(x, w, torch.zeros(16).half()),
        lambda: kt.layer_norm(x.half(), w.bfloat16(), w.bfloat16()),
        lambda: kt.layer_norm(x, w, torch.zeros(16), eps=-1.0),  # the launcher's own check
        lambda: kt.rms_norm(x, torch.ones(3, 16)),
        lambda: kt.rms_norm(x.to(torch.int64), w),
        lambda: kt.bias_gelu(x, torch.ones(8)),
        lambda: kt.bias_gelu(x, torch.ones(16).half()),
        lambda: kt.bias_swiglu(torch.randn(4, 15)),
        lambda: kt.bias_swiglu(x, torch.ones(8)),
        lambda: kops._scaled_softmax_backward(torch.randn(8, 40), y, 1.0),
        lambda: kops._scaled_softmax_backward(torch.randn(2, 40).half(), y, 1.0),
        lambda: kops._scaled_masked_softmax_backward(torch.randn(1, 2, 3, 8), torch.rand(2, 2, 3, 8), 1.0),
        lambda: kops._scaled_upper_triang_masked_softmax_backward(torch.randn(2, 4, 4), torch.rand(2, 4), 1.0),
        lambda: kops._layer_norm_backward(torch.randn(3, 16), x, mean, rstd, w),
        lambda: kops._layer_norm_backward(torch.randn(4, 16), x, mean[:2], rstd, w),
        lambda: kops._layer_norm_backward(torch.randn(4, 16), x, mean, rstd.half(), w),
        lambda: kops._rms_norm_backward(torch.randn(4, 16).bfloat16(), x, rstd, w),
        lambda: kops._bias_gelu_backward(torch.randn(3, 16), x, None),
        lambda: kops._bias_swiglu_backward(torch.randn(4, 16), x, None),
        lambda: kops._bias_swiglu_backward(torch.randn(4, 8).half(), x, None),
        *_bad_new_calls(),
    ]


def _bad_new_calls():
    """Bad input to the kernels of embedding, rope, cross_entropy and
    bias_dropout_add: shapes, dtypes, out-of-range token ids and targets,
    dropout's p and seed_offset."""
    w, ids = torch.randn(10, 4), torch.tensor([[1, 2], [3, 4]])
    lg, tg = torch.randn(3, 5), torch.tensor([0, 4, -100])
    x, r = torch.randn(3, 8), torch.randn(3, 8)
    so = torch.tensor([7, 4])
    xr, ang = torch.randn(2, 1, 2, 8), torch.zeros(2, 3)
    return [
        lambda: kt.embedding(ids, torch.randn(10)),
        lambda: kt.embedding(ids, torch.randn(10, 0)),
        lambda: kt.embedding(ids.int(), w),
        lambda: kt.embedding(ids, w.to(torch.int64)),
        lambda: kt.embedding(torch.tensor([3, 10, 1]), w, sync_check=True),  # out of [0, 10)
        lambda: kt.embedding(torch.tensor([-1]), w, vocab_start=0, vocab_size=10, sync_check=True),
        lambda: kt.embedding(torch.tensor([25]), w, vocab_start=10, vocab_size=20, sync_check=True),
        lambda: kops._embedding_backward(torch.randn(2, 3, 4), ids, 10, 0, True),
        lambda: kops._embedding_backward(torch.randn(2, 2, 0), ids, 10, 0, True),
        lambda: kops._embedding_backward(torch.randn(2, 2, 4), ids.int(), 10, 0, True),
        lambda: kops._embedding_backward(torch.randn(2, 2, 4), ids, 0, 0, True),
        lambda: kops._embedding_backward(torch.randn(2, 2, 4), ids, 10, -3, False),
        lambda: kops._embedding_backward(torch.randn(2, 2, 4).double(), ids, 10, 0, False),
        lambda: kt.rope(xr, ang, layout="hbsd"),
        lambda: kt.rope(torch.randn(2, 2, 8), ang),
        lambda: kt.rope(xr, ang.double()),
        lambda: kt.rope(xr, torch.zeros(3, 3)),
        lambda: kt.rope(xr, torch.zeros(2, 5)),
        lambda: kt.rope(xr, torch.zeros(2, 0)),
        lambda: kt.rope(xr.to(torch.int32), ang),
        lambda: kops._rope_backward(xr.double(), ang, "sbhd", False),
        lambda: kops._rope_backward(xr, ang, "bshd", True),
        lambda: kt.cross_entropy(torch.randn(3, 4, 5), tg),
        lambda: kt.cross_entropy(lg, torch.tensor([0, 1])),
        lambda: kt.cross_entropy(torch.randn(3, 0), tg),
        lambda: kt.cross_entropy(lg.to(torch.int64), tg),
        lambda: kt.cross_entropy(lg, tg.int()),
        lambda: kt.cross_entropy(lg, torch.tensor([0, 5, 1]), sync_check=True),  # out of [0, 5)
        lambda: kops._cross_entropy_backward(lg, torch.zeros(3).half(), torch.ones(3), tg, 0, -100),
        lambda: kops._cross_entropy_backward(lg, torch.zeros(3), torch.ones(2), tg, 0, -100),
        lambda: kops._cross_entropy_backward(lg, torch.zeros(3), torch.ones(3), tg, -1, -100),
        lambda: kops._cross_entropy_stats(lg, tg.int(), 0, 5, -100, False),
        lambda: kops._cross_entropy_stats(lg, torch.tensor([0, 12, 1]), 5, 10, -100, True),
        lambda: kt.bias_dropout_add(x, None, r, 1.0),
        lambda: kt.bias_dropout_add(x, None, r, -1e-05),
        lambda: kt.bias_dropout_add(x, None, r, float("nan")),
        lambda: kt.bias_dropout_add(x, None, r, 100.0, training=False),
        lambda: kt.bias_dropout_add(x, None, r, 1.25, training=False),
        lambda: kt.bias_dropout_add(x, torch.ones(4), r, 0.1),
        lambda: kt.bias_dropout_add(x, torch.ones(8).half(), r, 0.1),
        lambda: kt.bias_dropout_add(x, None, r.half(), 0.1),
        lambda: kt.bias_dropout_add(x, None, r[:2], 0.1),
        lambda: kt.bias_dropout_add(x.to(torch.int32), None, r.to(torch.int32), 0.1),
        lambda: kt.bias_dropout_add(torch.randn(3, 0), None, torch.randn(3, 0), 0.1),
        lambda: kops._bias_dropout_add(x, None, r, 0.1, True, torch.tensor([1, 2, 3])),
        lambda: kops._bias_dropout_add(x, None, r, 0.1, True, so.int()),
        lambda: kops._bias_dropout_add(x, None, r, 0.1, True, torch.tensor([-5, 4])),
        lambda: kops._bias_dropout_add_backward(torch.randn(3, 8), 1.5, True, so),
        lambda: kops._bias_dropout_add_backward(torch.tensor(1.0), 0.1, True, so),
        lambda: kops._bias_dropout_add_backward(torch.randn(3, 8).double(), 0.1, True, so),
        lambda: kops._bias_dropout_add_backward(torch.randn(3, 8), 0.1, True, torch.tensor([3, -4])),
    ]


def _error(fast: bool, call):  # type: ignore[no-untyped-def]
    def run():  # type: ignore[no-untyped-def]
        with pytest.raises(kiln.KilnError) as e:
            call()
        return type(e.value), e.value.status, str(e.value)

    return _on(fast, run)


def test_bad_input_gives_the_same_kiln_error_on_both_paths_and_the_process_goes_on():
    for i, call in enumerate(_bad_calls()):
        fast, slow = _error(True, call), _error(False, call)
        assert fast == slow, f"bad call {i}"
        assert fast[0] is kiln.KilnInvalidArgument, f"bad call {i}: {fast}"
    torch.testing.assert_close(kt.scaled_softmax(torch.zeros(2, 4)), torch.full((2, 4), 0.25))


def _capture_refusal(unit: str) -> str:
    return (
        f"kiln.torch: unit '{unit}' is not loaded yet and a CUDA graph is being captured (loading "
        "or building kernels cannot be captured); call kiln.torch.init() before capturing"
    )


def test_first_use_during_a_capture_is_the_same_kiln_unsupported_on_both_paths(monkeypatch):
    """The fake driver reports a capture (KILN_FAKE_CUDA_CAPTURE=1) that torch
    does not see: the fast path's C kernel asks libkiln when its launch fails
    (the load was refused), the Python impl when its resolve fails; both say
    "call kiln.torch.init()" with the same text. After init() nothing is
    loaded, so the same calls are captured (run) on both paths."""
    assert "scaled_softmax" in _fast.ops() and "scaled_masked_softmax_backward" in _fast.ops()
    x, m = torch.randn(2, 1, 3, 8), torch.zeros(2, 1, 3, 8, dtype=torch.bool)
    calls = {  # unit -> a call on it (a backward op maps to its forward's unit)
        "scaled_softmax": lambda: kt.scaled_softmax(torch.randn(2, 8)),
        "scaled_masked_softmax": lambda: torch.ops.kiln.scaled_masked_softmax_backward(x, x, 1.0),
    }
    _runtime.close_all()  # every unit unloaded: the next use loads
    monkeypatch.setenv("KILN_FAKE_CUDA_CAPTURE", "1")
    try:
        for unit, call in calls.items():
            for fast in (True, False):

                def run():  # type: ignore[no-untyped-def]
                    with pytest.raises((kiln.KilnUnsupported, RuntimeError)) as e:
                        call()
                    return e.value

                err = _on(fast, run)
                if isinstance(err, kiln.KilnError):
                    assert err.status == "KILN_EUNSUPPORTED" and err.code == -12, (unit, fast, err)
                    assert str(err) == _capture_refusal(unit), (unit, fast)
                else:  # a raw torch.ops call on the fast path: torch's RuntimeError, kiln's text
                    assert fast and _capture_refusal(unit) in str(err), (unit, err)
        monkeypatch.delenv("KILN_FAKE_CUDA_CAPTURE")  # the capture ended
        kt.init("cpu")
        monkeypatch.setenv("KILN_FAKE_CUDA_CAPTURE", "1")
        y = {fast: _on(fast, calls["scaled_softmax"]) for fast in (True, False)}
        assert torch.equal(y[True], y[False])
        assert _on(True, calls["scaled_masked_softmax"]).shape == x.shape
        assert kt.scaled_masked_softmax(x, m).shape == x.shape
    finally:
        monkeypatch.delenv("KILN_FAKE_CUDA_CAPTURE", raising=False)
        _fast.set_enabled(True)


def test_raw_op_on_the_fast_path_raises_runtime_error_with_kilns_message():
    with pytest.raises(RuntimeError, match=r"kiln.torch: x is torch.float64; kiln ops take"):
        torch.ops.kiln.scaled_softmax(torch.randn(2, 3, dtype=torch.float64), 1.0)
    # the record that error left is not taken for a later, unrelated one
    with pytest.raises(kiln.KilnInvalidArgument, match="has no last dimension"):
        kt.scaled_softmax(torch.randn(2, 0))


def _vm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    raise AssertionError("no VmSize")


def test_kernel_errors_free_every_tensor_and_leave_nothing_locked():
    """An error raised after the outputs were allocated (the launcher's eps
    check) frees them and the inputs: the inputs' storages are back to one
    user, 300 failed calls with 4 MiB outputs leave the address space as it
    was (a leak would add 1.2 GiB), and another thread's call then completes."""
    x, w, b = torch.randn(1024, 1024), torch.ones(1024), torch.zeros(1024)
    kt.layer_norm(x, w, b)  # warm: unit resolved, allocator primed
    use = torch._C._storage_Use_Count
    before = [use(t.untyped_storage()._cdata) for t in (x, w, b)]
    vm = _vm_kib()
    for _ in range(300):
        with pytest.raises(kiln.KilnInvalidArgument, match="eps -1 is negative"):
            kt.layer_norm(x, w, b, eps=-1.0)
    assert [use(t.untyped_storage()._cdata) for t in (x, w, b)] == before
    assert _vm_kib() - vm < 256 * 1024
    out: list[torch.Tensor] = []
    th = threading.Thread(target=lambda: out.append(kt.layer_norm(x[:2], w, b)))
    th.start()
    th.join(timeout=60)
    assert not th.is_alive() and len(out) == 1


_OPCHECK = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _opcheck_cases():
    m = torch.rand(1, 1, 3, 5) < 0.3
    x, w, b = torch.randn(3, 6), torch.ones(6), torch.zeros(6)
    mean, rstd = torch.zeros(3), torch.ones(3)
    y = torch.softmax(torch.randn(3, 5), -1)
    ids, tg, so = torch.tensor([[0, 2], [1, 1]]), torch.tensor([5, -100, 0]), torch.tensor([11, 8])
    return [
        (torch.ops.kiln.scaled_softmax.default, (torch.randn(3, 5), 0.5)),
        (torch.ops.kiln.scaled_softmax_backward.default, (torch.randn(3, 5), y, 0.5)),
        (torch.ops.kiln.scaled_masked_softmax.default, (torch.randn(2, 1, 3, 5), m, 0.5)),
        (torch.ops.kiln.scaled_masked_softmax_backward.default, (torch.randn(1, 1, 3, 5), y[None, None], 0.5)),
        (torch.ops.kiln.scaled_upper_triang_masked_softmax.default, (torch.randn(2, 4, 4), 0.5)),
        (torch.ops.kiln.scaled_upper_triang_masked_softmax_backward.default, (torch.randn(1, 3, 5), y[None], 0.5)),
        (torch.ops.kiln.layer_norm.default, (x, w, b, 1e-5)),
        (torch.ops.kiln.layer_norm_backward.default, (torch.randn(3, 6), x, mean, rstd, w)),
        (torch.ops.kiln.rms_norm.default, (x, w, 1e-5)),
        (torch.ops.kiln.rms_norm_backward.default, (torch.randn(3, 6), x, rstd, w)),
        (torch.ops.kiln.bias_gelu.default, (x, b)),
        (torch.ops.kiln.bias_gelu_backward.default, (torch.randn(3, 6), x, None)),
        (torch.ops.kiln.bias_swiglu.default, (x, None)),
        (torch.ops.kiln.bias_swiglu_backward.default, (torch.randn(3, 3), x, b)),
        (torch.ops.kiln.embedding.default, (ids, x, 0, 3, False)),
        (torch.ops.kiln.embedding_backward.default, (torch.randn(2, 2, 6), ids, 3, 0, True)),
        (torch.ops.kiln.rope.default, (torch.randn(3, 1, 2, 4), torch.rand(3, 1), "sbhd", False)),
        (torch.ops.kiln.rope_backward.default, (torch.randn(1, 3, 2, 4), torch.rand(3, 2), "bshd", True)),
        (torch.ops.kiln.cross_entropy.default, (x, tg, -100, False)),
        (torch.ops.kiln.cross_entropy_backward.default, (x, torch.full((3,), 2.0), torch.ones(3), tg, 0, -100)),
        (torch.ops.kiln.cross_entropy_stats.default, (x, tg, 0, 6, -100, False)),
        (torch.ops.kiln.bias_dropout_add.default, (x, b, torch.randn(3, 6), 0.3, True, so)),
        (torch.ops.kiln.bias_dropout_add_backward.default, (torch.randn(3, 6), 0.3, True, so)),
    ]


def test_opcheck_through_the_fast_path():
    cases = _opcheck_cases()
    served = set(_fast.ops())
    assert served == _expected_c_ops()
    cases = [(op, args) for op, args in cases if op._schema.name.split("::")[1] in served]
    assert len(cases) == len(served)
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=_OPCHECK)


def test_gradcheck_every_differentiable_fast_op_fp32():
    torch.manual_seed(3)
    m = torch.rand(1, 1, 2, 3) < 0.3
    w, b = _g(4, grad=True), _g(4, grad=True)
    so, angles = torch.tensor([3, 4]), torch.rand(2, 1) * 3
    checks = [
        (lambda x: kt.scaled_softmax(x, 0.7), (_g(2, 3),)),
        (lambda x: kt.scaled_masked_softmax(x, m, 0.7), (_g(1, 1, 2, 3),)),
        (lambda x: kt.scaled_upper_triang_masked_softmax(x, 0.7), (_g(1, 3, 3),)),
        (lambda x, w, b: kt.layer_norm(x, w, b), (_g(2, 4), w, b)),
        (lambda x, w: kt.rms_norm(x, w), (_g(2, 4), w)),
        (lambda x, b: kt.bias_gelu(x, b), (_g(2, 4), b)),
        (lambda x, b: kt.bias_swiglu(x, b), (_g(2, 4), _g(4))),
        (lambda w: kt.embedding(torch.tensor([[0, 2], [2, 1]]), w), (_g(3, 4),)),
        (lambda x: kt.rope(x, angles, "bshd", True), (_g(1, 2, 1, 4),)),
        (lambda t: kt.cross_entropy(t, torch.tensor([1, -100, 3])), (_g(3, 4),)),
        (lambda x, b, r: kops._bias_dropout_add(x, b, r, 0.5, True, so), (_g(2, 4), _g(4), _g(2, 4))),
    ]
    for fn, inputs in checks:
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-2, atol=2e-2, rtol=2e-2, fast_mode=True)


def test_info_says_which_path_and_why():
    info = kt.info()
    assert info["fast"] and "ops have C kernels" in info["reason"]
    assert set(info["c_ops"]) == _expected_c_ops()
    # the one op without a C kernel, and why: the shim cannot read a generator's Philox state;
    # on an older torch, those whose arguments need a symbol it lacks, naming it
    assert set(info["python_ops"]) == {"philox_seed_offset"} | _torch_lacks()
    assert "torch_generator_get_device" in info["why_python"]["philox_seed_offset"]
    for sym, ops in _OPTIONAL.items():
        for op in ops & _torch_lacks():
            assert sym in info["why_python"][op] and "lacks" in info["why_python"][op], info["why_python"][op]
    # what libkiln_torch says per op: no kernel, or one whose shim needs are met here
    buf = ctypes.create_string_buffer(256)
    assert _fast._lib_torch.kiln_torch_op_missing(b"philox_seed_offset", buf, 256) == -1
    for name in ("rope", "bias_dropout_add", "embedding"):
        st = _fast._lib_torch.kiln_torch_op_missing(name.encode(), buf, 256)
        if name in _torch_lacks():  # a kernel whose shim needs are not met: what is missing
            assert st == 1 and buf.value, (name, st, buf.value)
        else:
            assert st == 0 and buf.value == b"", (name, st, buf.value)
    _fast.set_enabled(False)
    try:
        info = kt.info()
        assert not info["fast"] and info["c_ops"] == [] and "switched off" in info["reason"]
        assert info["why_python"]["rope"] == info["reason"]
    finally:
        _fast.set_enabled(True)


def test_kiln_torch_fast_0_keeps_the_python_path(monkeypatch):
    """KILN_TORCH_FAST=0 at import: libkiln_torch is never loaded, no op has a
    C kernel, info() says why (a second copy of the module, loaded as import
    would; the ops' registration for that state is set_enabled(False)'s)."""
    import importlib.util

    monkeypatch.setenv("KILN_TORCH_FAST", "0")
    spec = importlib.util.spec_from_file_location("kiln_fast_copy", _fast.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert not copy.available() and copy.ops() == frozenset()
    assert copy._reason == "KILN_TORCH_FAST=0"


def test_a_torch_without_the_shim_leaves_the_fast_path_off_naming_the_symbol():
    """kiln_torch_open on a loaded library that lacks the shim (libc, standing
    in for an older libtorch; in a fresh interpreter, where libkiln_torch has
    not opened torch's yet) fails naming the first missing symbol, the reason
    info() then gives."""
    import ctypes.util
    import subprocess

    code = (
        "import ctypes, sys\n"
        "lt = ctypes.CDLL(sys.argv[1])\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "rc = lt.kiln_torch_open(sys.argv[2].encode(), None, buf, 256)\n"
        "lt.kiln_torch_ops.restype = ctypes.c_char_p\n"
        "print(rc, buf.value.decode(), repr(lt.kiln_torch_ops().decode()))\n"
    )
    libc = ctypes.util.find_library("c")
    out = subprocess.run(
        [sys.executable, "-c", code, _fast._find(), libc], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["-1", "aoti_torch_dtype_float32", "''"]


def test_a_loader_a_c_kernel_opened_counts_as_open():
    """kiln.torch.dist.warmup refuses settings for a loader that is already
    open: one a C kernel opened counts (libkiln_torch's table is the one
    table of loaders)."""
    _runtime.close_all()
    assert not _runtime.is_open(0)
    kt.scaled_softmax(torch.zeros(1, 4))  # the C kernel opens device 0's loader
    assert 0 not in _runtime._loaders and _runtime.is_open(0)
    assert _runtime.loader(0).value == _fast._lib_torch.kiln_torch_loader_peek(0)
