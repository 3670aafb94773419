#!/usr/bin/env bash
# kiln on real FUSE file systems (mount_lib.sh; DESIGN.md, "Shared file systems"):
# sshfs (served by an sshd of the test's own on 127.0.0.1), bindfs and fuse-overlayfs.
#  a. `kiln doctor --cache` on sshfs names the type: fuse.sshfs, shared (check cache_fs);
#  b. a primary cache there is refused ("shared between hosts", "--remote file://"),
#     through --cache and KILN_CACHE_DIR, an empty folder and a copied cache alike,
#     and nothing there is created or changed;
#  c. a cache copied there (the small fixture) is read as a layer (KILN_CACHE_PATH)
#     by build (a hit from layer 1), check and cache ls, and is not changed;
#  d. bindfs (type fuse) is shared as sshfs is; fuse-overlayfs (fuse.fuse-overlayfs)
#     is local: a primary cache there is used, imported into and verified;
#  e. a file:// remote on sshfs: --upload from a cache holding the fixture, then a
#     fresh cache fetches it (--remote, and KILN_REMOTE_URL) with nothing compiled.
# No SQLite -wal or -shm file ever appears on sshfs or bindfs: checked after every
# command, and by a poller that watches the folders behind the mounts throughout.
# Compiles nothing where kiln refuses as it should. Skips (77) without FUSE,
# sshfs or sshd; bindfs and fuse-overlayfs are left out (a line says so) where
# they do not mount.
IT_TIMEOUT=${IT_TIMEOUT:-60}
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mount_lib.sh"

SMALL=$(fixture small)
UNIT=bias_gelu
ARCH=90
build() { kiln build --arch "$ARCH" --kernels "$UNIT" --json "$@"; }
# run CMD...: expect_exit without an expected status ($RC, $OUT, $ERR); a timeout fails.
run() {
  RC=0
  "$@" >"$OUT" 2>"$ERR" || RC=$?
  if ((RC == 124 || RC == 137)); then fail "'$*' timed out"; fi
}
# expect_refused WHAT CMD...: CMD fails (not a timeout) saying why and what to use instead.
expect_refused() {
  local what=$1
  shift
  run "$@"
  if ((RC == 0)); then
    fail "$what: '$*' succeeded; a cache on a shared file system must be refused"
  else
    log "$what: refused, exit $RC: $(grep -m1 . "$ERR" || true)"
  fi
  expect_stderr_contains "shared between hosts" "$what"
  expect_stderr_contains "--remote file://" "$what"
}
# fs_summary: the summary of doctor's file-system check (cache_fs; the issue spelled
# it cache.fs) in $OUT (--json), or <none>.
fs_summary() {
  json "$OUT" '"; ".join(c["summary"] for c in d["checks"] if c["id"] in ("cache_fs", "cache.fs")) or "<none>"'
}
# expect_doctor_fs DIR WANT: `kiln doctor --cache DIR` says DIR's type WANT ("TYPE (shared)").
expect_doctor_fs() {
  run kiln doctor --cache "$1"
  ((RC <= 2)) || fail "doctor --cache $1 exited $RC"
  local type=${2%% *}
  expect_stdout_contains "$type" "doctor names the file-system type of $1"
  run kiln doctor --cache "$1" --json
  local s
  s=$(fs_summary || true)
  [[ $s == *"$2"* ]] || fail "doctor --cache $1: cache_fs says '$s', expected it to contain '$2'"
  log "doctor --cache $1: cache_fs: $s"
}

# SQLite's side files must never be made on a shared file system. The poller
# watches the folders behind the sshfs and bindfs mounts (the same files,
# read without FUSE) from start to end; no_side_files looks after each command.
mkdir -p -m 700 "$T/ssh-src" "$T/bind-src"
: >"$T/side-files.seen"
(while :; do
  find "$T/ssh-src" "$T/bind-src" \( -name '*-wal' -o -name '*-shm' \) -print 2>/dev/null
  sleep 0.05
done) >>"$T/side-files.seen" &
POLLER=$!
BG_PIDS+=("$POLLER")
SHARED_DIRS=("$T/ssh-src")
no_side_files() {
  local hits
  hits=$(find "${SHARED_DIRS[@]}" \( -name '*-wal' -o -name '*-shm' \) -print 2>/dev/null || true)
  [[ -z $hits ]] || fail "$1: SQLite side files on a shared file system: ${hits//$'\n'/ }"
}

[[ ! -e $SMALL/index.sqlite-wal ]] || die "the small fixture has an index.sqlite-wal: it was not closed cleanly"

sshfs_mount "$T/ssh-src" "$T/ssh"
S=$T/ssh
expect_eq "$MOUNT_FSTYPE" fuse.sshfs "the sshfs mount's type in mountinfo"
SHARED_DIRS+=("$S")

# ---- a. doctor names the type ----
new_cache "$S/c"
expect_doctor_fs "$S/c" "fuse.sshfs (shared)"
no_side_files "a. doctor"

# ---- b. a primary cache on sshfs is refused ----
cp -r "$SMALL" "$S/copy"
before=$(tree_sum "$T/ssh-src")
expect_refused "b. build --cache on sshfs" build --cache "$S/c"
no_side_files "b. build --cache"
KILN_CACHE_DIR=$S/c expect_refused "b. build with KILN_CACHE_DIR on sshfs" build
no_side_files "b. KILN_CACHE_DIR"
expect_refused "b. build --cache on a cache copied to sshfs" build --cache "$S/copy"
no_side_files "b. copied cache"
expect_eq "$(tree_sum "$T/ssh-src")" "$before" "b. the files on sshfs (an empty cache folder, a copied cache) after the refused builds"
[[ ! -e $S/c/index.sqlite ]] || fail "b. a refused build made $S/c/index.sqlite"

