#!/usr/bin/env bash
# The remote cache under faults. The server starts from good artifacts (the
# small fixture, bias_gelu sm_90, uploaded to nginx); then each fault must
# end in a local compile, exit 0, within a bound, with nothing bad stored:
#  1. server down (a closed port)           < 20 s, remote.errors > 0
#  2. every request 500 (fault_server.py)   bounded, remote.errors > 0
#     (and, controls: mode ok fetches; flaky:2 is absorbed by the retries)
#  3. a stalled server, KILN_REMOTE_TIMEOUT=2: bounded
#  4. truncated bodies: rejected, verify clean
#  5. a blob with wrong bytes (edited under nginx's root): rejected, verify clean
#  6. a record that is not JSON: rejected
#  7. signatures (KILN_REMOTE_HMAC_KEY_FILE): an unsigned record, one signed with
#     another key, and a signed record whose fields were edited: rejected; the
#     right key fetches
#  8. the breaker: 22 targets, server down: "turned off for this process" said
#     exactly once, breaker_trips 1
#  9. offline (the loader, fake libcuda, KILN_OFFLINE=1): a broken remote is a
#     clear error naming the unit and the remote, exit 1, nothing compiled; a
#     good remote loads the fetched CUBIN
# Compiles: bias_gelu sm_90 (the smallest unit: a second; the bounds above
# are for the remote's part) once per fallback case (9), and 22 injected
# failures (instant) for the breaker.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/remote_lib.sh"

