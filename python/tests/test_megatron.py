"""kiln.megatron against the installed megatron-core (0.16.1): after apply(),
megatron-core's own classes and functions launch kiln's kernels (the fake
driver's launch log, KILN_FAKE_CUDA_LOG) and match megatron-core's unfused
path on the same inputs, forward and backward.

No GPU: the ops run on CPU tensors through the fake driver. megatron-core
allocates on CUDA in three places a CPU run reaches; the ``megatron`` fixture
redirects them to the CPU (and says where): GlobalMemoryBuffer.get_tensor
(the attention score buffer), CudaRNGStatesTracker.fork (the attention
dropout's RNG fork, p = 0 here) and fused_softmax.get_default_causal_mask
(the torch path's causal mask). Megatron's torch.compile'd fusions (the
reference "default fusions") run eagerly under torch.compiler.set_stance
("force_eager"): the same math without inductor's CPU compile.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import tempfile
import types
import warnings
from functools import reduce

_LOG_FD, LOG = tempfile.mkstemp(prefix="kiln-megatron-launch-", suffix=".log")
os.close(_LOG_FD)
os.environ["KILN_FAKE_CUDA_LOG"] = LOG  # read at the fake driver's first cuInit

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("megatron.core")

import kiln  # noqa: E402
import kiln.megatron as km  # noqa: E402
from kiln.megatron import apex_softmax, patches  # noqa: E402
from kiln.torch import _runtime  # noqa: E402

HALF = [torch.float16, torch.bfloat16]
ALL = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def close(got, want, dtype, scale=1.0):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol * scale, atol=atol * scale)


@contextlib.contextmanager
def launches():
    """The fake driver's launch entries during the block (a list, filled on exit)."""
    start = os.path.getsize(LOG)
    seen: list[str] = []
    yield seen
    with open(LOG) as f:
        f.seek(start)
        seen.extend(line.split()[1] for line in f if line.startswith("launch ") and not line.startswith("launch fail"))


def families(seen):
    return {e.split("_fwd")[0].split("_bwd")[0] for e in seen}


@pytest.fixture(scope="module")
def megatron():
    import torch.distributed as dist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state as ps
        from megatron.core import utils as mu
        from megatron.core.fusions import fused_softmax as fs
        from megatron.core.tensor_parallel import random as mr

        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/store", rank=0, world_size=1)
        ps.initialize_model_parallel(1, 1)

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        return torch.empty(reduce(operator.mul, tensor_shape, 1), dtype=dtype).view(*tensor_shape)

    saved = (mu.GlobalMemoryBuffer.get_tensor, mr.CudaRNGStatesTracker.fork, fs.get_default_causal_mask)
    mu.GlobalMemoryBuffer.get_tensor = get_tensor
    mr.CudaRNGStatesTracker.fork = lambda self, name="model-parallel-rng": contextlib.nullcontext()
    fs.get_default_causal_mask = lambda sq: torch.triu(torch.ones(sq, sq), diagonal=1).bool()
    yield ps
    mu.GlobalMemoryBuffer.get_tensor, mr.CudaRNGStatesTracker.fork, fs.get_default_causal_mask = saved
    km.restore()


@pytest.fixture(autouse=True)
def cpu_tensors(megatron):
    _runtime.enable_cpu_tensors(True)
    km.apply()
    yield
    _runtime.enable_cpu_tensors(False)


def eager():
    return torch.compiler.set_stance("force_eager")


def grads(fn, inputs, dy):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    return out, torch.autograd.grad(out, [t for t in leaves if t.requires_grad], dy)


# ---- apply() ---------------------------------------------------------------------------------


def test_apply_twice_changes_nothing():
    first = km.patched()
    objs = {s.name: patches.read(s) for s in patches.SITES}
    again = km.apply()
    assert again == first
    assert {s.name: patches.read(s) for s in patches.SITES} == objs
    assert all(patches.is_kiln(o) for o in objs.values())
    for n in apex_softmax.MODULES:
        assert sys.modules[n] is apex_softmax.MODULES[n]
        assert f"sys.modules['{n}']" in first
    assert first["megatron.core.transformer.mlp.bias_gelu_impl"] == "kiln.megatron.patches.bias_gelu_impl"


def _all_original():
    return all(not patches.is_kiln(patches.read(s)) for s in patches.SITES) and not any(
        n in sys.modules for n in apex_softmax.MODULES
    )


