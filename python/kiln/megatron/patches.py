"""megatron-core's call sites of the ops kiln replaces, and the replacements.

``SITES`` is the table: for each switch of ``kiln.megatron.apply``, the
module and attribute megatron-core reads the op from (module globals it looks
up at call time, names other modules bound at import, class attributes), and
the factory that makes kiln's replacement from the original. ``apply`` looks
every selected site up before it changes any, so a megatron-core without one
of them is refused with nothing patched; every installed object is marked
(``__kiln__``), so a second ``apply`` finds the marks and changes nothing.

Verified against megatron-core 0.16.1 (``TESTED_VERSIONS``): each site below
was read in that release's source and is exercised by
python/tests/test_megatron.py.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

import kiln.torch as kt

MARK = "__kiln__"

# megatron-core releases whose call sites this table was checked against.
TESTED_VERSIONS = ("0.16.1",)

# What apply()'s switches set at call time (read by the replacements).
SETTINGS = {"strict_ids": False}


@dataclass(frozen=True)
class Site:
    """One call site: ``module``'s attribute ``attr`` (dotted for a class
    attribute: "VocabParallelEmbedding.forward") becomes ``make(original)``."""

    switch: str
    module: str
    attr: str
    make: Callable[[object], object]
    why: str

    @property
    def name(self) -> str:
        return f"{self.module}.{self.attr}"


def mark(obj: object) -> object:
    """Marks a replacement (so apply() recognizes it) and names it plainly."""
    setattr(obj, MARK, True)
    if isinstance(obj, types.FunctionType):
        obj.__qualname__ = obj.__name__
    return obj


def is_kiln(obj: object) -> bool:
    return bool(getattr(obj, MARK, False))


# ---- softmax --------------------------------------------------------------------------


def _make_is_kernel_available(original: object) -> object:
    from megatron.core.transformer.enums import AttnMaskType

    def is_kernel_available(self, mask, b, np, sq, sk):  # type: ignore[no-untyped-def]
        """kiln's softmax takes every shape megatron's fused path can hand it:
        fp16/bf16 input with fusion on, any sq and sk; causal needs sq == sk
        (megatron's fused path asserts it); a mask must be [b or 1, 1, sq, sk]
        bool/uint8. A sliding window (window_size) uses megatron's torch path,
        which is the one that applies the window."""
        if not (self.scaled_masked_softmax_fusion and self.input_in_float16):
            return False
        if getattr(self, "window_size", None) is not None or sq < 1 or sk < 1:
            return False
        if self.attn_mask_type == AttnMaskType.causal:
            return sq == sk
        if mask is not None:
            return (
                mask.dim() == 4
                and mask.dtype in (torch.bool, torch.uint8)
                and mask.shape[1] == 1
                and tuple(mask.shape[2:]) == (sq, sk)
                and mask.shape[0] in (1, b)
            )
        return True

    is_kernel_available.__kiln_original__ = original  # type: ignore[attr-defined]
    return mark(is_kernel_available)


# ---- bias + activation ------------------------------------------------------------------


def _make_bias_gelu_impl(original: object) -> object:
    def bias_gelu_impl(input: Tensor, bias: Tensor | None) -> Tensor:
        """gelu_tanh(input + bias) on kiln's bias_gelu kernels (megatron's
        GeLUFunction: the tanh approximation)."""
        if bias is not None and bias.dtype != input.dtype:
            bias = bias.to(input.dtype)
        return kt.bias_gelu(input, bias)

    return mark(bias_gelu_impl)


def _make_bias_swiglu_impl(original: object) -> object:
    def bias_swiglu_impl(
        input: Tensor, bias: Tensor | None, fp8_input_store: bool = False, cpu_offload_input: bool = False
    ) -> Tensor:
        """silu(a) * b of input + bias = [a | b] on kiln's bias_swiglu kernels.
        fp8_input_store and cpu_offload_input (which change what is saved for
        the backward) stay megatron's own implementation."""
        if fp8_input_store or cpu_offload_input:
            return original(input, bias, fp8_input_store, cpu_offload_input)  # type: ignore[operator]
        assert input.dim() in (2, 3), "bias_swiglu_impl takes 2D or 3D input, as megatron's"
        if bias is not None and bias.dtype != input.dtype:
            bias = bias.to(input.dtype)
        return kt.bias_swiglu(input, bias)

    return mark(bias_swiglu_impl)


# ---- bias + dropout + add -------------------------------------------------------------------


