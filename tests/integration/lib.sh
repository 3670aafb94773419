# Shared helpers for kiln's integration tests. Source it first thing:
#
#   . "$(dirname "$0")/lib.sh" "$@"      # $1: the kiln binary, $2: the fixture folder
#
# It gives every test:
#   $KILN_BIN, $FIXTURES     the binary under test; the folder the fixture caches live in
#   $T                       a private temp folder (0700), removed on exit
#   kiln ARGS...             the binary under a bounded wait ($IT_TIMEOUT s, default 300)
#   expect_exit CODE CMD...  runs CMD, keeps its output in $OUT / $ERR and its status in
#                            $RC, and checks the status
#   expect_stderr_contains / expect_stdout_contains STRING [WHY], expect_eq GOT WANT WHAT
#   fail MSG (recorded, the test goes on), die MSG (stops now), skip MSG (exit 77)
#   at_exit CMD              cleanup (unmounts...), run before $T is removed
#   BG_PIDS+=(pid)           background processes killed if the test ends early
#   wait_for SECS WHAT CMD.. polls CMD until it succeeds, bounded
#   json FILE EXPR           a Python expression over the JSON in FILE (as d), printed
#   index_query DIR SQL      rows of DIR/index.sqlite, tab-separated (private copies only)
#   fixture NAME, copy_cache SRC DST, subset_cache SRC ARCH GLOB DST, new_cache DIR,
#   cache_state DIR, tree_sum DIR, tmp_files DIR, blob_path DIR DIGEST
#   masked CMD...            CMD in a mount namespace with the paths in HIDE hidden (default:
#                            the CUDA toolkit) and the variables in HIDE_ENV unset;
#                            require_masking skips where that cannot be done
# Failures are counted rather than fatal, so one run shows every broken check;
# the test exits 1 at the end if any was recorded.
set -euo pipefail

# The operator's environment must not leak in (KILN_CACHE_PATH, KILN_JOBS...).
for v in $(compgen -e | grep '^KILN_' || true); do unset "$v"; done

KILN_BIN=$(realpath -e "${1:?usage: $0 KILN_BINARY [FIXTURE_DIR]}")
FIXTURES=${2:+$(realpath -m "$2")}
IT_TIMEOUT=${IT_TIMEOUT:-300}
TEST_NAME=$(basename "$0" .sh)
FAILURES=0
CLEANUPS=()
BG_PIDS=()