def test_a_missing_call_site_is_refused_with_nothing_patched(monkeypatch):
    from megatron.core.transformer import mlp

    km.restore()
    assert _all_original()
    monkeypatch.delattr(mlp, "bias_gelu_impl")
    with pytest.raises(kiln.KilnUnsupported) as e:
        km.apply()
    msg = str(e.value)
    assert "megatron-core 0.16.1" in msg and "megatron.core.transformer.mlp.bias_gelu_impl" in msg, msg
    assert "Nothing was patched" in msg
    monkeypatch.undo()
    assert _all_original() and km.patched() == {}


def test_an_unverified_version_is_refused_naming_it(monkeypatch):
    from megatron.core import package_info

    km.restore()
    monkeypatch.setattr(package_info, "__version__", "0.99.0")
    with pytest.raises(kiln.KilnUnsupported, match=r"megatron-core 0\.99\.0 is not a version"):
        km.apply()
    assert _all_original()


def test_apex_present_is_not_shadowed(monkeypatch):
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax

    km.restore()
    fake = {}
    for n in ("scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda", "scaled_softmax_cuda"):
        fake[n] = types.ModuleType(n)  # Apex's extension modules, as an Apex install provides them
        monkeypatch.setitem(sys.modules, n, fake[n])
    original = FusedScaleMaskSoftmax.__dict__["is_kernel_available"]
    km.apply()
    for n, m in fake.items():
        assert sys.modules[n] is m
    # the one Apex lacks here is kiln's; Apex's shape limits stay (its kernels have them)
    assert sys.modules["generic_scaled_masked_softmax_cuda"] is apex_softmax.generic_scaled_masked_softmax_cuda
    assert FusedScaleMaskSoftmax.__dict__["is_kernel_available"] is original
    km.restore()
    km.apply(force_softmax_modules=True)
    for n in fake:
        assert sys.modules[n] is apex_softmax.MODULES[n]
    km.restore()
    for n, m in fake.items():
        assert sys.modules[n] is m


# ---- Apex's contract -------------------------------------------------------------------------


def test_apex_modules_keep_apexs_contract():
    m = apex_softmax.scaled_masked_softmax_cuda
    # Apex's formula: 128-thread blocks, warps of min(32, next_pow2(sk)), 2 rows per warp up to 128
    assert [m.get_batch_per_block(64, sk, 2, 8) for sk in (8, 16, 32, 128, 256, 4096)] == [32, 16, 8, 8, 4, 4]
    x = torch.randn(2, 2, 4, 24).half()
    mask = torch.zeros(2, 1, 4, 24, dtype=torch.uint8)
    mask[:, :, :, 20:] = 1
    mask[1, 0, 2] = 1  # a fully masked row: zeros, as Apex's kernel gives
    scale = torch.tensor([0.5])[0]  # what megatron passes: a 0-d tensor
    y = m.forward(x, mask, scale)
    assert y.dtype == torch.float16
    assert torch.count_nonzero(y[1, :, 2]) == 0
    want = F.softmax((x.float() * 0.5).masked_fill(mask.bool(), float("-inf")), -1)
    close(y[0], want[0], torch.float16)
    with pytest.raises(RuntimeError, match="Only fp16 and bf16 are supported"):
        m.forward(x.float(), mask, scale)
    with pytest.raises(RuntimeError, match="expected 3D tensor"):
        apex_softmax.scaled_upper_triang_masked_softmax_cuda.forward(x, scale)


# ---- softmax through FusedScaleMaskSoftmax ----------------------------------------------------------


def _softmax_module(kind, dtype, fused):
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    return FusedScaleMaskSoftmax(
        input_in_fp16=dtype == torch.float16,
        input_in_bf16=dtype == torch.bfloat16,
        attn_mask_type=AttnMaskType.causal if kind == "causal" else AttnMaskType.padding,
        scaled_masked_softmax_fusion=fused,
        mask_func=attention_mask_func,
        softmax_in_fp32=True,
        scale=0.7,
    )


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("kind", ["padding", "causal", "none"])
def test_fused_scale_mask_softmax_launches_kiln_and_matches_the_torch_path(kind, dtype):
    # sk = 12 and sq = 6: shapes Apex's kernels refuse (16 < sk, sq % 4), which kiln takes
    b, np_, sq, sk = 2, 3, (12 if kind == "causal" else 6), 12
    x = torch.randn(b, np_, sq, sk).to(dtype)
    mask = None
    if kind == "padding":
        mask = torch.rand(b, 1, sq, sk) < 0.3
        mask[..., 0] = False
    fused, ref = _softmax_module(kind, dtype, True), _softmax_module(kind, dtype, False)
    assert fused.is_kernel_available(mask, b, np_, sq, sk)
    dy = torch.randn(b, np_, sq, sk).to(dtype)
    with launches() as seen:
        y, g = grads(lambda t: fused(t, mask), [x], dy)
    y_ref, g_ref = grads(lambda t: ref(t, mask), [x], dy)
    close(y, y_ref, dtype)
    close(g[0], g_ref[0], dtype)
    name = {"padding": "scaled_masked_softmax", "causal": "scaled_upper_triang_masked_softmax", "none": "scaled_softmax"}
    assert f"kiln_{name[kind]}" in families(seen), seen


