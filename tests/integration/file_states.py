#!/usr/bin/env python3
"""The file-state matrix (issue 20): every file and directory a cache holds, put
in turn into every bad state, under every kiln command and the loader; and
(issue 27) every file and directory of a file:// remote, under every command
that reads or writes one.

The cases are generated, not written: TARGETS x STATES x COMMANDS, less the
pairs that mean nothing (a directory cannot be cut short, nor made into a
directory; a file cannot be made a read-only directory; NOT_A_CASE). Each case
gets its own copy of the fixture cache (the "small" one: bias_gelu for sm_90,
whose compile and known-answer test take a second, so a case that rebuilds
costs little), puts one state at one target, and runs one command under the
command's bound. The remote's targets (ac/ and cas/, a record, a blob, a
killed uploader's temp file, the directory itself) are in the case's own copy
of a remote the fixture was uploaded into once per run (kiln build --upload),
and meet the REMOTE_COMMANDS instead: a fetch into an empty cache by kiln build
(whose compiles are made to fail, so a bad object is a quick failure, not a
compile) and by the offline loader (warmup), an upload of the fixture, doctor
with uploads on, and cache gc --remote. --pairs runs one case per (target,
state) pair instead, the commands taken in turn, so every pair and every
command is still met (the sanitizer build's subset). It passes when:

  - the command ends within its bound, by exit (no signal) with 0, 1 or 2, and
    no sanitizer report is in its output;
  - when it exits non-zero, its stdout or stderr names the file: the target's
    absolute path, or its path inside the cache (e.g. "cas/53/ed8c...",
    "index.sqlite-wal"), or for a blob its digest; the fan-out, tmp/ and
    quarantine/ directories by absolute path or by a path inside the cache
    that passes through them ("cas/53/", "tmp/", "quarantine/"); a layer's
    index by its absolute path or the layer's directory; in the remote, a
    record by its absolute path, "ac/<key>" or its key, a blob by its
    absolute path, "cas/<digest>" or its digest, the temp file by its
    absolute path or "cas/.tmp...", the directory and ac/ and cas/ by their
    absolute paths (or that of a file below them);
  - nothing outside the cache (or the remote's directory) changed: the folder
    "outside" beside it (the symlink state's target, a copy of what the link
    replaced, and a sentinel file and directory) has the same entries, modes,
    sizes, mtimes and bytes;
  - every image the (fake) driver loaded is a blob of the fixture, unaltered:
    each "load ok ... sha256=X" line of KILN_FAKE_CUDA_LOG has X among the
    fixture's artifact digests;
  - after a fetch from the remote, no bad bytes were stored: every record of
    the (formerly empty) local cache is one of the fixture's, its blob there
    and hashing to its digest, and every file under its cas/ hashes to its
    name.

Cases listed in KNOWN_FAILURES are still run and reported (XFAIL, with what
went wrong); one that passes is an error (XPASS), so the list cannot go stale.

usage: file_states.py KILN FIXTURE_CACHE FAKE_LIBCUDA WORKDIR [--jobs N] [--only GLOB] [--pairs]
"""
import argparse
import concurrent.futures
import fnmatch
import hashlib
import os
import random
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import zlib

# ---- the matrix ---------------------------------------------------------------------------------

