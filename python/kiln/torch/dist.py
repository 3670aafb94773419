"""The coordinated one-rank build inside a torch.distributed job.

    import torch.distributed as dist
    import kiln.torch.dist as kd

    dist.init_process_group("nccl")
    report = kd.warmup()                 # every rank calls it, with the same arguments
    report = kd.warmup(arch="90")        # fill the cache only, no GPU touched

``warmup`` runs kiln's coordination protocol (docs/coordination.md) over a
process group: the ranks agree on what is missing, rank 0 of the group builds
it once while it broadcasts a small status frame every heartbeat, and sends
the artifacts to the ranks that need them. No collective waits on the build
itself, so no torch.distributed or NCCL watchdog fires however long it takes.

The communicator is a ``kiln_comm`` (include/kiln/comm.h) filled here with
ctypes callbacks. Broadcast is ``dist.broadcast`` (on gloo a binomial tree).
Max-reduce on a CPU (gloo) group of 3 ranks or more is kiln's own binomial tree of
point-to-point messages up to rank 0 (``dist.isend``/``dist.irecv``, tag
``_TREE_TAG``) followed by that broadcast: 2 x ceil(log2 N) hops, where
``dist.all_reduce`` on gloo is a ring of 2 x (N - 1) hops (at 16,000 ranks and
gloo's latency, seconds per call; docs/coordination.md, "At scale"). On an
NCCL group it is ``dist.all_reduce(op=MAX)``, NCCL's own choice. Every
operation is ``async_op`` and every wait polls ``work.is_completed()`` against
kiln's own deadline (1 ms between polls, growing to 10 ms). A callback never
blocks past that deadline and never lets a Python exception reach the C
frames: a deadline is KILN_ETIMEDOUT (on the tree, naming the rank that sent
nothing), an exception from torch KILN_EPEER with its text
(kiln_comm_error).

By default kiln uses a gloo group of its own over the default group's ranks
(made once with ``dist.new_group(backend="gloo")``, on first use, and kept),
so NCCL's watchdog never sees kiln's traffic. Before it is made, every rank
checks in through the default group's store and waits at most the silence
limit for the others: a rank that is gone (exited, killed, stuck before
warmup) makes the rest raise KilnPeerError naming it, where new_group would
wait out its own timeout and raise torch's "Wait timeout". docs/python.md has
the API.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import threading
import time
from ctypes import POINTER, byref, c_int
from dataclasses import dataclass, field
from datetime import timedelta

import torch

from kiln import _lib
from kiln._lib import KILN_ENV, int_arg, lib, path_arg, positive_arg, text, text_arg
from kiln.api import Cache, PathArg, parse_targets
from kiln.errors import (
    KilnDriverError,
    KilnInvalidArgument,
    KilnMismatchError,
    KilnNotFound,
    KilnPeerError,
    error_for,
)
from kiln.torch import _runtime

KILN_OK = 0
KILN_ETIMEDOUT = -14
KILN_EPEER = -15
KILN_EMISMATCH = -16

# Polling a pending collective: the first check at once, then sleeps growing
# from 1 ms to 10 ms. A status frame is seen within 10 ms of its arrival, and a
# waiting rank costs almost no CPU while the root compiles.
_POLL_FIRST_S = 0.001
_POLL_MAX_S = 0.010
_POLL_GROWTH = 1.5

# The tag of the max-reduce tree's point-to-point messages, apart from the
# tags a user's own sends on the same group would pick (0 by default).
_TREE_TAG = 0x6B696C6E  # "kiln"
# What this kiln speaks over torch.distributed: the collectives it calls and
# how (the max-reduce tree). Ranks must agree on it before any collective (a
# rank on the ring and one on the tree would wait on each other until the
# deadline); the check-in compares it (KilnMismatchError).
COMM_PROTOCOL = "kiln-torch-comm-2 (max-reduce: binomial tree + broadcast from 3 ranks)"

# The dedicated gloo group's own timeout is kiln's silence limit plus this, so
# kiln's deadline (which every wait polls) always comes first.
_GROUP_TIMEOUT_MARGIN_S = 60.0
_DEFAULT_BUILD_TIMEOUT_S = 1800.0
# The check-in before new_group polls the default store (a file or TCP
# store), from 10 ms up to 100 ms between looks.
_CHECKIN_POLL_FIRST_S = 0.010
_CHECKIN_POLL_MAX_S = 0.100
# How long the ranks that did not decide a timed-out check-in wait for the
# deciding rank's list of missing ranks (one store look per rank).
_CHECKIN_DECIDE_S = 30.0


@dataclass
class WarmupReport:
    """What one rank saw of one coordinated warmup (kiln_coord_report,
    include/kiln/comm.h), plus what it did.

    ``compiled``: (unit, target) pairs this rank compiled (only rank 0 of the
    group compiles); ``received``: artifacts it received from rank 0;
    ``longest_wait_ms``/``longest_what``: its longest single collective call
    and which one; ``fingerprint``: of the artifact set this rank holds (the
    same on every rank). ``mode`` is "fill" (``arch`` given: cache only) or
    "load" (loaded on ``device``); ``units`` maps each loaded unit to where it
    came from ("exact CUBIN", ...), empty for "fill"; ``targets`` the filled
    targets ("sm_90", ...), empty for "load"."""

    rank: int
    size: int
    slots: int
    missing: int
    compiled: int
    received: int
    collectives: int
    longest_wait_ms: float
    longest_what: str
    bytes_received: int
    compile_cpu_s: float
    total_ms: float
    fingerprint: str
    mode: str = "fill"
    device: int | None = None
    comm: str = ""
    targets: list[str] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def from_c(r: _lib.kiln_coord_report, **extra: object) -> "WarmupReport":
        return WarmupReport(
            rank=int(r.rank),
            size=int(r.size),
            slots=int(r.slots),
            missing=int(r.missing),
            compiled=int(r.compiled),
            received=int(r.received),
            collectives=int(r.collectives),
            longest_wait_ms=float(r.longest_wait_ms),
            longest_what=text(r.longest_what),
            bytes_received=int(r.bytes_received),
            compile_cpu_s=float(r.compile_cpu_s),
            total_ms=float(r.total_ms),
            fingerprint=text(r.fingerprint),
            **extra,  # type: ignore[arg-type]
        )


# ---- the communicator ------------------------------------------------------------


def _comm_error(st: int, message: str) -> int:
    """Records message as kiln's last error (what kiln puts in its KILN_EPEER
    message) and returns st."""
    return int(lib.kiln_comm_error(st, b"%s", message.encode("utf-8", "replace")[:900]))


class _Comm:
    """A kiln_comm over a torch.distributed process group (group None: one
    process, no transport; every collective is a no-op).

    The ctypes callback objects and the kiln_comm live as long as this object;
    warmup keeps it until the C call has returned."""

    def __init__(self, group: object | None, own_group: bool) -> None:
        self.group = group
        self.own_group = own_group
        self.aborted = ""
        self.interrupt: BaseException | None = None
        self.abandoned: list[tuple[object, torch.Tensor]] = []  # works given up on, kept alive
        self.device: torch.device | None = None
        if group is None:
            self.rank, self.size, name = 0, 1, "single"
        else:
            import torch.distributed as dist

            self.rank = dist.get_rank(group)
            self.size = dist.get_world_size(group)
            if self.rank < 0:
                raise KilnInvalidArgument(
                    "kiln.torch.dist.warmup: this process is not a member of the group it was given",
                    status="KILN_EINVAL",
                    code=-1,
                )
            backend = str(dist.get_backend(group)).lower()
            # a group with a CPU backend (gloo, or "cpu:gloo,cuda:nccl") takes
            # CPU tensors; NCCL alone takes tensors on the current CUDA device
            if "nccl" in backend and "gloo" not in backend:
                self.device = torch.device("cuda", torch.cuda.current_device())
            name = "torch-gloo" if self.device is None else "torch-nccl"
        # max-reduce as kiln's tree (gloo) rather than torch's all_reduce,
        # from 3 ranks: at 2 both take 2 hops and all_reduce costs less
        # (bench/torch_max_reduce.py; it compares the two by switching this)
        self.tree = self.size > 2
        self._cb_broadcast = _lib.comm_broadcast_fn(self._broadcast)
        self._cb_max_reduce = _lib.comm_max_reduce_fn(self._max_reduce)
        self._cb_abort = _lib.comm_abort_fn(self._abort)
        self.c = _lib.kiln_comm(
            version=_lib.KILN_COMM_VERSION,
            rank=self.rank,
            size=self.size,
            self=None,
            broadcast=self._cb_broadcast,
            max_reduce=self._cb_max_reduce,
            abort=self._cb_abort,
            destroy=_lib.comm_destroy_fn(),
            name=name.encode(),
        )

    @property
    def name(self) -> str:
        return text(self.c.name)

    @property
    def ptr(self) -> "ctypes._Pointer[_lib.kiln_comm]":
        return ctypes.pointer(self.c)

    # -- the callbacks: never raise, never block past the deadline --

    def _broadcast(self, _self: object, buf: int, n: int, root: int, timeout_s: float) -> int:
        return self._run("broadcast", buf, n, root, timeout_s)

    def _max_reduce(self, _self: object, buf: int, n: int, timeout_s: float) -> int:
        return self._run("max-reduce", buf, n, -1, timeout_s)

    def _abort(self, _self: object, why: bytes | None) -> None:
        try:
            self.aborted = text(why) or "aborted"
            if self.own_group:  # kiln's own group: no one else uses it; a new one next time
                _forget_group(self.group)
                abort = getattr(self.group, "abort", None)
                if abort is not None:
                    abort()
        except BaseException:  # noqa: BLE001 - nothing may cross the C frames
            pass

    def _run(self, what: str, buf: int, n: int, root: int, timeout_s: float) -> int:
        try:
            return self._collective(what, buf, n, root, timeout_s)
        except BaseException as e:  # noqa: BLE001 - nothing may cross the C frames
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                self.interrupt = e
            return _comm_error(KILN_EPEER, f"torch.distributed {what} of {n} bytes: {type(e).__name__}: {e}")

    def _collective(self, what: str, buf: int, n: int, root: int, timeout_s: float) -> int:
        if self.interrupt is not None:
            return _comm_error(KILN_EPEER, "torch.distributed: interrupted")
        if self.aborted:
            return _comm_error(KILN_EPEER, f"torch.distributed: the communicator was aborted ({self.aborted})")
        if self.group is None or n == 0:
            return KILN_OK
        import torch.distributed as dist

        deadline = time.monotonic() + max(float(timeout_s), 0.0)
        host = torch.frombuffer((ctypes.c_uint8 * n).from_address(buf), dtype=torch.uint8)
        # the collective runs on a copy: an abandoned one may still write into
        # it after kiln's buffer is gone
        t = host.clone() if self.device is None else host.to(self.device)
        said = f"torch.distributed {what} of {n} bytes"
        if root >= 0:
            work = dist.broadcast(t, self._global(root), group=self.group, async_op=True)
            st = self._wait(work, t, deadline, f"{said} (root {root}) on {self.name}", timeout_s)
        elif self.device is None and self.tree:
            st = self._tree_max_reduce(t, deadline, said, timeout_s)
        else:
            work = dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
            st = self._wait(work, t, deadline, f"{said} on {self.name}", timeout_s)
        if st != KILN_OK:
            return st
        if root != self.rank:
            host.copy_(t)
        return KILN_OK

    def _global(self, r: int) -> int:
        """The default group's rank of rank r of self.group (what torch's
        point-to-point calls and broadcast's src take)."""
        import torch.distributed as dist

        return r if self.group is dist.group.WORLD else dist.get_global_rank(self.group, r)

    def _wait(self, work: object, t: torch.Tensor, deadline: float, what: str, timeout_s: float) -> int:
        """Polls work until it completes or deadline passes (KILN_ETIMEDOUT
        saying what did not complete; work and t are kept alive, as the
        transport may still write into t)."""
        sleep = _POLL_FIRST_S
        while not work.is_completed():  # type: ignore[attr-defined]
            now = time.monotonic()
            if now >= deadline:
                self.abandoned.append((work, t))
                return _comm_error(KILN_ETIMEDOUT, f"{what}: did not complete within {timeout_s:.1f} s")
            time.sleep(min(sleep, deadline - now))
            sleep = min(sleep * _POLL_GROWTH, _POLL_MAX_S)
        work.wait()  # type: ignore[attr-defined]  # completed: returns at once, or raises what failed it
        return KILN_OK

    def _wait_p2p(self, work: object, t: torch.Tensor, deadline: float, what: str, timeout_s: float) -> int:
        """_wait for a point-to-point operation. gloo's send and receive
        report completion only through a blocking wait() (their
        is_completed() stays False until then), and a wait() that times out
        closes every connection of the group, so it cannot be polled: a
        thread of its own blocks in wait() (the GIL released) while this one
        waits for it against kiln's deadline. Past the deadline the thread
        is left behind (a daemon) with work and t; its wait() ends when the
        group is aborted or gloo's own timeout, which comes later, passes."""
        done = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                work.wait()  # type: ignore[attr-defined]
            except BaseException as e:  # noqa: BLE001 - reported by the caller
                failed.append(e)
            finally:
                done.set()

        threading.Thread(target=run, name="kiln-comm-p2p", daemon=True).start()
        if not done.wait(max(deadline - time.monotonic(), 0.0)):
            self.abandoned.append((work, t))
            return _comm_error(KILN_ETIMEDOUT, f"{what}: did not complete within {timeout_s:.1f} s")
        if failed:
            raise failed[0]
        return KILN_OK

    def _tree_max_reduce(self, t: torch.Tensor, deadline: float, said: str, timeout_s: float) -> int:
        """The byte-wise maximum of t over the group, into t on every rank: a
        binomial tree up to rank 0 (in round k, a rank r with bit k set sends
        its running maximum to r - 2^k and is done; one without it receives
        from r + 2^k, if that rank exists, and takes the maximum), then
        rank 0's result broadcast down (gloo's broadcast: a binomial tree).
        2 x ceil(log2 N) hops and at most 2 x ceil(log2 N) x n bytes per rank,
        where gloo's all_reduce is a ring of 2 x (N - 1) hops. A wait past the
        deadline names the rank it waited on: a silent child is that rank or
        one below it in the tree (its subtree's ranks are given)."""
        import torch.distributed as dist

        r, size = self.rank, self.size
        got = torch.empty_like(t)
        mask = 1
        while mask < size:
            if r & mask:
                parent = r - mask
                work = dist.isend(t, self._global(parent), group=self.group, tag=_TREE_TAG)
                st = self._wait_p2p(
                    work, t, deadline, f"{said} on {self.name}: the send to rank {parent} "
                    "(this rank's parent in kiln's max-reduce tree)", timeout_s
                )
                if st != KILN_OK:
                    return st
                break
            child = r + mask
            if child < size:
                last = min(child + mask, size) - 1
                below = (
                    "it"
                    if last == child
                    else f"it, or rank {last} under it,"
                    if last == child + 1
                    else f"it, or one of ranks {child + 1} to {last} under it,"
                )
                work = dist.irecv(got, self._global(child), group=self.group, tag=_TREE_TAG)
                st = self._wait_p2p(
                    work, got, deadline, f"{said} on {self.name}: the receive from rank {child} "
                    f"({below} in kiln's max-reduce tree, sent nothing)", timeout_s
                )
                if st != KILN_OK:
                    return st
                torch.maximum(t, got, out=t)
                got = torch.empty_like(t)  # a late write into an abandoned one lands elsewhere
            mask <<= 1
        work = dist.broadcast(t, self._global(0), group=self.group, async_op=True)
        return self._wait(work, t, deadline, f"{said} on {self.name}: the result's broadcast from rank 0", timeout_s)


