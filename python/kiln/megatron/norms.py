"""LayerNorm and RMSNorm on kiln's kernels, as megatron-core's layer specs
build norms, and a GPT layer spec that uses them.

Megatron builds a norm from a spec as
``module(config=config, hidden_size=h, eps=config.layernorm_epsilon)`` (the
signature of its ``FusedLayerNorm``, ``WrappedTorchNorm`` and ``TENorm``);
``Norm`` takes the same arguments and builds ``LayerNorm`` or ``RMSNorm`` by
``config.normalization``, as ``WrappedTorchNorm`` and ``TENorm`` do. Unlike
``WrappedTorchNorm`` (torch's norms) they support what Megatron's fused norms
support:

- ``config.sequence_parallel``: the weight (and bias) carry
  ``sequence_parallel = True``, so Megatron all-reduces their gradients over
  the tensor-parallel group (``finalize_model_grads``);
- zero-centered gamma (``config.layernorm_zero_centered_gamma``, or the
  ``zero_centered_gamma`` argument): the weight is stored as ``gamma - 1``
  (initialized to zeros) and ``weight + 1`` is applied.

Parameters are created as Megatron's ``FusedLayerNorm`` creates them (float32
on the default device; Megatron's ``Float16Module`` casts them with the
model). kiln's norms take a float32 weight with 16-bit activations.

``gpt_layer_spec`` is megatron-core's local GPT layer spec
(``get_gpt_layer_local_spec``) with every norm replaced by ``Norm``: for
Megatron-LM, ``--spec kiln.megatron gpt_layer_spec``. ``get_gpt_layer_spec``
takes ``get_gpt_layer_local_spec``'s arguments.
"""

from __future__ import annotations

import dataclasses
import numbers

import torch
from torch import Tensor
from torch.nn import Parameter

import kiln.torch as kt


def _zero_centered(config: object, zero_centered_gamma: bool) -> bool:
    return bool(zero_centered_gamma or getattr(config, "layernorm_zero_centered_gamma", False))


def _hidden(hidden_size: int | tuple[int, ...] | torch.Size) -> int:
    if isinstance(hidden_size, numbers.Integral):
        return int(hidden_size)
    dims = tuple(hidden_size)
    if len(dims) != 1:
        raise ValueError(f"kiln.megatron norms normalize the last dimension only; got hidden_size {dims}")
    return int(dims[0])


def _weight_for(w: Tensor, x: Tensor) -> Tensor:
    """kiln's norms take a float32 weight or one in x's dtype."""
    return w if w.dtype in (torch.float32, x.dtype) else w.to(x.dtype)


class _KilnNorm(torch.nn.Module):
    """What both norms share: megatron's norm arguments, the weight (with
    zero-centered gamma and the sequence_parallel flag), and an optional bias."""

    def __init__(
        self,
        config: object,
        hidden_size: int,
        eps: float,
        zero_centered_gamma: bool,
        with_bias: bool,
    ) -> None:
        super().__init__()
        self.config = config
        self.hidden_size = _hidden(hidden_size)
        self.eps = float(eps)
        self.zero_centered_gamma = _zero_centered(config, zero_centered_gamma)
        self.sequence_parallel = bool(getattr(config, "sequence_parallel", False))
        self.weight = Parameter(torch.empty(self.hidden_size))
        self.bias = Parameter(torch.empty(self.hidden_size)) if with_bias else None
        self.reset_parameters()
        for p in (self.weight, self.bias):
            if p is not None:
                setattr(p, "sequence_parallel", self.sequence_parallel)

    def reset_parameters(self) -> None:
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        if self.zero_centered_gamma:
            torch.nn.init.zeros_(self.weight)
        else:
            torch.nn.init.ones_(self.weight)

    def _gamma(self, x: Tensor) -> Tensor:
        w = self.weight + 1 if self.zero_centered_gamma else self.weight
        return _weight_for(w, x)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, zero_centered_gamma={self.zero_centered_gamma}, kiln"


