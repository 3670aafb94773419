"""The ctypes binding of libkiln's public C API (include/kiln/*.h).

Every function the package calls is declared once in ``FUNCTIONS`` with its
return and argument types, and every struct it reads or fills is a
``ctypes.Structure`` named as the C typedef. ``python/tests/test_binding.py``
checks both against the headers (prototypes parsed from the text, struct
layouts measured by the C compiler), so the two cannot drift.

libkiln is found, in this order: ``KILN_LIBRARY`` (a path, for a build
tree), then the copy inside this package (``kiln/lib/libkiln.so*``, what the
wheel ships). Nothing here needs LD_LIBRARY_PATH.
"""

from __future__ import annotations

import ctypes
import math
import operator
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int64,
    c_longlong,
    c_size_t,
    c_uint,
    c_uint64,
    c_void_p,
)

from kiln._paths import library_path, set_python_prefix
from kiln.errors import KilnInvalidArgument

KILN_ENV = -1
KILN_LOADER_CURRENT_CONTEXT = -1
KILN_OPS_SYNC_CHECK = 1

# ---- structs (names and fields as in include/kiln) -----------------------------


class kiln_target(Structure):
    _fields_ = [("arch", c_int), ("arch_specific", c_int), ("kind", c_int)]


class kiln_source_file(Structure):
    _fields_ = [("path", c_char_p), ("data", c_void_p), ("size", c_size_t)]


class kiln_entry_info(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("direction", c_char_p),
        ("dtype", c_char_p),
        ("variant", c_char_p),
    ]


class kiln_unit_info(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("summary", c_char_p),
        ("min_arch", c_int),
        ("main_file", POINTER(kiln_source_file)),
        ("n_files", c_size_t),
        ("files", c_void_p),
        ("n_entries", c_size_t),
        ("entries", POINTER(kiln_entry_info)),
    ]


class kiln_remote_options(Structure):
    _fields_ = [
        ("version", c_int),
        ("url", c_char_p),
        ("upload", c_int),
        ("token_file", c_char_p),
        ("hmac_key_file", c_char_p),
        ("ca_file", c_char_p),
        ("connect_timeout_s", c_double),
        ("timeout_s", c_double),
        ("retries", c_int),
        ("parallel", c_int),
    ]


class kiln_cache_options(Structure):
    _fields_ = [
        ("version", c_int),
        ("dir", c_char_p),
        ("ro_path", c_char_p),
        ("create", c_int),
        ("remote", POINTER(kiln_remote_options)),
        ("read_only", c_int),  # version 2
    ]


class kiln_record(Structure):
    _fields_ = [
        ("key", c_char * 65),
        ("unit", c_char * 64),
        ("target", c_char * 16),
        ("kind", c_char * 8),
        ("digest", c_char * 65),
        ("size", c_uint64),
        ("toolchain", c_char * 32),
        ("options", c_char * 256),
        ("build_ms", c_double),
        ("registers", c_int),
        ("spill_stores", c_int),
        ("spill_loads", c_int),
        ("shared_bytes", c_int),
        ("stack_bytes", c_int),
        ("log_digest", c_char * 65),
        ("created", c_int64),
        ("last_used", c_int64),
        ("layer", c_int),
    ]


class kiln_cache_stats(Structure):
    _fields_ = [
        (n, c_uint64)
        for n in (
            "records",
            "blobs",
            "blob_bytes",
            "failures",
            "quarantined",
            "layers",
            "layer_records",
        )
    ]


class kiln_cache_verify_issue(Structure):
    _fields_ = [("path", c_char * 512), ("what", c_char * 128)]


class kiln_cache_verify_report(Structure):
    _fields_ = [
        ("checked", c_uint64),
        ("bad", c_uint64),
        ("n_issues", c_size_t),
        ("issues", POINTER(kiln_cache_verify_issue)),
    ]


class kiln_cache_gc_report(Structure):
    _fields_ = [
        (n, c_uint64)
        for n in (
            "removed_records",
            "removed_blobs",
            "freed_bytes",
            "remaining_bytes",
            "pinned_skipped",
        )
    ]


class kiln_build_item(Structure):
    _fields_ = [
        ("unit", POINTER(kiln_unit_info)),
        ("target", kiln_target),
        ("target_name", c_char * 16),
        ("outcome", c_int),
        ("status", c_int),
        ("error", c_char * 512),
        ("log_tail", c_char_p),
        ("record", kiln_record),
    ]