# ---- the group -----------------------------------------------------------------------

# (the default group object it was made from, its gloo timeout in s) -> kiln's group
_groups: dict[tuple[int, float], object] = {}


def _forget_group(group: object) -> None:
    for k, g in list(_groups.items()):
        if g is group:
            del _groups[k]


def _silence_limit(timeout_s: float | None) -> float:
    try:  # a bad timeout_s is refused after the group is made, on every rank alike
        return positive_arg("timeout_s", timeout_s)
    except KilnInvalidArgument:
        pass
    try:
        v = float(os.environ.get("KILN_BUILD_TIMEOUT", "") or _DEFAULT_BUILD_TIMEOUT_S)
        return v if v > 0 else _DEFAULT_BUILD_TIMEOUT_S
    except ValueError:  # kiln itself reports the bad value, on every rank
        return _DEFAULT_BUILD_TIMEOUT_S


def _default_group(timeout_s: float | None) -> object:
    """kiln's own gloo group over the default group's ranks, made on first use
    (a collective: every rank of the default group must call warmup) and
    kept. Its timeout is the silence limit plus a margin, so kiln's deadline
    decides; a warmup with a longer silence limit makes another one."""
    import torch.distributed as dist

    silence = _silence_limit(timeout_s)
    limit = silence + _GROUP_TIMEOUT_MARGIN_S
    key = (id(dist.group.WORLD), limit)
    g = _groups.get(key)
    if g is None:
        _check_in(silence)
        try:
            g = dist.new_group(backend="gloo", timeout=timedelta(seconds=limit))
        except RuntimeError as e:  # a rank went away between the check-in and here
            raise KilnPeerError(
                f"kiln.torch.dist.warmup: making kiln's gloo group over the default group failed "
                f"(a rank left after every rank had called warmup): {e}",
                status="KILN_EPEER",
                code=KILN_EPEER,
            ) from e
        _groups[key] = g
    return g


