#!/usr/bin/env python3
"""The file-state matrix (issue 20): every file and directory a cache holds, put
in turn into every bad state, under every kiln command and the loader.

The cases are generated, not written: TARGETS x STATES x COMMANDS, less the
pairs that mean nothing (a directory cannot be cut short, nor made into a
directory). Each case gets its own copy of the fixture cache (the "small"
one: bias_gelu for sm_90, whose compile and known-answer test take a second,
so a case that rebuilds costs little), puts one state at one target, and runs
one command under the command's bound. --pairs runs one case per (target,
state) pair instead, the commands taken in turn, so every pair and every
command is still met (the sanitizer build's subset). It passes when:

  - the command ends within its bound, by exit (no signal) with 0, 1 or 2, and
    no sanitizer report is in its output;
  - when it exits non-zero, its stdout or stderr names the file: the target's
    absolute path, or its path inside the cache (e.g. "cas/53/ed8c...",
    "index.sqlite-wal"), or for a blob its digest; the fan-out, tmp/ and
    quarantine/ directories by absolute path or by a path inside the cache
    that passes through them ("cas/53/", "tmp/", "quarantine/"); a layer's
    index by its absolute path or the layer's directory;
  - nothing outside the cache changed: the folder "outside" beside it (the
    symlink state's target, a copy of what the link replaced, and a sentinel
    file and directory) has the same entries, modes, sizes, mtimes and bytes;
  - every image the (fake) driver loaded is a blob of the fixture, unaltered:
    each "load ok ... sha256=X" line of KILN_FAKE_CUDA_LOG has X among the
    fixture's artifact digests.

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
# transaction is still in index.sqlite-wal, with its -shm) or "layer" (a read-only layer in
# KILN_CACHE_PATH over an empty primary). The path is resolved against the case's copy.
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
}

STATES = ["fifo", "symlink_out", "directory", "empty", "truncated", "garbage", "sparse_4g",
          "unreadable"]
NOT_FOR_DIRS = {"directory", "truncated"}  # a directory is one already, and has no length

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
# the list cannot go stale. Empty: every defect the matrix found is fixed (issue 20).
KNOWN_FAILURES = {}

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "UndefinedBehaviorSanitizer")


def cases():
    for t, (kind, _) in TARGETS.items():
        for s in STATES:
            if kind == "dir" and s in NOT_FOR_DIRS:
                continue
            for c in COMMANDS:
                yield t, s, c


def pairs():
    """One case per (target, state), the commands in turn: every pair and every command."""
    names = list(COMMANDS)
    seen = []
    for t, s, _ in cases():
        if (t, s) not in seen:
            seen.append((t, s))
    return [(t, s, names[i % len(names)]) for i, (t, s) in enumerate(seen)]


# ---- the fixture --------------------------------------------------------------------------------

def artifact_records(cache):
    db = sqlite3.connect(f"file:{cache}/index.sqlite?mode=ro", uri=True)
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
    if where == "layer":
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
    args, bound = COMMANDS[command]
    argv = [env.kiln] + args + ["--cache", primary]
    if where == "layer" and command in CACHES_AS_LAYERS:  # KILN_CACHE_PATH is ignored there
        argv += ["--cache", root]
    if state == "unreadable" and env.drop_caps:
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
        problems.append("a file outside the cache changed (%s)" % outside)
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
    env.wal_base = os.path.join(a.work, "wal-base")
    make_wal_base(a.fixture, env.wal_base)
    env.base_env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.base_env.update(KILN_CUDA_LIBRARY=a.fakecuda, KILN_FAKE_CUDA_DEVICES="90",
                        XDG_CACHE_HOME=os.path.join(a.work, "xdg"))
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):  # a report is found in the output, any exit
        env.base_env[var] = ":".join(filter(None, [env.base_env.get(var), "exitcode=86"]))
    env.drop_caps = drop_caps_prefix()
    os.makedirs(env.work)

    todo = [c for c in (pairs() if a.pairs else cases()) if fnmatch.fnmatch(".".join(c), a.only)]
    notes = []
    if env.drop_caps is None:
        todo = [c for c in todo if c[1] != "unreadable"]
        notes.append("the unreadable state is skipped: running as root, and setpriv cannot drop "
                     "the capabilities that let root read a mode-000 file")
    if a.list:
        print("\n".join(".".join(c) for c in todo))
        return 0
    n_targets, n_states, n_cmds = len(TARGETS), len(STATES), len(COMMANDS)
    print(f"file_states: {n_targets} targets x {n_states} states x {n_cmds} commands, "
          f"{len(list(cases()))} cases (directories skip {sorted(NOT_FOR_DIRS)}), "
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
        f"{c} {COMMANDS[c][1]} s ({slowest[c][0]:.1f} s {slowest[c][1].rsplit('.', 1)[0]})"
        for c in COMMANDS if c in slowest))
    total = {}
    for cid, _, secs, _, _ in results:
        cmd = cid.rsplit(".", 1)[1]
        total[cmd] = total.get(cmd, 0.0) + secs
    print("file_states: time by command (sum over its cases): " + ", ".join(
        f"{c} {total[c]:.0f} s" for c in COMMANDS if c in total))
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
