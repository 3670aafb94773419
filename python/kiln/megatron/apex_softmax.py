"""Apex's fused-softmax extension modules, on kiln's kernels.

megatron-core (``megatron/core/fusions/fused_softmax.py``) imports Apex's
extension modules by name inside its autograd functions:
``scaled_upper_triang_masked_softmax_cuda``, ``scaled_masked_softmax_cuda``
and ``scaled_softmax_cuda`` (``generic_scaled_masked_softmax_cuda`` is Apex's
shape-unrestricted variant). This module provides the four with Apex's
contract, so ``kiln.megatron.apply()`` can put them in ``sys.modules`` where
Apex's are absent:

- ``forward(input, scale)`` / ``forward(input, mask, scale)`` and
  ``backward(output_grads, softmax_results, scale)``, in that order; ``scale``
  a float or a 0-d tensor (megatron passes ``torch.tensor([scale])[0]``).
- input and gradients float16 or bfloat16, as Apex
  (``RuntimeError: Only fp16 and bf16 are supported`` otherwise); the result
  in the input's dtype.
- ``scaled_masked_softmax_cuda``: input ``[b, np, sq, sk]``, mask uint8 (or
  bool) ``[b or 1, 1, sq, sk]``, 1 = masked; a fully masked row is all zeros
  (Apex's kernels scale such a row by 0; torch's softmax gives NaN).
- ``scaled_upper_triang_masked_softmax_cuda``: input ``[attn_batches, sq, sk]``,
  key j > query i masked.
- ``scaled_softmax_cuda``: input ``[b, np, sq, sk]``, no mask.
- ``get_batch_per_block(sq, sk, b, np)``: Apex's formula (what its warp
  kernels process per 128-thread block), which megatron's
  ``is_kernel_available`` divides by. kiln's kernels have no such limit; the
  number only keeps megatron's own shape test meaning what it meant.

Apex's limits (16 < sk <= 4096 for the masked kernel, 16384 for the causal
one) do not apply: kiln's kernels take any row length.
"""

from __future__ import annotations

import sys
import types

import torch
from torch import Tensor

_MODULES = (
    "scaled_masked_softmax_cuda",
    "scaled_upper_triang_masked_softmax_cuda",
    "scaled_softmax_cuda",
    "generic_scaled_masked_softmax_cuda",
)

# Apex's C10_WARP_SIZE on NVIDIA GPUs, and the block its warp softmax uses.
_WARP_SIZE = 32
_THREADS_PER_BLOCK = 128


def _scale(scale: float | Tensor) -> float:
    if isinstance(scale, Tensor):
        if scale.numel() != 1:
            raise RuntimeError(f"scale must be a scalar; got a tensor of shape {tuple(scale.shape)}")
        return float(scale.item())
    return float(scale)


def _half(name: str, *tensors: Tensor) -> None:
    for t in tensors:
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise RuntimeError(f"{name}: Only fp16 and bf16 are supported (got {t.dtype})")


def _dims(name: str, n: int, *tensors: Tensor) -> None:
    for t in tensors:
        if t.dim() != n:
            raise RuntimeError(f"{name}: expected {n}D tensor, got {t.dim()}D {tuple(t.shape)}")