# ---- c. a cache copied to sshfs is a read-only layer ----
cp -r "$SMALL" "$S/layer"
no_side_files "c. cp -r"
layer_before=$(tree_sum "$T/ssh-src/layer")
new_cache "$T/L0"
KILN_CACHE_PATH=$S/layer expect_exit 0 build --cache "$T/L0"
expect_eq "$(json "$OUT" '[d["targets"], d["hits"], d["built"]]')" "[1, 1, 0]" "c. build over the layer: targets, hits, built"
expect_eq "$(json "$OUT" '[i["layer"] for i in d["items"]]')" "[1]" "c. build over the layer: the hit's layer"
KEY=$(json "$OUT" 'd["items"][0]["key"]' || true)
DIGEST=$(json "$OUT" 'd["items"][0]["digest"]' || true)
no_side_files "c. build"
KILN_CACHE_DIR=$T/L0 KILN_CACHE_PATH=$S/layer expect_exit 0 kiln check --arch "$ARCH" --kernels "$UNIT"
no_side_files "c. check"
KILN_CACHE_PATH=$S/layer expect_exit 0 kiln cache ls --cache "$T/L0" --json
expect_eq "$(json "$OUT" "[r['layer'] for r in d if r['key'] == '$KEY']")" "[1]" "c. cache ls: the layer's record"
no_side_files "c. cache ls"
expect_eq "$(tree_sum "$T/ssh-src/layer")" "$layer_before" "c. the layer's files after build, check and cache ls"
log "c. the layer on sshfs read by build, check and cache ls, unchanged"

# ---- e. a file:// remote on sshfs ----
mkdir -p "$S/remote"
copy_cache "$SMALL" "$T/R1"
expect_exit 0 build --cache "$T/R1" --remote "file://$S/remote" --upload
expect_eq "$(json "$OUT" '[d["targets"], d["hits"], d["built"], d["uploaded"]]')" "[1, 1, 0, 1]" \
  "e. upload: targets, hits, built, uploaded"
no_side_files "e. upload"
n=$(find "$T/ssh-src/remote" -type f 2>/dev/null | wc -l)
((n > 0)) || fail "e. upload: no file under the file:// remote"
new_cache "$T/R2"
expect_exit 0 build --cache "$T/R2" --remote "file://$S/remote"
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"], d["hits"], d["failed"]]')" "[1, 1, 0, 0, 0]" \
  "e. fetch: targets, fetched, built, hits, failed"
expect_eq "$(json "$OUT" '[(i["key"], i["digest"]) for i in d["items"]]')" "[[\"$KEY\", \"$DIGEST\"]]" \
  "e. fetch: key and digest"
no_side_files "e. fetch"
if [[ -f $T/R2/index.sqlite ]]; then
  expect_eq "$(index_query "$T/R2" "SELECT count(*) FROM builds")" 0 "e. fetch: compile runs in R2's builds log"
fi
expect_exit 0 kiln cache verify --cache "$T/R2" --json
new_cache "$T/R3"
KILN_REMOTE_URL=file://$S/remote expect_exit 0 build --cache "$T/R3"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[1, 0]" "e. fetch (KILN_REMOTE_URL): fetched, built"
no_side_files "e. KILN_REMOTE_URL"
log "e. file:// remote on sshfs: $n files uploaded, fetched by two fresh caches"

# ---- d. bindfs: shared; fuse-overlayfs: local ----
if try_mount bindfs_mount "$T/bind-src" "$T/bind"; then
  B=$T/bind
  SHARED_DIRS+=("$T/bind-src" "$B")
  new_cache "$B/c"
  expect_doctor_fs "$B/c" "$MOUNT_FSTYPE (shared)"
  expect_refused "d. build --cache on bindfs" build --cache "$B/c"
  no_side_files "d. build --cache on bindfs"
  [[ ! -e $B/c/index.sqlite ]] || fail "d. a refused build made $B/c/index.sqlite"
  cp -r "$SMALL" "$B/layer"
  new_cache "$T/L1"
  KILN_CACHE_PATH=$B/layer expect_exit 0 build --cache "$T/L1"
  expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[1, 0]" "d. build over a layer on bindfs: hits, built"
  no_side_files "d. bindfs"
fi
O=$T/ov/mnt
mkdir -p "$T/ov/lower" "$T/ov/upper" "$T/ov/work"
cp -a "$SMALL" "$T/ov/lower/c"
if try_mount overlayfs_mount "$T/ov/lower" "$T/ov/upper" "$T/ov/work" "$O"; then
  expect_doctor_fs "$O/c" "$MOUNT_FSTYPE (local)"
  expect_exit 0 build --cache "$O/c"
  expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[1, 0]" "d. fuse-overlayfs primary: hits, built"
  expect_exit 0 kiln cache verify --cache "$O/c" --json
  expect_eq "$(json "$OUT" 'd["bad"]')" 0 "d. fuse-overlayfs: verify's bad blobs"
  new_cache "$O/d"
  subset_cache "$SMALL" "$ARCH" "$UNIT" "$O/d"
  expect_exit 0 build --cache "$O/d"
  expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[1, 0]" "d. fuse-overlayfs, imported: hits, built"
  log "d. fuse-overlayfs: a primary cache used, imported into, verified"
fi

kill -TERM "$POLLER" 2>/dev/null
wait "$POLLER" 2>/dev/null || true
seen=$(sort -u "$T/side-files.seen")
[[ -z $seen ]] || fail "SQLite side files appeared on a shared file system during the test: ${seen//$'\n'/ }"