# how many check-ins this process has made: the same count on every rank, as
# every rank calls warmup with the same arguments
_checkins = 0


def _check_in(limit_s: float) -> None:
    """Every rank of the default group checks in through the default group's
    store, then waits at most limit_s for every other rank. The outcome is
    decided once, by the store's compare_set: "go" by the first rank that
    sees every rank arrived, or the missing ranks by the first whose
    deadline passes; every rank follows it, so no rank goes on into
    new_group (a collective) while another gives up. KilnPeerError naming
    the missing ranks when they did not come; KilnMismatchError when a rank
    speaks another COMM_PROTOCOL (the first rank to check in sets it).

    Each rank's wait reads one counter per poll (store.add of 0), so the
    store answers O(1) per poll at any N; a rank's own key is read only
    once, by the one rank that decides a timeout, to name who is missing."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    global _checkins
    get_store = getattr(c10d, "_get_default_store", None)
    if get_store is None:  # a torch without it: new_group's own wait decides
        return
    store = get_store()
    rank, size = dist.get_rank(), dist.get_world_size()
    _checkins += 1
    prefix = f"kiln/warmup/checkin/{_checkins}/"
    verdict_key, missing_key = prefix + "verdict", prefix + "missing"
    store.set(f"{prefix}{rank}", "1")
    first = bytes(store.compare_set(prefix + "protocol", "", COMM_PROTOCOL)).decode()
    if first != COMM_PROTOCOL:
        store.compare_set(verdict_key, "", f"mismatch\t{rank}\t{COMM_PROTOCOL}\t{first}")
    store.add(prefix + "arrived", 1)
    deadline = time.monotonic() + limit_s
    sleep = _CHECKIN_POLL_FIRST_S
    while True:
        if store.check([verdict_key]):
            verdict = bytes(store.get(verdict_key)).decode()
            break
        if store.add(prefix + "arrived", 0) >= size:
            verdict = bytes(store.compare_set(verdict_key, "", "go")).decode()
            break
        now = time.monotonic()
        if now >= deadline:
            mine = f"deciding\t{rank}"
            verdict = bytes(store.compare_set(verdict_key, "", mine)).decode()
            if verdict == mine:  # this rank decides: who is missing
                missing = [r for r in range(size) if not store.check([f"{prefix}{r}"])]
                store.set(missing_key, ",".join(map(str, missing)))
            break
        time.sleep(min(sleep, deadline - now))
        sleep = min(sleep * 1.5, _CHECKIN_POLL_MAX_S)
    if verdict == "go":
        return
    if verdict.startswith("mismatch\t"):
        _, who, theirs, first_s = verdict.split("\t", 3)
        raise KilnMismatchError(
            f"kiln.torch.dist.warmup: rank {who} of the default process group speaks "
            f"'{theirs}' over torch.distributed, where the first rank to check in speaks '{first_s}': "
            "every rank must run the same kiln. Nothing was built",
            status="KILN_EMISMATCH",
            code=KILN_EMISMATCH,
        )
    missing = _missing_ranks(store, missing_key)
    if missing is None:
        who = f"some ranks (rank {verdict.split(chr(9))[-1]} decided the wait was over, but never said which)"
    elif not missing:
        who = "no rank (every rank arrived just as the wait ended; the slowest decides)"
    else:
        who = ("rank " if len(missing) == 1 else "ranks ") + ", ".join(map(str, missing))
    missing = missing or []
    late = " (this one, too late: the others gave up)" if rank in missing else ""
    raise KilnPeerError(
        f"kiln.torch.dist.warmup: {who} of the default process group ({size} ranks) did not "
        f"call warmup within {limit_s:.1f} s{late}: gone (exited, killed) or stuck before it; "
        "every rank must call warmup. Nothing was built",
        status="KILN_EPEER",
        code=KILN_EPEER,
    )


def _missing_ranks(store: object, missing_key: str) -> list[int] | None:
    """The missing ranks the deciding rank wrote just after it decided
    (waited for a bounded while: None if they never came)."""
    deadline = time.monotonic() + _CHECKIN_DECIDE_S
    while not store.check([missing_key]):  # type: ignore[attr-defined]
        if time.monotonic() >= deadline:
            return None
        time.sleep(_CHECKIN_POLL_FIRST_S)
    listed = bytes(store.get(missing_key)).decode()  # type: ignore[attr-defined]
    return [int(r) for r in listed.split(",")] if listed else []


# ---- warmup ----------------------------------------------------------------------------


def _device_ordinal(device: int | str | torch.device | None) -> int:
    """The CUDA ordinal to load on: device if given, else torch's current CUDA
    device, else (torch without CUDA, kiln with a driver) LOCAL_RANK modulo
    kiln's device count. KilnDriverError when kiln sees no GPU."""
    if device is not None:
        d = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
        return _runtime.ordinal(d)
    if torch.cuda.is_available():
        return torch.cuda.current_device()
    n = c_int(0)
    st = lib.kiln_device_count(byref(n))
    if st != 0 or n.value == 0:
        why = _lib.last_error() if st != 0 else "the driver reports no device"
        raise KilnDriverError(
            f"kiln.torch.dist.warmup: no usable GPU on this rank ({why}); "
            "warmup(arch=...) fills caches without one",
            status="KILN_EDRIVER",
            code=-17,
        )
    try:
        local = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        local = 0
    return max(local, 0) % n.value


