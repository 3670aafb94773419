#!/usr/bin/env bash
# The s3:// remote against a real S3 server: SeaweedFS on 127.0.0.1 with
# signature checking (s3_lib.sh), started once for the whole file.
#  1. upload: a copy of the kernels fixture (nothing compiles) writes every
#     sm_90 target to s3://kiln-test/team/a (credentials from the environment);
#     the objects are at team/a/ac/<key> and team/a/cas/<digest>;
#  2. fetch: an empty cache gets every target (credentials from a shared
#     credentials file, AWS_PROFILE), compiles none, `kiln cache verify` is clean;
#  3. uploading again sends no PUT (HEAD finds every record);
#  4. a wrong secret: the 403 says SignatureDoesNotMatch (a fetch's GET, an
#     upload's HEAD, kiln doctor), the build still ends with its targets (one
#     compiled locally), and no secret is in any output (KILN_LOG=debug) or file;
#  5. kiln doctor: credentials' source named; anonymous (403 AccessDenied, said
#     to be anonymous); a read-only user with uploads on (AccessDenied);
#     a bucket that does not exist (NoSuchBucket);
#  6. the server stopped: the breaker turns the remote off once, bounded.
# Compiles: bias_gelu sm_90 once (4), and instant injected failures (6).
. "$(dirname "$0")/lib.sh" "$@"
REMOTE_LIB_NO_NGINX=1 . "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/s3_lib.sh"

URL=s3://kiln-test/team/a
build() { kiln build --arch 90 --json "$@"; }
# Only the environment a test sets: no operator's AWS settings leak in.
for v in $(compgen -e | grep '^AWS_' || true); do unset "$v"; done
export HOME=$T/home AWS_REGION=us-east-1
mkdir -p "$HOME"

weed_start s3
s3_mkbucket kiln-test
export KILN_S3_ENDPOINT=$S3_ENDPOINT
log "SeaweedFS at $S3_ENDPOINT, bucket kiln-test"

# ---- 1. upload ----
copy_cache "$(fixture kernels)" "$T/A"
AWS_ACCESS_KEY_ID=kilnAK AWS_SECRET_ACCESS_KEY=kilnSECRET KILN_LOG=debug \
  expect_exit 0 build --cache "$T/A" --remote "$URL" --upload
cp "$OUT" "$T/a.json"
cp "$ERR" "$T/a.err"
n=$(json "$T/a.json" 'd["targets"]')
((n >= 10)) || fail "upload: only $n targets at sm_90 in the kernels fixture"
expect_eq "$(json "$T/a.json" '[d["built"], d["fetched"], d["uploaded"]]')" "[0, 0, $n]" \
  "upload: built, fetched, uploaded"
while read -r key digest; do
  expect_eq "$(s3_request HEAD "kiln-test/team/a/ac/$key")" 200 "upload: HEAD team/a/ac/$key"
  expect_eq "$(s3_request HEAD "kiln-test/team/a/cas/$digest")" 200 "upload: HEAD team/a/cas/$digest"
done < <(json "$T/a.json" '"\n".join(i["key"] + " " + i["digest"] for i in d["items"][:2])')
log "upload: $n targets on the server (records and blobs under team/a/)"

# ---- 2. fetch, credentials from the shared file ----
mkdir -p "$HOME/.aws"
printf '[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n[ci]\naws_access_key_id = kilnAK\naws_secret_access_key = kilnSECRET\n' \
  >"$HOME/.aws/credentials"
new_cache "$T/B"
AWS_PROFILE=ci timed 0 build --cache "$T/B" --remote "$URL"
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"]]')" "[$n, $n, 0]" "fetch: targets, fetched, built"
expect_exit 0 kiln cache verify --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "fetch: verify"
expect_eq "$(remote_stat "$T/B" hits)" "$n" "fetch: remote.hits"
log "fetch: $n targets into an empty cache in ${ELAPSED}s, 0 compiled, verify clean"

# ---- 3. upload again: nothing new ----
AWS_PROFILE=ci KILN_LOG=debug expect_exit 0 build --cache "$T/A" --remote "$URL" --upload
expect_eq "$(json "$OUT" 'd["uploaded"]')" 0 "upload again: records written"
grep -q "remote PUT" "$ERR" && fail "upload again: a PUT was sent: $(grep -m1 'remote PUT' "$ERR")"
log "upload again: 0 written, no PUT"