def test_widening_can_be_turned_off():
    km.restore()
    km.apply(widen_softmax=False)
    m = _softmax_module("padding", torch.float16, True)
    assert not m.is_kernel_available(None, 2, 3, 6, 12)  # megatron's own limits
    assert m.is_kernel_available(None, 2, 2, 32, 32)
    km.restore()


# ---- bias + activation ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_bias_activation_impls_launch_kiln_and_match_megatrons_fusion(act, dtype):
    from megatron.core.fusions import fused_bias_gelu, fused_bias_swiglu
    from megatron.core.transformer import mlp

    cols = 24
    x = torch.randn(5, 2, 2 * cols if act == "swiglu" else cols).to(dtype)
    bias = torch.randn(x.shape[-1]).to(dtype)
    if act == "gelu":
        fn, ref = mlp.bias_gelu_impl, fused_bias_gelu.GeLUFunction.apply
    else:
        fn, ref = mlp.bias_swiglu_impl, lambda t, b: fused_bias_swiglu.BiasSwiGLUFunction.apply(
            t.view(-1, t.shape[-1]), b, False, False
        ).view(t.shape[0], t.shape[1], -1)
    assert patches.is_kiln(fn)
    dy = torch.randn(5, 2, cols).to(dtype)
    with launches() as seen:
        y, g = grads(fn, [x, bias], dy)
    with eager():
        y_ref, g_ref = grads(ref, [x, bias], dy)
    # megatron's reference computes in the input's dtype, kiln in float32: one more rounding
    close(y, y_ref, dtype, scale=2)
    close(g[0], g_ref[0], dtype, scale=2)
    close(g[1], g_ref[1], dtype, scale=4)  # a column sum of 10 rows
    assert f"kiln_bias_{act}" in families(seen)


# ---- bias + dropout + add --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_bias_dropout_add_at_inference_is_in_place_in_x_s_dtype(dtype):
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add

    x, bias = torch.randn(4, 2, 16).to(dtype), torch.randn(16).to(dtype)
    residual = torch.randn(4, 2, 16)  # float32, as under AMP O1: cast to x's dtype
    want = get_bias_dropout_add(False, False)((x.clone(), bias), residual, 0.1)
    fn = get_bias_dropout_add(False, True)
    assert patches.is_kiln(fn)
    with launches() as seen:
        out = fn((x, bias), residual, 0.1)
    assert out is x and out.dtype == dtype
    close(out, want, dtype)
    assert "kiln_bias_dropout_add" in families(seen)


@pytest.mark.parametrize("dtype", ALL)
def test_bias_dropout_add_training_matches_and_drops(dtype):
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add

    x, bias, residual = torch.randn(4, 2, 16).to(dtype), torch.randn(16).to(dtype), torch.randn(4, 2, 16).to(dtype)
    dy = torch.randn(4, 2, 16).to(dtype)
    # p = 0: the exact identity, forward and backward, against megatron's unfused path
    y, g = grads(lambda a, b, r: get_bias_dropout_add(True, True)((a, b), r, 0.0), [x, bias, residual], dy)
    y_ref, g_ref = grads(lambda a, b, r: get_bias_dropout_add(True, False)((a, b), r, 0.0), [x, bias, residual], dy)
    close(y, y_ref, dtype)
    for a, b in zip(g, g_ref):
        close(a, b, dtype, scale=4)
    # p = 0.5: each element is residual or residual + (x + bias) / (1 - p), about half each
    p = 0.5
    big = torch.randn(64, 2, 64).to(dtype)
    with launches() as seen:
        out = get_bias_dropout_add(True, True)((big, None), torch.zeros_like(big), p)
    kept = out != 0
    assert 0.35 < kept.float().mean().item() < 0.65
    close(out[kept], (big / (1 - p))[kept], dtype)
    assert "kiln_bias_dropout_add" in families(seen)


# ---- RoPE --------------------------------------------------------------------------------------


