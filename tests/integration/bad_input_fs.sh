#!/usr/bin/env bash
# File-system faults, with real file systems: a read-only tmpfs (as the cache
# and above it), a cache directory owned by another user, and a full disk
# (a tiny tmpfs where the blob does not fit; a tmpfs filled so the blob fits
# but the index cannot grow). Each is a clear message naming the cause, exit
# 1, and no temp file or record left behind; a full cache verifies clean and
# builds once there is room again. Needs root (mount, chown): exit 77 otherwise.
. "$(dirname "$0")/lib.sh" "$@"

((EUID == 0)) || skip "needs root to mount tmpfs and chown (running as uid $EUID)"
# mount_tmpfs DIR OPTIONS: a tmpfs at DIR, unmounted when the test ends.
mount_tmpfs() {
  mkdir -p "$1"
  mount -t tmpfs -o "$2" kiln-it "$1" 2>"$T/mount.err" ||
    skip "cannot mount tmpfs on $1: $(cat "$T/mount.err")"
  at_exit "umount '$1' 2>/dev/null || umount -l '$1'"
}
# The target is bias_gelu sm_90, the small fixture's (the smallest unit: each
# of the five compiles here takes about a second).
build=(build --arch 90 --kernels bias_gelu)
warm=$(fixture small)

log "a read-only file system"
mount_tmpfs "$T/ro" ro,size=1m,mode=0700
expect_exit 1 kiln "${build[@]}" --cache "$T/ro"
expect_stderr_contains "$T/ro"
expect_stderr_contains "Read-only file system"
expect_exit 1 kiln "${build[@]}" --cache "$T/ro/cache"
expect_stderr_contains "$T/ro/cache"
expect_stderr_contains "Read-only file system"

log "a warm cache on a file system remounted read-only"
mount_tmpfs "$T/image" size=16m,mode=0700
cp -a "$warm/." "$T/image/"
cache_state "$T/image" >"$T/image.before"
mount -o remount,ro "$T/image"
expect_exit 1 kiln "${build[@]}" --cache "$T/image"
expect_stderr_contains "$T/image"
expect_stderr_contains "Read-only file system"
# ... which is what KILN_CACHE_PATH is for: all hits, nothing written.
KILN_CACHE_PATH=$T/image expect_exit 0 kiln "${build[@]}" --cache "$T/primary" --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"], d["failed"]]')" "[1, 0, 0]" \
  "build over a read-only mounted layer: hits, built, failed"
expect_eq "$(index_query "$T/primary" "SELECT count(*) FROM records")" 0 "records copied into the primary"

log "a cache directory owned by another user"
nobody=$(id -u nobody 2>/dev/null) || skip "no user 'nobody'"
mkdir -m 0700 "$T/theirs"
chown nobody "$T/theirs"
expect_exit 1 kiln "${build[@]}" --cache "$T/theirs"
expect_stderr_contains "$T/theirs"
expect_stderr_contains "owned by uid $nobody"
expect_eq "$(find "$T/theirs" -mindepth 1 | wc -l)" 0 "files created in another user's directory"
cp -a "$warm" "$T/their-warm"
chown -R nobody "$T/their-warm"
expect_exit 1 kiln cache verify --cache "$T/their-warm"
expect_stderr_contains "owned by uid $nobody"
# Their cache is not trusted as a read-only layer either: whoever owns it
# could map a kernel's key to bytes of their own. Skipped with a warning; a
# copy owned by root (a cache baked into an image) is used.
KILN_CACHE_PATH=$T/their-warm expect_exit 0 kiln "${build[@]}" --cache "$T/mine" --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[0, 1]" "build over another user's cache as a layer"
expect_stderr_contains "read-only cache layer $T/their-warm skipped: $T/their-warm is owned by uid $nobody"
expect_exit 1 kiln check --arch 90 --kernels bias_gelu --cache "$T/mine" --cache "$T/their-warm"
expect_stderr_contains "is not trusted"
chown -R root "$T/their-warm"
KILN_CACHE_PATH=$T/their-warm expect_exit 0 kiln "${build[@]}" --cache "$T/mine3" --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[1, 0]" "build over a root-owned cache as a layer"
chmod g+w "$T/their-warm/cas"
KILN_CACHE_PATH=$T/their-warm expect_exit 0 kiln "${build[@]}" --cache "$T/mine4" --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[0, 1]" "a layer whose cas/ its group can write"
expect_stderr_contains "$T/their-warm/cas is writable by its group"
KILN_CUDA_LIBRARY=/nonexistent-libcuda expect_exit 2 kiln doctor --cache "$T/mine" --cache "$T/their-warm"
expect_stdout_contains "FAIL  cache_dir"
expect_stdout_contains "skipped: $T/their-warm/cas is writable by its group"

# check_full NAME DIR: the cache at DIR after a build that ran out of space.
check_full() {
  expect_eq "$(tmp_files "$2")" 0 "$1: files left in tmp/"
  expect_eq "$(index_query "$2" "SELECT count(*) FROM records")" 0 "$1: records"
  expect_exit 0 kiln cache verify --cache "$2" --json
  expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "$1: verify: bad, issues"
  expect_eq "$(tmp_files "$2")" 0 "$1: files in tmp/ after verify"
}

log "a full disk: the blob does not fit"
mount_tmpfs "$T/tiny" size=160k,mode=0700 # the index fits, bias_gelu's 108 KiB CUBIN does not
expect_exit 1 kiln "${build[@]}" --cache "$T/tiny"
expect_stderr_contains "No space left"
expect_stderr_contains "FAILED bias_gelu sm_90" "the message names the target"
expect_stdout_contains "1 failed"
check_full "tiny disk" "$T/tiny"

log "a full disk: the blobs fit, the index cannot grow"
# Room for the blobs the build writes (artifact and log, as in the small
# fixture, rounded up to pages), sqlite's 32 KiB shared-memory file and two
# pages more: the index's write-ahead log then cannot take the new record
# (it needs about five pages; measured: 32..48 KiB over the blobs fail).
copy_cache "$warm" "$T/sizes"
need_k=$(index_query "$T/sizes" "SELECT digest, log_digest FROM records" | tr '\t' '\n' |
  while read -r d; do [[ -n $d ]] && stat -c %s "$(blob_path "$T/sizes" "$d")"; done |
  awk '{ k += int(($1 + 4095) / 4096) * 4 } END { print k + 40 }')
mount_tmpfs "$T/full" size=$((need_k + 1024))k,mode=0700
expect_exit 0 kiln cache verify --cache "$T/full" # creates the index and folders (stats reads only)
avail=$(df -k --output=avail "$T/full" | tail -1)
((avail > need_k)) || die "tmpfs too small: $avail KiB free, need $need_k"
dd if=/dev/zero of="$T/full/filler" bs=1k count=$((avail - need_k)) status=none
expect_exit 1 kiln "${build[@]}" --cache "$T/full"
grep -Eq "FAILED bias_gelu sm_90: .*(No space left|disk is full)" "$ERR" ||
  fail "no 'No space left' or 'disk is full' for bias_gelu sm_90 in: $(cat "$ERR")"
log "the build failed with: $(grep FAILED "$ERR")"
check_full "index full" "$T/full"
rm -f "$T/full/filler"
expect_exit 0 kiln "${build[@]}" --cache "$T/full" --json
expect_eq "$(json "$OUT" '[d["built"], d["failed"]]')" "[1, 0]" "build once there is room again: built, failed"
expect_exit 0 kiln cache verify --cache "$T/full"
expect_stdout_contains "0 bad"