# name: (kind, where). kind "file" or "dir"; where: "primary", "primary+wal" (a copy whose last
# transaction is still in index.sqlite-wal, with its -shm), "layer" (a read-only layer in
# KILN_CACHE_PATH over an empty primary) or "remote" (a file:// remote directory, issue 27: the
# case's copy of a template the fixture was uploaded into once per run, DIR/ac/<key> and
# DIR/cas/<digest>, plus a killed uploader's stale temp file DIR/cas/.tmp.*). The path is
# resolved against the case's copy. A "remote" target meets the REMOTE_COMMANDS, the others
# the COMMANDS.
TARGETS = {
    "index": ("file", "primary"),
    "wal": ("file", "primary+wal"),
    "shm": ("file", "primary+wal"),
    "blob": ("file", "primary"),
    "fanout": ("dir", "primary"),
    "tmp": ("dir", "primary"),
    "quarantine": ("dir", "primary"),
    "layer_index": ("file", "layer"),
    "layer_blob": ("file", "layer"),
    "remote_root": ("dir", "remote"),  # DIR itself
    "remote_ac": ("dir", "remote"),  # DIR/ac
    "remote_cas": ("dir", "remote"),  # DIR/cas
    "remote_record": ("file", "remote"),  # DIR/ac/<key>
    "remote_blob": ("file", "remote"),  # DIR/cas/<digest>
    "remote_tmp": ("file", "remote"),  # DIR/cas/.tmp.<digest>.<host>.<pid>.<n>, 2 hours old
}

STATES = ["fifo", "symlink_out", "directory", "empty", "truncated", "garbage", "sparse_4g",
          "unreadable", "readonly_dir"]
NOT_FOR_DIRS = {"directory", "truncated"}  # a directory is one already, and has no length
NOT_FOR_FILES = {"readonly_dir"}  # mode 0555 (as root: run without capabilities, as unreadable)

# Single (target, state) pairs that mean nothing, as "target.state" -> why.
NOT_A_CASE = {
    "remote_root.symlink_out": "the URL names the remote's directory, and it may be a link (a "
                               "mount point's alias): only the paths below it are never followed",
}

# The fixture's one unit and target (tests/integration/fixture_small.sh).
UNIT, ARCH, TARGET = "bias_gelu", "90", "sm_90"

# name: (arguments after "kiln", bound in seconds). --cache is added. The bounds are several
# times the slowest passing run in the sanitizer build with 2 cases at a time on 2 cores (with
# scaled_softmax, 114 entry points, the fixture's unit until issue 33: a compile ~8 s loaded, its
# known-answer test ~7 s under ASan; bias_gelu takes about a second for each), and small, since a
# hang costs its whole bound.
COMMANDS = {
    "build": (["build", "--arch", ARCH, "--kernels", UNIT], 30),
    "cache_ls": (["cache", "ls"], 10),
    "cache_stats": (["cache", "stats"], 10),
    "cache_verify": (["cache", "verify"], 10),
    "cache_gc": (["cache", "gc", "--max-size", "1K"], 10),
    "check": (["check", "--arch", ARCH, "--kernels", UNIT], 10),
    "doctor": (["doctor"], 10),
    "probe": (["probe"], 10),
    "warmup": (["warmup", "--kernels", UNIT], 30),
    # offline: a miss is an error rather than a second compile (warmup above builds); the
    # known-answer test runs on whatever loaded
    "warmup_verify": (["warmup", "--verify", "--offline", "--kernels", UNIT], 60),
}

# The commands of a "remote" target: each runs with KILN_REMOTE_URL=file:///DIR (the case's
# remote) and, where it takes one, --remote file:///DIR (URL below); name: (arguments after
# "kiln", bound in seconds, the local --cache: "empty" (a new directory) or "fixture" (a copy)).
URL = "{url}"
REMOTE_COMMANDS = {
    # a fetch into an empty cache: a good remote gives 0 builds. kiln build has no offline mode,
    # so every compile fails at once (KILN_TEST_INJECT_COMPILE_ERROR): a bad object is a clean
    # failure (exit 1), never a slow NVRTC compile. Afterwards every record of the local cache
    # must be the fixture's and every blob must hash to its name (CHECK_LOCAL).
    "fetch": (["build", "--arch", ARCH, "--kernels", UNIT, "--remote", URL, "--json"], 30, "empty"),
    # the loader's fetch (resolution step 3), offline: a miss is an error, not a build
    "fetch_warmup": (["warmup", "--offline", "--kernels", UNIT], 30, "empty"),
    # the fixture written back: HEAD ac/<key>, then PUT the blob and the record
    "upload": (["build", "--arch", ARCH, "--kernels", UNIT, "--remote", URL, "--upload"], 30,
               "fixture"),
    # with KILN_REMOTE_UPLOAD=1: a GET of a key nobody builds, a test PUT and DELETE in cas/
    "doctor_remote": (["doctor"], 10, "fixture"),
    "gc_remote": (["cache", "gc", "--remote", URL, "--max-age", "0"], 10, "fixture"),
}
REMOTE_ENV = {"fetch": {"KILN_TEST_INJECT_COMPILE_ERROR": UNIT},
              "doctor_remote": {"KILN_REMOTE_UPLOAD": "1"}}