def _freqs(s, dim, interleaved):
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    f = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    emb = torch.stack((f, f), dim=-1).view(s, -1) if interleaved else torch.cat((f, f), dim=-1)
    return emb[:, None, None, :]  # megatron's RotaryEmbedding layout


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rotary_pos_emb_with_fusion_launches_kiln_and_matches_unfused(interleaved, dtype, megatron):
    from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
    from megatron.core.transformer.transformer_config import TransformerConfig

    def cfg(fused):
        c = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, apply_rope_fusion=fused)
        # set after __post_init__, which asks TE's version for fused interleaved RoPE
        c.rotary_interleaved = interleaved
        return c

    s, d, rot = 6, 16, 12  # a partial rotation: the last 4 features pass through
    t = torch.randn(s, 2, 3, d).to(dtype)
    freqs = _freqs(s, rot, interleaved)
    dy = torch.randn_like(t)
    cp = megatron.get_context_parallel_group()
    with launches() as seen:
        y, g = grads(lambda a: apply_rotary_pos_emb(a, freqs, cfg(True), cp_group=cp), [t], dy)
    y_ref, g_ref = grads(lambda a: apply_rotary_pos_emb(a, freqs, cfg(False), cp_group=cp), [t], dy)
    close(y, y_ref, dtype, scale=2)
    close(g[0], g_ref[0], dtype, scale=2)
    assert "kiln_rope" in families(seen)


def test_apply_rotary_pos_emb_thd_matches_unfused(megatron):
    from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
    from megatron.core.transformer.transformer_config import TransformerConfig

    def cfg(fused):
        return TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, apply_rope_fusion=fused)

    cu = torch.tensor([0, 3, 8, 10], dtype=torch.int32)
    t = torch.randn(10, 2, 8)
    freqs = _freqs(5, 8, False)
    cp = megatron.get_context_parallel_group()
    with launches() as seen:
        y = apply_rotary_pos_emb(t, freqs, cfg(True), cu_seqlens=cu, cp_group=cp)
    close(y, apply_rotary_pos_emb(t, freqs, cfg(False), cu_seqlens=cu, cp_group=cp), torch.float32)
    assert "kiln_rope" in families(seen)


# ---- cross-entropy (TP = 1; TP = 2 in test_megatron_dist.py) -----------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_fused_vocab_parallel_cross_entropy_tp1_matches_megatrons_unfused(dtype, megatron):
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy
    from megatron.core.models.common.language_module import language_module
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    assert patches.is_kiln(language_module.fused_vocab_parallel_cross_entropy)
    logits = (3 * torch.randn(5, 2, 40)).to(dtype)
    target = torch.randint(0, 40, (5, 2))
    dy = torch.rand(5, 2)
    tp = megatron.get_tensor_model_parallel_group()
    with launches() as seen:
        loss, g = grads(lambda z: fused_vocab_parallel_cross_entropy(z, target, tp), [logits], dy)
    loss_ref, g_ref = grads(lambda z: vocab_parallel_cross_entropy(z.float(), target), [logits], dy)
    assert loss.dtype == torch.float32 and loss.shape == target.shape
    close(loss, loss_ref, torch.float32, scale=10 if dtype != torch.float32 else 1)
    close(g[0], g_ref[0], dtype)
    assert "kiln_cross_entropy" in families(seen)


# ---- norms -------------------------------------------------------------------------------------


@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("zero_centered", [False, True])
def test_norms_through_the_local_spec(normalization, zero_centered):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from kiln.megatron import norms

    cfg = TransformerConfig(
        num_layers=1, hidden_size=24, num_attention_heads=4, normalization=normalization,
        layernorm_zero_centered_gamma=zero_centered, sequence_parallel=False, use_cpu_initialization=True,
        layernorm_epsilon=1e-6,
    )
    for spec in (get_gpt_layer_local_spec(normalization=normalization), km.gpt_layer_spec):
        norm = build_module(spec.submodules.input_layernorm, config=cfg, hidden_size=24, eps=cfg.layernorm_epsilon)
        assert type(norm) is (norms.LayerNorm if normalization == "LayerNorm" else norms.RMSNorm)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(24) * 0.1)
    x = torch.randn(4, 2, 24)
    if normalization == "LayerNorm":
        ref = lambda t, w: F.layer_norm(t, (24,), w + 1 if zero_centered else w, norm.bias, 1e-6)  # noqa: E731
    else:
        ref = lambda t, w: F.rms_norm(t, (24,), w + 1 if zero_centered else w, 1e-6)  # noqa: E731
    dy = torch.randn_like(x)
    with launches() as seen:
        y, g = grads(lambda t, w: _with_weight(norm, w)(t), [x, norm.weight.detach()], dy)
    y_ref, g_ref = grads(ref, [x, norm.weight.detach()], dy)
    close(y, y_ref, torch.float32, scale=10)
    close(g[0], g_ref[0], torch.float32, scale=10)
    close(g[1], g_ref[1], torch.float32, scale=10)
    assert ("kiln_layer_norm" if normalization == "LayerNorm" else "kiln_rms_norm") in families(seen)
    # sequence parallel: the weight carries Megatron's flag for the TP all-reduce of its grad
    sp = norms.Norm(TransformerConfig(num_layers=1, hidden_size=24, num_attention_heads=4,
                                      normalization=normalization, sequence_parallel=True,
                                      tensor_model_parallel_size=2), 24)
    assert sp.weight.sequence_parallel is True