class kiln_build_summary(Structure):
    _fields_ = [
        ("n_items", c_size_t),
        ("items", POINTER(kiln_build_item)),
        ("targets", c_size_t),
        ("hits", c_size_t),
        ("built", c_size_t),
        ("failed", c_size_t),
        ("shared", c_size_t),
        ("fetched", c_size_t),
        ("uploaded", c_size_t),
        ("upload_status", c_int),
        ("upload_error", c_char * 512),
        ("taken_over", c_size_t),
        ("bytes", c_uint64),
        ("wall_ms", c_double),
        ("compile_cpu_s", c_double),
    ]


kiln_build_progress_fn = CFUNCTYPE(
    None, POINTER(kiln_build_item), c_size_t, c_size_t, c_void_p
)


class kiln_build_options(Structure):
    _fields_ = [
        ("version", c_int),
        ("targets", POINTER(kiln_target)),
        ("n_targets", c_size_t),
        ("kernels_glob", c_char_p),
        ("jobs", c_int),
        ("rebuild", c_int),
        ("progress", kiln_build_progress_fn),
        ("user", c_void_p),
        ("lease_stale_s", c_double),
        ("wait_timeout_s", c_double),
        ("units", POINTER(c_char_p)),
        ("n_units", c_size_t),
        ("no_remote", c_int),
        ("offline", c_int),
    ]


class kiln_device_info(Structure):
    _fields_ = [
        ("ordinal", c_int),
        ("name", c_char * 128),
        ("cc_major", c_int),
        ("cc_minor", c_int),
        ("sm_count", c_int),
        ("total_mem", c_uint64),
        ("driver_version", c_int),
        ("ptx_isa", c_int),
    ]


class kiln_loader_options(Structure):
    _fields_ = [
        ("version", c_int),
        ("device", c_int),
        ("cache", POINTER(kiln_cache_options)),
        ("offline", c_int),
        ("lease_stale_s", c_double),
        ("build_timeout_s", c_double),
        ("jobs", c_int),
        ("kernels", c_char_p),
        ("heartbeat_s", c_double),
        ("peer_timeout_s", c_double),  # version 2
    ]


class kiln_unit_load(Structure):
    _fields_ = [
        ("unit", c_char * 64),
        ("source", c_int),
        ("target", c_char * 16),
        ("digest", c_char * 65),
        ("layer", c_int),
        ("ms", c_double),
    ]


# kiln_comm's function pointers (include/kiln/comm.h)
comm_broadcast_fn = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int, c_double)
comm_max_reduce_fn = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_double)
comm_abort_fn = CFUNCTYPE(None, c_void_p, c_char_p)
comm_destroy_fn = CFUNCTYPE(None, c_void_p)


class kiln_comm(Structure):
    _fields_ = [
        ("version", c_int),
        ("rank", c_int),
        ("size", c_int),
        ("self", c_void_p),
        ("broadcast", comm_broadcast_fn),
        ("max_reduce", comm_max_reduce_fn),
        ("abort", comm_abort_fn),
        ("destroy", comm_destroy_fn),
        ("name", c_char * 16),
    ]


class kiln_coord_report(Structure):
    _fields_ = [
        ("rank", c_int),
        ("size", c_int),
        ("slots", c_size_t),
        ("missing", c_size_t),
        ("compiled", c_size_t),
        ("received", c_size_t),
        ("collectives", c_size_t),
        ("longest_wait_ms", c_double),
        ("longest_what", c_char * 48),
        ("bytes_received", c_uint64),
        ("compile_cpu_s", c_double),
        ("total_ms", c_double),
        ("fingerprint", c_char * 65),
    ]


# kiln_coord_options' progress callback: (done, total, unit, target, elapsed_s, user)
kiln_coord_progress_fn = CFUNCTYPE(None, c_uint, c_uint, c_char_p, c_char_p, c_double, c_void_p)


class kiln_coord_options(Structure):
    _fields_ = [
        ("version", c_int),
        ("targets", POINTER(kiln_target)),
        ("n_targets", c_size_t),
        ("kernels", c_char_p),
        ("heartbeat_s", c_double),
        ("timeout_s", c_double),
        ("jobs", c_int),
        ("offline", c_int),
        ("progress", kiln_coord_progress_fn),
        ("user", c_void_p),
        ("peer_timeout_s", c_double),  # version 2
    ]


