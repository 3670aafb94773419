"""kiln without torch: build into a cache, look after caches, probe, doctor.

Every function raises a ``kiln.KilnError`` subclass (kiln/errors.py) with
kiln's own message when the C call fails.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from ctypes import POINTER, byref, c_size_t, c_void_p
from dataclasses import dataclass, field
from typing import Callable, Iterator, Union

from kiln import _lib
from kiln._lib import UINT64_MAX, int_arg, invalid, lib, path_arg, text, text_arg
from kiln._paths import executable_path
from kiln.errors import error_for

OUTCOMES = ("hit", "built", "failed", "shared", "fetched")


def check(st: int) -> None:
    """Raises the KilnError subclass of a failed kiln_status."""
    if st != 0:
        raise error_for(st, _lib.last_error(), _lib.status_name(st))


def version() -> str:
    """libkiln's version, e.g. "0.2.0"."""
    return text(lib.kiln_version())


@dataclass(frozen=True)
class Record:
    """One cache record (include/kiln/cache.h, kiln_record)."""

    key: str
    unit: str
    target: str
    kind: str
    digest: str
    size: int
    toolchain: str
    build_ms: float
    registers: int
    created: int
    last_used: int
    layer: int

    @staticmethod
    def from_c(r: _lib.kiln_record) -> "Record":
        return Record(
            key=text(r.key),
            unit=text(r.unit),
            target=text(r.target),
            kind=text(r.kind),
            digest=text(r.digest),
            size=int(r.size),
            toolchain=text(r.toolchain),
            build_ms=float(r.build_ms),
            registers=int(r.registers),
            created=int(r.created),
            last_used=int(r.last_used),
            layer=int(r.layer),
        )


@dataclass(frozen=True)
class BuildItem:
    """One (unit, target) of a build: ``outcome`` is one of OUTCOMES."""

    unit: str
    target: str
    outcome: str
    error: str
    log_tail: str
    record: Record | None