CHECK_LOCAL = {"fetch", "fetch_warmup"}
ALL_COMMANDS = {**COMMANDS, **REMOTE_COMMANDS}

# States a command may take for "nothing here" rather than a fault, as "target.state" -> why:
# a non-zero exit need not name the file then, but must be exit 1 (a miss: "MISSING", "not in
# the cache"), never 2. docs/cache-format.md ("Empty index") records the decision.
EMPTY_IS_NOTHING = {
    "index.empty": "a 0-byte index.sqlite is a cache with no records yet (sqlite's own first "
                   "state of a new database): read as empty, given its schema by a writer",
}

# Commands that name read-only layers as further --cache options, not by KILN_CACHE_PATH
# (kiln check --help: "the others as read-only layers, and KILN_CACHE_PATH is then ignored").
CACHES_AS_LAYERS = {"check"}

# Cases known to fail because of defects outside this test's reach, as "target.state.command"
# globs, each with the defect. They still run (XFAIL); one that passes is an error (XPASS), so
# the list cannot go stale. Every defect the cache targets found is fixed (issue 20), and so is
# the one the file:// remote's found (issue 27: a record that is not JSON is named by its path,
# ac/<key>).
KNOWN_FAILURES = {}

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "UndefinedBehaviorSanitizer")


def commands_for(target):
    return REMOTE_COMMANDS if TARGETS[target][1] == "remote" else COMMANDS


def target_states():
    for t, (kind, _) in TARGETS.items():
        for s in STATES:
            if s in (NOT_FOR_DIRS if kind == "dir" else NOT_FOR_FILES) or f"{t}.{s}" in NOT_A_CASE:
                continue
            yield t, s


def cases():
    for t, s in target_states():
        for c in commands_for(t):
            yield t, s, c


def pairs():
    """One case per (target, state), the target's commands in turn: every pair and every
    command (local and remote each have their own turn)."""
    turn = {}  # remote or not: the next command's turn
    out = []
    for t, s in target_states():
        names, remote = list(commands_for(t)), TARGETS[t][1] == "remote"
        i = turn[remote] = turn.get(remote, -1) + 1
        out.append((t, s, names[i % len(names)]))
    return out


# ---- the fixture --------------------------------------------------------------------------------

def artifact_records(cache):
    db = sqlite3.connect(f"file:{cache}/index.sqlite?mode=ro&immutable=1", uri=True)
    try:
        return db.execute("SELECT digest, size FROM records WHERE unit = ? AND target = ?",
                          (UNIT, TARGET)).fetchall()
    finally:
        db.close()


def blob_rel(digest):
    return f"cas/{digest[:2]}/{digest[2:]}"


