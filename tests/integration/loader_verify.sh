#!/usr/bin/env bash
# `kiln warmup --verify` against tests/fakecuda, which runs kiln's kernels on
# the CPU emulator: every entry point passes its known-answer test; with one
# entry point made to compute a wrong result, the run fails naming it, and
# that unit's blob (only that one) is quarantined.
#
# The emulator's known-answer tests cost about 0.15 s per entry point (three
# times that under the sanitizers), so the full pass is over the three
# softmax units (342 entry points) in the normal build and over one (114) in
# the sanitizer build, and the failing run is over the three bias_* units (18).
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
copy_cache "$(fixture full)" "$T/c"

if [[ ${IT_SANITIZED:-0} == 1 ]]; then glob=scaled_softmax entries=114; else glob='scaled_*' entries=342; fi
expect_exit 0 kiln warmup --kernels "$glob" --cache "$T/c" --offline --verify --json
expect_eq "$(json "$OUT" '[d["ok"], d["devices"][0]["verified_entries"], d["devices"][0]["verify_failures"]]')" \
  "[true, $entries, 0]" "ok, entry points verified, failures"

# the bias_* units for sm_90, from the kernels fixture
new_cache "$T/export-primary"
KILN_CACHE_PATH=$(fixture kernels) expect_exit 0 kiln cache export "$T/bias.tar" --arch 90 --kernels 'bias_*' \
  --cache "$T/export-primary"
expect_exit 0 kiln cache import "$T/bias.tar" --cache "$T/b"
digest=$(index_query "$T/b" "SELECT digest FROM records WHERE unit = 'bias_gelu' AND target = 'sm_90'")
KILN_FAKE_CUDA_WRONG='kiln_bias_gelu_bwd_f16_g' expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/b" --offline --verify
expect_stderr_contains "1 of 18 entry points failed the known-answer test; first: kiln_bias_gelu_bwd_f16_g"
expect_stderr_contains "quarantined blob $digest"
expect_eq "$(find "$T/b/quarantine" -type f -name "$digest.*" | wc -l)" 1 "the bad unit's blob in quarantine"
expect_eq "$(find "$T/b/quarantine" -type f | wc -l)" 1 "files in quarantine"
expect_eq "$(index_query "$T/b" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 2 \
  "sm_90 records left (the other two units)"
