"""The fast path: kiln's ops as C kernels in libkiln_torch, registered with
torch's dispatcher through torch's stable C shim (torch/ in the repository;
docs/python.md, "The fast path").

libkiln_torch finds the shim with dlsym in the libtorch ``import torch``
loaded: no torch headers at build time, no link against libtorch, one
library for every torch that has the symbols. Where it is missing (an older
torch, a package without the library) or ``KILN_TORCH_FAST=0``, every op
keeps its Python impl (ops.py), with the same behaviour and messages; info()
says which path is active and why.

An error in a C kernel reaches Python as the RuntimeError torch makes of its
check function's exception; kiln_error() turns it into the KilnError
subclass of kiln's status, with kiln's message, from the thread-local record
the kernel left (kiln_torch_take_error).
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_void_p

import torch

from kiln import _lib
from kiln._paths import library_path
from kiln.errors import KilnError, error_for

_lib_torch: ctypes.CDLL | None = None
_reason = ""
_ops: frozenset[str] = frozenset()
_enabled = True  # tests switch paths in one process (set_enabled)

# Ops that have no C kernel in libkiln_torch, and why (info()'s "why_python").
_NO_KERNEL = {
    "philox_seed_offset": (
        "draws dropout's (seed, offset) from torch's generator: torch's stable C shim has no call "
        "that reads or advances a generator's Philox state (torch 2.13 to 2.15 give only "
        "torch_new_generator_handle, torch_delete_generator and torch_generator_get_device), so "
        "the draw stays in Python; bias_dropout_add's kernels themselves are C"
    ),
}


def _find() -> str | None:
    """libkiln_torch: KILN_TORCH_LIBRARY, else beside the libkiln in use."""
    path = os.environ.get("KILN_TORCH_LIBRARY")
    if path:
        return path
    here = os.path.dirname(library_path())
    cand = os.path.join(here, "libkiln_torch.so")
    return cand if os.path.exists(cand) else None


def _load() -> None:
    global _lib_torch, _reason, _ops
    if os.environ.get("KILN_TORCH_FAST", "1") == "0":
        _reason = "KILN_TORCH_FAST=0"
        return
    path = _find()
    if path is None:
        _reason = "no libkiln_torch.so beside libkiln (KILN_TORCH_LIBRARY unset)"
        return
    try:
        lt = ctypes.CDLL(path)
    except OSError as e:
        _reason = f"libkiln_torch could not be loaded: {e}"
        return
    lt.kiln_torch_open.restype = c_int
    lt.kiln_torch_open.argtypes = [c_char_p, c_char_p, c_char_p, c_size_t]
    lt.kiln_torch_ops.restype = c_char_p
    lt.kiln_torch_ops.argtypes = []
    lt.kiln_torch_register.restype = c_int
    lt.kiln_torch_register.argtypes = [POINTER(c_void_p), c_char_p, c_char_p]
    lt.kiln_torch_unregister.restype = None
    lt.kiln_torch_unregister.argtypes = [c_void_p]
    lt.kiln_torch_loader.restype = c_int
    lt.kiln_torch_loader.argtypes = [POINTER(c_void_p), c_int, POINTER(_lib.kiln_loader_options)]
    lt.kiln_torch_loader_peek.restype = c_void_p
    lt.kiln_torch_loader_peek.argtypes = [c_int]
    lt.kiln_torch_close_loaders.restype = None
    lt.kiln_torch_close_loaders.argtypes = []
    lt.kiln_torch_op_missing.restype = c_int
    lt.kiln_torch_op_missing.argtypes = [c_char_p, c_char_p, c_size_t]
    lt.kiln_torch_take_error.restype = c_int
    lt.kiln_torch_take_error.argtypes = [POINTER(c_int), c_char_p, c_size_t]
    tlib = os.path.join(os.path.dirname(torch.__file__), "lib")
    cuda = os.path.join(tlib, "libtorch_cuda.so")
    missing = ctypes.create_string_buffer(256)
    rc = lt.kiln_torch_open(
        os.path.join(tlib, "libtorch_cpu.so").encode(),
        cuda.encode() if os.path.exists(cuda) else None,
        missing,
        len(missing),
    )
    if rc != 0:
        _reason = f"torch {torch.__version__} lacks the stable C shim's {missing.value.decode()}"
        return
    _lib_torch = lt
    _ops = frozenset(n for n in (lt.kiln_torch_ops() or b"").decode().split(",") if n)
    _reason = f"torch {torch.__version__}: {len(_ops)} ops have C kernels"


_load()


def available() -> bool:
    """libkiln_torch and torch's shim were found (KILN_TORCH_FAST is not 0)."""
    return _lib_torch is not None


