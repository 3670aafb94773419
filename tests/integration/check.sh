#!/usr/bin/env bash
# kiln check: passes on a complete --arch 90 cache (every unit's sm_90 record
# and blob, from the kernels fixture), fails naming
# the unit whose record was removed; compatible CUBIN and PTX count as
# coverage by the loader's rules, --driver narrows them; several caches
# layer; bad usage is exit 2; nothing is created.
. "$(dirname "$0")/lib.sh" "$@"

log "a complete --arch 90 cache passes"
C=$T/c90
subset_cache "$(fixture kernels)" 90 '*' "$C" # what `kiln build --arch 90` makes (its compile: fixture_kernels)
expect_exit 0 kiln check --arch 90 --cache "$C" --json
expect_eq "$(json "$OUT" 'd["ok"]')" true "ok"
expect_eq "$(json "$OUT" 'd["pairs"]')" "$(kiln list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["units"]))')" "pairs = units"
expect_eq "$(json "$OUT" 'sorted(set(i["source"] for i in d["items"]))')" '["exact CUBIN"]' "sources"
expect_exit 0 kiln check --arch 90 --cache "$C"
expect_stdout_contains "0 missing"

log "one record removed: it fails and names the unit"
expect_exit 0 kiln cache rm rms_norm --cache "$C"
expect_exit 1 kiln check --arch 90 --cache "$C"
expect_stderr_contains "MISSING rms_norm for sm_90"
expect_stderr_contains "kiln build --arch sm_90 --kernels rms_norm"
expect_exit 1 kiln check --arch 90 --cache "$C" --json
expect_eq "$(json "$OUT" 'd["missing"]')" '[{"unit": "rms_norm", "target": "sm_90"}]' "missing list"
expect_exit 0 kiln check --arch 90 --cache "$C" --kernels 'scaled_*'

log "compatible CUBIN, PTX and --driver (fixture: softmax units x sm_80, sm_90, compute_90)"
F=$T/full
copy_cache "$(fixture full)" "$F"
K=(--cache "$F" --kernels 'scaled_*' --json)
expect_exit 0 kiln check --arch 86 "${K[@]}"
expect_eq "$(json "$OUT" 'sorted(set((i["source"], i["artifact"]) for i in d["items"]))')" '[["compatible CUBIN", "sm_80"]]' "sm_86"
expect_exit 0 kiln check --arch 120 "${K[@]}"
expect_eq "$(json "$OUT" 'sorted(set((i["source"], i["artifact"]) for i in d["items"]))')" '[["PTX JIT", "compute_90"]]' "sm_120"
expect_exit 0 kiln check --arch compute_90 "${K[@]}"
expect_exit 1 kiln check --arch sm_90a "${K[@]}"
expect_exit 0 kiln check --arch 100 "${K[@]}" # PTX runs on later majors too
expect_eq "$(json "$OUT" 'sorted(set(i["source"] for i in d["items"]))')" '["PTX JIT"]' "sm_100"
expect_exit 1 kiln check --arch 100 --cache "$C" --kernels 'scaled_*' # CUBIN only: no
expect_exit 1 kiln check --arch 80 --cache "$C" --kernels 'scaled_*'  # sm_90 cannot run on sm_80
# NVRTC 13 built these: a CUDA 12.8 driver can load none of them.
expect_exit 1 kiln check --arch 90 --driver 12.8 "${K[@]}"
expect_eq "$(json "$OUT" 'len(d["missing"])')" 3 "missing for a 12.8 driver"

log "a corrupt blob does not count, and check changes nothing"
G=$T/corrupt
copy_cache "$(fixture full)" "$G"
d=$(kiln check --arch 90 --cache "$G" --kernels scaled_softmax --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["digest"])')
chmod u+w "$(blob_path "$G" "$d")"
printf 'X' | dd of="$(blob_path "$G" "$d")" bs=1 seek=100 conv=notrunc status=none
before=$(cache_state "$G")
expect_exit 0 kiln check --arch 90 --cache "$G" --kernels scaled_softmax --json
expect_eq "$(json "$OUT" '[d["items"][0]["source"], d["items"][0]["artifact"]]')" '["PTX JIT", "compute_90"]' \
  "with the sm_90 blob corrupt, what would load"
expect_eq "$(cache_state "$G")" "$before" "the cache after kiln check"

log "several caches: the first primary, the others read-only layers"
E=$T/empty
new_cache "$E"
expect_exit 1 kiln check --arch 90 --cache "$E" --kernels 'scaled_*'
expect_exit 0 kiln check --arch 90 --cache "$E" --cache "$F" --kernels 'scaled_*' --json
expect_eq "$(json "$OUT" 'sorted(set(i["layer"] for i in d["items"]))')" '[1]' "found in layer 1"

log "bad usage, and nothing created"
expect_exit 2 kiln check --cache "$C"
expect_stderr_contains "--arch LIST is required"
expect_exit 2 kiln check --arch 90 --driver twelve --cache "$C"
expect_exit 2 kiln check --arch 90 --kernels 'nope*' --cache "$C"
expect_exit 2 kiln check --arch 9x --cache "$C"
expect_exit 2 kiln check --arch 90 --cache "$T/never"
[[ ! -e $T/never ]] || fail "kiln check created $T/never"