def _check_kernels(glob: str) -> None:
    """KilnNotFound, naming the units, when glob matches none (as `kiln build`)."""
    names = [text(lib.kiln_unit_at(i).contents.name) for i in range(lib.kiln_unit_count())]
    if not any(fnmatch.fnmatchcase(n, glob) for n in names):
        raise KilnNotFound(
            f"kiln.torch.dist.warmup: kernels '{glob}' matches no unit; units are: {', '.join(names)}",
            status="KILN_ENOTFOUND",
            code=-4,
        )


def _raise_status(st: int) -> None:
    if st != 0:
        raise error_for(st, _lib.last_error(), _lib.status_name(st))


def warmup(
    group: object | None = None,
    arch: str | list[str] | None = None,
    kernels: str | None = None,
    heartbeat_ms: float | None = None,
    timeout_s: float | None = None,
    cache: PathArg | Cache | None = None,
    device: int | str | torch.device | None = None,
    peer_timeout_s: float | None = None,
) -> WarmupReport:
    """Builds what any rank of the job lacks once, on rank 0 of ``group``,
    and gives it to every rank. Every rank of the group calls it with the
    same arguments (after ``dist.init_process_group``).

    ``group``: a torch.distributed process group (gloo, or NCCL with this
    rank's CUDA device current); None: kiln's own gloo group over the
    default group's ranks, made on first use and kept. Without an
    initialized process group the protocol runs with one rank (this process
    builds what it lacks; processes sharing a cache directory still build
    each key once, through the cache's build leases).

    ``arch`` (as `kiln build --arch`: "90", "80,90+ptx", a list): fill the
    cache for those targets, touching no GPU (kiln_coord_fill, like `kiln
    warmup --arch`). None: load on this rank's GPU (kiln_loader_warmup with
    kiln.torch's loader of ``device``; default torch's current CUDA device,
    or LOCAL_RANK modulo kiln's device count when torch has no CUDA), after
    which the loaded units need no resolve in the ops.

    ``kernels``: a glob over unit names (`kiln list`); None: every unit.
    ``heartbeat_ms``: the status frame period (None: KILN_HEARTBEAT_MS, 500);
    ``timeout_s``: the silence limit, after which a root that sent no frame
    fails the job (None: KILN_BUILD_TIMEOUT, 1800); the heartbeat must be
    at most half of it; ``peer_timeout_s``: once the protocol is under way,
    how long a root may send no status frame before every other rank gives
    up on it (None: KILN_PEER_TIMEOUT, else 10 s or 20 heartbeats; at least
    two heartbeats). They are finite numbers > 0 (not bool), ``device``
    an int in [0, 2**31-1], a str or a torch.device. ``cache``: a path (str,
    bytes or os.PathLike, as kiln.Cache takes it) or an open kiln.Cache (None:
    KILN_CACHE_DIR / the default cache); for a load, the directory of the
    device's loader, which must not be open yet when ``cache``, ``kernels``,
    ``heartbeat_ms``, ``timeout_s`` or ``peer_timeout_s`` is given. With a remote cache
    (KILN_REMOTE_URL: ``http(s)://``, ``s3://BUCKET/PREFIX`` or
    ``file:///DIR``; or a kiln.Cache opened with ``remote=``), rank 0 fetches
    from it before it builds (docs/remote-cache.md).

    Returns a WarmupReport. Raises on every rank alike: KilnCompileError
    (unit, target and NVRTC's log tail) when the build failed,
    KilnMismatchError when ranks run different kiln builds or
    KILN_NVRTC_OPTIONS or would load different code, KilnPeerError when
    another rank failed or the root went silent past ``peer_timeout_s``, or (the
    default group) when a rank never called warmup within ``timeout_s``
    (gone before it: the message names the missing ranks).
    KilnInvalidArgument, naming it, for a bad argument. A rank
    whose own set-up fails (its cache or GPU does not open, a bad argument)
    raises its own error, after telling the others (kiln_coord_fail), who
    raise KilnPeerError at once.
    """
    group_given = group is not None
    if group is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            group = _default_group(timeout_s)
    comm = _Comm(group, own_group=group is not None and not group_given)
    keep: list[object] = []  # what the C call points into, alive until it returns
    try:
        timeout = hb = peer = float(KILN_ENV)
        try:
            what = "kiln.torch.dist.warmup:"
            if heartbeat_ms is not None:
                hb = positive_arg(f"{what} heartbeat_ms", heartbeat_ms) / 1e3
            if timeout_s is not None:
                timeout = positive_arg(f"{what} timeout_s", timeout_s)
            if peer_timeout_s is not None:
                peer = positive_arg(f"{what} peer_timeout_s", peer_timeout_s)
            if kernels is not None:
                text_arg(f"{what} kernels", kernels)
                _check_kernels(kernels)
            if cache is not None and not isinstance(cache, Cache):
                cache = path_arg(f"{what} cache", cache)
            if device is not None and not isinstance(device, (str, torch.device)):
                device = int_arg(f"{what} device", device)
        except BaseException as e:
            raise _cannot_start(comm, timeout, e)
        times = (hb, timeout, peer)
        if arch is not None:
            return _fill(comm, arch, kernels, times, cache, keep)
        return _load(comm, device, kernels, times, cache, keep)
    except BaseException:
        if comm.interrupt is not None:  # Ctrl-C during a wait: kiln gave up; say so
            raise comm.interrupt from None
        raise


