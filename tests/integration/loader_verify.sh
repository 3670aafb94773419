#!/usr/bin/env bash
# `kiln warmup --verify` against tests/fakecuda, which runs kiln's kernels on
# the CPU emulator: every entry point passes its known-answer test; with one
# entry point made to compute a wrong result, the run fails naming it, and
# that unit's blob (only that one) is quarantined.
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
copy_cache "$(fixture full)" "$T/c"

expect_exit 0 kiln warmup --kernels 'scaled_*' --cache "$T/c" --offline --verify --json
expect_eq "$(json "$OUT" '[d["ok"], d["devices"][0]["verified_entries"], d["devices"][0]["verify_failures"]]')" \
  "[true, 342, 0]" "ok, entry points verified, failures"

digest=$(index_query "$T/c" "SELECT digest FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_90'")
KILN_FAKE_CUDA_WRONG='kiln_scaled_softmax_bwd_f16_w4' expect_exit 1 kiln warmup --kernels 'scaled_*' --cache "$T/c" --offline --verify
expect_stderr_contains "1 of 342 entry points failed the known-answer test; first: kiln_scaled_softmax_bwd_f16_w4"
expect_stderr_contains "quarantined blob $digest"
expect_eq "$(find "$T/c/quarantine" -type f -name "$digest.*" | wc -l)" 1 "the bad unit's blob in quarantine"
expect_eq "$(find "$T/c/quarantine" -type f | wc -l)" 1 "files in quarantine"
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 2 \
  "sm_90 records left (the other two units)"
