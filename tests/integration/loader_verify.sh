#!/usr/bin/env bash
# `kiln warmup --verify` against tests/fakecuda, which runs kiln's kernels on
# the CPU emulator: with one entry point made to compute a wrong result, the
# run fails naming it, every other entry point passes its known-answer test,
# and that unit's blob (only that one) is quarantined.
#
# The emulator's known-answer tests (softmax units only) cost about 0.15 s per
# entry point, three times that under the sanitizers: the run is over the
# two softmax units (228 entry points: 227 pass, 1 made wrong; only its
# unit's blob is quarantined), over the one unit in the sanitizer build (114:
# the same C paths, the fake driver's emulator instrumented too). That every
# entry point passes with none made wrong is what gpu_bundle's `run tests`
# shows (warmup --verify of every unit).
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
copy_cache "$(fixture full)" "$T/c"

if [[ ${IT_SANITIZED:-0} == 1 ]]; then glob=scaled_softmax entries=114; else glob='scaled_[sm]*' entries=228; fi
digest=$(index_query "$T/c" "SELECT digest FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_90'")
KILN_FAKE_CUDA_WRONG='kiln_scaled_softmax_bwd_f16_w4' expect_exit 1 kiln warmup --kernels "$glob" --cache "$T/c" \
  --offline --verify
expect_stderr_contains "1 of $entries entry points failed the known-answer test; first: kiln_scaled_softmax_bwd_f16_w4"
expect_stderr_contains "quarantined blob $digest"
expect_eq "$(find "$T/c/quarantine" -type f -name "$digest.*" | wc -l)" 1 "the bad unit's blob in quarantine"
expect_eq "$(find "$T/c/quarantine" -type f | wc -l)" 1 "files in quarantine"
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 2 \
  "sm_90 records left (the other two units)"