def make_wal_base(fixture, dest):
    """A copy of the fixture whose last transaction is only in index.sqlite-wal (copied while
    the writer still has it open, as a crash would leave it)."""
    work = dest + ".writer"
    shutil.copytree(fixture, work, symlinks=True)
    db = sqlite3.connect(os.path.join(work, "index.sqlite"), isolation_level=None)
    try:
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            raise SystemExit("the fixture's index is not in WAL mode")
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute("UPDATE records SET last_used = last_used + 1")
        shutil.copytree(work, dest, symlinks=True)
    finally:
        db.close()
    shutil.rmtree(work)
    for f in ("index.sqlite-wal", "index.sqlite-shm"):
        if not os.path.isfile(os.path.join(dest, f)):
            raise SystemExit(f"the WAL copy has no {f}")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_remote_template(env, kiln, dest):
    """A file:// remote holding the fixture (DIR/ac/<key>, DIR/cas/<digest>), written by kiln
    itself: `kiln build --remote file:///DEST --upload` from a copy of the fixture. Then a stale
    temp file of a killed uploader in cas/ (and one in ac/), for the gc and the remote_tmp
    target. Checked: a fetch from it into an empty cache gets the fixture's record, builds
    nothing."""
    up = dest + ".uploader"
    shutil.copytree(env.fixture, up, symlinks=True)
    os.mkdir(dest)
    url = "file://" + dest
    run = [kiln, "build", "--arch", ARCH, "--kernels", UNIT, "--cache", up, "--remote", url]
    r = subprocess.run(run + ["--upload"], capture_output=True, text=True, env=env.base_env,
                       timeout=120)
    shutil.rmtree(up)
    if r.returncode != 0:
        raise SystemExit(f"uploading the fixture to {url} failed (exit {r.returncode}):\n"
                         + r.stdout + r.stderr)
    for rel in ("ac/" + env.key, "cas/" + env.digest):
        if not os.path.isfile(os.path.join(dest, rel)):
            raise SystemExit(f"the upload to {url} left no {rel}")
    if sha256_file(os.path.join(dest, "cas", env.digest)) != env.digest:
        raise SystemExit(f"the upload to {url} wrote other bytes than the fixture's blob")
    old = time.time() - 7200
    for rel in (env.remote_tmp, f"ac/.tmp.{env.key}.otherhost.4242.0"):
        p = os.path.join(dest, rel)
        with open(p, "wb") as f:
            f.write(garbage(rel, 1000))  # half an upload
        os.utime(p, (old, old))
    empty = dest + ".fetcher"
    os.mkdir(empty, 0o700)
    r = subprocess.run([kiln, "build", "--arch", ARCH, "--kernels", UNIT, "--cache", empty,
                        "--remote", url, "--json"], capture_output=True, text=True,
                       env=dict(env.base_env, KILN_TEST_INJECT_COMPILE_ERROR=UNIT), timeout=120)
    problems = check_local(env, empty)
    got = artifact_records(empty) if os.path.exists(os.path.join(empty, "index.sqlite")) else []
    shutil.rmtree(empty)
    if r.returncode != 0 or problems or got != artifact_records(env.fixture):
        raise SystemExit(f"a fetch from the fixture's remote {url} into an empty cache does not "
                         f"get its record (exit {r.returncode}, {got}, {problems}):\n"
                         + r.stdout[-2000:] + r.stderr)


def check_local(env, cache):
    """No bad bytes fetched: every record of the cache is the fixture's, its blob there and
    hashing to its digest; every file in cas/ hashes to its name."""
    problems = []
    index = os.path.join(cache, "index.sqlite")
    if os.path.exists(index):
        try:
            db = sqlite3.connect(f"file:{index}?mode=ro&immutable=1", uri=True)
            try:
                recs = db.execute("SELECT key, digest, size FROM records").fetchall()
            finally:
                db.close()
        except sqlite3.Error as e:
            return [f"the local cache's index cannot be read after the fetch: {e}"]
        for key, digest, size in recs:
            blob = os.path.join(cache, blob_rel(digest))
            if (key, digest, size) not in env.fixture_recs:
                problems.append(f"the local cache has a record the fixture has not: {key} "
                                f"{digest} {size}")
            elif not os.path.isfile(blob) or os.path.islink(blob):
                problems.append(f"record {key} has no blob {blob_rel(digest)}")
            elif sha256_file(blob) != digest:
                problems.append(f"record {key}'s blob {blob_rel(digest)} has other bytes")
    cas = os.path.join(cache, "cas")
    for d, _, files in os.walk(cas):
        for n in files:
            p = os.path.join(d, n)
            name = os.path.relpath(p, cas).replace("/", "")
            if os.path.islink(p) or not os.path.isfile(p):
                problems.append(f"the local cache has {os.path.relpath(p, cache)}, no regular file")
            elif sha256_file(p) != name:
                problems.append(f"the local cache stored bad bytes: {os.path.relpath(p, cache)}")
    return problems


