#!/usr/bin/env bash
# The remote cache end to end against nginx WebDAV (tests/integration/nginx_dav.sh):
#  1. upload: a warm cache (the kernels fixture) writes two bias units' sm_90
#     targets back (--upload): ac/{key} and cas/{digest} on the server, bytes = digest;
#  2. fetch: an empty cache gets every target from the remote, compiles none
#     (its builds log is empty), same keys and digests as the source, stats count it;
#  3. a second build there is all local hits and sends no request;
#  4. a read-only server: --upload from a cache that compiles one more target
#     succeeds (exit 0) with a warning about the refused upload; server unchanged;
#  5. bearer token (KILN_REMOTE_TOKEN_FILE): fetch works; with KILN_LOG=debug the
#     token is in no output and no file of the cache; a wrong token: warning
#     (401), local build, exit 0, neither token printed;
#  6. .netrc ($HOME/.netrc and $NETRC) with basic auth; the password never printed;
#  7. TLS: KILN_REMOTE_CA_FILE trusts the test CA; without it verification fails,
#     kiln warns and builds locally.
# Compiles: 3 targets (one per fallback case), everything else is fetched.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/remote_lib.sh"

kiln build --help | grep -q -- --remote || skip "this kiln has no remote cache (kiln build --remote)"
GLOB='bias_[gs]*' # bias_gelu, bias_swiglu: the remote is the same for every unit; these compile in seconds
ONE=bias_gelu
build() { kiln build --arch 90 --json "$@"; }
count() { json "$OUT" "sum(1 for i in d['items'] if i['outcome'] == '$1')"; }
pairs() { json "$1" "sorted((r['key'], r['digest']) for r in d if r['target'] == 'sm_90' and r['unit'] in ('bias_gelu', 'bias_swiglu'))"; }

# ---- 1. upload from a warm cache ----
copy_cache "$(fixture kernels)" "$T/A"
P=$(serve pub)
expect_exit 0 build --kernels "$GLOB" --cache "$T/A" --remote "$P" --upload
expect_eq "$(json "$OUT" '[d["targets"], d["hits"], d["built"], d["fetched"], d["uploaded"]]')" \
  "[2, 2, 0, 0, 2]" "upload: targets, hits, built, fetched, uploaded"
cp "$OUT" "$T/a.json"
expect_exit 0 kiln cache ls --cache "$T/A" --json
cp "$OUT" "$T/a.ls"
n_up=0
while read -r key digest; do
  [[ -f $T/pub/root/ac/$key ]] || fail "upload: no ac/$key on the server"
  if [[ -f $T/pub/root/cas/$digest ]]; then
    expect_eq "$(sha256sum <"$T/pub/root/cas/$digest" | cut -c1-64)" "$digest" "upload: sha256 of cas/$digest"
    n_up=$((n_up + 1))
  else
    fail "upload: no cas/$digest on the server"
  fi
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(d.get("key") != sys.argv[2])' \
    "$T/pub/root/ac/$key" "$key" 2>/dev/null || fail "upload: ac/$key is not a JSON record of its key"
done < <(json "$T/a.json" '"\n".join(i["key"] + " " + i["digest"] for i in d["items"])')
expect_eq "$(remote_stat "$T/A" uploads)" 2 "upload: remote.uploads in A's stats"
log "upload: 2 records and their blobs on the server ($n_up verified)"

# Uploading again finds them there (HEAD) and writes nothing.
before=$(find "$T/pub/root" -type f -printf '%p %T@\n' | sort)
n=$(requests pub)
expect_exit 0 build --kernels "$GLOB" --cache "$T/A" --remote "$P" --upload
expect_eq "$(json "$OUT" 'd["uploaded"]')" 0 "upload again: records written"
expect_eq "$(find "$T/pub/root" -type f -printf '%p %T@\n' | sort)" "$before" "upload again: the server's files"
tail -n +"$((n + 1))" "$T/pub/logs/access.log" | grep -q '"PUT ' && fail "upload again: PUT requests sent"

