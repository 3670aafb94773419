#!/usr/bin/env bash
# `kiln warmup --verify` against tests/fakecuda, which runs kiln's kernels on
# the CPU emulator: with one entry point made to compute a wrong result, the
# run fails naming it, every other entry point passes its known-answer test,
# and that unit's blob (only that one) is quarantined.
#
# Over the three softmax units (the only ones with known-answer tests): 342
# entry points, 341 pass and 1 made wrong; only its unit's blob is
# quarantined. Both builds run it (the sanitizer build's fake driver and
# emulator are instrumented too). It takes a few seconds: the check is linear
# in the tensor (it was quadratic in cols, about 0.1 s an entry point).
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
copy_cache "$(fixture full)" "$T/c"

glob='scaled_*' entries=342
digest=$(index_query "$T/c" "SELECT digest FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_90'")
KILN_FAKE_CUDA_WRONG='kiln_scaled_softmax_bwd_f16_w4' expect_exit 1 kiln warmup --kernels "$glob" --cache "$T/c" \
  --offline --verify
expect_stderr_contains "1 of $entries entry points failed the known-answer test; first: kiln_scaled_softmax_bwd_f16_w4"
expect_stderr_contains "quarantined blob $digest"
expect_eq "$(find "$T/c/quarantine" -type f -name "$digest.*" | wc -l)" 1 "the bad unit's blob in quarantine"
expect_eq "$(find "$T/c/quarantine" -type f | wc -l)" 1 "files in quarantine"
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 2 \
  "sm_90 records left (the other two units)"