KILN_COORD_OPTIONS_VERSION = 2


class kiln_library_info(Structure):
    _fields_ = [("path", c_char * 512), ("found_by", c_char * 600), ("version", c_char * 32)]


KILN_COMM_VERSION = 1
STRUCT_VERSIONS = {  # the *_OPTIONS_VERSION each options struct is filled for
    "kiln_cache_options": 2,
    "kiln_remote_options": 1,
    "kiln_build_options": 1,
    "kiln_loader_options": 2,
}

# ---- functions: name -> (restype, argtypes) ------------------------------------
# Opaque handles (kiln_cache *, kiln_loader *, CUstream) and device pointers
# are c_void_p; the binding test accepts c_void_p for any pointer parameter.

_st = c_int  # kiln_status
_p = c_void_p
_ll = c_longlong
_dt = c_int  # kiln_dtype

FUNCTIONS: dict[str, tuple[object, list[object]]] = {
    "kiln_version": (c_char_p, []),
    "kiln_status_str": (c_char_p, [c_int]),
    "kiln_last_error": (c_char_p, []),
    "kiln_log_set_level": (None, [c_int]),
    "kiln_log_get_level": (c_int, []),
    # targets and units
    "kiln_targets_parse_list": (_st, [POINTER(POINTER(kiln_target)), POINTER(c_size_t), c_char_p]),
    "kiln_target_name": (c_char_p, [POINTER(kiln_target), c_char_p]),
    "kiln_unit_count": (c_size_t, []),
    "kiln_unit_at": (POINTER(kiln_unit_info), [c_size_t]),
    "kiln_toolchain_id": (_st, [c_char_p]),
    "kiln_nvrtc_version": (_st, [POINTER(c_int), POINTER(c_int)]),
    # cache
    "kiln_cache_options_init": (_st, [POINTER(kiln_cache_options), c_int]),
    "kiln_remote_options_init": (_st, [POINTER(kiln_remote_options), c_int]),
    "kiln_cache_open": (_st, [POINTER(_p), POINTER(kiln_cache_options)]),
    "kiln_cache_close": (None, [_p]),
    "kiln_cache_dir": (c_char_p, [_p]),
    "kiln_cache_list": (_st, [POINTER(POINTER(kiln_record)), POINTER(c_size_t), _p]),
    "kiln_cache_stats_get": (_st, [POINTER(kiln_cache_stats), _p]),
    "kiln_cache_verify": (_st, [POINTER(kiln_cache_verify_report), _p]),
    "kiln_cache_verify_report_free": (None, [POINTER(kiln_cache_verify_report)]),
    "kiln_cache_gc": (_st, [POINTER(kiln_cache_gc_report), _p, c_uint64]),
    # build
    "kiln_build_options_init": (_st, [POINTER(kiln_build_options), c_int]),
    "kiln_build": (_st, [POINTER(POINTER(kiln_build_summary)), _p, POINTER(kiln_build_options)]),
    "kiln_build_summary_free": (None, [POINTER(kiln_build_summary)]),
    # loader
    "kiln_device_count": (_st, [POINTER(c_int)]),
    "kiln_loader_options_init": (_st, [POINTER(kiln_loader_options), c_int]),
    "kiln_loader_open": (_st, [POINTER(_p), POINTER(kiln_loader_options)]),
    "kiln_loader_close": (None, [_p]),
    "kiln_loader_device": (_st, [POINTER(kiln_device_info), _p]),
    "kiln_loader_resolve": (_st, [_p, c_char_p]),
    "kiln_loader_warmup": (_st, [_p, POINTER(kiln_comm)]),
    "kiln_loader_coord_report": (_st, [POINTER(kiln_coord_report), _p]),
    "kiln_loader_unit_load": (_st, [POINTER(kiln_unit_load), _p, c_char_p]),
    "kiln_loader_stream_capturing": (_st, [POINTER(c_int), _p, _p]),
    "kiln_load_source_str": (c_char_p, [c_int]),
    "kiln_library_get_info": (_st, [POINTER(kiln_library_info), c_int]),
    # coordination
    "kiln_coord_fail": (_st, [POINTER(kiln_comm), c_double]),
    "kiln_coord_options_init": (_st, [POINTER(kiln_coord_options), c_int]),
    "kiln_coord_fill": (
        _st,
        [POINTER(kiln_coord_report), _p, POINTER(kiln_coord_options), POINTER(kiln_comm)],
    ),
    "kiln_coord_any": (_st, [POINTER(c_int), POINTER(kiln_comm), c_double]),
    # variadic (fmt, ...): call it as kiln_comm_error(st, b"%s", message)
    "kiln_comm_error": (_st, [c_int, c_char_p]),
    # ops
    "kiln_ops_check": (_st, [_p, _p]),
    "kiln_scaled_softmax_fwd": (_st, [_p, _dt, _p, _p, _ll, c_int, c_float, _p]),
    "kiln_scaled_softmax_bwd": (_st, [_p, _dt, _p, _p, _p, _ll, c_int, c_float, _p]),
    "kiln_scaled_masked_softmax_fwd": (
        _st,
        [_p, _dt, _p, _p, _p, c_int, c_int, c_int, c_int, c_int, c_float, _p],
    ),
    "kiln_scaled_masked_softmax_bwd": (
        _st,
        [_p, _dt, _p, _p, _p, c_int, c_int, c_int, c_int, c_float, _p],
    ),
    "kiln_scaled_upper_triang_masked_softmax_fwd": (
        _st,
        [_p, _dt, _p, _p, _ll, c_int, c_int, c_float, _p],
    ),
    "kiln_scaled_upper_triang_masked_softmax_bwd": (
        _st,
        [_p, _dt, _p, _p, _p, _ll, c_int, c_int, c_float, _p],
    ),
    "kiln_layer_norm_fwd": (_st, [_p, _dt, _dt, _p, _p, _p, _p, _p, _p, _ll, c_int, c_float, _p]),
    "kiln_layer_norm_bwd_workspace_size": (c_size_t, [_ll, c_int]),
    "kiln_layer_norm_bwd": (
        _st,
        [_p, _dt, _dt, _p, _p, _p, _p, _p, _p, _p, _p, _ll, c_int, _p, c_size_t, _p],
    ),
    "kiln_rms_norm_fwd": (_st, [_p, _dt, _dt, _p, _p, _p, _p, _ll, c_int, c_float, _p]),
    "kiln_rms_norm_bwd_workspace_size": (c_size_t, [_ll, c_int]),
    "kiln_rms_norm_bwd": (
        _st,
        [_p, _dt, _dt, _p, _p, _p, _p, _p, _p, _ll, c_int, _p, c_size_t, _p],
    ),
    "kiln_embedding_fwd": (_st, [_p, _dt, _p, _p, _p, _ll, c_int, _ll, _ll, _ll, c_uint, _p]),
    "kiln_embedding_bwd_workspace_size": (c_size_t, [_ll, _ll, _ll, c_int]),
    "kiln_embedding_bwd": (
        _st,
        [_p, _dt, _p, _p, _p, _ll, c_int, _ll, _ll, c_int, _p, c_size_t, _p],
    ),
    "kiln_bias_gelu_fwd": (_st, [_p, _dt, _p, _p, _p, _ll, c_int, _p]),
    "kiln_bias_gelu_bwd": (_st, [_p, _dt, _p, _p, _p, _p, _ll, c_int, _p]),
    "kiln_bias_swiglu_fwd": (_st, [_p, _dt, _p, _p, _p, _ll, c_int, _p]),
    "kiln_bias_swiglu_bwd": (_st, [_p, _dt, _p, _p, _p, _p, _ll, c_int, _p]),
    "kiln_bias_dropout_add_fwd": (
        _st,
        [_p, _dt, _p, _p, _p, _p, _ll, c_int, c_float, c_uint64, c_uint64, c_int, _p],
    ),
    "kiln_bias_dropout_add_bwd": (
        _st,
        [_p, _dt, _p, _p, _ll, c_int, c_float, c_uint64, c_uint64, c_int, _p],
    ),
    "kiln_rope_fwd": (
        _st,
        [_p, _dt, c_int, c_int, _p, _p, _p, c_int, c_int, c_int, c_int, c_int, _p],
    ),
    "kiln_rope_bwd": (
        _st,
        [_p, _dt, c_int, c_int, _p, _p, _p, c_int, c_int, c_int, c_int, c_int, _p],
    ),
    "kiln_cross_entropy_fwd": (_st, [_p, _dt, _p, _p, _p, _p, _ll, c_int, _ll, c_uint, _p]),
    "kiln_cross_entropy_stats": (
        _st,
        [_p, _dt, _p, _p, _p, _p, _p, _ll, c_int, _ll, _ll, _ll, c_uint, _p],
    ),
    "kiln_cross_entropy_rescale": (_st, [_p, _p, _p, _p, _ll, _p]),
    "kiln_cross_entropy_loss": (_st, [_p, _p, _p, _p, _p, _p, _p, _ll, _ll, _p]),
    "kiln_cross_entropy_bwd": (_st, [_p, _dt, _p, _p, _p, _p, _ll, c_int, _ll, _ll, _p]),
}


