"""kiln's communicator over torch.distributed (kiln/torch/dist.py, _Comm),
called directly in real gloo jobs (ranks.run, 127.0.0.1):

- the max-reduce tree (binomial, point-to-point, then gloo's broadcast) gives
  the byte-wise maximum on every rank, the same as torch's all_reduce(MAX),
  on a group of 6 (the world) and on a group of 5 whose rank 0 is global
  rank 1 (not a power of two; group ranks mapped to global ones), for 1, 7
  and 16,640 bytes (the exchange's size); broadcast from a root other than 0;
- a rank that never takes part is named by the rank that waits on it
  (KILN_ETIMEDOUT at kiln's deadline, "the receive from rank 3");
- ranks whose kiln speaks another protocol over torch.distributed
  (COMM_PROTOCOL) refuse each other at the check-in with one
  KilnMismatchError, before any collective.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import ranks

SIZES = (1, 7, 16640)
OLD_PROTOCOL = "kiln-torch-comm-1 (max-reduce: all_reduce)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pattern(grank: int, n: int) -> bytes:
    return bytes((i * 31 + grank * 97 + (i * grank) % 13) % 256 for i in range(n))


def _init(rank: int, size: int, port: int, timeout_s: float = 60) -> None:
    import torch.distributed as dist

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s)
    )


def _call(comm: object, what: str, data: bytes, root: int = -1, timeout_s: float = 30.0) -> tuple[int, bytes, str]:
    """One collective through the kiln_comm callbacks, as kiln's C code calls
    them: (status, the buffer after it, kiln's last error)."""
    from kiln import _lib

    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    addr = ctypes.addressof(buf)
    if what == "max":
        st = comm._max_reduce(None, addr, len(data), timeout_s)  # type: ignore[attr-defined]
    else:
        st = comm._broadcast(None, addr, len(data), root, timeout_s)  # type: ignore[attr-defined]
    return st, bytes(buf), _lib.last_error() if st else ""


def _reduce_rank(rank: int, size: int, port: int, out: str) -> None:
    import torch.distributed as dist

    import kiln.torch.dist as kd

    _init(rank, size, port)
    members = list(range(1, size))
    sub = dist.new_group(ranks=members, backend="gloo")
    res: dict[str, object] = {}
    for name, group, grank, gsize, granks in (
        ("world", dist.group.WORLD, rank, size, list(range(size))),
        ("sub", sub, rank - 1, size - 1, members),
    ):
        if grank < 0:
            continue
        for tree in (True, False):
            comm = kd._Comm(group, own_group=False)
            comm.tree = tree
            assert (comm.rank, comm.size) == (grank, gsize)
            for n in SIZES:
                st, got, err = _call(comm, "max", _pattern(rank, n))
                want = bytes(max(col) for col in zip(*(_pattern(g, n) for g in granks)))
                res[f"{name}/{'tree' if tree else 'ring'}/{n}"] = [st, got == want, err]
        comm = kd._Comm(group, own_group=False)
        data = _pattern(rank, 300)
        st, got, err = _call(comm, "bcast", data, root=gsize - 1)
        res[f"{name}/bcast"] = [st, got == _pattern(granks[-1], 300), err]
    Path(out, f"{rank}.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def test_the_max_reduce_tree_gives_the_byte_wise_maximum_on_every_rank_like_all_reduce(tmp_path: Path) -> None:
    size = 6
    ranks.run(_reduce_rank, size, (size, _free_port(), str(tmp_path)), deadline_s=180)
    for r in range(size):
        res = json.loads((tmp_path / f"{r}.json").read_text())
        want = {f"{g}/{a}/{n}" for g in ("world", "sub") for a in ("tree", "ring") for n in SIZES}
        want |= {"world/bcast", "sub/bcast"}
        if r == 0:  # not in the sub-group
            want = {k for k in want if k.startswith("world/")}
        assert set(res) == want, res
        assert all(v[:2] == [0, True] for v in res.values()), f"rank {r}: {res}"


def _silent_rank(rank: int, size: int, port: int, out: str) -> None:
    import kiln.torch.dist as kd

    _init(rank, size, port)
    import torch.distributed as dist

    comm = kd._Comm(dist.group.WORLD, own_group=False)
    if rank == size - 1:  # takes no part (as a rank stuck elsewhere), then leaves
        time.sleep(4.0)
        Path(out, f"{rank}.json").write_text(json.dumps({"silent": True}))
        os._exit(0)
    t0 = time.monotonic()
    st, _, err = _call(comm, "max", _pattern(rank, 64), timeout_s=1.5)
    Path(out, f"{rank}.json").write_text(json.dumps({"st": st, "err": err, "s": time.monotonic() - t0}))
    os._exit(0)  # an abandoned receive is pending: leave without a teardown


def test_a_rank_that_never_joins_the_max_reduce_is_named_by_the_rank_waiting_on_it(tmp_path: Path) -> None:
    size = 4
    ranks.run(_silent_rank, size, (size, _free_port(), str(tmp_path)), deadline_s=120)
    res = {r: json.loads((tmp_path / f"{r}.json").read_text()) for r in range(size)}
    for r in range(size - 1):
        assert res[r]["st"] == -14 and 1.4 <= res[r]["s"] <= 6.0, res  # KILN_ETIMEDOUT at kiln's deadline
        assert "did not complete within 1.5 s" in res[r]["err"], res
    assert "the receive from rank 3 (it in kiln's max-reduce tree, sent nothing)" in res[2]["err"], res
    # rank 0 waits on rank 2, whose subtree holds rank 3
    assert "the receive from rank 2 (it, or rank 3 under it, in kiln's max-reduce tree" in res[0]["err"], res
    assert "the send to rank 0" in res[1]["err"] or res[1]["st"] == -14, res


def _mismatch_rank(rank: int, size: int, port: int, out: str) -> None:
    import kiln
    import kiln.torch.dist as kd

    _init(rank, size, port)
    if rank == 1:  # a rank on an older kiln
        kd.COMM_PROTOCOL = OLD_PROTOCOL
    try:
        kd.warmup(arch="90", kernels="bias_gelu", cache=os.path.join(out, f"cache{rank}"), timeout_s=60)
        res = {"ok": True}
    except kiln.KilnError as e:
        res = {"ok": False, "error": type(e).__name__, "message": str(e)}
    Path(out, f"{rank}.json").write_text(json.dumps(res))
    # rank 0 holds the TCP store: every rank stays until all have their verdict
    end = time.monotonic() + 60
    while time.monotonic() < end and not all(Path(out, f"{r}.json").exists() for r in range(size)):
        time.sleep(0.05)


def test_ranks_speaking_another_protocol_refuse_each_other_at_the_check_in(tmp_path: Path) -> None:
    size = 3
    t0 = time.monotonic()
    ranks.run(_mismatch_rank, size, (size, _free_port(), str(tmp_path)), deadline_s=120)
    res = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(size)]
    assert all(r.get("error") == "KilnMismatchError" for r in res), res
    assert len({r["message"] for r in res}) == 1, res  # one verdict, the same words everywhere
    msg = res[0]["message"]
    assert OLD_PROTOCOL in msg and "kiln-torch-comm-2" in msg and "every rank must run the same kiln" in msg, msg
    assert time.monotonic() - t0 < 60, "refused at once, not at the timeout"
    assert not any((tmp_path / f"cache{r}" / "cas").exists() and any((tmp_path / f"cache{r}" / "cas").rglob("*.*")) for r in range(size))
