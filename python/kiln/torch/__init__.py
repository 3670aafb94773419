"""kiln for PyTorch: the fused ops on torch tensors, and the coordinated
one-rank build inside a torch.distributed job.

    import kiln.torch as kt
    kt.init()                      # load (or build) every unit for this GPU
    y = kt.scaled_masked_softmax(scores, mask, scale=0.125)
    kt.check()                     # raise the first bad token id / target, if any

Ops are torch.library custom ops (``torch.ops.kiln.*``) with fake
implementations and autograd formulas, so torch.compile(fullgraph=True) and
torch.library.opcheck work. Where torch has its stable C shim, most ops run
as C kernels registered from libkiln_torch (``kt.info()`` says which;
``KILN_TORCH_FAST=0`` keeps the Python impls). docs/python.md has the API and
the op schemas.
"""

from __future__ import annotations

from ctypes import byref

import torch

from kiln import _lib
from kiln._lib import int_arg, lib, text, text_arg
from kiln.api import check as _check_status
from kiln.torch import _runtime
from kiln.torch.ops import (
    bias_dropout_add,
    bias_gelu,
    bias_swiglu,
    check_data,
    cross_entropy,
    embedding,
    layer_norm,
    rms_norm,
    rope,
    scaled_masked_softmax,
    scaled_softmax,
    scaled_upper_triang_masked_softmax,
)


def init(
    device: torch.device | str | int | None = None,
    kernels: str | None = None,
    offline: bool | None = None,
) -> dict[str, str]:
    """Loads every unit (or those matching the ``kernels`` glob) for the GPU
    of ``device`` (default: the current CUDA device): from memory, the cache
    layers, the remote cache, or a build on a miss. Call it before capturing
    CUDA graphs: an op never loads or builds during a capture. Returns
    {unit: where it came from} ("exact CUBIN", "PTX JIT", "built", ...).
    ``offline`` True: never build (KILN_OFFLINE). Raises KilnDriverError
    without a usable GPU, KilnNotFound when nothing can be loaded offline,
    KilnInvalidArgument (naming it) for a ``device`` int outside [0, 2**31-1]
    or a bool, a ``kernels`` that is not a str or holds a NUL."""
    if device is not None and not isinstance(device, (str, torch.device)):
        device = int_arg("kiln.torch.init: device", device)
    kern = text_arg("kiln.torch.init: kernels", kernels) if kernels is not None else None
    if device is None:
        d = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    else:
        d = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    dev = _runtime.ordinal(d)
    opts = None
    if kernels is not None or offline is not None:
        opts = _lib.kiln_loader_options()
        _check_status(lib.kiln_loader_options_init(byref(opts), _lib.STRUCT_VERSIONS["kiln_loader_options"]))
        if kern is not None:
            opts.kernels = kern
        if offline is not None:
            opts.offline = 1 if offline else 0
    h = _runtime.loader(dev, opts)
    if kernels is None:
        for unit in _runtime.UNITS:
            _runtime.resolve(dev, unit)
    else:
        _check_status(lib.kiln_loader_warmup(h, None))
    loaded: dict[str, str] = {}
    for unit in _runtime.UNITS:
        info = _lib.kiln_unit_load()
        if lib.kiln_loader_unit_load(byref(info), h, unit.encode()) == 0:
            loaded[unit] = text(lib.kiln_load_source_str(info.source))
            _runtime.mark_resolved(dev, [unit])
    return loaded


def check(device: torch.device | str | int | None = None) -> None:
    """Raises KilnInvalidArgument with the first data error since the last
    check (e.g. "kiln_embedding_fwd: token id 32001 at position 17 is outside
    the vocabulary [0, 32000)"); synchronizes the current stream of device."""
    check_data(device)


def info() -> dict[str, object]:
    """Which path the ops take: {"fast": True when the C kernels of
    libkiln_torch are registered (torch's stable C shim found, KILN_TORCH_FAST
    not 0), "reason": why (or why not), "torch": its version, "c_ops": the
    kiln:: ops with a C kernel, "python_ops": those on their Python impl}
    (docs/python.md, "The fast path")."""
    from kiln.torch import _fast

    return _fast.info()


def warmup(*args: object, **kwargs: object) -> object:
    """The coordinated one-rank build over torch.distributed: every rank calls
    it; returns a kiln.torch.dist.WarmupReport (kiln.torch.dist.warmup has the
    signature and errors; docs/python.md)."""
    from kiln.torch.dist import warmup as _warmup

    return _warmup(*args, **kwargs)


__all__ = [
    "init",
    "check",
    "info",
    "warmup",
    "bias_dropout_add",
    "bias_gelu",
    "bias_swiglu",
    "cross_entropy",
    "embedding",
    "layer_norm",
    "rms_norm",
    "rope",
    "scaled_masked_softmax",
    "scaled_softmax",
    "scaled_upper_triang_masked_softmax",
]