def _load() -> ctypes.CDLL:
    set_python_prefix()
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(f"kiln: cannot load {path}: {e}") from e
    for name, (restype, argtypes) in FUNCTIONS.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _load()
_libc = ctypes.CDLL(None)
_libc.free.restype = None
_libc.free.argtypes = [c_void_p]


def free(p: object) -> None:
    """free() of memory libkiln handed out (lists, target arrays)."""
    _libc.free(ctypes.cast(p, c_void_p))


def text(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b else ""


def last_error() -> str:
    return text(lib.kiln_last_error())


def status_name(st: int) -> str:
    return text(lib.kiln_status_str(st))


# ---- arguments: what crosses into C is checked here first ----------------------------
# ctypes wraps an int that does not fit its C type (2**64 becomes 0 for a
# uint64_t) and cuts a char * at its first NUL, so a bad argument would reach
# libkiln as another, valid one. Every int, number, path and string the
# package hands to C goes through one of these, which raise
# KilnInvalidArgument naming the argument instead.

INT_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1


def invalid(message: str) -> KilnInvalidArgument:
    """A KilnInvalidArgument (KILN_EINVAL) raised by the package itself."""
    return KilnInvalidArgument(message, status="KILN_EINVAL", code=-1)


def int_arg(what: str, v: object, lo: int = 0, hi: int = INT_MAX) -> int:
    """v as an int in [lo, hi] (the range of the C parameter it becomes).
    Anything with __index__ counts (numpy integers too); bool, float and str
    do not."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise invalid(f"{what} must be an integer, not {type(v).__name__} {v!r}")
    n = operator.index(v)
    if not lo <= n <= hi:
        raise invalid(f"{what} {n} is outside [{lo}, {hi}]")
    return n


def positive_arg(what: str, v: object) -> float:
    """v as a finite float > 0 (a timeout, a period): int or float, not bool,
    not inf or nan."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(f"{what} {v!r} is not a number > 0")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    if not (math.isfinite(f) and f > 0):
        raise invalid(f"{what} {v!r} is not a finite number > 0")
    return f


def path_arg(what: str, v: object) -> bytes:
    """A path for C: str, bytes or os.PathLike, as os.fsencode gives it (a
    non-UTF-8 name stays as it is on disk). Anything else, an empty path and
    a path with a NUL byte (C would cut it there) are refused."""
    if not isinstance(v, (str, bytes, os.PathLike)):
        raise invalid(f"{what} must be a path (str, bytes or os.PathLike), not {type(v).__name__} {v!r}")
    try:
        b = os.fsencode(v)
    except (TypeError, UnicodeError) as e:  # a PathLike giving neither str nor bytes
        raise invalid(f"{what} {v!r} is not a path: {e}") from None
    if not b:
        raise invalid(f"{what} is empty, not a path")
    if b"\0" in b:
        raise invalid(f"{what} {v!r} contains a NUL byte")
    return b


def text_arg(what: str, v: object) -> bytes:
    """A str for C (a glob, an arch list, a URL), UTF-8: anything else and a
    NUL byte are refused."""
    if not isinstance(v, str):
        raise invalid(f"{what} must be a str, not {type(v).__name__} {v!r}")
    if "\0" in v:
        raise invalid(f"{what} {v!r} contains a NUL byte")
    try:
        return v.encode()
    except UnicodeError as e:  # a lone surrogate
        raise invalid(f"{what} {v!r} is not valid text: {e}") from None