# ---- states -------------------------------------------------------------------------------------

def remove(path):
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


def garbage(seed, n):
    return random.Random(seed).getrandbits(8 * n).to_bytes(n, "little")


def apply_state(state, path, outside, seed):
    """Puts state at path (which exists). Returns False when it cannot be made here."""
    parent = os.path.dirname(path)
    os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
    is_dir = os.path.isdir(path)
    if state == "fifo":
        remove(path)
        os.mkfifo(path, 0o600)
    elif state == "symlink_out":
        # what the link replaces, moved outside: a cache that follows it finds it whole
        away = os.path.join(outside, "linked-" + os.path.basename(path))
        shutil.move(path, away)
        os.symlink(away, path)
    elif state == "directory":
        remove(path)
        os.mkdir(path, 0o700)
    elif state in ("empty", "garbage", "sparse_4g") and is_dir:
        remove(path)
        with open(path, "wb") as f:
            if state == "garbage":
                f.write(garbage(seed, 4096))
            elif state == "sparse_4g":
                f.truncate(4 << 30)
    elif state == "empty":
        os.chmod(path, 0o600)
        os.truncate(path, 0)
    elif state == "truncated":
        os.chmod(path, 0o600)
        os.truncate(path, os.path.getsize(path) // 2)
    elif state == "garbage":
        os.chmod(path, 0o600)
        n = max(os.path.getsize(path), 4096)
        with open(path, "wb") as f:
            f.write(garbage(seed, n))
    elif state == "sparse_4g":  # the file's own bytes, then holes to 4 GiB
        os.chmod(path, 0o600)
        os.truncate(path, 4 << 30)
    elif state == "unreadable":
        os.chmod(path, 0)
    elif state == "readonly_dir":
        os.chmod(path, 0o555)
    else:
        raise ValueError(state)
    return True


def tree(root):
    """Every entry under root: type, mode, size, mtime and content hash."""
    out = []
    for d, dirs, files in os.walk(root):
        for n in sorted(dirs + files):
            p = os.path.join(d, n)
            st = os.lstat(p)
            h = ""
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
            out.append((os.path.relpath(p, root), stat.S_IFMT(st.st_mode), st.st_mode & 0o7777,
                        st.st_size, st.st_mtime_ns, h))
    return sorted(out)


# ---- one case -----------------------------------------------------------------------------------

class Env:
    pass


def target_path(env, target, root):
    if target.startswith("remote_"):
        rel = {"remote_root": "", "remote_ac": "ac", "remote_cas": "cas",
               "remote_record": "ac/" + env.key, "remote_blob": "cas/" + env.digest,
               "remote_tmp": env.remote_tmp}[target]
        return os.path.join(root, rel) if rel else root
    if target in ("index", "layer_index"):
        return os.path.join(root, "index.sqlite")
    if target == "wal":
        return os.path.join(root, "index.sqlite-wal")
    if target == "shm":
        return os.path.join(root, "index.sqlite-shm")
    if target in ("blob", "layer_blob"):
        return os.path.join(root, blob_rel(env.digest))
    if target == "fanout":
        return os.path.join(root, "cas", env.digest[:2])
    return os.path.join(root, target)  # tmp, quarantine


def names_of(env, target, root, path):
    """The strings any one of which names the target in a message."""
    rel = os.path.relpath(path, root)
    if target in ("remote_root", "remote_ac", "remote_cas"):
        return [path]  # also a prefix of the path of anything below it
    if target == "remote_record":
        return [path, rel, env.key]
    if target == "remote_blob":
        return [path, rel, env.digest]
    if target == "remote_tmp":
        return [path, rel]
    if target == "blob" or target == "layer_blob":
        return [path, rel, env.digest]
    if target in ("fanout", "tmp", "quarantine"):
        return [path, rel + "/"]
    if target == "layer_index":
        return [path, root]
    return [path, rel]


def run_case(env, target, state, command):
    cid = f"{target}.{state}.{command}"
    d = os.path.join(env.work, cid)
    os.makedirs(d)
    outside = os.path.join(d, "outside")
    os.makedirs(os.path.join(outside, "sentinel-dir"))
    with open(os.path.join(outside, "sentinel"), "w") as f:
        f.write("not kiln's\n")
    with open(os.path.join(outside, "sentinel-dir", "file"), "w") as f:
        f.write("not kiln's either\n")
    where = TARGETS[target][1]
    primary = os.path.join(d, "cache")
    run_env = dict(env.base_env)
    run_env["KILN_FAKE_CUDA_LOG"] = os.path.join(d, "fake.log")
    if where == "remote":
        root = os.path.join(d, "remote")
        shutil.copytree(env.remote_template, root, symlinks=True)
        if REMOTE_COMMANDS[command][2] == "empty":
            os.mkdir(primary, 0o700)
        else:
            shutil.copytree(env.fixture, primary, symlinks=True)
        run_env["KILN_REMOTE_URL"] = "file://" + root
        run_env.update(REMOTE_ENV.get(command, {}))
    elif where == "layer":
        root = os.path.join(d, "layer")
        shutil.copytree(env.fixture, root, symlinks=True)
        os.mkdir(primary, 0o700)  # an empty cache of ours, as new_cache makes
        run_env["KILN_CACHE_PATH"] = root
    else:
        root = primary
        shutil.copytree(env.wal_base if where == "primary+wal" else env.fixture, root,
                        symlinks=True)
    path = target_path(env, target, root)
    apply_state(state, path, outside, zlib.crc32(cid.encode()))
    before = tree(outside)
    args, bound = ALL_COMMANDS[command][:2]
    args = [run_env["KILN_REMOTE_URL"] if a == URL else a for a in args]
    argv = [env.kiln] + args + ["--cache", primary]
    if where == "layer" and command in CACHES_AS_LAYERS:  # KILN_CACHE_PATH is ignored there
        argv += ["--cache", root]
    if state in ("unreadable", "readonly_dir") and env.drop_caps:
        argv = env.drop_caps + argv
    start = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env,
                         start_new_session=True, cwd=d)
    timed_out = False
    try:
        out, err = p.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    secs = time.monotonic() - start
    text = out.decode(errors="replace") + err.decode(errors="replace")
    problems = []
    if timed_out:
        problems.append(f"still running after its bound of {bound} s (killed)")
    elif p.returncode < 0:
        problems.append(f"killed by signal {-p.returncode}")
    elif p.returncode not in (0, 1, 2):
        problems.append(f"exit {p.returncode}, not 0, 1 or 2")
    if any(m in text for m in SANITIZER_MARKS):
        problems.append("a sanitizer report")
    nothing = EMPTY_IS_NOTHING.get(f"{target}.{state}")
    if nothing and not timed_out and p.returncode not in (0, 1):
        problems.append(f"exit {p.returncode}: {nothing}, so at most a miss (exit 1)")
    elif not timed_out and p.returncode != 0 and not nothing:
        names = names_of(env, target, root, path)
        if not any(n in text for n in names):
            problems.append("exit %d without naming the file (any of: %s)"
                            % (p.returncode, ", ".join(repr(n) for n in names)))
    if tree(outside) != before:
        problems.append("a file outside the %s changed (%s)"
                        % ("remote's directory" if where == "remote" else "cache", outside))
    if where == "remote" and command in CHECK_LOCAL:
        problems += check_local(env, primary)
    log = os.path.join(d, "fake.log")
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                m = re.match(r"load ok \S+ \S+ \d+ pid=\d+ sha256=(\S+)", line)
                if line.startswith("load ok") and (not m or m.group(1) not in env.good):
                    problems.append("the driver got an image that is no blob of the fixture: "
                                    + line.strip())
    if os.path.lexists(path) and not os.path.islink(path):  # let the removal through
        os.chmod(path, 0o700)
    for dp, dirs, _ in os.walk(d):
        for n in dirs:
            q = os.path.join(dp, n)
            if not os.path.islink(q):
                os.chmod(q, 0o700)
    shutil.rmtree(d)
    return cid, p.returncode if not timed_out else None, secs, problems, text