kiln build --help | grep -q -- --remote || skip "this kiln has no remote cache (kiln build --remote)"
build() { kiln build --arch 90 --kernels bias_gelu --json "$@"; }
n_cache=0
fresh() { n_cache=$((n_cache + 1)); C=$T/c$n_cache; new_cache "$C"; }
# fallback WHAT: the last build compiled the target itself (exit checked by the caller)
fallback() {
  expect_eq "$(json "$OUT" '[d["fetched"], d["built"], d["failed"]]')" "[0, 1, 0]" "$1: fetched, built, failed"
}
fetched() { expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[1, 0]" "$1: fetched, built"; }
# clean WHAT: verify finds nothing bad, and every blob's bytes hash to its name
clean() {
  expect_exit 0 kiln cache verify --cache "$C" --json
  expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "$1: verify"
  local f
  while IFS= read -r f; do
    [[ $(sha256sum <"$f" | cut -c1-64) == "$(basename "$(dirname "$f")")$(basename "$f")" ]] ||
      fail "$1: blob $f does not hash to its name"
  done < <(find "$C/cas" -type f)
}
stat_gt0() { [[ $(remote_stat "$C" "$2") -gt 0 ]] || fail "$1: remote.$2 is 0"; }

# ---- the good artifacts ----
copy_cache "$(fixture small)" "$T/W"
P=$(serve pub)
expect_exit 0 build --cache "$T/W" --remote "$P" --upload
expect_eq "$(json "$OUT" 'd["uploaded"]')" 1 "setup: uploaded"
key=$(json "$OUT" 'd["items"][0]["key"]')
digest=$(json "$OUT" 'd["items"][0]["digest"]')
[[ -f $T/pub/root/ac/$key && -f $T/pub/root/cas/$digest ]] || die "setup: the upload left no ac/cas files"
log "setup: bias_gelu sm_90 on the server ($P)"

# ---- 1. server down ----
U=$(closed_url)
fresh
timed 0 build --cache "$C" --remote "$U"
fallback "down"
under 20 "down: the build with the server down"
stat_gt0 "down" errors
log "down: connection refused, compiled locally in ${ELAPSED}s"

# ---- 2. 500 (and the controls) ----
F=$(fault_serve fault ok)
fill fault pub
fresh
expect_exit 0 build --cache "$C" --remote "$F"
fetched "fault server, mode ok"
set_mode "$F" flaky:2
fresh
expect_exit 0 build --cache "$C" --remote "$F"
fetched "flaky:2 (two 503s, absorbed by the retries)"
set_mode "$F" 500
fresh
n=$(requests fault)
timed 0 build --cache "$C" --remote "$F"
fallback "500"
under 30 "500: the build"
stat_gt0 "500" errors
sent=$(($(requests fault) - n))
((sent >= 2 && sent <= 6)) || fail "500: $sent requests for one record (expected 1 + retries, retries 2 by default)"
log "500: $sent requests (retried), compiled locally in ${ELAPSED}s"

# ---- 3. stall ----
set_mode "$F" stall
fresh
KILN_REMOTE_TIMEOUT=2 timed 0 build --cache "$C" --remote "$F"
fallback "stall"
under 40 "stall (KILN_REMOTE_TIMEOUT=2): the build"
stat_gt0 "stall" errors
log "stall: timed out, compiled locally in ${ELAPSED}s"

# ---- 4. truncated bodies ----
set_mode "$F" truncate
fresh
timed 0 build --cache "$C" --remote "$F"
fallback "truncate"
under 30 "truncate: the build"
stat_gt0 "truncate" rejected
clean "truncate"
set_mode "$F" ok
log "truncate: rejected, compiled locally, verify clean"

# ---- 5. a blob with wrong bytes ----
X=$(serve badblob)
fill badblob pub
python3 -c 'import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xFF
open(p, "wb").write(b)' "$T/badblob/root/cas/$digest"
fresh
expect_exit 0 build --cache "$C" --remote "$X"
fallback "wrong bytes"
stat_gt0 "wrong bytes" rejected
grep -i "remote cache" "$ERR" | grep -q "bias_gelu" || fail "wrong bytes: no warning naming the unit: $(head -3 "$ERR")"
clean "wrong bytes"
log "wrong bytes: rejected with a warning, compiled locally, verify clean"

# ---- 6. a record that is not JSON ----
Y=$(serve badjson)
fill badjson pub
printf 'this is not {"json": at all\n' >"$T/badjson/root/ac/$key"
fresh
expect_exit 0 build --cache "$C" --remote "$Y"
fallback "not JSON"
stat_gt0 "not JSON" rejected
clean "not JSON"
log "not JSON: rejected, compiled locally"

# ---- 7. signatures ----
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/key1"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/key2"
chmod 600 "$T/key1" "$T/key2"
# (a) the unsigned records of pub, a client that wants signatures
fresh
KILN_REMOTE_HMAC_KEY_FILE=$T/key1 expect_exit 0 build --cache "$C" --remote "$P"
fallback "unsigned record, client with a key"
stat_gt0 "unsigned record" rejected
# (b) records signed with key2
Z=$(serve signed)
copy_cache "$(fixture small)" "$T/W2"
KILN_REMOTE_HMAC_KEY_FILE=$T/key2 expect_exit 0 build --cache "$T/W2" --remote "$Z" --upload
expect_eq "$(json "$OUT" 'd["uploaded"]')" 1 "signed: uploaded"
grep -q '"signature"' "$T/signed/root/ac/$key" || fail "signed: the uploaded record has no signature"
fresh
KILN_REMOTE_HMAC_KEY_FILE=$T/key2 expect_exit 0 build --cache "$C" --remote "$Z"
fetched "signed with key2, client with key2"
fresh
KILN_REMOTE_HMAC_KEY_FILE=$T/key1 expect_exit 0 build --cache "$C" --remote "$Z"
fallback "signed with key2, client with key1"
stat_gt0 "signed with another key" rejected
secret_free "signatures: output and cache" "$(cat "$T/key1")" "$OUT" "$ERR" "$C"
# (c) a signed record edited after signing
python3 -c 'import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["registers"] = d["registers"] + 1
json.dump(d, open(p, "w"))' "$T/signed/root/ac/$key"
fresh
KILN_REMOTE_HMAC_KEY_FILE=$T/key2 expect_exit 0 build --cache "$C" --remote "$Z"
fallback "signed record edited"
stat_gt0 "signed record edited" rejected
log "signatures: unsigned, other key and edited records rejected; the right key fetches"

# ---- 8. the breaker ----
fresh
# every compile fails (injected, instantly): exit 1 is expected
KILN_TEST_INJECT_COMPILE_ERROR='*' timed 1 kiln build --arch 80,90 --cache "$C" --remote "$U" --json
targets=$(json "$OUT" 'd["targets"]')
((targets >= 20)) || fail "breaker: only $targets targets"
expect_eq "$(grep -c "turned off for this process" "$ERR")" 1 "breaker: 'turned off for this process' warnings"
expect_eq "$(remote_stat "$C" breaker_trips)" 1 "breaker: remote.breaker_trips"
under 60 "breaker: the build of $targets targets"
log "breaker: $targets targets, server down: turned off once, in ${ELAPSED}s"

# ---- 9. offline: the loader ----
if [[ -f ${IT_FAKECUDA:-} ]]; then
  export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
  fresh
  KILN_OFFLINE=1 KILN_REMOTE_URL=$U expect_exit 1 kiln warmup --kernels bias_gelu --cache "$C"
  expect_stderr_contains "bias_gelu" "the unit"
  expect_stderr_contains "KILN_OFFLINE=1 forbids building it here"
  expect_stderr_contains "remote cache $U" "the remote and its failure"
  if [[ -f $C/index.sqlite ]]; then
    expect_eq "$(index_query "$C" "SELECT count(*) FROM builds")/$(index_query "$C" "SELECT count(*) FROM records")" \
      0/0 "offline, remote down: compile runs / records"
  fi
  fresh
  KILN_OFFLINE=1 KILN_REMOTE_URL=$P expect_exit 0 kiln warmup --kernels bias_gelu --cache "$C" --json
  expect_eq "$(json "$OUT" '[u["source"] + " " + u["target"] for x in d["devices"] for u in x["units"]]')" \
    '["exact CUBIN sm_90"]' "offline, good remote: what was loaded"
  expect_eq "$(index_query "$C" "SELECT count(*) FROM builds")" 0 "offline, good remote: compile runs"
  unset KILN_CUDA_LIBRARY KILN_FAKE_CUDA_DEVICES
  log "offline: a broken remote is a clear error (unit, remote), nothing compiled; a good one loads"
else
  log "offline: skipped (no fake libcuda)"
fi