def _with_weight(norm, w):
    """norm's forward with w in place of its weight parameter (for autograd.grad)."""

    def f(t):
        saved = norm.weight
        try:
            del norm._parameters["weight"]
            norm.weight = w
            return norm(t)
        finally:
            del norm.weight
            norm.weight = saved

    return f


# ---- embedding ---------------------------------------------------------------------------------


def test_embedding_strict_ids_raises_with_position_and_id_and_goes_on(megatron):
    from megatron.core.tensor_parallel.layers import VocabParallelEmbedding
    from megatron.core.transformer.transformer_config import TransformerConfig

    km.apply(strict_ids=True)
    cfg = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, use_cpu_initialization=True)
    emb = VocabParallelEmbedding(40, 8, init_method=torch.nn.init.normal_, config=cfg)
    ids = torch.randint(0, 40, (3, 5))
    with launches() as seen:
        y = emb(ids)
    torch.testing.assert_close(y, F.embedding(ids, emb.weight))
    assert "kiln_embedding" in families(seen)
    bad = ids.clone()
    bad[1, 2] = 41
    with pytest.raises(kiln.KilnInvalidArgument, match=r"token id 41 at position 7 is outside the vocabulary \[0, 40\)"):
        emb(bad)
    torch.testing.assert_close(emb(ids), F.embedding(ids, emb.weight))  # the process goes on
    km.apply(strict_ids=False)


# ---- a whole TransformerLayer ------------------------------------------------------------------------


def _layer(dtype, rope):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        num_layers=1, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16, params_dtype=dtype,
        attention_dropout=0.0, hidden_dropout=0.0, add_bias_linear=True,
        masked_softmax_fusion=True, bias_activation_fusion=True, bias_dropout_fusion=True,
        apply_rope_fusion=rope,
    )
    torch.manual_seed(1234)
    return build_module(get_gpt_layer_local_spec(), config=cfg, layer_number=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transformer_layer_matches_with_and_without_apply(dtype):
    x = torch.randn(8, 2, 32).to(dtype)
    dy = torch.randn(8, 2, 32).to(dtype)
    freqs = _freqs(8, 8, False)

    def run(layer):
        inp = x.clone().requires_grad_()
        out, _ = layer(inp, attention_mask=None, rotary_pos_emb=freqs)
        out.backward(dy)
        return out.detach(), inp.grad, {n: p.grad for n, p in layer.named_parameters()}

    km.restore()
    ref_layer = _layer(dtype, rope=False)  # megatron's default fusions without TE: no fused RoPE
    with eager():
        want = run(ref_layer)
    km.apply()
    layer = _layer(dtype, rope=True)
    layer.load_state_dict(ref_layer.state_dict())
    with launches() as seen:
        got = run(layer)
    scale = 1 if dtype == torch.float32 else 2
    close(got[0], want[0], dtype, scale)
    close(got[1], want[1], dtype, scale)
    assert got[2].keys() == want[2].keys()
    for n in want[2]:
        close(got[2][n], want[2][n], dtype, 10 * scale)
    fam = families(seen)
    expected = {"kiln_layer_norm", "kiln_bias_gelu", "kiln_bias_dropout_add", "kiln_rope"}
    if dtype != torch.float32:  # megatron's fused softmax path is fp16/bf16 only
        expected.add("kiln_scaled_upper_triang_masked_softmax")
    assert expected <= fam, fam


def test_initialize_runs_kilns_warmup():
    # one rank here (the 4-rank cold start is in test_megatron_dist.py); the
    # loader is already open from the ops above, so no per-call options
    rep = km.initialize()
    assert rep.size == 1 and rep.mode == "load"
    assert {"bias_gelu", "scaled_masked_softmax", "cross_entropy"} <= set(rep.units)