def _cannot_start(comm: _Comm, timeout_s: float, e: BaseException) -> BaseException:
    """This rank cannot take part: it still joins the others' first exchange,
    as failed, so they stop now instead of waiting out the timeout for it."""
    lib.kiln_coord_fail(comm.ptr, timeout_s)
    return e


def _fill(
    comm: _Comm,
    arch: str | list[str],
    kernels: str | None,
    times: tuple[float, float, float],
    cache: bytes | Cache | None,
    keep: list[object],
) -> WarmupReport:
    heartbeat_s, timeout_s, peer_timeout_s = times  # KILN_ENV: the environment's
    own = not isinstance(cache, Cache)
    c: Cache | None = None
    try:
        try:
            targets = parse_targets(arch)
            c = Cache(dir=cache) if own else cache  # type: ignore[assignment]
            handle = c.handle  # type: ignore[union-attr]
        except BaseException as e:
            raise _cannot_start(comm, timeout_s, e)
        opts = _lib.kiln_coord_options()
        st = lib.kiln_coord_options_init(byref(opts), _lib.KILN_COORD_OPTIONS_VERSION)
        if st != 0:
            raise _cannot_start(comm, timeout_s, error_for(st, _lib.last_error(), _lib.status_name(st)))
        kern = kernels.encode() if kernels else None
        keep += [targets, kern]
        opts.targets = ctypes.cast(targets, POINTER(_lib.kiln_target))
        opts.n_targets = len(targets)
        opts.kernels = kern
        opts.heartbeat_s = heartbeat_s
        opts.timeout_s = timeout_s
        opts.peer_timeout_s = peer_timeout_s
        rep = _lib.kiln_coord_report()
        st = lib.kiln_coord_fill(byref(rep), handle, byref(opts), comm.ptr)
        _raise_status(st)
        names = []
        for t in targets:
            buf = ctypes.create_string_buffer(16)
            names.append(text(lib.kiln_target_name(byref(t), buf)))
        return WarmupReport.from_c(rep, mode="fill", comm=comm.name, targets=names)
    finally:
        if own and c is not None:
            c.close()


