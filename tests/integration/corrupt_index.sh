#!/usr/bin/env bash
# A cache whose index has a corrupt b-tree page (builds fail with "database
# disk image is malformed"): kiln check fails naming the index and the fix,
# kiln doctor FAILs it with `kiln cache verify --repair`, kiln cache verify
# reports it (PRAGMA quick_check) and changes nothing, and verify --repair
# salvages every readable record whose blob verifies into a new index, keeps
# the old one in quarantine/, lists what was lost; the next build rebuilds
# only that. A repair is refused while another process has the index open.
. "$(dirname "$0")/lib.sh" "$@"

FULL=$(fixture full)
ARCH=(--arch 80,90+ptx --kernels 'scaled_*') # the full fixture's 9 (unit, target) pairs
export KILN_CUDA_LIBRARY=$T/no-libcuda.so   # doctor: no GPU checks
LOST_UNIT=scaled_masked_softmax LOST_TARGET=sm_90

# corrupted DIR: a copy of the full fixture whose index has 512-byte pages
# (one record a leaf page) and whose leaf holding LOST_UNIT/LOST_TARGET has
# a garbage page header. Prints that record's key.
corrupted() {
  copy_cache "$FULL" "$1"
  python3 - "$1/index.sqlite" "$LOST_UNIT" "$LOST_TARGET" <<'PY'
import sqlite3, sys
path, unit, target = sys.argv[1:]
db = sqlite3.connect(path, isolation_level=None)
for s in ("PRAGMA journal_mode=DELETE", "PRAGMA page_size=512", "VACUUM", "PRAGMA journal_mode=WAL"):
    db.execute(s)
rowid, key = db.execute("SELECT rowid, key FROM records WHERE unit = ? AND target = ?", (unit, target)).fetchone()
root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'records'").fetchone()[0]
db.close()  # the last connection: the -wal is checkpointed into the file and removed
b = bytearray(open(path, "rb").read())
ps = int.from_bytes(b[16:18], "big")
def varint(i):
    v = 0
    for k in range(9):
        v = (v << 7) | (b[i + k] & 0x7F) if k < 8 else (v << 8) | b[i + k]
        if k < 8 and not b[i + k] & 0x80: break
    return v
page = root  # down the table b-tree to the leaf that holds rowid
while True:
    off = (page - 1) * ps
    h = off + (100 if page == 1 else 0)
    if b[h] == 0x0D: break
    assert b[h] == 0x05, f"page {page}: type {b[h]}"
    child = int.from_bytes(b[h + 8:h + 12], "big")
    for c in range(int.from_bytes(b[h + 3:h + 5], "big")):
        cell = off + int.from_bytes(b[h + 12 + 2 * c:h + 14 + 2 * c], "big")
        if rowid <= varint(cell + 4):
            child = int.from_bytes(b[cell:cell + 4], "big")
            break
    page = child
assert page != root, "the records table fits in one page: nothing else would survive"
b[h:h + 8] = b"\xff" * 8
open(path, "r+b").write(b)
print(key)
PY
}
# quick_check DIR: sqlite's verdict on DIR's index ("ok", a finding, or its error).
quick_check() {
  python3 -c 'import sqlite3, sys
try:
    db = sqlite3.connect("file:" + sys.argv[1] + "/index.sqlite?mode=ro&immutable=1", uri=True)
    print(db.execute("PRAGMA quick_check").fetchone()[0])
except sqlite3.DatabaseError as e:
    print(e)' "$1"
}

C=$T/c
lost_key=$(corrupted "$C")
[[ $lost_key =~ ^[0-9a-f]{64}$ ]] || die "could not corrupt the index: $lost_key"
[[ $(quick_check "$C") != ok ]] || die "the corruption made is not one quick_check finds"
log "the index made: $(quick_check "$C")"

log "the corruption is real: a build from that cache fails with sqlite's malformed error"
copy_cache "$C" "$T/b"
expect_exit 1 kiln build "${ARCH[@]}" --cache "$T/b"
expect_stderr_contains "database disk image is malformed"

log "kiln check: fails (exit 2), naming the index and the fix; nothing changes"
before=$(tree_sum "$C")
expect_exit 2 kiln check "${ARCH[@]}" --cache "$C"
expect_stderr_contains "$C/index.sqlite is corrupt"
expect_stderr_contains "kiln cache verify --repair --cache $C"

log "kiln doctor: cache_dir FAIL, fix kiln cache verify --repair; nothing changes"
expect_exit 2 kiln doctor --cache "$C" --json
expect_eq "$(json "$OUT" "[c['status'] for c in d['checks'] if c['id'] == 'cache_dir'][0]")" FAIL "doctor's cache_dir"
expect_eq "$(json "$OUT" "'kiln cache verify --repair --cache $C' in [c['fix'] for c in d['checks'] if c['id'] == 'cache_dir'][0]")" true "doctor's fix"
expect_exit 0 kiln probe --cache "$C" --json
expect_eq "$(json "$OUT" '"is corrupt" in d["cache_error"]')" true "probe's cache_error"
expect_eq "$(tree_sum "$C")" "$before" "the cache after check, doctor and probe"