# ---- 2. fetch into an empty cache ----
new_cache "$T/B"
expect_exit 0 build --kernels "$GLOB" --cache "$T/B" --remote "$P"
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"], d["hits"], d["failed"]]')" \
  "[2, 2, 0, 0, 0]" "fetch: targets, fetched, built, hits, failed"
expect_eq "$(count fetched)" 2 "fetch: items with outcome 'fetched'"
expect_eq "$(index_query "$T/B" "SELECT count(*) FROM builds")" 0 "fetch: compile runs in B's builds log"
expect_exit 0 kiln cache ls --cache "$T/B" --json
expect_eq "$(pairs "$OUT")" "$(pairs "$T/a.ls")" "fetch: (key, digest) pairs of B vs A"
expect_eq "$(remote_stat "$T/B" hits)" 2 "fetch: remote.hits"
[[ $(remote_stat "$T/B" bytes_down) -gt 0 ]] || fail "fetch: remote.bytes_down is 0"
expect_eq "$(remote_stat "$T/B" errors)/$(remote_stat "$T/B" rejected)" 0/0 "fetch: remote errors/rejected"
expect_exit 0 kiln cache verify --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["checked"], d["bad"]]')" "[2, 0]" "fetch: verify checked, bad"
log "fetch: 2 of 2 targets fetched, 0 compiled, digests equal A's"

# ---- 3. a second build: local hits, no request ----
n=$(requests pub)
expect_exit 0 build --kernels "$GLOB" --cache "$T/B" --remote "$P"
expect_eq "$(json "$OUT" '[d["hits"], d["fetched"], d["built"]]')" "[2, 0, 0]" "again: hits, fetched, built"
expect_eq "$(requests pub)" "$n" "again: requests the server saw"
# The text summary says what was fetched.
new_cache "$T/B2"
expect_exit 0 kiln build --arch 90 --kernels "$GLOB" --cache "$T/B2" --remote "$P"
expect_stdout_contains ", 2 fetched" "the text summary"
log "again: all local hits, no request; text summary counts fetched"

# ---- 4. a read-only server refuses the upload; the build succeeds ----
R=$(serve ro --readonly)
fill ro pub
ro_before=$(cd "$T/ro/root" && find . -printf '%p %s %T@\n' | sort)
new_cache "$T/C"
expect_exit 0 build --kernels 'bias_*' --cache "$T/C" --remote "$R" --upload
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"], d["failed"], d["uploaded"]]')" \
  "[3, 2, 1, 0, 0]" "readonly: targets, fetched, built, failed, uploaded"
[[ $(json "$OUT" 'd.get("upload_error", "")') != "" ]] || fail "readonly: no upload_error in the summary"
grep -i "remote cache" "$ERR" | grep -qiE "upload|put|403|forbidden|refused" ||
  fail "readonly: no warning about the refused upload: $(head -5 "$ERR")"
expect_eq "$(cd "$T/ro/root" && find . -printf '%p %s %T@\n' | sort)" "$ro_before" "readonly: the server's files"
grep -q '"PUT [^"]*" 403 ' "$T/ro/logs/access.log" || fail "readonly: no PUT refused with 403 in the access log"
log "readonly: 2 fetched, 1 built, upload refused with a warning, exit 0"

# ---- 5. bearer token ----
K=$(serve tok --token SECRET123)
fill tok pub
printf 'SECRET123\n' >"$T/token"
chmod 600 "$T/token"
new_cache "$T/D"
seen=$(requests tok) # nginx_dav.sh's own readiness probe carries no token
KILN_LOG=debug KILN_REMOTE_TOKEN_FILE=$T/token expect_exit 0 build --kernels "$GLOB" --cache "$T/D" --remote "$K"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[2, 0]" "token: fetched, built"
tail -n +"$((seen + 1))" "$T/tok/logs/access.log" | grep -q '" 401 ' &&
  fail "token: requests refused (401) with the right token"
