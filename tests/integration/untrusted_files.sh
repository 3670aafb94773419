#!/usr/bin/env bash
# Files in a cache directory, and secret files, are untrusted input (issue 20,
# its first item): a FIFO at a blob's path, or at KILN_REMOTE_TOKEN_FILE, must
# not hang any command, and a huge sparse file at a small blob's path is
# refused by its size before it is read. Every command runs under a 60 s bound
# and must end well inside it. The caches are copies of the small fixture
# (bias_gelu sm_90): each build below takes about a second.
. "$(dirname "$0")/lib.sh" "$@"
IT_TIMEOUT=60
command -v mkfifo >/dev/null || skip "no mkfifo"

blob_of() { # CACHE: the path of its (only) sm_90 bias_gelu blob
  blob_path "$1" "$(index_query "$1" "SELECT digest FROM records WHERE unit = 'bias_gelu' AND target = 'sm_90'")"
}

log "a FIFO at a blob's path: verify, check and build end, and the build replaces it"
copy_cache "$(fixture small)" "$T/F"
b=$(blob_of "$T/F")
chmod u+w "$(dirname "$b")"
rm -f "$b" && mkfifo "$b"
expect_exit 1 kiln cache verify --cache "$T/F"
expect_stdout_contains "BAD $b"
expect_exit 0 kiln build --arch 90 --kernels bias_gelu --cache "$T/F"
expect_exit 0 kiln cache verify --cache "$T/F"
expect_exit 0 kiln check --arch 90 --kernels bias_gelu --cache "$T/F"

log "a 2 GiB sparse file at a small blob's path: refused by its size, not read"
copy_cache "$(fixture small)" "$T/S"
b=$(blob_of "$T/S")
chmod u+w "$b" "$(dirname "$b")"
truncate -s 2G "$b"
start=$(date +%s)
expect_exit 1 kiln check --arch 90 --kernels bias_gelu --cache "$T/S"
expect_exit 1 kiln cache verify --cache "$T/S"
expect_true "check and verify took under 20 s" test $(($(date +%s) - start)) -lt 20

log "a FIFO as KILN_REMOTE_TOKEN_FILE: an error naming it, no hang"
mkfifo "$T/token"
KILN_REMOTE_URL=http://127.0.0.1:9 KILN_REMOTE_TOKEN_FILE=$T/token \
  expect_exit 1 kiln build --arch 90 --kernels bias_gelu --cache "$T/R"
expect_stderr_contains "$T/token"
expect_stderr_contains "not a regular file"

if [[ -f ${IT_FAKECUDA:-} ]]; then
  log "a CUBIN whose digest matches but whose ELF headers point past its end never reaches the driver"
  copy_cache "$(fixture small)" "$T/E"
  b=$(blob_of "$T/E")
  head -c 4096 "$b" >"$T/cut"
  d=$(sha256sum "$T/cut" | cut -d' ' -f1)
  chmod u+w "$T/E/cas"
  mkdir -p "$(dirname "$(blob_path "$T/E" "$d")")"
  cp "$T/cut" "$(blob_path "$T/E" "$d")"
  index_query "$T/E" "UPDATE records SET digest = '$d', size = 4096 WHERE unit = 'bias_gelu' AND target = 'sm_90'"
  expect_exit 0 kiln cache verify --cache "$T/E" # the digest is right: only the image's shape is wrong
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_LOG=$T/fake.log \
    expect_exit 0 kiln warmup --kernels bias_gelu --cache "$T/E"
  expect_stderr_contains "not a loadable cubin: its"
  expect_stderr_contains "quarantined"
  expect_eq "$(grep -c "^load ok cubin sm_90 4096 " "$T/fake.log")" 0 "the cut image was handed to the driver"
  expect_eq "$(grep -c "^load ok cubin sm_90" "$T/fake.log")" 1 "the rebuilt image loaded"
fi

log "a directory that is not a kiln cache is refused, and nothing is created in it"
mkdir -p "$T/home/tmp" && echo mine >"$T/home/notes.txt" && echo old >"$T/home/tmp/draft"
touch -d '3 days ago' "$T/home/tmp/draft"
before=$(tree_sum "$T/home")
for cmd in "cache verify" "cache ls" "build --arch 90 --kernels bias_gelu"; do
  # shellcheck disable=SC2086 # the command's words
  expect_exit 2 kiln $cmd --cache "$T/home"
  expect_stderr_contains "is not a kiln cache (no index.sqlite) and holds other files"
done
expect_eq "$(tree_sum "$T/home")" "$before" "a non-cache directory after every command"

