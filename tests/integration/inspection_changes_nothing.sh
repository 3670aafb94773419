#!/usr/bin/env bash
# kiln doctor, check, probe, cache ls and cache stats (text and --json) change nothing, byte for
# byte, directory metadata included, in: an empty directory, a path that does
# not exist, a cache whose index is an older kiln's (schema 2, rollback
# journal), a warm cache, and a warm cache whose index another process holds
# open with rows only in its -wal. None of them is created, migrated (schema,
# journal mode) or written (last-used times, -wal/-shm files).
. "$(dirname "$0")/lib.sh" "$@"

WARM=$(fixture warm)
if [[ -f ${IT_FAKECUDA:-} ]]; then # probe's per-unit answers need a GPU
  export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
else
  export KILN_CUDA_LIBRARY=$T/no-libcuda.so
fi

# sqlite_meta DIR: user_version and the header's journal byte (1 rollback, 2 WAL), read from the file.
sqlite_meta() {
  python3 -c 'import sys
b = open(sys.argv[1] + "/index.sqlite", "rb").read(100)
print(int.from_bytes(b[60:64], "big"), b[18])' "$1"
}

# inspect WHERE DIR: every inspection, text and JSON, against DIR; WHERE (DIR
# or its parent) must be the same tree afterwards. Exit statuses are
# checked by the callers through the expect_* calls below.
inspect() {
  local where=$1 dir=$2 before
  before=$(tree_sum "$where" | grep -v "${SKIP_SHM:-^$}" || true)
  for fmt in "" --json; do
    RC=0; kiln doctor --cache "$dir" $fmt >"$T/doctor$fmt.out" 2>"$T/doctor$fmt.err" || RC=$?
    echo "$RC" >"$T/doctor$fmt.rc"
    RC=0; kiln check --arch 90 --kernels scaled_softmax --cache "$dir" $fmt >"$T/check$fmt.out" \
      2>"$T/check$fmt.err" || RC=$?
    echo "$RC" >"$T/check$fmt.rc"
    RC=0; kiln probe --cache "$dir" $fmt >"$T/probe$fmt.out" 2>"$T/probe$fmt.err" || RC=$?
    echo "$RC" >"$T/probe$fmt.rc"
    for verb in ls stats; do
      RC=0; kiln cache $verb --cache "$dir" $fmt >"$T/$verb$fmt.out" 2>"$T/$verb$fmt.err" || RC=$?
      echo "$RC" >"$T/$verb$fmt.rc"
    done
  done
  diff -u <(echo "$before") <(tree_sum "$where" | grep -v "${SKIP_SHM:-^$}" || true) >&2 ||
    fail "$dir changed (names, modes, sizes, mtimes or bytes) under kiln doctor, check, probe, cache ls or stats"
}
rc_of() { cat "$T/$1.rc"; }
cache_status() { json "$T/doctor--json.out" "[c['status'] for c in d['checks'] if c['id'] == '$1'][0]"; }

log "an empty directory: read as an empty cache, not made into one"
E=$T/empty
new_cache "$E"
inspect "$E" "$E"
expect_eq "$(find "$E" -mindepth 1 | wc -l)" 0 "files in the empty directory"
expect_eq "$(rc_of check)" 1 "kiln check on an empty directory (the pair is missing)"
grep -q "MISSING scaled_softmax for sm_90" "$T/check.err" || fail "check: $(cat "$T/check.err")"
expect_eq "$(cache_status cache_dir)" PASS "doctor's cache_dir on an empty directory"
grep -q "no cache in it yet" "$T/doctor.out" || fail "doctor: $(cat "$T/doctor.out")"
expect_eq "$(rc_of probe)" 0 "kiln probe"
expect_eq "$(rc_of stats--json)" 0 "kiln cache stats on an empty directory"
expect_eq "$(json "$T/stats--json.out" 'd["records"]')" 0 "cache stats: records in an empty directory"
expect_eq "$(json "$T/probe--json.out" '[d.get("cache_error"), d["caches"][0]["records"]]')" "[null, 0]" "probe on an empty directory"

log "a path that does not exist: not created"
P=$T/parent
mkdir -m 700 "$P"
inspect "$P" "$P/none"
[[ ! -e $P/none ]] || fail "$P/none was created"
expect_eq "$(rc_of check--json)" 2 "kiln check on a missing directory"
grep -q "does not exist" "$T/check--json.err" || fail "check: $(cat "$T/check--json.err")"
expect_eq "$(cache_status cache_dir)" PASS "doctor's cache_dir on a missing directory"
expect_eq "$(json "$T/probe--json.out" '"does not exist" in d["cache_error"]')" true "probe's cache_error"

