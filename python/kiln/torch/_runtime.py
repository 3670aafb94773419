"""One kiln loader per CUDA device, the unit resolve guard, streams, dtypes.

The loader of device N is opened on first use (or at kiln.torch.init()) on
that device's primary context, the one torch uses. A unit is resolved (loaded
from the caches, or built) at init() or the first op that needs it; never
while a CUDA graph is being captured.

Test mode (``enable_cpu_tensors()``, for the CI tests only): ops accept CPU
tensors and run them on the fake driver (tests/fakecuda), whose device
memory is host memory. Production code keeps the CUDA-only device check.
"""

from __future__ import annotations

import threading
from ctypes import byref, c_int, c_void_p

import torch

from kiln import _lib
from kiln._lib import lib
from kiln.api import check
from kiln.errors import KilnError, KilnInvalidArgument, KilnUnsupported

DTYPES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

# op family -> unit name (`kiln list`)
UNITS = (
    "scaled_softmax",
    "scaled_masked_softmax",
    "scaled_upper_triang_masked_softmax",
    "layer_norm",
    "rms_norm",
    "embedding",
    "bias_gelu",
    "bias_swiglu",
    "bias_dropout_add",
    "rope",
    "cross_entropy",
)

_lock = threading.Lock()
_loaders: dict[int, c_void_p] = {}
_resolved: set[tuple[int, str]] = set()
_cpu_tensors = False


def enable_cpu_tensors(on: bool = True) -> None:
    """Test mode: ops take CPU tensors and launch on the fake driver (device 0),
    with no stream. Only for kiln's own tests (python/tests); never in training."""
    global _cpu_tensors
    if _cpu_tensors == on:
        return
    _cpu_tensors = on
    from kiln.torch import ops

    ops._register()  # the C kernels take CPU tensors only in this mode


def cpu_tensors_enabled() -> bool:
    return _cpu_tensors


def ordinal(device: torch.device) -> int:
    """The CUDA ordinal ops on this device launch on; KilnInvalidArgument for a
    device kiln cannot run on."""
    if device.type == "cuda":
        return device.index if device.index is not None else torch.cuda.current_device()
    if device.type == "cpu" and _cpu_tensors:
        return 0
    raise KilnInvalidArgument(
        f"kiln.torch: tensors must be on a CUDA device, not {device.type}",
        status="KILN_EINVAL",
        code=-1,
    )


def loader(dev: int, options: _lib.kiln_loader_options | None = None) -> c_void_p:
    """The loader of CUDA device dev, opened on first use (with options, when
    given: kiln.torch.init passes its own)."""
    h = _loaders.get(dev)
    if h is not None:
        return h
    from kiln.torch import _fast

    if _fast.available():  # one loader per device, shared with the C kernels
        with _lock:
            opts = options
            if opts is not None:
                opts.device = dev
            h = _loaders[dev] = _fast.loader(dev, opts)
            return h
    with _lock:
        h = _loaders.get(dev)
        if h is not None:
            return h
        opts = options or _lib.kiln_loader_options()
        if options is None:
            check(lib.kiln_loader_options_init(byref(opts), _lib.STRUCT_VERSIONS["kiln_loader_options"]))
        opts.device = dev
        h = c_void_p()
        check(lib.kiln_loader_open(byref(h), byref(opts)))
        _loaders[dev] = h
        return h


def is_open(dev: int) -> bool:
    """The loader of device dev is open (by Python, or by a C kernel of the
    fast path)."""
    if dev in _loaders:
        return True
    from kiln.torch import _fast

    return _fast.loader_open(dev)


def capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _refused_while_capturing(unit: str) -> KilnUnsupported:
    # The C kernels of the fast path raise the same text (torch/call.c,
    # kt_capture_refusal): keep the two in step.
    return KilnUnsupported(
        f"kiln.torch: unit '{unit}' is not loaded yet and a CUDA graph is being captured "
        "(loading or building kernels cannot be captured); call kiln.torch.init() before "
        "capturing",
        status="KILN_EUNSUPPORTED",
        code=-12,
    )


def _driver_capturing(h: c_void_p, dev: int) -> bool:
    """The driver says the stream ops on dev launch on is capturing (libkiln's
    kiln_loader_stream_capturing; the fake driver's KILN_FAKE_CUDA_CAPTURE)."""
    s = None
    if torch.cuda.is_available() and not _cpu_tensors:
        s = torch.cuda.current_stream(dev).cuda_stream
    on = c_int(0)
    return lib.kiln_loader_stream_capturing(byref(on), h, s) == 0 and bool(on.value)


def resolve(dev: int, unit: str) -> c_void_p:
    """The loader of dev with unit loaded. Resolving inside a CUDA graph capture
    is refused: units must be loaded by kiln.torch.init() before capturing.
    torch says so before anything is tried; a capture torch does not see (one
    begun outside torch) is the driver's refusal of the load, said the same way."""
    h = loader(dev)
    if (dev, unit) in _resolved:
        return h
    if capturing():
        raise _refused_while_capturing(unit)
    try:
        check(lib.kiln_loader_resolve(h, unit.encode()))
    except KilnError as e:
        if _driver_capturing(h, dev):
            raise _refused_while_capturing(unit) from e
        raise
    _resolved.add((dev, unit))
    return h


def mark_resolved(dev: int, units: list[str] | tuple[str, ...]) -> None:
    for u in units:
        _resolved.add((dev, u))


def stream(t: torch.Tensor) -> int | None:
    """The raw handle of the current stream of t's device (None: the fake
    driver's test mode, which has no streams)."""
    if t.device.type == "cuda":
        return torch.cuda.current_stream(t.device).cuda_stream
    return None


def dtype_code(t: torch.Tensor, what: str) -> int:
    code = DTYPES.get(t.dtype)
    if code is None:
        raise KilnInvalidArgument(
            f"kiln.torch: {what} is {t.dtype}; kiln ops take float32, float16 or bfloat16",
            status="KILN_EINVAL",
            code=-1,
        )
    return code


def ptr(t: torch.Tensor | None) -> int | None:
    return t.data_ptr() if t is not None else None


def close_all() -> None:
    """Closes every loader (tests; at exit the process just ends)."""
    from kiln.torch import _fast

    with _lock:
        if _fast.available():
            _fast.close_loaders()
        else:
            for h in _loaders.values():
                lib.kiln_loader_close(h)
        _loaders.clear()
        _resolved.clear()