def active() -> bool:
    return _lib_torch is not None and _enabled


def ops() -> frozenset[str]:
    """The kiln:: ops with a C kernel on this torch (an op taking a Tensor?
    needs torch >= 2.13)."""
    return _ops if active() else frozenset()


def set_enabled(on: bool) -> None:
    """Tests: the fast path on or off (off: every op on its Python impl, as
    with KILN_TORCH_FAST=0); the ops are registered again."""
    global _enabled
    _enabled = on
    from kiln.torch import ops as _o

    _o._register()


def register(key: str, names: list[str]) -> c_void_p | None:
    """Registers the C kernels of names for dispatch key; the handle that
    unregister() takes."""
    if not names:
        return None
    assert _lib_torch is not None
    h = c_void_p()
    st = _lib_torch.kiln_torch_register(byref(h), key.encode(), ",".join(names).encode())
    if st != 0:
        raise error_for(st, f"kiln.torch: registering the C kernels for {key} failed", _lib.status_name(st))
    return h


def unregister(h: c_void_p | None) -> None:
    if h is not None and _lib_torch is not None:
        _lib_torch.kiln_torch_unregister(h)


def loader(dev: int, options: _lib.kiln_loader_options | None) -> c_void_p:
    """The loader of device dev the C kernels launch with (one per device for
    the process): opened here on first use, with options when given."""
    assert _lib_torch is not None
    h = c_void_p()
    st = _lib_torch.kiln_torch_loader(byref(h), dev, byref(options) if options is not None else None)
    if st != 0:
        raise error_for(st, _lib.last_error(), _lib.status_name(st))
    return h


def loader_open(dev: int) -> bool:
    """A loader of device dev is open in libkiln_torch's table (an op's C
    kernel may have opened it before any Python code asked)."""
    return _lib_torch is not None and bool(_lib_torch.kiln_torch_loader_peek(dev))


def close_loaders() -> None:
    if _lib_torch is not None:
        _lib_torch.kiln_torch_close_loaders()


def kiln_error(e: RuntimeError) -> BaseException:
    """The KilnError a C kernel's RuntimeError stands for (its status and
    kiln's message), or e itself when no kernel error is pending."""
    if _lib_torch is None:
        return e
    st = c_int()
    msg = ctypes.create_string_buffer(1024)
    if not _lib_torch.kiln_torch_take_error(byref(st), msg, len(msg)):
        return e
    text = msg.value.decode(errors="replace")
    if text not in str(e):  # a record left by a call nobody mapped: not this error
        return e
    return error_for(st.value, text, _lib.status_name(st.value))


def _why_python(name: str, reason: str) -> str:
    """Why op name runs its Python impl."""
    if not active():
        return reason
    if name in _NO_KERNEL:
        return _NO_KERNEL[name]
    assert _lib_torch is not None
    missing = ctypes.create_string_buffer(256)
    rc = _lib_torch.kiln_torch_op_missing(name.encode(), missing, len(missing))
    if rc < 0:
        return "no C kernel in libkiln_torch"
    return f"torch {torch.__version__} lacks {missing.value.decode()}, which its arguments need"


def info() -> dict[str, object]:
    """Which path kiln.torch's ops take: {"fast": bool, "reason": str,
    "torch": version, "c_ops": [...], "python_ops": [...], "why_python":
    {op: why it runs its Python impl}}."""
    from kiln.torch import ops as _o

    names = sorted(op.name for op in _o._OPS)
    c = sorted(n for n in names if n in ops())
    reason = _reason if _enabled or not available() else "switched off (kiln.torch._fast.set_enabled)"
    py = [n for n in names if n not in c]
    return {
        "fast": active() and bool(c),
        "reason": reason,
        "torch": torch.__version__,
        "c_ops": c,
        "python_ops": py,
        "why_python": {n: _why_python(n, reason) for n in py},
    }


__all__ = ["KilnError", "active", "available", "info", "kiln_error", "ops"]