log "kiln cache verify: reports the index (exit 1), never that a build would fix it; blobs untouched"
cas_before=$(tree_sum "$C/cas")
expect_exit 1 kiln cache verify --cache "$C"
expect_stdout_contains "BAD $C/index.sqlite: index corrupt"
expect_stdout_contains "kiln cache verify --repair --cache $C"
grep -q "the next kiln build rebuilds" "$OUT" && fail "verify promised that a build fixes a corrupt index"
expect_exit 1 kiln cache verify --cache "$C" --json
expect_eq "$(json "$OUT" '[d["index_corrupt"], d["bad"]]')" "[true, 1]" "verify --json"
expect_eq "$(tree_sum "$C/cas")" "$cas_before" "cas/ after verify"
[[ -z $(ls -A "$C/quarantine") ]] || fail "verify without --repair quarantined: $(ls "$C/quarantine")"

log "verify --repair while another process has the index open: refused, nothing changed"
mkfifo "$T/go" "$T/ready"
python3 - "$C/index.sqlite" "$T/ready" "$T/go" <<'PY' &
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # holds its shared lock from here
open(sys.argv[2], "w").write("ready\n")
open(sys.argv[3]).read()
db.close()
PY
holder=$!
BG_PIDS+=($holder)
timeout 30 cat "$T/ready" >/dev/null || die "the holder did not start"
held=$(tree_sum "$C" | grep -v 'index.sqlite-shm\|^\. d ')
expect_exit 1 kiln cache verify --repair --cache "$C"
expect_stderr_contains "in use by another process"
expect_eq "$(tree_sum "$C" | grep -v 'index.sqlite-shm\|^\. d ')" "$held" "the cache after a refused repair"
echo go >"$T/go"
wait "$holder" || fail "the holder failed"

log "verify --repair: 8 records kept, the unreadable one named; the old index kept in quarantine/"
old_sum=$(sha256sum <"$C/index.sqlite")
expect_exit 0 kiln cache verify --repair --cache "$C" --json
cp "$OUT" "$T/repair.json"
expect_eq "$(json "$T/repair.json" '[d["repair"]["repaired"], d["repair"]["kept"], d["bad"], d["index_corrupt"]]')" \
  "[true, 8, 0, false]" "repair --json (repaired, kept; then verify's bad and index_corrupt)"
expect_eq "$(json "$T/repair.json" '[(l["key"], l["unit"], l["why"]) for l in d["repair"]["lost"]]')" \
  "[[\"$lost_key\", null, \"record unreadable\"]]" "the record lost"
moved=$(json "$T/repair.json" 'd["repair"]["moved_to"]')
[[ $moved == "$C"/quarantine/index.sqlite.* ]] || fail "the old index went to '$moved'"
expect_eq "$(sha256sum <"$moved")" "$old_sum" "the old index, kept as it was"
expect_eq "$(quick_check "$C")" ok "quick_check of the new index"
expect_eq "$(index_query "$C" 'SELECT count(*) FROM records')" 8 "records in the new index"
expect_eq "$(index_query "$C" 'PRAGMA user_version')" "$(unset KILN_CUDA_LIBRARY; kiln --version | sed -n 's/^cache schema //p')" "the new index's schema"
[[ -z $(ls -A "$C/tmp") ]] || fail "repair left files in tmp/: $(ls "$C/tmp")"

log "the next build rebuilds only what was lost; check then passes"
expect_exit 0 kiln build "${ARCH[@]}" --cache "$C" --json
expect_eq "$(json "$OUT" '[d["targets"], d["hits"], d["built"], d["failed"]]')" "[9, 8, 1, 0]" "build after the repair"
expect_eq "$(json "$OUT" '[(i["unit"], i["target"]) for i in d["items"] if i["outcome"] == "built"]')" \
  "[[\"$LOST_UNIT\", \"$LOST_TARGET\"]]" "the one built"
expect_exit 0 kiln check "${ARCH[@]}" --cache "$C"

log "verify --repair in text: what was kept and lost, and where the old index went"
D=$T/d
corrupted "$D" >/dev/null
expect_exit 0 kiln cache verify --repair --cache "$D"
expect_stdout_contains "REPAIRED the index"
expect_stdout_contains "the old one is kept as $D/quarantine/index.sqlite."
expect_stdout_contains "LOST key $lost_key: record unreadable"
expect_stdout_contains "kept 8 records, lost 1"

log "an index sqlite cannot read at all (its header overwritten): repaired, every record lost"
Z=$T/z
copy_cache "$FULL" "$Z"
printf 'this is not a database, not at all' | dd of="$Z/index.sqlite" conv=notrunc status=none
expect_exit 2 kiln check "${ARCH[@]}" --cache "$Z"
expect_stderr_contains "kiln cache verify --repair --cache $Z"
expect_exit 1 kiln cache ls --cache "$Z"
expect_stderr_contains "kiln cache verify --repair --cache $Z"
expect_exit 0 kiln cache verify --repair --cache "$Z" --json
expect_eq "$(json "$OUT" '[d["repair"]["repaired"], d["repair"]["kept"], d["bad"]]')" "[true, 0, 0]" "repair of an unreadable index"
expect_exit 1 kiln check "${ARCH[@]}" --cache "$Z"
expect_stderr_contains "MISSING"

log "a sound index: --repair changes nothing but verifies as usual"
H=$T/h
copy_cache "$FULL" "$H"
expect_exit 0 kiln cache verify --repair --cache "$H" --json
expect_eq "$(json "$OUT" '[d["repair"]["repaired"], d["repair"]["moved_to"], d["bad"]]')" "[false, null, 0]" "repair of a sound index"
[[ -z $(ls -A "$H/quarantine") ]] || fail "a sound index was moved aside"

log "--repair belongs to verify"
expect_exit 2 kiln cache ls --repair --cache "$H"
expect_stderr_contains "--repair is for 'kiln cache verify'"
