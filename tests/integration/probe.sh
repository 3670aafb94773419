#!/usr/bin/env bash
# kiln probe: without a driver it reports no GPU cleanly and still lists
# NVRTC, NCCL and the caches; with (fake) GPUs it says per unit what each
# would load or that it would build (or fail offline). Its JSON is compared
# with golden files in tests/data (machine-specific values normalised);
# UPDATE_GOLDEN=1 rewrites them. It changes nothing in the cache.
. "$(dirname "$0")/lib.sh" "$@"

DATA=${IT_SOURCE_DIR:?}/tests/data
F=$T/full
copy_cache "$(fixture full)" "$F"

# normalise FILE: paths, versions and sizes that differ between machines.
normalise() {
  python3 - "$1" "$T" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = sys.argv[2]
def fix(v):
    if isinstance(v, str): return v.replace(t, "<T>")
    if isinstance(v, list): return [fix(x) for x in v]
    if isinstance(v, dict): return {k: fix(x) for k, x in v.items()}
    return v
d = fix(d)
d["kiln"] = "<kiln>"
if d["nvrtc"].get("found"):
    d["nvrtc"]["version"] = "<nvrtc>"
    d["nvrtc"]["targets"] = "<targets>"
    d["nvrtc"]["library"] = "<library>"
    d["nvrtc"]["found_by"] = "<found_by>"
if "driver" in d:
    d["driver"]["library"] = "<library>"
d["nccl"] = "<nccl>"
for c in d["caches"]:
    c["bytes"] = "<bytes>"
print(json.dumps(d, indent=2, sort_keys=True))
PY
}

golden() { # NAME: compare $OUT (normalised) with tests/data/NAME
  normalise "$OUT" >"$T/got.json"
  if [[ ${UPDATE_GOLDEN:-} == 1 ]]; then cp "$T/got.json" "$DATA/$1"; log "wrote $DATA/$1"; fi
  diff -u "$DATA/$1" "$T/got.json" >&2 || fail "probe --json differs from tests/data/$1"
}

log "no driver: no GPU, still NVRTC, NCCL and the caches"
before=$(cache_state "$F")
KILN_CUDA_LIBRARY=$T/no-libcuda.so expect_exit 0 kiln probe --cache "$F" --json
golden probe_nogpu.json
expect_eq "$(json "$OUT" 'd["gpus"]')" "[]" "gpus"
expect_eq "$(json "$OUT" 'd["schema"]')" "kiln-probe/1" "schema"
expect_eq "$(json "$OUT" '"no-libcuda.so" in d["gpu_error"]')" true "the reason names the library"
expect_eq "$(json "$OUT" 'd["caches"][0]["records"]')" 9 "records in the fixture"
KILN_CUDA_LIBRARY=$T/no-libcuda.so expect_exit 0 kiln probe --cache "$F"
expect_stdout_contains "GPUs: none"
expect_stdout_contains "cache layer 0: $F (writable), 9 records"

log "the remote: where it is, and where an s3:// remote's credentials came from, never what they are"
secret=probe-SECRET-never-shown
AWS_ACCESS_KEY_ID=probeAK AWS_SECRET_ACCESS_KEY=$secret AWS_SESSION_TOKEN=probe-TOKEN-never-shown \
  KILN_REMOTE_URL=s3://kiln-test/team KILN_REMOTE_UPLOAD=1 KILN_CUDA_LIBRARY=$T/no-libcuda.so \
  expect_exit 0 kiln probe --cache "$F" --json
expect_eq "$(json "$OUT" 'd["remote"]')" \
  '{"url": "s3://kiln-test/team", "upload": true, "credentials": "environment (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN)"}' "remote, --json"
AWS_ACCESS_KEY_ID=probeAK AWS_SECRET_ACCESS_KEY=$secret AWS_SESSION_TOKEN=probe-TOKEN-never-shown \
  KILN_REMOTE_URL=s3://kiln-test/team KILN_CUDA_LIBRARY=$T/no-libcuda.so KILN_LOG=debug \
  expect_exit 0 kiln probe --cache "$F"
expect_stdout_contains "remote: s3://kiln-test/team (read only), credentials: environment (AWS_ACCESS_KEY_ID, AWS_SESSION_TOKEN)"
! grep -q "never-shown" "$OUT" "$ERR" || fail "kiln probe printed a secret"
KILN_REMOTE_URL=file://$T KILN_CUDA_LIBRARY=$T/no-libcuda.so expect_exit 0 kiln probe --cache "$F" --json
expect_eq "$(json "$OUT" 'd["remote"]')" "{\"url\": \"file://$T\", \"upload\": false, \"credentials\": null}" "a file:// remote"

log "two fake GPUs (sm_90, sm_86): exact, compatible, would build; offline: would fail"
[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90,86
expect_exit 0 kiln probe --cache "$F" --json
golden probe_fake.json
expect_eq "$(json "$OUT" '[(u["gpu"], u["would_load"], u["artifact"]) for u in d["units"] if u["unit"] == "scaled_softmax"]')" \
  '[[0, "exact CUBIN", "sm_90"], [1, "compatible CUBIN", "sm_80"]]' "scaled_softmax on each GPU"
expect_eq "$(json "$OUT" '[u["if_missing"] for u in d["units"] if u["unit"] == "rope"][0]')" \
  "would build (NVRTC, once per cache)" "rope"
KILN_OFFLINE=1 expect_exit 0 kiln probe --cache "$F" --json
expect_eq "$(json "$OUT" '[u["if_missing"] for u in d["units"] if u["unit"] == "rope"][0]')" \
  "would fail: KILN_OFFLINE=1 forbids building" "rope, offline"
KILN_OFFLINE=yes expect_exit 0 kiln probe --cache "$F" --json
expect_eq "$(json "$OUT" '"KILN_OFFLINE" in d["offline_error"]')" true "a malformed KILN_OFFLINE is reported"
expect_eq "$(cache_state "$F")" "$before" "the cache after kiln probe"
expect_exit 2 kiln probe --bogus
