#!/usr/bin/env bash
# Files in a cache directory, and secret files, are untrusted input (issue 20,
# its first item): a FIFO at a blob's path, or at KILN_REMOTE_TOKEN_FILE, must
# not hang any command, and a huge sparse file at a small blob's path is
# refused by its size before it is read. Every command runs under a 60 s bound
# and must end well inside it.
. "$(dirname "$0")/lib.sh" "$@"
IT_TIMEOUT=60
command -v mkfifo >/dev/null || skip "no mkfifo"

blob_of() { # CACHE: the path of its (only) sm_90 scaled_softmax blob
  blob_path "$1" "$(index_query "$1" "SELECT digest FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_90'")"
}

log "a FIFO at a blob's path: verify, check and build end, and the build replaces it"
copy_cache "$(fixture warm)" "$T/F"
b=$(blob_of "$T/F")
chmod u+w "$(dirname "$b")"
rm -f "$b" && mkfifo "$b"
expect_exit 1 kiln cache verify --cache "$T/F"
expect_stdout_contains "BAD $b"
expect_exit 0 kiln build --arch 90 --kernels scaled_softmax --cache "$T/F"
expect_exit 0 kiln cache verify --cache "$T/F"
expect_exit 0 kiln check --arch 90 --kernels scaled_softmax --cache "$T/F"

log "a 2 GiB sparse file at a small blob's path: refused by its size, not read"
copy_cache "$(fixture warm)" "$T/S"
b=$(blob_of "$T/S")
chmod u+w "$b" "$(dirname "$b")"
truncate -s 2G "$b"
start=$(date +%s)
expect_exit 1 kiln check --arch 90 --kernels scaled_softmax --cache "$T/S"
expect_exit 1 kiln cache verify --cache "$T/S"
expect_true "check and verify took under 20 s" test $(($(date +%s) - start)) -lt 20

log "a FIFO as KILN_REMOTE_TOKEN_FILE: an error naming it, no hang"
mkfifo "$T/token"
KILN_REMOTE_URL=http://127.0.0.1:9 KILN_REMOTE_TOKEN_FILE=$T/token \
  expect_exit 1 kiln build --arch 90 --kernels scaled_softmax --cache "$T/R"
expect_stderr_contains "$T/token"
expect_stderr_contains "not a regular file"

if [[ -f ${IT_FAKECUDA:-} ]]; then
  log "a CUBIN whose digest matches but whose ELF headers point past its end never reaches the driver"
  copy_cache "$(fixture warm)" "$T/E"
  b=$(blob_of "$T/E")
  head -c 4096 "$b" >"$T/cut"
  d=$(sha256sum "$T/cut" | cut -d' ' -f1)
  chmod u+w "$T/E/cas"
  mkdir -p "$(dirname "$(blob_path "$T/E" "$d")")"
  cp "$T/cut" "$(blob_path "$T/E" "$d")"
  index_query "$T/E" "UPDATE records SET digest = '$d', size = 4096 WHERE unit = 'scaled_softmax' AND target = 'sm_90'"
  expect_exit 0 kiln cache verify --cache "$T/E" # the digest is right: only the image's shape is wrong
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_LOG=$T/fake.log \
    expect_exit 0 kiln warmup --kernels scaled_softmax --cache "$T/E"
  expect_stderr_contains "not a loadable cubin: its"
  expect_stderr_contains "quarantined"
  expect_eq "$(grep -c "^load ok cubin sm_90 4096 " "$T/fake.log")" 0 "the cut image was handed to the driver"
  expect_eq "$(grep -c "^load ok cubin sm_90" "$T/fake.log")" 1 "the rebuilt image loaded"
fi
