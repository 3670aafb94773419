"""kiln without torch (kiln/api.py): kiln.build into a cache, the KilnError
exceptions with kiln's own messages, kiln.Cache's ls/stats/verify/gc,
kiln.probe() and kiln.doctor() as `kiln probe|doctor --json` print them, and
`python -m kiln`; and what the package refuses before C sees it: sizes and
counts outside the C type (gc(2**64) once emptied the cache), paths that are
not str/bytes/os.PathLike or hold a NUL, strings with a NUL.

One unit (scaled_softmax) for one target (sm_90) is compiled once per module
(NVRTC: a few seconds); tests that change a cache work on a copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln._paths import executable_path

UNIT = "scaled_softmax"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, kiln.BuildReport, list]:
    """A cache holding UNIT for sm_90, the report of the build that filled it
    and the progress calls it made."""
    cache = tmp_path_factory.mktemp("api") / "cache"
    calls: list[tuple[kiln.BuildItem, int, int]] = []
    report = kiln.build(arch="90", kernels=UNIT, cache=str(cache), progress=lambda *a: calls.append(a))
    return cache, report, calls


def _copy(cache: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(cache, dst, symlinks=True)
    os.chmod(dst, 0o700)
    return dst


def test_build_reports_one_built_target_and_calls_progress(built) -> None:
    _, report, calls = built
    assert report.ok
    assert (report.targets, report.built, report.hits, report.failed) == (1, 1, 0, 0)
    assert report.bytes > 0 and report.wall_ms > 0
    [item] = report.items
    assert (item.unit, item.target, item.outcome, item.error) == (UNIT, "sm_90", "built", "")
    rec = item.record
    assert rec is not None and rec.unit == UNIT and rec.target == "sm_90" and rec.kind == "cubin"
    assert len(rec.digest) == 64 and len(rec.key) == 64 and rec.size > 0
    assert rec.toolchain.startswith("nvrtc-")
    assert len(calls) == 1, calls
    pitem, done, total = calls[0]
    assert (pitem.unit, pitem.target, pitem.outcome, done, total) == (UNIT, "sm_90", "built", 1, 1)


def test_second_build_is_all_cache_hits(built, tmp_path: Path) -> None:
    cache, first, _ = built
    copy = _copy(cache, tmp_path)
    calls = []
    again = kiln.build(arch=["90"], kernels=UNIT, cache=str(copy), progress=lambda *a: calls.append(a))
    assert (again.targets, again.hits, again.built, again.failed) == (1, 1, 0, 0)
    assert [i.outcome for i in again.items] == ["hit"]
    assert again.items[0].record.digest == first.items[0].record.digest
    assert len(calls) == 1


def test_build_into_an_open_cache(built, tmp_path: Path) -> None:
    cache, _, _ = built
    with kiln.Cache(str(_copy(cache, tmp_path))) as c:
        report = kiln.build(arch="sm_90", kernels="scaled_soft*", cache=c)
        assert report.hits == 1
        assert c.stats()["records"] == 1  # still open after the build


def test_bad_arch_is_invalid_argument_with_kilns_message(tmp_path: Path) -> None:
    with pytest.raises(kiln.KilnInvalidArgument) as e:
        kiln.build(arch="9x", kernels=UNIT, cache=str(tmp_path / "c"))
    assert isinstance(e.value, ValueError) and isinstance(e.value, kiln.KilnError)
    assert e.value.status == "KILN_EINVAL" and e.value.code == -1
    assert "'9x' is not a target" in str(e.value), str(e.value)


def test_glob_matching_no_unit_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(kiln.KilnNotFound) as e:
        kiln.build(arch="90", kernels="no_such_unit*", cache=str(tmp_path / "c"))
    assert isinstance(e.value, LookupError)
    assert e.value.status == "KILN_ENOTFOUND"
    assert "no_such_unit*" in str(e.value), str(e.value)


def test_build_rejects_bad_jobs_before_compiling(tmp_path: Path) -> None:
    with pytest.raises(kiln.KilnInvalidArgument, match="jobs 0"):
        kiln.build(arch="90", kernels=UNIT, cache=str(tmp_path / "c"), jobs=0)


def test_cache_ls_and_stats_show_the_record(built) -> None:
    cache, report, _ = built
    with kiln.Cache(str(cache), create=False) as c:
        assert os.path.realpath(c.dir) == os.path.realpath(cache)
        [rec] = c.ls()
        assert (rec.unit, rec.target, rec.digest) == (UNIT, "sm_90", report.items[0].record.digest)
        assert rec.layer == 0
        stats = c.stats()
        # the artifact and its build log (log_digest) are blobs
        assert stats["records"] == 1 and stats["blobs"] == 2
        assert stats["blob_bytes"] > rec.size
        assert stats["failures"] == 0 and stats["quarantined"] == 0


def test_cache_verify_finds_a_corrupt_blob(built, tmp_path: Path) -> None:
    cache, report, _ = built
    copy = _copy(cache, tmp_path)
    with kiln.Cache(str(copy)) as c:
        assert c.verify() == {"checked": 2, "bad": 0, "issues": []}
    digest = report.items[0].record.digest
    blob = copy / "cas" / digest[:2] / digest[2:]
    os.chmod(blob, 0o600)
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    with kiln.Cache(str(copy)) as c:
        v = c.verify()
        assert (v["checked"], v["bad"]) == (2, 1), v
        assert len(v["issues"]) == 1 and digest[2:] in v["issues"][0]["path"], v
        assert c.stats()["quarantined"] == 1


def _tree(root: Path) -> list:
    """Every entry under root (root itself included): name, mode, size, mtime."""
    entries = [root, *sorted(root.rglob("*"))]
    return [(str(p), p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns) for p in entries]


def test_read_only_cache_reads_and_changes_nothing(built, tmp_path: Path) -> None:
    cache, report, _ = built
    copy = _copy(cache, tmp_path)
    before = _tree(copy)
    with kiln.Cache(str(copy), read_only=True) as c:
        [rec] = c.ls()
        assert rec.digest == report.items[0].record.digest
        with pytest.raises(PermissionError, match="read-only"):
            c.verify()
    assert _tree(copy) == before
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    with kiln.Cache(str(empty), read_only=True) as c:  # no index yet: an empty cache
        assert c.ls() == []
    assert list(empty.iterdir()) == []
    with pytest.raises(LookupError, match="does not exist"):
        kiln.Cache(str(tmp_path / "missing"), read_only=True)


def test_cache_gc_evicts_down_to_max_bytes(built, tmp_path: Path) -> None:
    cache, _, _ = built
    with kiln.Cache(str(_copy(cache, tmp_path))) as c:
        size = c.stats()["blob_bytes"]
        kept = c.gc(size)
        assert kept["removed_records"] == 0 and kept["remaining_bytes"] == size, kept
        gone = c.gc(0)
        assert gone["removed_records"] == 1 and gone["freed_bytes"] == size, gone
        assert gone["remaining_bytes"] == 0
        assert c.ls() == [] and c.stats()["blobs"] == 0
        with pytest.raises(ValueError):
            c.gc(-1)


@pytest.mark.parametrize("bad", [2**64, 2**64 + 1000, -1, True, 1.5, "100"])
def test_cache_gc_refuses_a_size_outside_uint64_and_keeps_every_record(built, tmp_path: Path, bad) -> None:
    # 2**64 used to reach C as 0 (ctypes wraps it) and emptied the cache
    cache, _, _ = built
    with kiln.Cache(str(_copy(cache, tmp_path))) as c:
        before = c.ls()
        with pytest.raises(kiln.KilnInvalidArgument, match="max_bytes") as e:
            c.gc(bad)
        assert e.value.status == "KILN_EINVAL"
        assert c.ls() == before and len(before) == 1
        assert c.gc(2**64 - 1)["removed_records"] == 0  # the largest size is kept as it is


@pytest.mark.parametrize("bad", [0, -1, 2**31, 2**32 + 4, True, 4.0, "4"])
def test_build_refuses_jobs_outside_int_before_compiling(tmp_path: Path, bad) -> None:
    with pytest.raises(kiln.KilnInvalidArgument, match="jobs"):
        kiln.build(arch="90", kernels=UNIT, cache=str(tmp_path / "c"), jobs=bad)
    assert not (tmp_path / "c" / "index.sqlite").exists() or kiln.Cache(str(tmp_path / "c")).ls() == []


def test_cache_takes_str_bytes_and_pathlike_paths(tmp_path: Path) -> None:
    for name, path in (("s", str(tmp_path / "s")), ("b", os.fsencode(tmp_path / "b")), ("p", tmp_path / "p")):
        with kiln.Cache(path) as c:
            assert c.dir == str(tmp_path / name)
            c.stats()
        assert (tmp_path / name / "index.sqlite").exists()
    # a non-UTF-8 name, as os.fsencode gives it, reaches the file system unchanged
    raw = os.fsencode(tmp_path) + b"/caf\xe9"
    with kiln.Cache(raw):
        pass
    assert os.path.isdir(raw)
    assert sorted(os.listdir(tmp_path)) == sorted(["b", "p", "s", os.fsdecode(b"caf\xe9")])
    with kiln.Cache(str(tmp_path / "s"), layers=[os.fsencode(tmp_path / "b"), tmp_path / "p"]) as c:
        assert c.stats()["layers"] == 2


@pytest.mark.parametrize(
    "bad, what",
    [
        ("{tmp}/a\0b", "NUL"),
        (b"{tmp}/a\0b", "NUL"),
        (123, "int"),
        (12.5, "float"),
        (["{tmp}/a"], "list"),
        ("", "empty"),
    ],
)
def test_cache_refuses_a_path_with_a_nul_or_not_a_path(tmp_path: Path, bad, what: str) -> None:
    def fill(v: object) -> object:
        if isinstance(v, str):
            return v.replace("{tmp}", str(tmp_path))
        if isinstance(v, bytes):
            return v.replace(b"{tmp}", os.fsencode(tmp_path))
        if isinstance(v, list):
            return [fill(x) for x in v]
        return v

    bad = fill(bad)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # Cache(123) used to open ./123
    try:
        with pytest.raises(kiln.KilnInvalidArgument, match=f"kiln.Cache: dir.*{what}") as e:
            kiln.Cache(bad)
        assert e.value.status == "KILN_EINVAL"
        with pytest.raises(kiln.KilnInvalidArgument, match=f"kiln.Cache: layers.*{what}"):
            kiln.Cache(str(tmp_path / "ok"), layers=[str(tmp_path / "ok2"), bad])
        with pytest.raises(kiln.KilnInvalidArgument, match=f"kiln.build: cache.*{what}"):
            kiln.build(arch="90", kernels=UNIT, cache=bad)
        for fn in (kiln.probe, kiln.doctor):
            with pytest.raises(kiln.KilnInvalidArgument, match=f"cache.*{what}"):
                fn(cache=bad)
    finally:
        os.chdir(cwd)
    assert os.listdir(tmp_path) == [], "a directory was made for a refused path"


def test_cache_layers_must_be_a_list_of_paths_without_a_colon(tmp_path: Path) -> None:
    with pytest.raises(kiln.KilnInvalidArgument, match="layers.*list"):
        kiln.Cache(str(tmp_path / "c"), layers=str(tmp_path / "l"))  # once split into one layer per letter
    with pytest.raises(kiln.KilnInvalidArgument, match="layers.*':'"):
        kiln.Cache(str(tmp_path / "c"), layers=[str(tmp_path / "a:b")])


def test_text_arguments_with_a_nul_are_refused(tmp_path: Path) -> None:
    c = str(tmp_path / "c")
    with pytest.raises(kiln.KilnInvalidArgument, match="arch.*NUL"):
        kiln.build(arch="90\0junk", kernels=UNIT, cache=c)
    with pytest.raises(kiln.KilnInvalidArgument, match="kernels.*NUL"):
        kiln.build(arch="90", kernels=UNIT + "\0junk", cache=c)
    with pytest.raises(kiln.KilnInvalidArgument, match="remote.*NUL"):
        kiln.Cache(c, remote="file:///x\0y")
    with pytest.raises(kiln.KilnInvalidArgument, match="kernels.*str"):
        kiln.build(arch="90", kernels=b"scaled_softmax", cache=c)


def test_closed_cache_raises(tmp_path: Path) -> None:
    c = kiln.Cache(str(tmp_path / "c"))
    c.close()
    c.close()  # twice is fine
    with pytest.raises(ValueError, match="after close"):
        c.stats()


def test_missing_cache_without_create_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(kiln.KilnError):
        kiln.Cache(str(tmp_path / "absent"), create=False)


def _schema(v: object) -> object:
    """The shape of a JSON value: dict keys with their shapes, a list's
    element shapes merged, scalars by type (int and float alike)."""
    if isinstance(v, dict):
        return {k: _schema(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        merged: dict = {}
        for x in v:
            s = _schema(x)
            if isinstance(s, dict):
                merged.update(s)
            else:
                merged[f"<{s}>"] = s
        return ["list", merged]
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def _cli_json(*args: str) -> dict:
    p = subprocess.run([executable_path(), *args], capture_output=True, text=True, timeout=300)
    return json.loads(p.stdout)


@pytest.mark.parametrize("verb", ["probe", "doctor"])
def test_probe_and_doctor_have_the_cli_json_schema(verb: str, built) -> None:
    cache, _, _ = built
    got = getattr(kiln, verb)(cache=str(cache))
    want = _cli_json(verb, "--json", "--cache", str(cache))
    assert got.get("schema") == want.get("schema") and str(got["schema"]).startswith(f"kiln-{verb}/")
    assert _schema(got) == _schema(want)
    if verb == "probe":
        assert got["kiln"] == kiln.__version__
        assert [c["records"] for c in got["caches"] if c["layer"] == 0] == [1]


def test_python_m_kiln_runs_the_cli() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "kiln", "--version"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"kiln {kiln.__version__}", p.stdout
    assert "NVRTC" in p.stdout


def test_version_is_the_librarys() -> None:
    assert kiln.__version__ == kiln.version()
    assert kiln.__version__.count(".") == 2
