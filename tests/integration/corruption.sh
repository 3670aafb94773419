#!/usr/bin/env bash
# Bad bytes never count as a hit. On copies of the small fixture (bias_gelu
# sm_90: each rebuild below takes a second):
#  - a flipped byte, then a truncated blob: `kiln cache verify` exits 1 naming
#    the blob, moves it to quarantine/ and drops its record; the next build
#    rebuilds it (built == 1) and verify is clean again;
#  - a flipped byte and `kiln build` straight away: a miss, not a hit; the bad
#    blob is quarantined, the target rebuilt, and the blob hashes to its name;
#  - a deleted blob: verify exits 1 naming it and drops the record.
. "$(dirname "$0")/lib.sh" "$@"

warm=$(fixture small)
build=(build --arch 90 --kernels bias_gelu --json)

flip_byte() { # flip_byte FILE: inverts the byte in the middle of FILE
  chmod u+w "$1"
  python3 -c 'import os, sys
with open(sys.argv[1], "r+b") as f:
    n = os.fstat(f.fileno()).st_size; f.seek(n // 2); b = f.read(1); f.seek(n // 2)
    f.write(bytes([b[0] ^ 0xFF]))' "$1"
  chmod 0444 "$1"
}
truncate_half() {
  chmod u+w "$1"
  truncate -s $(($(stat -c %s "$1") / 2)) "$1"
  chmod 0444 "$1"
}
cubin_digest() { index_query "$1" "SELECT digest FROM records WHERE kind = 'cubin'"; }
quarantined() { find "$1/quarantine" -name "$2*" | wc -l; }
hash_of() { sha256sum <"$1" | cut -d' ' -f1; }

copy_cache "$warm" "$T/probe"
digest=$(cubin_digest "$T/probe")
[[ ${#digest} == 64 ]] || die "the small fixture holds no CUBIN record"
log "the CUBIN blob is $digest"

# verify_then_build NAME DAMAGE_FN
verify_then_build() {
  local name=$1 damage=$2 c=$T/$1 blob
  copy_cache "$warm" "$c"
  blob=$(blob_path "$c" "$digest")
  "$damage" "$blob"
  expect_exit 1 kiln cache verify --cache "$c"
  expect_stdout_contains "$blob" "verify names the $name blob"
  expect_stdout_contains "1 bad"
  [[ -e $blob ]] && fail "$name: the bad blob is still in cas/"
  expect_eq "$(quarantined "$c" "$digest")" 1 "$name: blobs named $digest in quarantine/"
  expect_eq "$(index_query "$c" "SELECT count(*) FROM records WHERE digest = '$digest'")" 0 \
    "$name: records still pointing at the bad blob"
  expect_exit 0 kiln cache verify --cache "$c"
  expect_stdout_contains "0 bad" "$name: verify after quarantine"
  expect_exit 0 kiln "${build[@]}" --cache "$c"
  expect_eq "$(json "$OUT" '[d["hits"], d["built"], d["failed"]]')" "[0, 1, 0]" "$name: rebuild hits, built, failed"
  expect_eq "$(json "$OUT" 'd["items"][0]["digest"]')" "$digest" "$name: digest of the rebuilt blob"
  [[ -f $blob ]] && expect_eq "$(hash_of "$blob")" "$digest" "$name: hash of the rebuilt blob"
  [[ -f $blob ]] || fail "$name: no blob at $blob after the rebuild"
  expect_exit 0 kiln cache verify --cache "$c"
  expect_stdout_contains "0 bad" "$name: verify after the rebuild"
  expect_eq "$(tmp_files "$c")" 0 "$name: files in tmp/"
}
verify_then_build flipped flip_byte
verify_then_build truncated truncate_half

# A corrupt blob met by `kiln build` itself, with no verify first.
c=$T/direct
copy_cache "$warm" "$c"
blob=$(blob_path "$c" "$digest")
flip_byte "$blob"
expect_exit 0 kiln "${build[@]}" --cache "$c"
expect_eq "$(json "$OUT" '[d["hits"], d["built"], d["failed"]]')" "[0, 1, 0]" "direct: hits, built, failed"
expect_stderr_contains "quarantined" "build warns that it quarantined the blob"
expect_eq "$(quarantined "$c" "$digest")" 1 "direct: blobs named $digest in quarantine/"
[[ -f $blob ]] && expect_eq "$(hash_of "$blob")" "$digest" "direct: hash of the blob after the build"
[[ -f $blob ]] || fail "direct: no blob at $blob after the build"
expect_eq "$(index_query "$c" "SELECT digest FROM records")" "$digest" "direct: the record after the build"
expect_exit 0 kiln cache verify --cache "$c"
expect_stdout_contains "0 bad" "direct: verify after the build"

# A record whose blob is gone.
c=$T/missing
copy_cache "$warm" "$c"
blob=$(blob_path "$c" "$digest")
rm -f "$blob"
expect_exit 1 kiln cache verify --cache "$c"
expect_stdout_contains "$blob" "verify names the missing blob"
expect_stdout_contains "missing"
expect_eq "$(index_query "$c" "SELECT count(*) FROM records")" 0 "missing: records left"
expect_exit 0 kiln cache verify --cache "$c"
expect_stdout_contains "0 bad" "missing: verify after the record was dropped"
