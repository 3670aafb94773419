#!/usr/bin/env bash
# Bad input that kiln warmup meets only once it has started (a malformed
# KILN_* variable read when the loader or the ranks open, a --cache that is
# someone's directory) exits 2, as in kiln build, with the message naming it,
# in both modes (one device; ranks with --arch); a real failure stays 1.
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
C=$T/c
copy_cache "$(fixture warm)" "$C"
F=$T/foreign
mkdir -m 700 "$F" && echo mine >"$F/notes.txt"

for mode in "" "--arch 90"; do
  log "warmup ${mode:-(one device)}: malformed variables and a foreign --cache are exit 2"
  # shellcheck disable=SC2086 # mode is two words or none
  KILN_BUILD_TIMEOUT=soon expect_exit 2 kiln warmup $mode --kernels scaled_softmax --cache "$C"
  expect_stderr_contains "KILN_BUILD_TIMEOUT: 'soon' is not a number of seconds"
  # shellcheck disable=SC2086
  KILN_OFFLINE=maybe expect_exit 2 kiln warmup $mode --kernels scaled_softmax --cache "$C"
  expect_stderr_contains "KILN_OFFLINE: 'maybe'"
  # shellcheck disable=SC2086
  expect_exit 2 kiln warmup $mode --kernels scaled_softmax --cache "$F"
  expect_stderr_contains "$F is not a kiln cache"
  [[ $(ls -A "$F") == notes.txt ]] || fail "warmup wrote into $F: $(ls -A "$F")"
done

log "a failure that is not bad input stays exit 1 (a GPU too old for the unit)"
KILN_FAKE_CUDA_DEVICES=75 expect_exit 1 kiln warmup --kernels scaled_softmax --cache "$C" --offline
expect_stderr_contains "needs sm_80 or newer"