@dataclass
class BuildReport:
    """What kiln.build did (include/kiln/build.h, kiln_build_summary)."""

    items: list[BuildItem] = field(default_factory=list)
    targets: int = 0
    hits: int = 0
    built: int = 0
    failed: int = 0
    shared: int = 0
    fetched: int = 0
    uploaded: int = 0
    upload_error: str = ""
    taken_over: int = 0
    bytes: int = 0
    wall_ms: float = 0.0
    compile_cpu_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every target is in the cache."""
        return self.failed == 0


PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def _layers_arg(what: str, layers: object) -> bytes:
    """A list of paths as KILN_CACHE_PATH takes them, joined with ':' (so
    none may hold one)."""
    if isinstance(layers, (str, bytes, os.PathLike)) or not isinstance(layers, (list, tuple)):
        raise invalid(f"{what} must be a list of paths, not {type(layers).__name__} {layers!r}")
    paths = [path_arg(f"{what}[{i}]", x) for i, x in enumerate(layers)]
    for i, b in enumerate(paths):
        if b":" in b:
            raise invalid(f"{what}[{i}] {layers[i]!r} holds a ':', which separates layers")
    return b":".join(paths)


def _remote_options(remote: str | None, upload: bool | None) -> _lib.kiln_remote_options | None:
    if remote is None and upload is None:
        return None
    ro = _lib.kiln_remote_options()
    check(lib.kiln_remote_options_init(byref(ro), _lib.STRUCT_VERSIONS["kiln_remote_options"]))
    if remote is not None:
        ro.url = text_arg("kiln.Cache: remote", remote)
    if upload is not None:
        ro.upload = 1 if upload else 0
    return ro


class Cache:
    """A kiln cache: a primary directory and read-only layers.

    ``dir`` None: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
    (a default on a file system shared between hosts, such as an NFS home,
    moves to the node-local /var/tmp/kiln-<uid>; a ``dir`` there is refused
    with KilnUnsupported: docs/cache-format.md, "Shared file systems").
    ``layers`` None: KILN_CACHE_PATH. ``remote``: the remote cache's URL,
    ``http(s)://HOST/PATH``, ``s3://BUCKET[/PREFIX]`` (credentials from AWS_*
    or ~/.aws, server KILN_S3_ENDPOINT) or ``file:///DIR`` (docs/remote-cache.md);
    None: KILN_REMOTE_URL ("" for none); ``upload`` None: KILN_REMOTE_UPLOAD. ``read_only``: inspect the
    primary directory without creating, migrating or writing anything (a
    missing one raises LookupError, one with no index yet reads as empty, a
    corrupt index raises KilnCorrupt; writes such as ``verify()`` raise
    PermissionError).
    Usable as a context manager; ``close()`` releases it.

    Paths (``dir``, each of ``layers``) are str, bytes or os.PathLike,
    passed on as os.fsencode gives them; anything else, an empty path, a NUL
    byte, or a ':' in a layer raises KilnInvalidArgument naming the argument.
    """

    def __init__(
        self,
        dir: PathArg | None = None,
        layers: list[PathArg] | None = None,
        create: bool = True,
        remote: str | None = None,
        upload: bool | None = None,
        read_only: bool = False,
    ) -> None:
        self._h = c_void_p()
        opts = _lib.kiln_cache_options()
        check(lib.kiln_cache_options_init(byref(opts), _lib.STRUCT_VERSIONS["kiln_cache_options"]))
        if dir is not None:
            opts.dir = path_arg("kiln.Cache: dir", dir)
        if layers is not None:
            opts.ro_path = _layers_arg("kiln.Cache: layers", layers)
        opts.create = 1 if create else 0
        opts.read_only = 1 if read_only else 0
        self._remote = _remote_options(remote, upload)  # kept alive while open
        if self._remote is not None:
            opts.remote = ctypes.pointer(self._remote)
        check(lib.kiln_cache_open(byref(self._h), byref(opts)))

    @property
    def handle(self) -> c_void_p:
        if not self._h:
            raise ValueError("kiln.Cache: used after close()")
        return self._h

    @property
    def dir(self) -> str:
        """The primary directory in use."""
        return text(lib.kiln_cache_dir(self.handle))

    def ls(self) -> list[Record]:
        """Every record of every layer, primary first."""
        out = POINTER(_lib.kiln_record)()
        n = c_size_t()
        check(lib.kiln_cache_list(byref(out), byref(n), self.handle))
        try:
            return [Record.from_c(out[i]) for i in range(n.value)]
        finally:
            _lib.free(out)

    def stats(self) -> dict[str, int]:
        """Counts of the primary layer (records, blobs, blob_bytes, failures,
        quarantined) and of the read-only layers (layers, layer_records)."""
        s = _lib.kiln_cache_stats()
        check(lib.kiln_cache_stats_get(byref(s), self.handle))
        return {name: int(getattr(s, name)) for name, _ in s._fields_}

    def verify(self) -> dict[str, object]:
        """Checks the index (PRAGMA quick_check) and re-hashes every blob of the
        primary layer (bad ones are quarantined): {"checked": n, "bad": n,
        "issues": [{"path", "what"}, ...]}. A corrupt index is the one issue
        reported (its path is the index's) and nothing is changed: close every
        handle on the cache and run `kiln cache verify --repair`."""
        r = _lib.kiln_cache_verify_report()
        check(lib.kiln_cache_verify(byref(r), self.handle))
        try:
            issues = [
                {"path": text(r.issues[i].path), "what": text(r.issues[i].what)}
                for i in range(r.n_issues)
            ]
            return {"checked": int(r.checked), "bad": int(r.bad), "issues": issues}
        finally:
            lib.kiln_cache_verify_report_free(byref(r))

    def gc(self, max_bytes: int) -> dict[str, int]:
        """Evicts least-recently-used records until the primary layer's blobs
        take at most max_bytes (pinned records are kept). max_bytes is an int
        in [0, 2**64-1]; anything else raises KilnInvalidArgument."""
        max_bytes = int_arg("kiln.Cache.gc: max_bytes", max_bytes, 0, UINT64_MAX)
        r = _lib.kiln_cache_gc_report()
        check(lib.kiln_cache_gc(byref(r), self.handle, max_bytes))
        return {name: int(getattr(r, name)) for name, _ in r._fields_}

    def close(self) -> None:
        if self._h:
            lib.kiln_cache_close(self._h)
            self._h = c_void_p()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def parse_targets(arch: str | list[str] | None) -> "ctypes.Array[_lib.kiln_target]":
    """An arch list as `kiln build --arch` takes it ("80,90+ptx", "all"; a list
    is joined with commas), checked against NVRTC."""
    if arch is None:
        arch = "all"
    if not isinstance(arch, str):
        arch = ",".join(str(a) for a in arch)
    spec = text_arg("arch", arch)
    out = POINTER(_lib.kiln_target)()
    n = c_size_t()
    check(lib.kiln_targets_parse_list(byref(out), byref(n), spec))
    try:
        arr = (_lib.kiln_target * n.value)()
        for i in range(n.value):
            arr[i] = out[i]
        return arr
    finally:
        _lib.free(out)


def _items(s: _lib.kiln_build_summary) -> Iterator[BuildItem]:
    for i in range(s.n_items):
        it = s.items[i]
        ok = it.outcome != 2
        yield BuildItem(
            unit=text(it.unit.contents.name) if it.unit else "",
            target=text(it.target_name),
            outcome=OUTCOMES[it.outcome] if 0 <= it.outcome < len(OUTCOMES) else str(it.outcome),
            error=text(it.error),
            log_tail=text(it.log_tail),
            record=Record.from_c(it.record) if ok else None,
        )


def build(
    arch: str | list[str] | None = None,
    kernels: str | None = None,
    cache: PathArg | Cache | None = None,
    remote: str | None = None,
    upload: bool | None = None,
    jobs: int | None = None,
    rebuild: bool = False,
    offline: bool | None = None,
    progress: Callable[[BuildItem, int, int], None] | None = None,
) -> BuildReport:
    """Compiles every unit matching ``kernels`` (a shell glob; None: all) for
    every target of ``arch`` (as `kiln build --arch`; None: "all") into the
    cache, like `kiln build`. ``cache``: a directory or an open kiln.Cache
    (None: the default cache). ``remote``/``upload`` as `--remote`/`--upload`
    (``remote``: ``http(s)://``, ``s3://BUCKET[/PREFIX]`` or ``file:///DIR``).
    ``progress(item, done, total)`` is called after each target.

    Returns a BuildReport; a target that failed to compile is in its items
    (``report.failed``), not an exception. Raises KilnInvalidArgument for a
    bad arch or argument (before anything is built: ``jobs`` not an int in
    [1, 2**31-1], ``cache`` not a path as kiln.Cache takes them, a NUL in a
    string), KilnNotFound when the glob matches no unit, KilnNoNVRTC without
    NVRTC.
    """
    own = not isinstance(cache, Cache)
    if own and cache is not None:
        cache = path_arg("kiln.build: cache", cache)
    glob = text_arg("kiln.build: kernels", kernels) if kernels is not None else None
    if jobs is not None:
        jobs = int_arg("kiln.build: jobs", jobs, 1)
    c = Cache(dir=cache, remote=remote, upload=upload) if own else cache
    try:
        targets = parse_targets(arch)
        opts = _lib.kiln_build_options()
        check(lib.kiln_build_options_init(byref(opts), _lib.STRUCT_VERSIONS["kiln_build_options"]))
        opts.targets = ctypes.cast(targets, POINTER(_lib.kiln_target))
        opts.n_targets = len(targets)
        opts.kernels_glob = glob or None
        if jobs is not None:
            opts.jobs = jobs
        opts.rebuild = 1 if rebuild else 0
        if offline is not None:
            opts.offline = 1 if offline else 0
        errors: list[BaseException] = []

        def on_item(item: object, done: int, total: int, _user: object) -> None:
            if errors or progress is None:
                return
            try:
                s = _lib.kiln_build_summary(n_items=1, items=item)
                progress(next(_items(s)), done, total)
            except BaseException as e:  # raised after the build, not through C
                errors.append(e)

        cb = _lib.kiln_build_progress_fn(on_item) if progress else _lib.kiln_build_progress_fn()
        opts.progress = cb
        out = POINTER(_lib.kiln_build_summary)()
        check(lib.kiln_build(byref(out), c.handle, byref(opts)))
        try:
            s = out.contents
            report = BuildReport(
                items=list(_items(s)),
                targets=s.targets,
                hits=s.hits,
                built=s.built,
                failed=s.failed,
                shared=s.shared,
                fetched=s.fetched,
                uploaded=s.uploaded,
                upload_error=text(s.upload_error) if s.upload_status else "",
                taken_over=s.taken_over,
                bytes=s.bytes,
                wall_ms=s.wall_ms,
                compile_cpu_s=s.compile_cpu_s,
            )
        finally:
            lib.kiln_build_summary_free(out)
        if errors:
            raise errors[0]
        return report
    finally:
        if own:
            c.close()


def _json_command(args: list[str]) -> dict[str, object]:
    exe = executable_path()
    try:
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        raise error_for(-14, f"kiln {' '.join(args)}: no answer in 600 s", "KILN_ETIMEDOUT") from e
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError as e:
        why = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
        raise error_for(-1, f"kiln {' '.join(args)}: {why[0]}", "KILN_EINVAL") from e


def _cache_args(what: str, cache: PathArg | None) -> list[str]:
    # os.fsdecode: a non-UTF-8 name reaches the command as the same bytes
    return [] if cache is None else ["--cache", os.fsdecode(path_arg(f"{what}: cache", cache))]


def probe(cache: PathArg | None = None) -> dict[str, object]:
    """What `kiln probe --json` prints, as a dict (its schema: docs/operations.md):
    the GPUs, driver, NVRTC, NCCL and the caches of this machine. ``cache``:
    a path as kiln.Cache takes it (None: the default)."""
    return _json_command(["probe", "--json", *_cache_args("kiln.probe", cache)])


def doctor(cache: PathArg | None = None) -> dict[str, object]:
    """What `kiln doctor --json` prints, as a dict (docs/operations.md): every
    health check with PASS/WARN/FAIL/SKIP, a summary and a fix. ``cache`` as
    probe's."""
    return _json_command(["doctor", "--json", *_cache_args("kiln.doctor", cache)])