[[ -x $KILN_BIN ]] || { echo "$TEST_NAME: $KILN_BIN is not an executable" >&2; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-it-$TEST_NAME.XXXXXX")
chmod 700 "$T"
export XDG_CACHE_HOME=$T/xdg-cache # kiln's default cache, were a test to forget --cache
OUT=$T/.out
ERR=$T/.err

on_exit() {
  local rc=$? i
  set +e
  if ((${#BG_PIDS[@]})); then # TERM first: timeout(1) passes it on to its child
    kill -TERM "${BG_PIDS[@]}" 2>/dev/null
    sleep 0.5
    kill -KILL "${BG_PIDS[@]}" 2>/dev/null
  fi
  for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${CLEANUPS[i]}"; done
  rm -rf "$T"
  if ((rc == 0 && FAILURES > 0)); then rc=1; fi
  if ((rc == 0)); then echo "$TEST_NAME: PASS"
  elif ((rc == 77)); then echo "$TEST_NAME: SKIPPED"
  else echo "$TEST_NAME: FAILED ($FAILURES failed checks, exit $rc)"; fi
  exit "$rc"
}
trap on_exit EXIT
# Runs CMD (a string) when the test ends, last registered first.
at_exit() { CLEANUPS+=("$1"); }

log() { printf '%s: %s\n' "$TEST_NAME" "$*"; }
fail() {
  FAILURES=$((FAILURES + 1))
  printf 'FAIL: %s\n' "$*" >&2
}
die() {
  printf 'FATAL: %s\n' "$*" >&2
  exit 1
}
skip() {
  printf 'SKIP: %s\n' "$*"
  exit 77
}

kiln() { timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" "$@"; }

# expect_exit CODE CMD...: stdout goes to $OUT, stderr to $ERR; $RC is the status.
expect_exit() {
  local want=$1
  shift
  RC=0
  "$@" >"$OUT" 2>"$ERR" || RC=$?
  if [[ $RC != "$want" ]]; then
    fail "'$*' exited $RC, expected $want"
    sed 's/^/  stderr| /' "$ERR" | head -20 >&2
    return 0
  fi
  if ((RC == 124)); then fail "'$*' timed out"; fi
}
expect_stderr_contains() {
  grep -qF -- "$1" "$ERR" || {
    fail "stderr lacks '$1'${2:+ ($2)}"
    sed 's/^/  stderr| /' "$ERR" | head -20 >&2
  }
}
expect_stdout_contains() {
  grep -qF -- "$1" "$OUT" || {
    fail "stdout lacks '$1'${2:+ ($2)}"
    sed 's/^/  stdout| /' "$OUT" | head -20 >&2
  }
}
# expect_eq ACTUAL EXPECTED WHAT
expect_eq() {
  [[ $1 == "$2" ]] || fail "$3: got '$1', expected '$2'"
}
# expect_true WHAT CMD...
expect_true() {
  local what=$1
  shift
  "$@" || fail "$what"
}

# The interpreter itself (not a version manager's shim, which costs a
# fraction of a CPU second at every start), for the helpers run many times.
PY=$(python3 -c 'import sys; print(sys.executable)')
# json FILE EXPR: evaluates EXPR with d = the parsed JSON and prints the result.
json() {
  "$PY" -I -S -c 'import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit(f"<{sys.argv[1]} holds no JSON: {e}>")
v = eval(sys.argv[2])
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)' "$1" "$2"
}

# index_query DIR SQL: rows of DIR/index.sqlite, columns tab-separated. It opens
# the index as kiln does (a read-only connection would leave -wal and -shm files
# behind): use it on private copies, never on a fixture or a read-only layer.
index_query() {
  [[ -f $1/index.sqlite ]] || { echo "index_query: no $1/index.sqlite" >&2; return 1; }
  python3 -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "/index.sqlite?mode=rw", uri=True, isolation_level=None)
for row in db.execute(sys.argv[2]):
    print("\t".join("" if v is None else str(v) for v in row))
db.close()' "$1" "$2"
}

# Number of files in DIR/tmp (temp files of writers).
tmp_files() { find "$1/tmp" -mindepth 1 2>/dev/null | wc -l; }

# new_cache DIR: an empty directory fit to be a cache (ours, 0700).
new_cache() { mkdir -p -m 700 "$1"; }

# copy_cache SRC DST: a private copy of a fixture cache.
copy_cache() {
  [[ -f $1/index.sqlite ]] || die "fixture cache $1 is missing (did its setup test run?)"
  mkdir -p "$(dirname "$2")"
  cp -a "$1" "$2"
}

# fixture NAME: the path of a fixture cache built by fixture_NAME.sh.
fixture() {
  [[ -n $FIXTURES ]] || die "no fixture folder given"
  local d=$FIXTURES/$1
  [[ -f $d/index.sqlite ]] || die "fixture cache $d is missing (did integration.fixture_$1 run?)"
  printf '%s\n' "$d"
}

# tree_sum DIR: one line per entry: path, type, mode, size, mtime and content hash.
tree_sum() {
  (cd "$1" && find . -printf '%p %y %m %s %T@\n' | sort &&
    find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
}

# cache_state DIR: what a cache holds (records, blobs, temp and quarantined
# files), for before/after comparisons; sqlite's own files are left out, and
# so is last_used (a cache hit may refresh it).
cache_state() {
  index_query "$1" "SELECT key, unit, target, kind, digest, size, toolchain, options, build_ms,
    registers, spill_stores, spill_loads, shared_bytes, stack_bytes, log_digest, created
    FROM records ORDER BY key"
  index_query "$1" "SELECT * FROM failures ORDER BY key"
  (cd "$1" && find cas tmp quarantine -printf '%p %y %m %s\n' | sort)
}

# subset_cache SRC ARCH GLOB DST: a new cache DST holding SRC's records for the
# targets ARCH and the units GLOB, through `kiln cache export | import` (the
# way to take part of a fixture: SRC is read as a layer, never written; build
# logs are not carried, so log_digest is empty in DST).
subset_cache() {
  mkdir -p -m 700 "$T/.subset-primary"
  KILN_CACHE_PATH=$1 "$KILN_BIN" cache export "$T/.subset.tar" --arch "$2" --kernels "$3" \
    --cache "$T/.subset-primary" >/dev/null 2>"$T/.subset.err" &&
    "$KILN_BIN" cache import "$T/.subset.tar" --cache "$4" >/dev/null 2>>"$T/.subset.err" ||
    die "subset of $1 ($2, $3) into $4: $(cat "$T/.subset.err")"
  rm -f "$T/.subset.tar"
}

# blob_path DIR DIGEST
blob_path() { printf '%s/cas/%s/%s\n' "$1" "${2:0:2}" "${2:2}"; }

# wait_for SECONDS WHAT CMD...: polls CMD every 0.1 s until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || { fail "timed out after ${limit}s waiting for $what"; return 1; }
    sleep 0.1
  done
}

# ---- hiding paths: a mount namespace -----------------------------------------------
# masked CMD...: runs CMD (bounded: $MASK_TIMEOUT s, default 900) in a mount
# namespace (unshare -m) where every path in HIDE is hidden: a directory under
# an empty tmpfs, a file under /dev/null (a symbolic link: what it points to),
# with the variables named in HIDE_ENV unset and no PATH entry that names
# cuda. HIDE is every /usr/local/cuda* (the CUDA toolkit) and HIDE_ENV is
# CUDA_HOME and CUDA_PATH unless a test adds to them (HIDE+=(...)) before the
# call. require_masking skips (77) where that cannot be done.
HIDE=(/usr/local/cuda*)
HIDE_ENV=(CUDA_HOME CUDA_PATH)
require_masking() {
  [[ $(id -u) == 0 ]] || skip "needs root for unshare -m and mount"
  unshare -m true 2>/dev/null || skip "unshare -m is not permitted here"
}
masked() {
  timeout -k 10 "${MASK_TIMEOUT:-900}" unshare -m bash -c '
    set -e
    n=$1 m=$2
    shift 2
    for p in "${@:1:n}"; do
      [[ -e $p ]] || continue
      p=$(realpath -e "$p")
      if [[ -d $p ]]; then mount -t tmpfs -o size=1m,mode=755 kiln-hidden "$p"
      else mount --bind /dev/null "$p"; fi
    done
    for v in "${@:n+1:m}"; do unset "$v"; done
    shift $((n + m))
    PATH=$(printf %s "$PATH" | tr : "\n" | grep -v cuda | paste -sd:)
    export PATH
    exec "$@"' masked "${#HIDE[@]}" "${#HIDE_ENV[@]}" "${HIDE[@]}" "${HIDE_ENV[@]}" "$@"
}

# writer_cache BASE DIR: a cache of its own for a concurrent writer: BASE's
# index copied (a build writes it), its blobs hard-linked (immutable and
# content-addressed: an upload only reads them).
writer_cache() {
  mkdir -m 700 "$2"
  cp -a "$1/index.sqlite" "$1/tmp" "$1/quarantine" "$2/"
  cp -al "$1/cas" "$2/cas"
}

# gate_start N FN: N processes running `FN i` (i = 0..N-1), each held at a
# gate until every one has started, then released at once. Their pids go to
# GATE_PIDS (and BG_PIDS), the release's time to GATE_T0 ($EPOCHREALTIME).
gate_start() {
  local i gate
  GATE_PIDS=()
  exec {gate}>"$T/.gate"
  flock -x "$gate"
  for ((i = 0; i < $1; i++)); do
    (
      exec {gate}>&-
      timeout 60 flock -s "$T/.gate" true || exit 99
      "$2" "$i"
    ) &
    GATE_PIDS+=($!)
    BG_PIDS+=($!)
  done
  sleep 0.3 # every process is waiting at the gate
  GATE_T0=$EPOCHREALTIME
  exec {gate}>&-
}

# free_ports N: N free TCP ports of 127.0.0.1 (bound together, so distinct).
free_ports() {
  python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()' "$1"
}
