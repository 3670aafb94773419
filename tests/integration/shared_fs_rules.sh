#!/usr/bin/env bash
# No SQLite WAL index on a file system shared between hosts (docs/cache-format.md,
# "Shared file systems"), driven through the KILN_TEST_FSTYPE seam on this machine's
# own disk: every shared type (and FUSE rule) refuses a read-write primary before
# creating anything, every local one is used; a refused cache that holds an index
# names the export | import that moves it, and that command works; a default
# directory there moves to the node-local one (said at info); a read-only layer
# there is read immutable even with a pending -wal; a read-only inspection of a
# shared primary creates nothing; kiln doctor's cache_fs line for each. Real FUSE
# mounts: shared_fs_mounts.sh. No compile: the small fixture's one record.
. "$(dirname "$0")/lib.sh" "$@"

# index_files DIR: the index's -wal, -shm and -journal files in DIR, space-separated.
index_files() { find "$1" -maxdepth 1 -name 'index.sqlite-*' -printf '%f ' | sort; }
# state DIR: every file of DIR (mode, size, mtime, bytes), without the directory's own
# entry, whose mtime sqlite's -wal/-shm would change: they are checked by name instead.
state() { tree_sum "$1" | grep -v '^\. d '; }
# fs_lines: "STATUS summary" of each cache_fs check in $OUT (kiln doctor's text; python
# starts slowly, and a dozen doctor runs are read here).
fs_lines() { sed -n 's/^\([A-Z]*\)  cache_fs  *\(.*\)$/\1 \2/p' "$OUT"; }
# records DIR: the number of records kiln cache ls lists in DIR.
records() { kiln cache ls --cache "$1" | tail -n +2 | wc -l; }
# wal_only_row DIR: commits a record to DIR's index.sqlite-wal only (the writer dies
# before any checkpoint, leaving the -wal and -shm), as a writer on another host would.
wal_only_row() {
  python3 - "$1/index.sqlite" <<'PY'
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA wal_autocheckpoint=0")
cols = [r[1] for r in db.execute("PRAGMA table_info(records)")]
db.execute("INSERT INTO records SELECT " + ", ".join(
    "'" + "e" * 64 + "'" if c == "key" else "'walonly'" if c == "unit" else c for c in cols)
    + " FROM records LIMIT 1")
os._exit(0)  # no close: no checkpoint, the -wal and -shm stay
PY
  [[ -s $1/index.sqlite-wal && -e $1/index.sqlite-shm ]] || die "no pending -wal in $1"
}

S=$T/shared # what the seam marks shared in most cases below
mkdir -m 700 "$S"
export KILN_TEST_NODE_LOCAL_DIR=$T/node-local # never the user's /var/tmp/kiln-<uid>
export KILN_CUDA_LIBRARY=$T/no-libcuda.so     # doctor: no driver, quick
L=$T/local
copy_cache "$(fixture small)" "$L"
RECORDS=$(records "$L")
A=$T/small.tar
expect_exit 0 kiln cache export "$A" --cache "$L"