def get_batch_per_block(query_seq_len: int, key_seq_len: int, batches: int, attn_heads: int) -> int:
    """Apex's batches per block: rows of length key_seq_len that its warp
    softmax handles per 128-thread block (query_seq_len, batches and
    attn_heads do not enter it, as in Apex)."""
    log2 = 0
    while (1 << log2) < key_seq_len:
        log2 += 1
    next_pow2 = 1 << log2
    warp_size = next_pow2 if next_pow2 < _WARP_SIZE else _WARP_SIZE
    batches_per_warp = 2 if next_pow2 <= 128 else 1
    return (_THREADS_PER_BLOCK // warp_size) * batches_per_warp


def _kops():  # type: ignore[no-untyped-def]
    """kiln.torch.ops: its op callables raise the KilnError subclass on the
    fast path too (a raw torch.ops.kiln call raises torch's RuntimeError)."""
    import kiln.torch.ops as kops

    return kops


def _masked_forward(name: str):  # type: ignore[no-untyped-def]
    def forward(input: Tensor, mask: Tensor, scale: float | Tensor) -> Tensor:
        """softmax(scale * input) with mask != 0 excluded: input [b, np, sq, sk]
        fp16/bf16, mask uint8/bool [b or 1, 1, sq, sk]; a fully masked row is zeros."""
        _dims(name + ".forward", 4, input, mask)
        _half(name + ".forward", input)
        return _kops()._scaled_masked_softmax(input, mask, _scale(scale))

    return forward


def _forward(name: str, n: int, op: str):  # type: ignore[no-untyped-def]
    def forward(input: Tensor, scale: float | Tensor) -> Tensor:
        """softmax(scale * input) over the last dimension (causal for
        scaled_upper_triang_masked_softmax_cuda): input fp16/bf16,
        [attn_batches, sq, sk] for the causal kernel, [b, np, sq, sk] else."""
        _dims(name + ".forward", n, input)
        _half(name + ".forward", input)
        return getattr(_kops(), "_" + op)(input, _scale(scale))

    return forward


def _backward(name: str, n: int, op: str):  # type: ignore[no-untyped-def]
    def backward(output_grads: Tensor, softmax_results: Tensor, scale: float | Tensor) -> Tensor:
        """The input gradient from the output's gradient and the forward's result
        (fp16/bf16, each of the forward input's shape)."""
        _dims(name + ".backward", n, output_grads, softmax_results)
        _half(name + ".backward", output_grads, softmax_results)
        return getattr(_kops(), "_" + op)(output_grads, softmax_results, _scale(scale))

    return backward


def _module(name: str, **functions: object) -> types.ModuleType:
    m = types.ModuleType(name, f"Apex's {name} extension, on kiln's kernels (kiln.megatron.apex_softmax).")
    for k, v in functions.items():
        setattr(m, k, v)
    m.__kiln__ = True  # type: ignore[attr-defined]
    return m


def _make() -> dict[str, types.ModuleType]:
    import kiln.torch.ops  # noqa: F401  (defines torch.ops.kiln.*)

    m, c, p, g = (
        "scaled_masked_softmax_cuda",
        "scaled_upper_triang_masked_softmax_cuda",
        "scaled_softmax_cuda",
        "generic_scaled_masked_softmax_cuda",
    )
    return {
        m: _module(
            m,
            forward=_masked_forward(m),
            backward=_backward(m, 4, "scaled_masked_softmax_backward"),
            get_batch_per_block=get_batch_per_block,
        ),
        c: _module(
            c,
            forward=_forward(c, 3, "scaled_upper_triang_masked_softmax"),
            backward=_backward(c, 3, "scaled_upper_triang_masked_softmax_backward"),
        ),
        p: _module(p, forward=_forward(p, 4, "scaled_softmax"), backward=_backward(p, 4, "scaled_softmax_backward")),
        g: _module(g, forward=_masked_forward(g), backward=_backward(g, 4, "scaled_masked_softmax_backward")),
    }

MODULES: dict[str, types.ModuleType] = _make()
scaled_masked_softmax_cuda = MODULES["scaled_masked_softmax_cuda"]
scaled_upper_triang_masked_softmax_cuda = MODULES["scaled_upper_triang_masked_softmax_cuda"]
scaled_softmax_cuda = MODULES["scaled_softmax_cuda"]
generic_scaled_masked_softmax_cuda = MODULES["generic_scaled_masked_softmax_cuda"]


def apex_has(name: str) -> bool:
    """True when an extension module of this name other than kiln's can be
    imported (Apex built with --cpp_ext --cuda_ext, or anything else that
    provides it): kiln's must not shadow it."""
    import importlib.util

    have = sys.modules.get(name)
    if have is not None:
        return not getattr(have, "__kiln__", False)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


__all__ = [
    "MODULES",
    "apex_has",
    "get_batch_per_block",
    "generic_scaled_masked_softmax_cuda",
    "scaled_masked_softmax_cuda",
    "scaled_softmax_cuda",
    "scaled_upper_triang_masked_softmax_cuda",
]