log "an older kiln's cache (schema 2, rollback journal): read as it is, not upgraded"
S=$T/schema2
copy_cache "$WARM" "$S"
python3 - "$S/index.sqlite" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("DROP TABLE remote_stats")
db.execute("DROP TABLE conflicts")
db.execute("PRAGMA user_version=2")
db.execute("PRAGMA journal_mode=DELETE")
db.close()
PY
expect_eq "$(sqlite_meta "$S")" "2 1" "the schema-2 index made for the test (version, journal)"
inspect "$S" "$S"
expect_eq "$(sqlite_meta "$S")" "2 1" "the schema-2 index after the inspections (version, journal)"
expect_eq "$(rc_of check)" 0 "kiln check on the schema-2 cache (its record covers sm_90)"
expect_eq "$(json "$T/ls--json.out" 'len(d)')" 1 "cache ls on the schema-2 cache"
expect_eq "$(json "$T/check--json.out" 'd["ok"]')" true "check --json on the schema-2 cache"
expect_eq "$(cache_status cache_dir)" PASS "doctor's cache_dir on the schema-2 cache"
expect_eq "$(cache_status conflicts)" PASS "doctor's conflicts (a table schema 2 lacks) on the schema-2 cache"
expect_eq "$(json "$T/probe--json.out" 'd["caches"][0]["records"]')" 1 "probe's records in the schema-2 cache"

log "a warm cache (WAL, no -wal file): nothing changes, last-used times included"
W=$T/warm
copy_cache "$WARM" "$W"
# Every last_used a day old, so a last-used update would write; and no
# -wal/-shm to start from, whatever the fixture held when it was copied
# (sqlite deletes both when the last connection of a checkpointed WAL closes).
python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.execute("UPDATE records SET last_used = last_used - 86400")
db.commit(); db.execute("PRAGMA wal_checkpoint(TRUNCATE)"); db.close()' "$W/index.sqlite"
[[ -e $W/index.sqlite-wal || -e $W/index.sqlite-shm ]] && die "could not clear $W's -wal/-shm"
touch -d '2 days ago' "$W/index.sqlite" # a last_used update would move it
inspect "$W" "$W"
expect_eq "$(rc_of check)" 0 "kiln check on the warm cache"
expect_eq "$(rc_of check--json)" 0 "kiln check --json on the warm cache"
expect_eq "$(rc_of ls)$(rc_of stats)" 00 "kiln cache ls and stats on the warm cache"
expect_eq "$(cache_status cache_dir)" PASS "doctor's cache_dir on the warm cache"
expect_eq "$(json "$T/probe--json.out" 'd["caches"][0]["records"]')" 1 "probe's records in the warm cache"
[[ -e $W/index.sqlite-wal || -e $W/index.sqlite-shm ]] && fail "sqlite's -wal/-shm left in $W"

log "a warm cache held open by a writer whose change is only in the -wal: read through it, files kept"
H=$T/held
copy_cache "$WARM" "$H"
mkfifo "$T/go" "$T/ready"
python3 - "$H/index.sqlite" "$T/ready" "$T/go" <<'PY' &
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("DELETE FROM records")  # committed, in the -wal only
open(sys.argv[2], "w").write("ready\n")
open(sys.argv[3]).read()  # held open until the test says go
db.close()
PY
BG_PIDS+=($!)
holder=$!
timeout 30 cat "$T/ready" >/dev/null || die "the writer did not start"
[[ -s $H/index.sqlite-wal && -e $H/index.sqlite-shm ]] || fail "the writer left no -wal/-shm"
# The -shm is sqlite's shared memory: every reader takes its read marks
# there, so its bytes are left out; everything else (the -wal included) is kept.
SKIP_SHM=index.sqlite-shm inspect "$H" "$H"
expect_eq "$(rc_of check)" 1 "kiln check on a cache whose only record was deleted in the -wal"
expect_eq "$(json "$T/ls--json.out" 'len(d)')" 0 "cache ls reads through the -wal"
expect_eq "$(json "$T/probe--json.out" 'd["caches"][0]["records"]')" 0 "probe's records (read through the -wal)"
echo go >"$T/go"
wait "$holder" || fail "the writer failed"
