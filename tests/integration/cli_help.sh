#!/usr/bin/env bash
# --help on every command exits 0, prints its usage on stdout and mentions
# every documented flag; `kiln --version` prints the kiln, NVRTC and cache
# schema lines. No cache is opened or created for any of these.
. "$(dirname "$0")/lib.sh" "$@"

export KILN_CACHE_DIR=$T/never-created
# help_mentions WHAT -- FLAGS... -- CMD...
help_mentions() {
  local what=$1 flags=() f
  shift 2
  while [[ $1 != -- ]]; do flags+=("$1"); shift; done
  shift
  expect_exit 0 kiln "$@"
  [[ -s $ERR ]] && fail "$what: --help wrote to stderr: $(head -3 "$ERR")"
  for f in "${flags[@]}"; do expect_stdout_contains "$f" "$what --help"; done
}
for h in --help -h help; do
  help_mentions "kiln $h" -- "usage: kiln" build list cache warmup check probe doctor --version --help -- "$h"
done
for h in --help -h; do
  help_mentions "kiln build $h" -- "usage: kiln build" --arch --kernels --cache -j --rebuild --json --help \
    90+ptx compute_90 sm_90a all "Exit status" -- build "$h"
  help_mentions "kiln list $h" -- "usage: kiln list" --json --help -- list "$h"
  help_mentions "kiln check $h" -- "usage: kiln check" --arch --cache --kernels --driver --json --help \
    "Exit status" -- check "$h"
  help_mentions "kiln probe $h" -- "usage: kiln probe" --cache --json --help kiln-probe/1 -- probe "$h"
  help_mentions "kiln doctor $h" -- "usage: kiln doctor" --cache --json --help kiln-doctor/1 \
    "Exit status" -- doctor "$h"
  help_mentions "kiln warmup $h" -- "usage: kiln warmup" --comm --arch --heartbeat --timeout --device \
    --kernels --verify --json "Exit status" -- warmup "$h"
  help_mentions "kiln cache $h" -- "usage: kiln cache" ls stats verify gc rm --max-size --all --cache --json \
    --help KILN_CACHE_PATH -- cache "$h"
done
for verb in ls stats verify gc rm; do
  help_mentions "kiln cache $verb --help" -- "usage: kiln cache" --max-size --all -- cache "$verb" --help
done
# The environment variables the top-level help documents.
help_mentions "kiln --help (environment)" -- KILN_CACHE_DIR KILN_CACHE_PATH KILN_JOBS KILN_LOG \
  KILN_HEARTBEAT_MS KILN_NVRTC_OPTIONS KILN_MPI_LIBRARY -- --help

expect_exit 0 kiln --version
[[ -s $ERR ]] && fail "--version wrote to stderr: $(head -3 "$ERR")"
grep -Eq '^kiln [0-9]+\.[0-9]+\.[0-9]+' "$OUT" || fail "--version lacks a 'kiln X.Y.Z' line: $(cat "$OUT")"
# one line per GPU library: its version, file and how it was found, or why not
grep -Eq '^NVRTC [0-9]+\.[0-9]+: /.* \(found by .*\)$' "$OUT" ||
  fail "--version lacks an 'NVRTC X.Y: FILE (found by ...)' line: $(cat "$OUT")"
grep -Eq '^NCCL( [0-9.]+: /.* \(found by .*\)|: not available: .+)$' "$OUT" ||
  fail "--version lacks an NCCL line: $(cat "$OUT")"
grep -Eq '^CUDA driver( [0-9.]+: /.* \(found by .*\)|: not available: .+)$' "$OUT" ||
  fail "--version lacks a 'CUDA driver' line: $(cat "$OUT")"
grep -Eq '^cache schema [0-9]+$' "$OUT" || fail "--version lacks a 'cache schema N' line: $(cat "$OUT")"
expect_eq "$(wc -l <"$OUT")" 5 "lines printed by --version"
expect_exit 0 kiln version
[[ ! -e $KILN_CACHE_DIR ]] || fail "a help or version command created the cache $KILN_CACHE_DIR"