secret_free "token: output and cache" SECRET123 "$OUT" "$ERR" "$T/D" "$T/xdg-cache"
# the same through KILN_REMOTE_URL from the environment
new_cache "$T/D2"
KILN_LOG=debug KILN_REMOTE_URL=$K KILN_REMOTE_TOKEN_FILE=$T/token expect_exit 0 build --kernels "$ONE" --cache "$T/D2"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[1, 0]" "token (KILN_REMOTE_URL): fetched, built"
secret_free "token (KILN_REMOTE_URL): output and cache" SECRET123 "$OUT" "$ERR" "$T/D2"
# a wrong token: refused, warned, built here
printf 'WRONGTOKEN42\n' >"$T/wrong"
new_cache "$T/E"
KILN_LOG=debug KILN_REMOTE_TOKEN_FILE=$T/wrong expect_exit 0 build --kernels "$ONE" --cache "$T/E" --remote "$K"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"], d["failed"]]')" "[0, 1, 0]" "wrong token: fetched, built, failed"
grep -i "remote cache" "$ERR" | grep -qiE "401|unauthori[sz]ed|authori[sz]ation" ||
  fail "wrong token: no warning naming 401/authorization: $(grep -i remote "$ERR" | head -5)"
secret_free "wrong token: output and cache" WRONGTOKEN42 "$OUT" "$ERR" "$T/E"
secret_free "wrong token: output and cache" SECRET123 "$OUT" "$ERR" "$T/E"
log "token: fetched with it, never printed; a wrong one warned about (401), built locally"

# ---- 6. .netrc with basic auth ----
N=$(serve basic --basic kiln:pw-netrc-77)
fill basic pub
mkdir -p "$T/home"
printf 'machine 127.0.0.1\n  login kiln\n  password pw-netrc-77\n' >"$T/home/.netrc"
chmod 600 "$T/home/.netrc"
new_cache "$T/F"
HOME=$T/home KILN_LOG=debug expect_exit 0 build --kernels "$GLOB" --cache "$T/F" --remote "$N"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[2, 0]" "netrc (\$HOME/.netrc): fetched, built"
secret_free "netrc: output and cache" pw-netrc-77 "$OUT" "$ERR" "$T/F"
mkdir -p "$T/home2"
cp "$T/home/.netrc" "$T/netrc-file"
new_cache "$T/F2"
HOME=$T/home2 NETRC=$T/netrc-file KILN_LOG=debug expect_exit 0 build --kernels "$ONE" --cache "$T/F2" --remote "$N"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[1, 0]" "netrc (\$NETRC): fetched, built"
secret_free "netrc (\$NETRC): output and cache" pw-netrc-77 "$OUT" "$ERR" "$T/F2"
grep -q '" 200 ' "$T/basic/logs/access.log" || fail "netrc: no authorized request in the access log"
log "netrc: basic auth from \$HOME/.netrc and \$NETRC, password never printed"

# ---- 7. TLS ----
S=$(serve tls --tls)
ca=$(sed -n 2p "$T/tls.start")
fill tls pub
new_cache "$T/G"
KILN_REMOTE_CA_FILE=$ca expect_exit 0 build --kernels "$GLOB" --cache "$T/G" --remote "$S"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"]]')" "[2, 0]" "tls with the CA: fetched, built"
new_cache "$T/H"
expect_exit 0 build --kernels "$ONE" --cache "$T/H" --remote "$S"
expect_eq "$(json "$OUT" '[d["fetched"], d["built"], d["failed"]]')" "[0, 1, 0]" "tls without the CA: fetched, built, failed"
grep -i "remote cache" "$ERR" | grep -qiE "certificate|ssl|tls|verif" ||
  fail "tls without the CA: no warning about verification: $(grep -i remote "$ERR" | head -5)"
[[ $(remote_stat "$T/H" errors) -gt 0 ]] || fail "tls without the CA: remote.errors is 0"
log "tls: fetched with KILN_REMOTE_CA_FILE; without it a verification warning and a local build"