log "every shared type refuses a read-write primary before making anything (exit 2)"
for vt in nfs:nfs nfs4:nfs 0x6969:nfs lustre:lustre 0x0bd00bd0:lustre gpfs:gpfs beegfs:beegfs \
  ceph:ceph smb:smb cifs:cifs smb2:smb2 9p:9p afs:afs ocfs2:ocfs2 gfs2:gfs2 \
  fuse.sshfs:fuse.sshfs fuse.glusterfs:fuse.glusterfs fuse.bindfs:fuse.bindfs fuse:fuse \
  0x65735546:fuse; do
  v=${vt%%:*} type=${vt#*:}
  KILN_TEST_FSTYPE=$S=$v expect_exit 2 kiln cache import "$A" --cache "$S/new"
  expect_stderr_contains "cache directory $S/new is on $type (KILN_TEST_FSTYPE), a file system shared between hosts, where kiln's SQLite index is unsafe (WAL needs one host): use a node-local --cache / KILN_CACHE_DIR ($T/node-local) and share builds through the remote: --remote file://$S/new --upload (docs/remote-cache.md)" "$v"
  [[ ! -e $S/new ]] || fail "$v: $S/new was created"
done
KILN_TEST_FSTYPE=$S=nfs expect_exit 2 kiln build --kernels bias_gelu --arch 90 --cache "$S/new"
expect_stderr_contains "cache directory $S/new is on nfs (KILN_TEST_FSTYPE)" "kiln build"
KILN_TEST_FSTYPE=$S=nfs KILN_CACHE_DIR=$S/env expect_exit 2 kiln cache import "$A"
expect_stderr_contains "cache directory $S/env is on nfs" "KILN_CACHE_DIR is the user's choice: not moved"
if [[ -f ${IT_FAKECUDA:-} ]]; then # the loader's open too
  KILN_TEST_FSTYPE=$S=lustre KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 \
    expect_exit 1 kiln warmup --kernels bias_gelu --cache "$S/new" --offline # warmup: 2 is EINVAL only
  expect_stderr_contains "cache directory $S/new is on lustre (KILN_TEST_FSTYPE)" "kiln warmup"
fi
[[ ! -e $S/new && ! -e $S/env ]] || fail "a refused directory was created"

log "every local type is used: the import lands, no -wal/-shm is left"
for vt in ext4:ext4 xfs:xfs tmpfs:tmpfs overlay:overlay 0xef53:ext4 0x12345678:0x12345678 \
  fuse.fuse-overlayfs:fuse.fuse-overlayfs fuse.squashfuse:fuse.squashfuse \
  fuse.squashfuse_ll:fuse.squashfuse_ll fuse.lxcfs:fuse.lxcfs fuseblk:fuseblk; do
  v=${vt%%:*} type=${vt#*:} d=$S/ok-${vt%%:*}
  KILN_TEST_FSTYPE=$S=$v expect_exit 0 kiln cache import "$A" --cache "$d"
  expect_stdout_contains ": $RECORDS added" "$v"
  expect_eq "$(index_files "$d")" "" "$v: index files left"
done
KILN_TEST_FSTYPE=$S=fuse.fuse-overlayfs expect_exit 0 kiln doctor --cache "$S/ok-ext4"
expect_eq "$(fs_lines)" "PASS $S/ok-ext4: fuse.fuse-overlayfs (local), from KILN_TEST_FSTYPE" "doctor, local"
expect_exit 0 kiln doctor --cache "$L"
expect_true "doctor without the seam: a real type, not from KILN_TEST_FSTYPE" \
  grep -q "^PASS $L: [^ ]* (local)\$" <<<"$(fs_lines)"

log "a shared primary that holds an index: refused, names export | import, which works"
P=$S/prim
copy_cache "$L" "$P"
before=$(state "$P")
KILN_TEST_FSTYPE=$S=nfs expect_exit 2 kiln cache import "$A" --cache "$P"
msg="cache directory $P is on nfs (KILN_TEST_FSTYPE), a file system shared between hosts, where kiln's SQLite index is unsafe (WAL needs one host); kiln does not move the index it holds: copy its artifacts into a node-local cache with \`kiln cache export - --cache $P | kiln cache import - --cache $T/node-local\`, use that (--cache / KILN_CACHE_DIR), and share builds through the remote: --remote file://$P-remote --upload (docs/remote-cache.md)"
expect_stderr_contains "$msg"
# shellcheck disable=SC2016 # the backquotes are the message's, not a command
cmd=$(sed -n 's/.*`\(kiln cache export [^`]*\)`.*/\1/p' "$ERR") # run below, as it is
KILN_TEST_FSTYPE=$S=nfs expect_exit 2 kiln cache verify --repair --cache "$P"
expect_stderr_contains "kiln does not move the index it holds" "verify --repair writes the index too"
KILN_TEST_FSTYPE=$S=nfs expect_exit 2 kiln cache gc --max-size 1G --cache "$P"
expect_stderr_contains "cache directory $P is on nfs" "gc"
[[ -n $cmd ]] || fail "no command in the message"
KILN_TEST_FSTYPE=$S=nfs expect_exit 0 eval "$cmd" # `kiln` is lib.sh's; pipefail is on
expect_eq "$(records "$T/node-local")" "$RECORDS" "records moved by '$cmd'"
expect_eq "$(state "$P")" "$before" "the shared cache after the refusals and the export"
expect_eq "$(index_files "$P")" "" "index files in the shared cache"

log "reading a shared primary (check, ls, stats, export, doctor) creates nothing, not even -wal/-shm"
export KILN_TEST_FSTYPE=$S=nfs
expect_exit 0 kiln check --arch 90 --kernels bias_gelu --cache "$P"
expect_eq "$(records "$P")" "$RECORDS" "records listed"
expect_exit 0 kiln cache stats --cache "$P"
expect_exit 0 kiln cache export "$T/again.tar" --cache "$P"
expect_eq "$(state "$P")" "$before" "the shared cache after the inspections"
expect_eq "$(index_files "$P")" "" "index files after the inspections"
log "with a writer's pending -wal: read immutable (its row unseen, said at info), -shm untouched"
W=$S/prim-wal
copy_cache "$L" "$W"
wal_only_row "$W"
before=$(state "$W")
KILN_LOG=info expect_exit 0 kiln cache ls --cache "$W"
expect_eq "$(grep -c walonly "$OUT")" 0 "rows read that are only in the -wal"
expect_stderr_contains "cache $W is on nfs (KILN_TEST_FSTYPE), shared between hosts: its index is read immutable, so the rows only in its index.sqlite-wal are not read"
expect_eq "$(state "$W")" "$before" "the shared cache (its -wal and -shm too) after ls"

log "doctor: a shared primary FAILs cache_fs (exit 2) but doctor runs; a new one FAILs too"
expect_exit 2 kiln doctor --cache "$W" --json
expect_eq "$(json "$OUT" "[[c['status'], c['summary'], c['fix']] for c in d['checks'] if c['id'] in ('cache_dir', 'cache_fs')]")" \
  "[[\"PASS\", \"$W (0700, yours)\", null], [\"FAIL\", \"$W: nfs (shared), from KILN_TEST_FSTYPE; holds a WAL index, which kiln only reads there (immutable): builds refuse it (SQLite's WAL needs one host)\", \"copy its artifacts to a node-local cache: \`kiln cache export - --cache $W | kiln cache import - --cache $T/node-local\`, use that (KILN_CACHE_DIR), share through --remote file://$W-remote --upload\"]]" \
  "doctor --json: cache_dir and cache_fs of a shared primary"
expect_exit 2 kiln doctor --cache "$P"
expect_stdout_contains "FAIL  cache_fs          $P: nfs (shared), from KILN_TEST_FSTYPE; holds a WAL index"
expect_stdout_contains "fix: copy its artifacts to a node-local cache: \`kiln cache export - --cache $P |"
expect_exit 2 kiln doctor --cache "$S/none"
expect_eq "$(fs_lines)" "FAIL $S/none: nfs (shared), from KILN_TEST_FSTYPE; kiln refuses to make its index there (SQLite's WAL needs one host)" "doctor, new shared primary"
[[ ! -e $S/none ]] || fail "doctor created $S/none"
expect_eq "$(state "$W")" "$before" "the shared cache after doctor"

log "a read-only layer on a shared file system: immutable even with a pending -wal"
N=$T/primary
new_cache "$N"
KILN_LOG=info KILN_CACHE_PATH=$W expect_exit 0 kiln cache ls --cache "$N"
expect_eq "$(tail -n +2 "$OUT" | grep -c ' 1$')" "$RECORDS" "the layer's rows in index.sqlite"
expect_eq "$(grep -c walonly "$OUT")" 0 "the layer's rows only in its -wal"
expect_stderr_contains "read-only cache layer $W is on nfs (KILN_TEST_FSTYPE), shared between hosts: its index is read immutable, so the rows only in its index.sqlite-wal are not read"
expect_exit 0 kiln check --arch 90 --kernels bias_gelu --cache "$N" --cache "$W"
KILN_CACHE_PATH=$P expect_exit 0 kiln cache ls --cache "$N"
expect_eq "$(state "$W")" "$before" "the shared layer (its -wal and -shm too) after ls and check"
expect_eq "$(index_files "$P")" "" "index files in a shared layer without a -wal"
expect_exit 1 kiln doctor --cache "$N" --cache "$W" --cache "$P"
expect_eq "$(fs_lines | sed "1s|^PASS $N: [^ ]* (local)\$|PASS $N: <local>|")" "PASS $N: <local>
WARN $W: nfs (shared), from KILN_TEST_FSTYPE; read-only layer with an -wal/-shm (a writer has its WAL index open, or was killed): read immutable, the rows only in its -wal are not seen
PASS $P: nfs (shared), from KILN_TEST_FSTYPE; read-only layer, read immutable" "doctor, a primary and two layers"
log "the same layer on a local file system is read with its -wal (the row is real)"
KILN_TEST_FSTYPE=$S=ext4 KILN_CACHE_PATH=$W expect_exit 0 kiln cache ls --cache "$N"
expect_eq "$(grep -c walonly "$OUT")" 1 "the -wal's row, read on a local file system"
unset KILN_TEST_FSTYPE

log "the default directory on a shared file system moves to the node-local one (info)"
H=$T/home
mkdir -m 700 "$H"
rm -rf "$T/node-local"
home() { XDG_CACHE_HOME='' HOME=$H KILN_TEST_FSTYPE=$H=nfs "$@"; } # "" reads as unset
KILN_LOG=info home expect_exit 0 kiln cache import "$A"
expect_stderr_contains "kiln info: $H/.cache/kiln is on nfs (KILN_TEST_FSTYPE), shared between hosts: using the node-local $T/node-local for the index (SQLite's WAL needs one host); set KILN_CACHE_DIR to choose, and --remote file://... to share (docs/cache-format.md)"
expect_eq "$(records "$T/node-local")" "$RECORDS" "records in the node-local directory"
[[ ! -e $H/.cache ]] || fail "$H/.cache was created"
home expect_exit 0 kiln cache stats
expect_stdout_contains "cache:        $T/node-local" "kiln cache stats names the directory in use"
home expect_exit 0 kiln doctor
expect_eq "$(fs_lines | sed "s|^PASS $T/node-local: [^ ]* (local);|PASS <node-local>;|")" \
  "PASS <node-local>; the default $H/.cache/kiln is on nfs (KILN_TEST_FSTYPE), shared between hosts: the index is kept here instead" "doctor, a moved default"
KILN_LOG=info HOME=$H XDG_CACHE_HOME=$H/xdg KILN_TEST_FSTYPE=$H=nfs expect_exit 0 kiln cache stats
expect_stderr_contains "kiln info: $H/xdg/kiln is on nfs (KILN_TEST_FSTYPE), shared between hosts: using the node-local $T/node-local"
log "a default that holds a cache: the info line names the command that copies it"
copy_cache "$L" "$H/.cache/kiln"
KILN_LOG=info home expect_exit 0 kiln cache stats
expect_stderr_contains "; the cache already there is not used: \`kiln cache export - --cache $H/.cache/kiln | kiln cache import -\` copies it"
log "when the node-local directory is shared too, the default is refused instead"
XDG_CACHE_HOME='' HOME=$H KILN_TEST_FSTYPE=nfs expect_exit 2 kiln cache import "$A"
expect_stderr_contains "cache directory $H/.cache/kiln is on nfs (KILN_TEST_FSTYPE), a file system shared between hosts"
expect_stderr_contains "kiln cache import - --cache DIR on a local disk"
log "a node-local directory that is a symbolic link is refused, not followed"
rm -rf "$T/node-local" && mkdir -m 700 "$T/elsewhere" && ln -s "$T/elsewhere" "$T/node-local"
rm -rf "$H/.cache"
home expect_exit 1 kiln cache import "$A"
expect_stderr_contains "its node-local replacement $T/node-local is not a directory of its own"
expect_eq "$(ls -A "$T/elsewhere")" "" "what was written through the link"

log "a malformed KILN_TEST_FSTYPE entry: a warning, the others still apply"
KILN_TEST_FSTYPE="bogus,$S=nfs" expect_exit 2 kiln cache import "$A" --cache "$S/new"
expect_stderr_contains "KILN_TEST_FSTYPE: 'bogus' is not [DIR=]TYPE"
expect_stderr_contains "cache directory $S/new is on nfs"
