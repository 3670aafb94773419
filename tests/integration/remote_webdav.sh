#!/usr/bin/env bash
# The remote cache on a plain RFC 4918 WebDAV server: nginx without
# `create_full_put_path` (nginx_dav.sh --strict-dav) and an empty document
# root, so every PUT under a missing collection answers 409 Conflict. kiln
# makes the collections with MKCOL (the base path, ac/, cas/; each once per
# process), sends the PUTs again, and never counts a 409 towards the breaker.
# A fresh cache then fetches everything with 0 builds, and `kiln doctor` says
# uploads can land (and, with uploads off, that it is used read-only). A base
# at the server's root needs only ac/ and cas/; a server that makes folders
# itself (create_full_put_path) gets no MKCOL and no PUT twice. What is
# uploaded comes from a copy of the full fixture (nothing is compiled here).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/remote_lib.sh"

url=$(serve dav --strict-dav)
base=$url/team/kiln # two collections that do not exist yet
root=$T/dav/root

log "the server is strict: a PUT under a missing collection fails (nginx: 500; RFC 4918: 409)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT --data-binary x "$url/nowhere/x")
[[ $code == 409 || $code == 500 ]] || fail "PUT under a missing collection: got $code, expected 409 or 500"

log "--upload makes the collections (MKCOL) and uploads everything"
copy_cache "$(fixture full)" "$T/A"
expect_exit 0 kiln build --arch 90 --kernels 'scaled_*' --cache "$T/A" --remote "$base" --upload --json
built=$(json "$OUT" 'd["hits"] + d["built"]') # the plan's targets: the fixture's, all hits
expect_eq "$(json "$OUT" '[d["targets"], d["built"]]')" "[3, 0]" "targets, built (the fixture's)"
expect_eq "$(json "$OUT" 'd["uploaded"]')" "$built" "records uploaded (every target of the plan)"
[[ -d $root/team/kiln/ac && -d $root/team/kiln/cas ]] || fail "ac/ and cas/ were not made under /team/kiln/"
expect_eq "$(find "$root/team/kiln/ac" -type f | wc -l)" "$built" "records on the server"
expect_eq "$(find "$root/team/kiln/cas" -type f | wc -l)" "$built" "blobs on the server"
expect_eq "$(grep -c '"MKCOL ' "$T/dav/logs/access.log")" 4 "MKCOLs sent: /team/, /team/kiln/, then ac/ and cas/, once"
expect_eq "$(remote_stat "$T/A" breaker_trips)" 0 "breaker trips"
expect_eq "$(remote_stat "$T/A" errors)" 0 "remote errors"

log "a fresh cache fetches everything, with 0 builds"
expect_exit 0 kiln build --arch 90 --kernels 'scaled_*' --cache "$T/B" --remote "$base" --json
expect_eq "$(json "$OUT" '[d["built"], d["fetched"]]')" "[0, $built]" "fresh cache: built, fetched"
expect_exit 0 kiln cache verify --cache "$T/B"

log "kiln doctor: uploads can land (a test object, deleted again)"
KILN_CACHE_DIR=$T/B KILN_REMOTE_URL=$url/other KILN_REMOTE_UPLOAD=1 expect_exit 0 kiln doctor --json
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "remote"][0]')" PASS "doctor's remote check"
expect_true "doctor says a test upload landed" grep -q "a test upload landed" "$OUT"
expect_eq "$(find "$root/other" -type f | wc -l)" 0 "files doctor left on the server"
log "... and says when they cannot (a read-only server)"
ro=$(serve ro --readonly)
KILN_CACHE_DIR=$T/B KILN_REMOTE_URL=$ro KILN_REMOTE_UPLOAD=1 kiln doctor --json >"$OUT" 2>"$ERR" || true
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "remote"][0]')" FAIL "doctor's remote check on a read-only server"
expect_true "doctor says uploads cannot land" grep -q "uploads cannot land" "$OUT"

log "kiln doctor with uploads off says the remote is used read-only"
KILN_CACHE_DIR=$T/B KILN_REMOTE_URL=$base expect_exit 0 kiln doctor --json
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "remote"][0]')" PASS "doctor's remote check, uploads off"
expect_true "doctor says uploads are off" grep -q "upload off (read-only use" "$OUT"

log "a base URL at the server's root: MKCOL of ac/ and cas/ only"
url2=$(serve dav2 --strict-dav)
expect_exit 0 kiln build --arch 90 --kernels 'scaled_*' --cache "$T/A" --remote "$url2" --upload --json
expect_eq "$(json "$OUT" 'd["uploaded"]')" "$built" "records uploaded to the server's root"
expect_eq "$(grep -c '"MKCOL ' "$T/dav2/logs/access.log")" 2 "MKCOLs sent: ac/ and cas/"
expect_eq "$(find "$T/dav2/root/cas" -type f | wc -l)" "$built" "blobs at the server's root"

log "a server that makes folders itself (create_full_put_path): no MKCOL, no PUT sent twice"
plain=$(serve plain)
expect_exit 0 kiln build --arch 90 --kernels 'scaled_*' --cache "$T/A" --remote "$plain/team/kiln" --upload --json
expect_eq "$(json "$OUT" 'd["uploaded"]')" "$built" "records uploaded"
expect_eq "$(grep -c '"MKCOL ' "$T/plain/logs/access.log")" 0 "MKCOLs sent"
expect_eq "$(grep -c '"PUT ' "$T/plain/logs/access.log")" "$((2 * built))" "PUTs sent (a blob and a record each)"

log "a 409 never counts towards the breaker (a server that answers every PUT 409, and has no MKCOL)"
c409=$(fault_serve c409 409)
expect_exit 0 kiln build --arch 80,90 --kernels '*softmax*' --cache "$T/A" --json
n=$(json "$OUT" 'd["targets"]')
expect_true "$n >= 6 records to upload (more than the breaker's 5)" test "$n" -ge 6
kiln build --arch 80,90 --kernels '*softmax*' --cache "$T/A" --remote "$c409" --upload --json >"$OUT" 2>"$ERR" || true
expect_stderr_contains "uploads failed" "the uploads fail, saying so"
expect_eq "$(remote_stat "$T/A" breaker_trips)" 0 "breaker trips after $n answers of 409"