def guarded(env, target, state, command):
    """run_case, with a failure of the test's own (a state it could not make) as a problem."""
    try:
        return run_case(env, target, state, command)
    except (OSError, ValueError, shutil.Error) as e:
        return f"{target}.{state}.{command}", None, 0.0, [f"the test itself failed: {e!r}"], ""


# ---- main ---------------------------------------------------------------------------------------

def drop_caps_prefix():
    """As root, chmod 000 stops nobody: the unreadable state's command then runs with no
    capabilities (uid 0 still owns the cache), where it does stop reads. None if that cannot
    be done here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return None
    prefix = [setpriv, "--bounding-set", "-all", "--inh-caps", "-all"]
    probe = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kiln-fs-probe-{os.getpid()}")
    with open(probe, "w") as f:
        f.write("x")
    os.chmod(probe, 0)
    try:
        r = subprocess.run(prefix + ["cat", probe], capture_output=True)
    finally:
        os.unlink(probe)
    return prefix if r.returncode != 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kiln")
    ap.add_argument("fixture", help=f"the small fixture cache ({UNIT}, {TARGET})")
    ap.add_argument("fakecuda", help="libkiln_fakecuda.so")
    ap.add_argument("work", help="an empty folder for the cases")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="*", help="run the cases whose target.state.command match")
    ap.add_argument("--pairs", action="store_true",
                    help="one case per (target, state) pair, the commands taken in turn")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    a = ap.parse_args()

    env = Env()
    a.kiln, a.fixture, a.fakecuda, a.work = map(os.path.abspath,
                                                (a.kiln, a.fixture, a.fakecuda, a.work))
    env.kiln, env.fixture, env.work = a.kiln, a.fixture, os.path.join(a.work, "cases")
    recs = artifact_records(a.fixture)
    if len(recs) != 1:
        raise SystemExit(f"the fixture should hold one {UNIT} {TARGET} record, not {recs}")
    env.digest = recs[0][0]
    env.good = {r[0] for r in recs}
    db = sqlite3.connect(f"file:{a.fixture}/index.sqlite?mode=ro&immutable=1", uri=True)
    try:
        env.fixture_recs = set(db.execute("SELECT key, digest, size FROM records").fetchall())
        env.key = db.execute("SELECT key FROM records WHERE digest = ?",
                             (env.digest,)).fetchone()[0]
    finally:
        db.close()
    env.remote_tmp = f"cas/.tmp.{env.digest}.otherhost.4242.0"
    env.wal_base = os.path.join(a.work, "wal-base")
    make_wal_base(a.fixture, env.wal_base)
    env.base_env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.base_env.update(KILN_CUDA_LIBRARY=a.fakecuda, KILN_FAKE_CUDA_DEVICES="90",
                        XDG_CACHE_HOME=os.path.join(a.work, "xdg"))
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):  # a report is found in the output, any exit
        env.base_env[var] = ":".join(filter(None, [env.base_env.get(var), "exitcode=86"]))
    env.drop_caps = drop_caps_prefix()
    todo = [c for c in (pairs() if a.pairs else cases()) if fnmatch.fnmatch(".".join(c), a.only)]
    if any(TARGETS[c[0]][1] == "remote" for c in todo) and not a.list:
        env.remote_template = os.path.join(a.work, "remote-template")
        make_remote_template(env, a.kiln, env.remote_template)
    os.makedirs(env.work)

    notes = []
    if env.drop_caps is None:
        todo = [c for c in todo if c[1] not in ("unreadable", "readonly_dir")]
        notes.append("the unreadable and readonly_dir states are skipped: running as root, and "
                     "setpriv cannot drop the capabilities that let root read a mode-000 file "
                     "and write into a mode-555 directory")
    if a.list:
        print("\n".join(".".join(c) for c in todo))
        return 0
    n_remote = sum(1 for w in TARGETS.values() if w[1] == "remote")
    n_local_cases = sum(1 for t, _, _ in cases() if TARGETS[t][1] != "remote")
    print(f"file_states: {len(TARGETS) - n_remote} cache targets x {len(COMMANDS)} commands "
          f"({n_local_cases} cases) and {n_remote} file:// remote targets x "
          f"{len(REMOTE_COMMANDS)} remote commands ({len(list(cases())) - n_local_cases} cases), "
          f"x {len(STATES)} states (directories skip {sorted(NOT_FOR_DIRS)}, files "
          f"{sorted(NOT_FOR_FILES)}, and {sorted(NOT_A_CASE)}): {len(list(cases()))} cases, "
          f"{len(todo)} to run on {a.jobs} workers"
          + (" (--pairs: one per target and state, the commands in turn)" if a.pairs else ""),
          flush=True)

    start = time.monotonic()
    results = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for r in pool.map(lambda c: guarded(env, *c), todo):
            results.append(r)
    wall = time.monotonic() - start

    failed, xfail, xpass = [], [], []
    by_exit, slowest = {}, {}
    for cid, rc, secs, problems, text in results:
        by_exit[rc] = by_exit.get(rc, 0) + 1
        cmd = cid.rsplit(".", 1)[1]
        if secs >= slowest.get(cmd, (0.0, ""))[0]:
            slowest[cmd] = (secs, cid)
        known = next((why for g, why in KNOWN_FAILURES.items() if fnmatch.fnmatch(cid, g)), None)
        if problems and known:
            xfail.append((cid, rc, problems, known, text))
        elif problems:
            failed.append((cid, rc, problems, text))
        elif known:
            xpass.append((cid, known))
    for cid, rc, problems, text in failed:
        print(f"FAIL {cid} (exit {rc}): " + "; ".join(problems))
        for line in text.strip().splitlines()[-6:]:
            print("    | " + line[:300])
    for cid, rc, problems, known, text in xfail:
        print(f"XFAIL {cid} (exit {rc}): " + "; ".join(problems) + f" [known: {known}]")
        for line in text.strip().splitlines()[-3:]:
            print("    | " + line[:300])
    for cid, known in xpass:
        print(f"XPASS {cid}: passes now; remove it from KNOWN_FAILURES ({known})")
    print("file_states: per-command bound (slowest case): " + ", ".join(
        f"{c} {ALL_COMMANDS[c][1]} s ({slowest[c][0]:.1f} s {slowest[c][1].rsplit('.', 1)[0]})"
        for c in ALL_COMMANDS if c in slowest))
    total = {}
    for cid, _, secs, _, _ in results:
        cmd = cid.rsplit(".", 1)[1]
        total[cmd] = total.get(cmd, 0.0) + secs
    print("file_states: time by command (sum over its cases): " + ", ".join(
        f"{c} {total[c]:.0f} s" for c in ALL_COMMANDS if c in total))
    print("file_states: exit codes: " + ", ".join(
        f"{'timeout' if k is None else k}: {v}" for k, v in sorted(by_exit.items(),
                                                                  key=lambda kv: str(kv[0]))))
    for n in notes:
        print("file_states: note: " + n)
    print(f"file_states: {len(results)} cases in {wall:.0f} s: {len(results) - len(failed) - len(xfail)}"
          f" passed, {len(failed)} failed, {len(xfail)} known failures, {len(xpass)} unexpected"
          " passes")
    return 1 if failed or xpass else 0


if __name__ == "__main__":
    sys.exit(main())