# device -> (cache, kernels, heartbeat_s, timeout_s, peer_timeout_s) its loader was opened with here
_opened_with: dict[int, tuple[object, ...]] = {}


def _load(
    comm: _Comm,
    device: int | str | torch.device | None,
    kernels: str | None,
    times: tuple[float, float, float],
    cache: bytes | Cache | None,
    keep: list[object],
) -> WarmupReport:
    heartbeat_s, timeout_s, peer_timeout_s = times  # KILN_ENV: the environment's
    try:
        dev = _device_ordinal(device)
        if isinstance(cache, Cache):
            cache = path_arg("kiln.torch.dist.warmup: cache", cache.dir)
        wanted = (cache, kernels, heartbeat_s, timeout_s, peer_timeout_s)
        custom = wanted != (None, None, float(KILN_ENV), float(KILN_ENV), float(KILN_ENV))
        if _runtime.is_open(dev) and custom and _opened_with.get(dev) != wanted:
            raise KilnInvalidArgument(
                f"kiln.torch.dist.warmup: the loader of device {dev} is already open (kiln.torch.init, "
                "an op or a warmup with other settings ran first), so cache, kernels, heartbeat_ms, "
                "timeout_s and peer_timeout_s cannot apply to it: call warmup first, or leave them to "
                "the environment",
                status="KILN_EINVAL",
                code=-1,
            )
        opts = None
        if not _runtime.is_open(dev):
            opts = _lib.kiln_loader_options()
            _raise_status(lib.kiln_loader_options_init(byref(opts), _lib.STRUCT_VERSIONS["kiln_loader_options"]))
            if cache is not None:
                co = _lib.kiln_cache_options()
                _raise_status(lib.kiln_cache_options_init(byref(co), _lib.STRUCT_VERSIONS["kiln_cache_options"]))
                co.dir = cache  # bytes: path_arg's
                keep.append(co)
                opts.cache = ctypes.pointer(co)
            if kernels is not None:
                kern = kernels.encode()
                keep.append(kern)
                opts.kernels = kern
            opts.heartbeat_s = heartbeat_s
            opts.build_timeout_s = timeout_s
            opts.peer_timeout_s = peer_timeout_s
        h = _runtime.loader(dev, opts)
        if opts is not None:
            _opened_with[dev] = wanted
    except BaseException as e:
        raise _cannot_start(comm, timeout_s, e)
    st = lib.kiln_loader_warmup(h, comm.ptr)
    _raise_status(st)
    rep = _lib.kiln_coord_report()
    _raise_status(lib.kiln_loader_coord_report(byref(rep), h))
    units: dict[str, str] = {}
    for unit in _runtime.UNITS:
        info = _lib.kiln_unit_load()
        if lib.kiln_loader_unit_load(byref(info), h, unit.encode()) == 0:
            units[unit] = text(lib.kiln_load_source_str(info.source))
    _runtime.mark_resolved(dev, list(units))
    return WarmupReport.from_c(rep, mode="load", device=dev, comm=comm.name, units=units)


__all__ = ["WarmupReport", "warmup"]