log "verify removes only kiln's own temp names, and never through a symlink"
copy_cache "$(fixture small)" "$T/V"
chmod u+w "$T/V/tmp" "$T/V/cas"
echo user >"$T/V/tmp/report.pdf" && touch -d '3 days ago' "$T/V/tmp/report.pdf"
echo debris >"$T/V/tmp/tmp.999999.$(hostname).AbC123" && touch -d '3 days ago' "$T/V/tmp/tmp.999999.$(hostname).AbC123"
mkdir -p "$T/outside/ab"
echo precious >"$T/outside/ab/$(printf 'c%.0s' $(seq 62))"
ln -s "$T/outside/ab" "$T/V/cas/ab"
expect_exit 1 kiln cache verify --cache "$T/V" # reports the link, walks nothing through it
expect_stdout_contains "$T/V/cas/ab"
expect_stderr_contains "$T/V/cas/ab is a symbolic link"
expect_true "a user's file in tmp/ is kept" test -f "$T/V/tmp/report.pdf"
expect_true "kiln's own old temp file is removed" test ! -e "$T/V/tmp/tmp.999999.$(hostname).AbC123"
expect_true "a file behind a symlinked cas/ab is not moved" test -f "$T/outside/ab/$(printf 'c%.0s' $(seq 62))"
rm -rf "$T/V/tmp" && mkdir -p "$T/outside/t" && echo keep >"$T/outside/t/tmp.1.x.AbC123"
touch -d '3 days ago' "$T/outside/t/tmp.1.x.AbC123" && ln -s "$T/outside/t" "$T/V/tmp"
expect_exit 1 kiln cache verify --cache "$T/V" # a writer refuses a linked tmp/, naming it
expect_stderr_contains "$T/V/tmp is a symbolic link"
expect_true "a file behind a symlinked tmp/ is not removed" test -f "$T/outside/t/tmp.1.x.AbC123"

log "a symlink at a blob's path is refused, not followed"
copy_cache "$(fixture small)" "$T/L"
b=$(blob_of "$T/L")
chmod u+w "$(dirname "$b")"
cp "$b" "$T/outside/real-blob" && rm -f "$b" && ln -s "$T/outside/real-blob" "$b"
expect_exit 1 kiln cache verify --cache "$T/L"
expect_stdout_contains "BAD"
expect_true "the link's target is untouched" test -f "$T/outside/real-blob"

log "a record whose digest is not a SHA-256 digest: verify reports and drops it, the next build rebuilds"
for bad in '' "$(printf 'A%.0s' $(seq 64))" '../../etc/passwd'; do
  copy_cache "$(fixture small)" "$T/D"
  index_query "$T/D" "UPDATE records SET digest = '$bad' WHERE unit = 'bias_gelu' AND target = 'sm_90'"
  expect_exit 1 kiln cache verify --cache "$T/D"
  expect_stdout_contains "its digest is not 64 lowercase hex digits (record dropped)"
  expect_eq "$(index_query "$T/D" "SELECT count(*) FROM records WHERE digest = '$bad'")" 0 "records left with digest '$bad'"
  expect_exit 0 kiln build --arch 90 --kernels bias_gelu --cache "$T/D"
  rm -rf "$T/D"
done

log "unservable records reach a build, not verify first: dropped once, rebuilt at once"
for change in "digest = ''" "digest = upper(digest)" "size = size + 1"; do
  copy_cache "$(fixture small)" "$T/U"
  index_query "$T/U" "UPDATE records SET $change WHERE unit = 'bias_gelu' AND target = 'sm_90'"
  start=$SECONDS
  KILN_BUILD_TIMEOUT=60 expect_exit 0 kiln build --arch 90 --kernels bias_gelu --cache "$T/U" --json
  expect_eq "$(json "$OUT" '[d["built"], d["failed"]]')" "[1, 0]" "build after $change"
  expect_stderr_contains "cannot be served"
  ((SECONDS - start < 30)) || fail "a build over a record with $change took $((SECONDS - start)) s"
  rm -rf "$T/U"
done

if [[ -f ${IT_FAKECUDA:-} ]]; then
  log "a record pointing at another unit's (valid) blob: refused at load, dropped and rebuilt"
  copy_cache "$(fixture small)" "$T/X"
  expect_exit 0 kiln build --arch 90 --kernels bias_swiglu --cache "$T/X"
  other=$(index_query "$T/X" "SELECT digest || ' ' || size FROM records WHERE unit = 'bias_swiglu' AND target = 'sm_90'")
  [[ -n $other ]] || fail "the small fixture has no bias_swiglu sm_90"
  index_query "$T/X" "UPDATE records SET digest = '${other% *}', size = ${other#* } WHERE unit = 'bias_gelu' AND target = 'sm_90'"
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 \
    expect_exit 0 kiln warmup --kernels bias_gelu --cache "$T/X"
  expect_stderr_contains "not bias_gelu's image: it has no entry point kiln_bias_gelu_"
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 \
    expect_exit 0 kiln warmup --kernels bias_gelu --cache "$T/X" --offline
fi