def _bias_dropout_add(x_with_bias, residual: Tensor, prob: float, training: bool) -> Tensor:  # type: ignore[no-untyped-def]
    from kiln.torch import _runtime as rt
    from kiln.torch import ops as kops

    x, bias = x_with_bias
    # megatron: "cast residual to the same dtype as x" (AMP O1); the output is in x's dtype.
    residual = residual if residual.dtype == x.dtype else residual.to(x.dtype)
    if bias is not None:
        if bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        if bias.shape != x.shape[-1:]:  # a broadcast bias of another shape: add it here
            x, bias = x + bias, None
    if residual.shape != x.shape:
        residual = residual.expand_as(x)
    inplace = (
        not training
        and not x.requires_grad
        and not residual.requires_grad
        and (bias is None or not bias.requires_grad)
    )
    if inplace and x.is_contiguous():
        # megatron's inference path writes into x and returns it: so does kiln's
        # kernel (y may be x; training = 0 is the exact (x + bias) + residual).
        rows, cols = kops._rows_cols("bias_dropout_add", x)
        kops._same_dtype("bias_dropout_add", x, residual=residual)
        residual = kops._c(residual)
        bias = kops._c(bias) if bias is not None else None
        bp = bias.data_ptr() if bias is not None else None
        kops._run(
            "bias_dropout_add", x, "kiln_bias_dropout_add_fwd", rt.dtype_code(x, "x"), x.data_ptr(),
            x.data_ptr(), bp, residual.data_ptr(), rows, cols, float(prob), 0, 0, 0,
        )
        return x
    return kt.bias_dropout_add(x, bias, residual, float(prob), training=training)


def _make_bda(training: bool) -> Callable[[object], object]:
    def make(original: object) -> object:
        def bias_dropout_add(x_with_bias, residual: Tensor, prob: float) -> Tensor:  # type: ignore[no-untyped-def]
            """residual + dropout(x + bias, prob) on kiln's bias_dropout_add
            kernel (megatron's bias_dropout_add_fused_train/_inference)."""
            return _bias_dropout_add(x_with_bias, residual, prob, training)

        bias_dropout_add.__name__ = "bias_dropout_add_fused_" + ("train" if training else "inference")
        return mark(bias_dropout_add)

    return make


# ---- RoPE -------------------------------------------------------------------------------------


