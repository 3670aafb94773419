#!/usr/bin/env bash
# The s3:// remote against moto's S3, IAM and STS with authentication on
# (s3_lib.sh: moto_start), started once for the whole file: AWS's strict
# headers, temporary credentials, web identity, a wrong region and
# credentials that expire mid-job.
#  1. an IAM user's keys: an upload from a copy of the kernels fixture, then
#     a fresh cache fetches every sm_90 target (0 compiled, verify clean);
#  2. a session token from sts:AssumeRole: the fetch works with
#     AWS_SESSION_TOKEN (x-amz-security-token) and is refused without it;
#  3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN through moto's
#     STS (AWS_ENDPOINT_URL_STS): every target fetched with the role's
#     credentials; kiln probe says "web identity", never a key;
#  4. a wrong region (fault_server.py in front of moto answers as AWS does,
#     moto does not check): the error says which region to set; with it set,
#     the fetch works;
#  5. ExpiredToken (fault_server.py, moto does not expire tokens): the
#     credentials file is rewritten while kiln's requests wait, kiln re-reads
#     it and every target comes; expired again with the file unchanged: an
#     error that says so, once per request, and no secret in any output.
# Compiles: none (the failures inject instant compile errors).
. "$(dirname "$0")/lib.sh" "$@"
REMOTE_LIB_NO_NGINX=1 . "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/s3_lib.sh"

URL=s3://kiln-test/moto
build() { kiln build --arch 90 --json "$@"; }
for v in $(compgen -e | grep '^AWS_' || true); do unset "$v"; done
export HOME=$T/home AWS_REGION=us-east-1
mkdir -p "$HOME/.aws"

moto_start moto kiln-test
export KILN_S3_ENDPOINT=$S3_ENDPOINT
log "moto at $S3_ENDPOINT (authentication on), user $MOTO_AK, role $MOTO_ROLE"
secrets=("$MOTO_SK")

# ---- 1. the IAM user's keys ----
copy_cache "$(fixture kernels)" "$T/A"
AWS_ACCESS_KEY_ID=$MOTO_AK AWS_SECRET_ACCESS_KEY=$MOTO_SK KILN_LOG=debug \
  expect_exit 0 build --cache "$T/A" --remote "$URL" --upload
cp "$OUT" "$T/1.json"
cp "$ERR" "$T/1.err"
n=$(json "$OUT" 'd["targets"]')
((n >= 10)) || fail "upload: only $n targets at sm_90 in the kernels fixture"
expect_eq "$(json "$OUT" '[d["built"], d["uploaded"]]')" "[0, $n]" "user keys: built, uploaded"
new_cache "$T/B"
AWS_ACCESS_KEY_ID=$MOTO_AK AWS_SECRET_ACCESS_KEY=$MOTO_SK timed 0 build --cache "$T/B" --remote "$URL"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[$n, 0]" "user keys: fetched, built"
expect_exit 0 kiln cache verify --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "user keys: verify"
log "user keys: $n targets uploaded and fetched back (${ELAPSED}s), verify clean"

# ---- 2. a session token ----
moto_assume s1
secrets+=("$SESS_SK" "$SESS_TOKEN")
new_cache "$T/C"
AWS_ACCESS_KEY_ID=$SESS_AK AWS_SECRET_ACCESS_KEY=$SESS_SK AWS_SESSION_TOKEN=$SESS_TOKEN KILN_LOG=debug \
  expect_exit 0 build --cache "$T/C" --remote "$URL"
cp "$ERR" "$T/2.err"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[$n, 0]" "session token: fetched, built"
new_cache "$T/D"
AWS_ACCESS_KEY_ID=$SESS_AK AWS_SECRET_ACCESS_KEY=$SESS_SK KILN_TEST_INJECT_COMPILE_ERROR='*' \
  expect_exit 1 build --cache "$T/D" --remote "$URL" --kernels bias_gelu
cp "$ERR" "$T/2b.err"
expect_eq "$(json "$OUT" 'd["fetched"]')" 0 "session keys without the token: fetched"
expect_stderr_contains "HTTP 403 InvalidAccessKeyId" "session keys without the token: the 403 names the cause"
log "session token: fetched with x-amz-security-token, InvalidAccessKeyId without it"

# ---- 3. web identity ----
printf 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a2lsbiJ9.c2lnbmF0dXJl\n' >"$T/oidc-token"
secrets+=("eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6a2lsbiJ9")
export AWS_WEB_IDENTITY_TOKEN_FILE=$T/oidc-token AWS_ROLE_ARN=$MOTO_ROLE AWS_ENDPOINT_URL_STS=$S3_ENDPOINT
new_cache "$T/E"
moto_auth_free 1 # moto checks signatures even on AssumeRoleWithWebIdentity, which AWS does not sign
KILN_LOG=debug expect_exit 0 build --cache "$T/E" --remote "$URL"
cp "$ERR" "$T/3.err"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[$n, 0]" "web identity: fetched, built"
expect_stderr_contains "credentials: web identity (role $MOTO_ROLE from AWS_ROLE_ARN, token file $T/oidc-token)" \
  "web identity: the source, at debug"