# ---- 4. a wrong secret ----
export AWS_ACCESS_KEY_ID=kilnAK AWS_SECRET_ACCESS_KEY=wrongSECRETxyz
new_cache "$T/C"
KILN_LOG=debug expect_exit 0 build --cache "$T/C" --remote "$URL" --kernels bias_gelu
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"]]')" "[1, 0, 1]" "wrong secret: fetched, built"
expect_stderr_contains "SignatureDoesNotMatch" "a fetch's 403 names the cause"
cp "$OUT" "$T/c.json"
cp "$ERR" "$T/c.err"
KILN_LOG=debug expect_exit 0 build --cache "$T/A" --remote "$URL" --kernels bias_gelu --upload
expect_stderr_contains "HEAD ac/" "an upload's HEAD"
expect_stderr_contains "SignatureDoesNotMatch" "an upload's 403 (a HEAD has no body) names the cause"
cp "$ERR" "$T/c2.err"
KILN_REMOTE_URL=$URL KILN_LOG=debug kiln doctor --cache "$T/A" --json >"$OUT" 2>"$ERR" || true
cp "$OUT" "$T/c3.json"
cp "$ERR" "$T/c3.err"
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "remote"][0]')" FAIL "wrong secret: doctor's remote check"
expect_stdout_contains "SignatureDoesNotMatch" "doctor names the cause"
expect_stdout_contains "environment (AWS_ACCESS_KEY_ID)" "doctor names where the credentials came from"
for s in wrongSECRETxyz kilnSECRET; do
  secret_free "secret $s" "$s" "$T/a.json" "$T/a.err" "$T/c.json" "$T/c.err" "$T/c2.err" "$T/c3.json" "$T/c3.err" \
    "$T/A" "$T/B" "$T/C"
done
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
log "wrong secret: SignatureDoesNotMatch said, built locally, no secret in any output"

# ---- 5. kiln doctor ----
doctor_remote() { json "$OUT" '[c["status"] + " " + c["summary"] + " | " + (c["fix"] or "") for c in d["checks"] if c["id"] == "remote"][0]'; }
AWS_PROFILE=ci KILN_REMOTE_URL=$URL KILN_REMOTE_UPLOAD=1 kiln doctor --cache "$T/A" --json >"$OUT" 2>"$ERR" || true
r=$(doctor_remote)
[[ $r == PASS* && $r == *"credentials: file $HOME/.aws/credentials, profile ci"* && $r == *"test upload landed"* ]] ||
  fail "doctor, profile ci: $r"
rm "$HOME/.aws/credentials"
KILN_REMOTE_URL=$URL kiln doctor --cache "$T/A" --json >"$OUT" 2>"$ERR" || true
r=$(doctor_remote)
[[ $r == FAIL* && $r == *AccessDenied* && $r == *anonymous* ]] || fail "doctor, anonymous: $r"
AWS_ACCESS_KEY_ID=readAK AWS_SECRET_ACCESS_KEY=readSECRET KILN_REMOTE_URL=$URL \
  KILN_REMOTE_UPLOAD=1 kiln doctor --cache "$T/A" --json >"$OUT" 2>"$ERR" || true
r=$(doctor_remote)
[[ $r == FAIL* && $r == *"uploads cannot land"* && $r == *AccessDenied* ]] || fail "doctor, read-only user: $r"
# the same user's build with --upload: uploads go off for the process, the build succeeds
AWS_ACCESS_KEY_ID=readAK AWS_SECRET_ACCESS_KEY=readSECRET \
  expect_exit 0 build --cache "$T/A" --remote "${URL%/*}/read-only" --upload --kernels bias_gelu
expect_stderr_contains "refuses uploads" "a read-only bucket's refusal"
expect_stderr_contains "uploads are off for this process, fetches go on" "uploads off, not the remote"
AWS_ACCESS_KEY_ID=kilnAK AWS_SECRET_ACCESS_KEY=kilnSECRET \
  KILN_REMOTE_URL=s3://no-such-bucket/x kiln doctor --cache "$T/A" --json >"$OUT" 2>"$ERR" || true
r=$(doctor_remote)
[[ $r == FAIL* && $r == *NoSuchBucket* ]] || fail "doctor, missing bucket: $r"
log "doctor: the credentials' source; anonymous, read-only and missing-bucket failures explained"

# ---- 6. the server stopped: the breaker ----
weed_stop
new_cache "$T/D"
# every compile fails (injected, instantly): exit 1 is expected
AWS_ACCESS_KEY_ID=kilnAK AWS_SECRET_ACCESS_KEY=kilnSECRET KILN_TEST_INJECT_COMPILE_ERROR='*' \
  timed 1 kiln build --arch 80,90 --cache "$T/D" --remote "$URL" --json
targets=$(json "$OUT" 'd["targets"]')
((targets >= 20)) || fail "breaker: only $targets targets"
expect_eq "$(grep -c "turned off for this process" "$ERR")" 1 "breaker: 'turned off for this process' warnings"
expect_eq "$(remote_stat "$T/D" breaker_trips)" 1 "breaker: remote.breaker_trips"
under 30 "breaker: the build of $targets targets with the server stopped"
log "server stopped: turned off once, $targets targets in ${ELAPSED}s"