def _angles(freqs: Tensor, interleaved: bool) -> Tensor:
    """megatron's freqs [s, 1, 1, rot_dim] (each angle twice: [f | f], or
    f0 f0 f1 f1 ... when interleaved) as kiln's angles [s, rot_dim / 2]."""
    f = freqs.reshape(freqs.shape[0], freqs.shape[-1])
    f = f[:, 0::2] if interleaved else f[:, : f.shape[1] // 2]
    return f.float().contiguous()


def _make_fused_rope(original: object) -> object:
    def fused_apply_rotary_pos_emb(
        t: Tensor, freqs: Tensor, transpose_output_memory: bool = False, interleaved: bool = False
    ) -> Tensor:
        """RoPE of t [s, b, h, d] ("sbhd") with megatron's freqs [s, 1, 1, rot_dim]
        on kiln's rope kernels; rotate-half, or interleaved pairs."""
        if t.dim() != 4 or freqs.dim() != 4 or freqs.shape[1:3] != (1, 1) or freqs.shape[0] != t.shape[0]:
            from megatron.core.models.common.embeddings import rope_utils

            return rope_utils._apply_rotary_pos_emb_bshd(t, freqs, rotary_interleaved=interleaved)
        return kt.rope(t, _angles(freqs, interleaved), layout="sbhd", interleaved=interleaved)

    return mark(fused_apply_rotary_pos_emb)


def _make_fused_rope_thd(original: object) -> object:
    def fused_apply_rotary_pos_emb_thd(
        t: Tensor, cu_seqlens: Tensor, freqs: Tensor, cp_size: int = 1, cp_rank: int = 0
    ) -> Tensor:
        """RoPE of packed sequences t [total, h, d] (cu_seqlens [b + 1]) with
        megatron's freqs [max_s or total, 1, 1, rot_dim], context-parallel rank
        cp_rank of cp_size: megatron's own position mapping
        (_get_thd_freqs_on_this_cp_rank), then one kiln rope launch."""
        from megatron.core.models.common.embeddings import rope_utils

        seqlens = ((cu_seqlens[1:] - cu_seqlens[:-1]) // cp_size).tolist()
        splits = torch.split(t, seqlens)
        if freqs.dim() >= 1 and freqs.size(0) == cu_seqlens[-1]:
            parts = [
                rope_utils._get_thd_freqs_on_this_cp_rank(cp_rank, cp_size, x, freqs, int(cu_seqlens[i].item()))
                for i, x in enumerate(splits)
            ]
        else:
            parts = [rope_utils._get_thd_freqs_on_this_cp_rank(cp_rank, cp_size, x, freqs) for x in splits]
        packed = torch.cat(parts, dim=0)
        return kt.rope(t.unsqueeze(1), _angles(packed, False), layout="sbhd").squeeze(1)

    return mark(fused_apply_rotary_pos_emb_thd)


# ---- cross-entropy --------------------------------------------------------------------------------


def _make_cross_entropy(original: object) -> object:
    def fused_vocab_parallel_cross_entropy(vocab_parallel_logits: Tensor, target: Tensor, tp_group) -> Tensor:  # type: ignore[no-untyped-def]
        """Per-token loss (float32, target's shape) of logits [..., vocab/tp]
        split over tp_group, on kiln's cross_entropy kernels (three small
        all-reduces at TP > 1). A target outside [0, vocab) is a data error
        (its loss 0; kiln.torch.check() raises it), where megatron's gives
        log-sum-exp; -100 is ignored (loss 0). Megatron masks such tokens with
        loss_mask either way."""
        part = vocab_parallel_logits.shape[-1]
        logits = vocab_parallel_logits.reshape(-1, part)
        tgt = target.reshape(-1)
        if tgt.dtype != torch.int64:
            tgt = tgt.long()
        group = tp_group if tp_group is not None and tp_group.size() > 1 else None
        start = tp_group.rank() * part if group is not None else None
        loss = kt.cross_entropy(logits, tgt, reduction="none", group=group, vocab_start=start)
        return loss.view(target.shape)

    return mark(fused_vocab_parallel_cross_entropy)


# ---- embedding ----------------------------------------------------------------------------------


def _make_embedding_forward(original: object) -> object:
    def forward(self, input_: Tensor) -> Tensor:  # type: ignore[no-untyped-def]
        """VocabParallelEmbedding.forward on kiln's embedding kernel: ids of
        other partitions give zero rows (summed over the TP group, as
        megatron's); an id outside [0, num_embeddings) is a zero row and a
        data error, raised at once as KilnInvalidArgument (with its position
        and id, at TP = 1 and TP > 1 alike) when apply(strict_ids=True),
        else left for kiln.torch.check(). The weight gradient is deterministic."""
        from megatron.core.tensor_parallel import layers

        ids = input_ if input_.dtype == torch.int64 else input_.long()
        output_parallel = kt.embedding(
            ids,
            self.weight,
            vocab_start=self.vocab_start_index,
            vocab_size=self.num_embeddings,
            sync_check=bool(SETTINGS["strict_ids"]),
        )
        if self.reduce_scatter_embeddings:
            output_parallel = output_parallel.transpose(0, 1).contiguous()
            return layers.reduce_scatter_to_sequence_parallel_region(output_parallel, group=self.tp_group)
        return layers.reduce_from_tensor_model_parallel_region(output_parallel, group=self.tp_group)

    forward.__kiln_original__ = original  # type: ignore[attr-defined]
    return mark(forward)


# ---- norms ----------------------------------------------------------------------------------------


def _make_norm(original: object) -> object:
    from kiln.megatron.norms import Norm

    return Norm


def _make_layer_norm_method(original: object) -> object:
    from kiln.megatron.norms import Norm

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False) -> type:  # type: ignore[no-untyped-def]
        """kiln's Norm (LayerNorm or RMSNorm by config.normalization)."""
        return Norm

    return mark(layer_norm)


# ---- the table ----------------------------------------------------------------------------------

_FS = "megatron.core.fusions"

SITES: tuple[Site, ...] = (
    Site("softmax", f"{_FS}.fused_softmax", "FusedScaleMaskSoftmax.is_kernel_available",
         _make_is_kernel_available, "widened to every shape kiln's softmax takes (widen_softmax)"),
    Site("norms", "megatron.core.models.backends", "LocalSpecProvider.layer_norm",
         _make_layer_norm_method, "the local spec provider's norm (LocalSpecProvider)"),
    Site("norms", "megatron.core.models.backends", "LNImpl", _make_norm, "bound at import"),
    Site("norms", "megatron.core.models.gpt.gpt_layer_specs", "LNImpl", _make_norm,
         "bound at import: decoder block specs"),
    Site("norms", "megatron.core.transformer.transformer_block", "LayerNormImpl", _make_norm,
         "bound at import: the final layernorm of a block built from a layer spec"),
    Site("activations", f"{_FS}.fused_bias_gelu", "bias_gelu_impl", _make_bias_gelu_impl, "definition"),
    Site("activations", "megatron.core.transformer.mlp", "bias_gelu_impl", _make_bias_gelu_impl,
         "bound at import"),
    Site("activations", "megatron.core.transformer.moe.shared_experts", "bias_gelu_impl",
         _make_bias_gelu_impl, "bound at import"),
    Site("activations", f"{_FS}.fused_bias_swiglu", "bias_swiglu_impl", _make_bias_swiglu_impl, "definition"),
    Site("activations", "megatron.core.transformer.mlp", "bias_swiglu_impl", _make_bias_swiglu_impl,
         "bound at import"),
    Site("activations", "megatron.core.transformer.moe.shared_experts", "bias_swiglu_impl",
         _make_bias_swiglu_impl, "bound at import"),
    Site("dropout_add", f"{_FS}.fused_bias_dropout", "bias_dropout_add_fused_train", _make_bda(True),
         "read by get_bias_dropout_add at call time"),
    Site("dropout_add", f"{_FS}.fused_bias_dropout", "bias_dropout_add_fused_inference", _make_bda(False),
         "read by get_bias_dropout_add at call time"),
    Site("rope", "megatron.core.models.common.embeddings.rope_utils", "fused_apply_rotary_pos_emb",
         _make_fused_rope, "module global read at call time (None without TE)"),
    Site("rope", "megatron.core.models.common.embeddings.rope_utils", "fused_apply_rotary_pos_emb_thd",
         _make_fused_rope_thd, "module global read at call time (None without TE)"),
    Site("cross_entropy", f"{_FS}.fused_cross_entropy", "fused_vocab_parallel_cross_entropy",
         _make_cross_entropy, "definition"),
    Site("cross_entropy", "megatron.core.models.common.language_module.language_module",
         "fused_vocab_parallel_cross_entropy", _make_cross_entropy, "bound at import"),
    Site("embedding", "megatron.core.tensor_parallel.layers", "VocabParallelEmbedding.forward",
         _make_embedding_forward, "method"),
)

SWITCHES = ("softmax", "norms", "activations", "dropout_add", "rope", "cross_entropy", "embedding")

_MISSING = object()


def owner_and_name(site: Site) -> tuple[object, str]:
    """The object holding the site's attribute, and the attribute's name;
    raises ImportError/AttributeError when megatron-core lacks it."""
    obj: object = importlib.import_module(site.module)
    *path, name = site.attr.split(".")
    for p in path:
        obj = getattr(obj, p)
    if name not in vars(obj):
        raise AttributeError(f"{site.name} does not exist")
    return obj, name


def read(site: Site) -> object:
    owner, name = owner_and_name(site)
    return vars(owner)[name]


def megatron_version() -> str:
    try:
        from megatron.core import package_info
    except ImportError as e:
        raise ImportError(f"kiln.megatron: megatron-core is not importable ({e})") from e
    return str(package_info.__version__)


@contextlib.contextmanager
def _quiet_imports():  # type: ignore[no-untyped-def]
    """megatron-core warns on import when Apex/TE are missing: not our news."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def resolve(sites: list[Site]) -> list[tuple[Site, object, str, object]]:
    """(site, owner, name, current value) of every site, or KilnUnsupported
    naming every site that is missing and megatron-core's version."""
    from kiln.errors import KilnUnsupported

    found, missing = [], []
    with _quiet_imports():
        for s in sites:
            try:
                owner, name = owner_and_name(s)
                found.append((s, owner, name, read(s)))
            except (ImportError, AttributeError) as e:
                missing.append(f"{s.name} ({type(e).__name__}: {e})")
    if missing:
        raise KilnUnsupported(
            f"kiln.megatron.apply: megatron-core {megatron_version()} lacks call sites kiln patches "
            f"(kiln knows megatron-core {', '.join(TESTED_VERSIONS)}): " + "; ".join(missing)
            + ". Nothing was patched.",
            status="KILN_EUNSUPPORTED",
            code=-12,
        )
    return found


def module_loaded(name: str) -> bool:
    return name in sys.modules


__all__ = ["MARK", "SETTINGS", "SITES", "SWITCHES", "Site", "TESTED_VERSIONS", "is_kiln", "mark", "resolve"]