moto_auth_free 1
KILN_REMOTE_URL=$URL expect_exit 0 kiln probe --cache "$T/E" --json
cp "$OUT" "$T/3.json"
expect_eq "$(json "$OUT" 'd["remote"]["credentials"].split(" (")[0]')" "web identity" "web identity: kiln probe"
# a token file that is not there: a usage error naming it
AWS_WEB_IDENTITY_TOKEN_FILE=$T/nonexistent expect_exit 2 build --cache "$T/D" --remote "$URL" --kernels bias_gelu
expect_stderr_contains "the token file $T/nonexistent cannot be read" "web identity: a missing token file"
# STS unreachable: the remote fails, the build goes on without it
new_cache "$T/D3"
AWS_ENDPOINT_URL_STS=$(closed_url) KILN_TEST_INJECT_COMPILE_ERROR='*' \
  expect_exit 1 build --cache "$T/D3" --remote "$URL" --kernels bias_gelu
expect_stderr_contains "web identity: STS at" "web identity: STS unreachable, said"
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"]]')" "[1, 0]" "web identity: STS unreachable: targets, fetched"
unset AWS_WEB_IDENTITY_TOKEN_FILE AWS_ROLE_ARN AWS_ENDPOINT_URL_STS
log "web identity: $n targets with the role's credentials from moto's STS"

# ---- 4. a wrong region ----
fault_proxy_start proxy s3-region:eu-west-1
export KILN_S3_ENDPOINT=$PROXY_ENDPOINT AWS_ACCESS_KEY_ID=$MOTO_AK AWS_SECRET_ACCESS_KEY=$MOTO_SK
new_cache "$T/D4"
KILN_TEST_INJECT_COMPILE_ERROR='*' expect_exit 1 build --cache "$T/D4" --remote "$URL" --kernels bias_gelu
expect_stderr_contains "the bucket is in region eu-west-1, not us-east-1: set AWS_REGION=eu-west-1" \
  "wrong region: which region to set"
new_cache "$T/F"
AWS_REGION=eu-west-1 expect_exit 0 build --cache "$T/F" --remote "$URL"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[$n, 0]" "right region: fetched, built"
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
log "wrong region: 'set AWS_REGION=eu-west-1' said; with it, $n targets fetched"

# ---- 5. credentials that expire mid-job ----
creds_file() { printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\naws_session_token = %s\n' \
  "$SESS_AK" "$SESS_SK" "$SESS_TOKEN" >"$HOME/.aws/credentials.tmp" && mv "$HOME/.aws/credentials.tmp" "$HOME/.aws/credentials"; }
tok_hash() { printf '%s' "$1" | sha256sum | cut -c1-8; }
moto_assume s2
secrets+=("$SESS_SK" "$SESS_TOKEN")
old=$(tok_hash "$SESS_TOKEN")
creds_file
fault_proxy_mode "s3-expired-token:$SESS_TOKEN:$T/gate"
: >"$PROXY_LOG"
new_cache "$T/G"
KILN_LOG=debug build --cache "$T/G" --remote "$URL" >"$T/5.json" 2>"$T/5.err" &
pid=$!
wait_for 60 "kiln's first request to be held" grep -q " held " "$PROXY_LOG" ||
  fail "no request was held: $(tail -3 "$PROXY_LOG")"
moto_assume s3 # what the job's credential refresher writes
secrets+=("$SESS_SK" "$SESS_TOKEN")
new=$(tok_hash "$SESS_TOKEN")
creds_file
touch "$T/gate"
wait_for 120 "the build with expiring credentials to end" bash -c "! kill -0 $pid 2>/dev/null" ||
  kill -KILL "$pid"
wait "$pid" || fail "the build with expiring credentials failed: $(tail -5 "$T/5.err")"
expect_eq "$(json "$T/5.json" '[d["fetched"], d["built"]]')" "[$n, 0]" "renewed credentials: fetched, built"
grep -q " 400 auth=yes tok=$old" "$PROXY_LOG" || fail "no ExpiredToken was answered"
expect_eq "$(grep -c " 200 auth=yes tok=$new" "$PROXY_LOG")" "$((2 * n))" "renewed credentials: requests that got 200"
grep -q "credentials renewed from file $HOME/.aws/credentials, profile default" "$T/5.err" ||
  fail "no 'credentials renewed' line: $(grep -m3 ExpiredToken "$T/5.err")"
# expired again, and the file still has them: an error, not a loop
fault_proxy_mode "s3-expired-token:$SESS_TOKEN"
: >"$PROXY_LOG"
new_cache "$T/D5"
KILN_TEST_INJECT_COMPILE_ERROR='*' expect_exit 1 build --cache "$T/D5" --remote "$URL" --kernels bias_gelu
cp "$ERR" "$T/5b.err"
expect_stderr_contains "HTTP 400 ExpiredToken: expired, and their source has no newer ones" "expired, unchanged: the request's error"
expect_stderr_contains "the credentials have expired (ExpiredToken), and their source (file $HOME/.aws/credentials, profile default) still has the same ones: renew them there" \
  "expired, unchanged: said once at warn"
expect_eq "$(grep -c " 400 " "$PROXY_LOG")" 1 "expired, unchanged: requests sent"
log "ExpiredToken: re-read from the rewritten file, $n targets; unchanged: one request, an error"

for s in "${secrets[@]}"; do
  secret_free "a secret" "$s" "$T"/*.json "$T"/*.err "$T/A" "$T/B" "$T/C" "$T/E" "$T/G"
done
log "no secret in any output or cache"
