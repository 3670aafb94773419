#!/usr/bin/env bash
# nginx_dav.sh itself (the server the remote cache's tests and bench use):
#  1. plain: PUT then GET round trip (nested path created), HEAD, 404, logs;
#  2. --token: no or wrong bearer token 401, the right one 200;
#  3. --basic: 401 without credentials, 200 with them (curl --netrc-file too);
#  4. --readonly: GET works, PUT and DELETE 403;
#  5. --tls: https with --cacert works (HTTP/2 offered), without it curl refuses;
#  6. stop leaves no nginx behind, also for a server whose master was killed.
# Nothing here runs kiln (the binary argument only follows the convention).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/remote_lib.sh" # serve, and every server stopped at exit
# code ARGS...: the HTTP status curl gets.
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" || true; }

payload=$T/payload
head -c 200000 /dev/urandom >"$payload"

# ---- 1. plain ----
url=$(serve plain)
[[ $url =~ ^http://127\.0\.0\.1:[0-9]+$ ]] || fail "plain: base URL '$url'"
expect_eq "$(cat "$T/plain/url")" "$url" "plain: DIR/url"
expect_eq "$(code -T "$payload" "$url/cas/deep/er/blob")" 201 "plain: PUT (nested path)"
curl -sf --max-time 10 -o "$T/got" "$url/cas/deep/er/blob" || fail "plain: GET failed"
cmp -s "$payload" "$T/got" || fail "plain: GET returned other bytes than were PUT"
cmp -s "$payload" "$T/plain/root/cas/deep/er/blob" || fail "plain: the file under DIR/root differs"
expect_eq "$(code -T "$payload" "$url/cas/deep/er/blob")" 204 "plain: PUT over an existing file"
expect_eq "$(code -I "$url/cas/deep/er/blob")" 200 "plain: HEAD"
expect_eq "$(code "$url/ac/missing")" 404 "plain: GET of a missing file"
expect_eq "$(code -X DELETE "$url/cas/deep/er/blob")" 204 "plain: DELETE"
expect_eq "$(code "$url/cas/deep/er/blob")" 404 "plain: GET after DELETE"
grep -q '"PUT /cas/deep/er/blob HTTP' "$T/plain/logs/access.log" || fail "plain: no PUT in the access log"
[[ $(stat -c %U "$T/plain/root/cas/deep") == "$(id -un)" ]] || fail "plain: files not owned by the invoking user"
log "plain: PUT/GET/HEAD/DELETE round trip of 200000 bytes at $url"

# ---- 2. token ----
url=$(serve token --token SECRET123)
expect_eq "$(code "$url/ac/x")" 401 "token: no Authorization"
expect_eq "$(code -H 'Authorization: Bearer WRONG' "$url/ac/x")" 401 "token: wrong token"
expect_eq "$(code -H 'Authorization: Bearer SECRET123' -T "$payload" "$url/ac/x")" 201 "token: PUT with the token"
expect_eq "$(code -H 'Authorization: Bearer SECRET123' "$url/ac/x")" 200 "token: GET with the token"
expect_eq "$(code -T "$payload" "$url/ac/y")" 401 "token: PUT without the token"
[[ -e $T/token/root/ac/y ]] && fail "token: a PUT without the token wrote a file"
log "token: 401 without or with a wrong token, 200/201 with it"

# ---- 3. basic ----
url=$(serve basic --basic alice:s3cret)
expect_eq "$(code "$url/ac/x")" 401 "basic: no credentials"
expect_eq "$(code -u alice:wrong "$url/ac/x")" 401 "basic: wrong password"
expect_eq "$(code -u alice:s3cret -T "$payload" "$url/ac/x")" 201 "basic: PUT with credentials"
printf 'machine 127.0.0.1 login alice password s3cret\n' >"$T/netrc"
chmod 600 "$T/netrc"
expect_eq "$(code --netrc-file "$T/netrc" "$url/ac/x")" 200 "basic: GET with a netrc file"
log "basic: 401 without credentials, 200 with them and with a netrc file"

# ---- 4. read-only ----
url=$(serve ro --readonly)
mkdir -p "$T/ro/root/ac"
cp "$payload" "$T/ro/root/ac/k"
expect_eq "$(code "$url/ac/k")" 200 "readonly: GET"
expect_eq "$(code -I "$url/ac/k")" 200 "readonly: HEAD"
expect_eq "$(code -T "$payload" "$url/ac/new")" 403 "readonly: PUT"
expect_eq "$(code -X DELETE "$url/ac/k")" 403 "readonly: DELETE"
[[ -e $T/ro/root/ac/new || ! -e $T/ro/root/ac/k ]] && fail "readonly: the root was changed"
log "readonly: GET/HEAD 200, PUT/DELETE 403"

# ---- 5. tls ----
url=$(serve tls --tls)
ca=$(sed -n 2p "$T/tls.start")
[[ $url =~ ^https://127\.0\.0\.1:[0-9]+$ ]] || fail "tls: base URL '$url'"
[[ -f $ca && $ca == "$(cat "$T/tls/ca_file")" ]] || fail "tls: CA path '$ca'"
expect_eq "$(code --cacert "$ca" -T "$payload" "$url/cas/b")" 201 "tls: PUT with --cacert"
curl -sf --max-time 10 --cacert "$ca" -o "$T/got" "$url/cas/b" || fail "tls: GET failed"
cmp -s "$payload" "$T/got" || fail "tls: GET returned other bytes"
if curl -V | grep -q HTTP2; then
  expect_eq "$(curl -s -o /dev/null -w '%{http_version}' --http2 --cacert "$ca" "$url/cas/b")" 2 "tls: HTTP/2"
fi
rc=0
curl -s -o /dev/null --max-time 10 "$url/cas/b" || rc=$?
expect_eq "$rc" 60 "tls: curl's exit without the CA (60: certificate not verified)"
log "tls: https with the test CA works, without it verification fails"

# ---- 6. stop ----
for s in plain token basic ro; do bash "$ND" stop "$T/$s"; done
bash "$ND" stop "$T/plain" # twice is fine
master=$(cat "$T/tls/nginx.pid")
workers=$(pgrep -P "$master" | tr '\n' ' ')
[[ -n $workers ]] || fail "stop: no workers under the tls master $master"
kill -KILL "$master"
bash "$ND" stop "$T/tls" # the master is gone: its orphaned workers are found and ended
# alive PID: running, not a zombie (a reparented worker may wait a while to be reaped)
alive() { [[ -e /proc/$1 ]] && ! grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
for p in $workers; do
  if alive "$p"; then
    fail "stop: worker $p of the killed master survived"
    kill -KILL "$p"
  fi
done
for s in plain token basic ro tls; do
  [[ -e $T/$s/nginx.pid ]] && fail "stop: $s left its pid file"
done
left=$(pgrep -f "nginx: master process nginx -p $T/" || true)
[[ -z $left ]] || fail "stop: nginx masters left: $left"
# A failed start leaves nothing running: two servers in one folder.
url=$(serve again)
if bash "$ND" start "$T/again" >/dev/null 2>"$T/again.err"; then
  fail "start in a folder where nginx runs succeeded"
fi
grep -q "already runs" "$T/again.err" || fail "start twice: $(cat "$T/again.err")"
bash "$ND" stop "$T/again"
[[ -z $(pgrep -f "nginx: master process nginx -p $T/" || true) ]] || fail "stop: nginx left after stop"
log "stop: graceful stop, twice, after the master was killed; a second start refused"