class LayerNorm(_KilnNorm):
    """y = (x - mean) * rsqrt(var + eps) * gamma + beta over the last
    dimension, on kiln's layer_norm kernels. x ``[..., hidden]`` float32,
    float16 or bfloat16 (CUDA tensors); returns x's shape and dtype.
    Arguments as megatron-core's ``FusedLayerNorm``."""

    def __init__(
        self,
        config: object,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "LayerNorm",
    ) -> None:
        super().__init__(config, hidden_size, eps, zero_centered_gamma, with_bias=True)

    def forward(self, x: Tensor) -> Tensor:
        w = self._gamma(x)
        b = _weight_for(self.bias, x)
        if b.dtype != w.dtype:
            b = b.to(w.dtype)
        return kt.layer_norm(x, w, b, self.eps)


class RMSNorm(_KilnNorm):
    """y = x * rsqrt(mean(x^2) + eps) * gamma over the last dimension, on
    kiln's rms_norm kernels. Arguments as ``LayerNorm``; no bias."""

    def __init__(
        self,
        config: object,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "RMSNorm",
    ) -> None:
        super().__init__(config, hidden_size, eps, zero_centered_gamma, with_bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return kt.rms_norm(x, self._gamma(x), self.eps)


class Norm:
    """The norm of ``config.normalization`` ("LayerNorm" or "RMSNorm"), built
    with megatron's norm arguments (as ``WrappedTorchNorm`` and ``TENorm``):
    a ``LayerNorm`` or an ``RMSNorm`` instance. Anything else is a
    ValueError naming it."""

    def __new__(  # type: ignore[misc]
        cls,
        config: object,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str | None = None,
    ) -> torch.nn.Module:
        kind = getattr(config, "normalization", None) or normalization or "LayerNorm"
        if kind == "LayerNorm":
            return LayerNorm(config, hidden_size, eps, persist_layer_norm, zero_centered_gamma)
        if kind == "RMSNorm":
            return RMSNorm(config, hidden_size, eps, persist_layer_norm, zero_centered_gamma)
        raise ValueError(f"kiln.megatron.norms.Norm: normalization '{kind}'; kiln has LayerNorm and RMSNorm")


Norm.__kiln__ = True  # type: ignore[attr-defined]


def _megatron_norm_classes() -> tuple[type, ...]:
    out: list[type] = []
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    out.append(WrappedTorchNorm)
    try:
        from megatron.core.fusions.fused_layer_norm import FusedLayerNorm

        out.append(FusedLayerNorm)
    except ImportError:
        pass
    try:
        from megatron.core.extensions.transformer_engine import TENorm

        out.append(TENorm)
    except ImportError:
        pass
    return tuple(out)


def replace_norms(spec: object, norm: type = Norm) -> object:  # type: ignore[assignment]
    """A copy of a megatron ModuleSpec (or submodules dataclass) with every
    megatron norm class (``WrappedTorchNorm``, ``FusedLayerNorm``, ``TENorm``)
    replaced by ``norm``, at any depth."""
    from megatron.core.transformer.spec_utils import ModuleSpec

    classes = _megatron_norm_classes()

    def walk(v: object) -> object:
        if isinstance(v, type) and v in classes:
            return norm
        if isinstance(v, ModuleSpec):
            module = norm if (isinstance(v.module, type) and v.module in classes) else v.module
            return dataclasses.replace(v, module=module, submodules=walk(v.submodules))
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.replace(
                v, **{f.name: walk(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
            )
        if isinstance(v, (list, tuple)):
            return type(v)(walk(x) for x in v)
        return v

    return walk(spec)


def get_gpt_layer_spec(**kwargs: object) -> object:
    """megatron-core's ``get_gpt_layer_local_spec(**kwargs)`` with kiln's
    norms (input, pre-MLP, and q/k norms when ``qk_layernorm=True``)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    return replace_norms(get_gpt_layer_local_spec(**kwargs))


def __getattr__(name: str) -> object:
    # gpt_layer_spec is built on first access (it imports megatron-core) and
    # then kept in the module's dict, where Megatron-LM's --spec looks.
    if name == "gpt_layer_spec":
        spec = get_gpt_layer_spec()
        globals()[name] = spec
        return spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LayerNorm", "RMSNorm", "Norm", "get_gpt_layer_spec", "gpt_layer_spec", "replace_norms"]
