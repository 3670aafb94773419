#!/usr/bin/env bash
# bench/remote_fetch --smoke: the remote-cache benchmark runs end to end (one
# unit, one repetition: a cold build uploading to nginx, a fetch into an empty
# cache that must fetch every target, the curl baseline; with SeaweedFS's
# `weed` present, --s3 as well: the same fetch from its S3 endpoint and curl
# --aws-sigv4; without it the S3 part is left out, not failed). Checks that it
# runs and that its table is whole, not the figures (this machine is shared).
. "$(dirname "$0")/lib.sh" "$@"

command -v nginx >/dev/null || skip "nginx is not installed (scripts/install-deps installs nginx-light)"
command -v curl >/dev/null || skip "curl is not installed"
bench=$(realpath "$(dirname "$0")/../../bench/remote_fetch")
# the S3 part only where there is a `weed` (s3_lib.sh's order: IT_WEED, the
# test venv's, ~/.cache/kiln-test-torch/venv/bin, PATH)
WEED=${IT_WEED:-}
for w in ${IT_TEST_PYTHON:+"$(dirname "$IT_TEST_PYTHON")/weed"} "$HOME/.cache/kiln-test-torch/venv/bin/weed" \
  "$(command -v weed || true)"; do
  [[ -z $WEED && -n $w && -x $w ]] && WEED=$w
done
s3=()
if [[ -n $WEED ]]; then
  s3=(--s3)
else
  echo "  (no SeaweedFS 'weed': the S3 part is left out)"
fi
rc=0
IT_WEED=$WEED timeout -k 10 "$IT_TIMEOUT" python3 "$bench" --build "$(dirname "$KILN_BIN")" --smoke \
  "${s3[@]}" --raw "$T/raw.json" >"$OUT" 2>"$ERR" || rc=$?
((rc == 77)) && skip "$(cat "$OUT")"
expect_eq "$rc" 0 "bench/remote_fetch --smoke exit status"
((rc == 0)) || sed 's/^/  | /' "$ERR" "$OUT" | tail -30 >&2
sed 's/^/  | /' "$OUT"
for row in "cold build" kiln curl warm; do
  grep -qE "^ *$row +[0-9]" "$OUT" || fail "no '$row' row in the table"
done
expect_stdout_contains "fetched 1 of 1 targets, built 0" "every target fetched"
expect_eq "$(json "$T/raw.json" 'len([r for r in d["runs"] if r["what"] == "kiln"])')" 1 "kiln runs in the raw results"
expect_eq "$(json "$T/raw.json" 'd["cold"]["uploaded"]')" 1 "targets uploaded by the cold build"
if ((${#s3[@]})); then
  for row in "kiln s3" "curl s3"; do
    grep -qE "^ *$row +[0-9]" "$OUT" || fail "no '$row' row in the table"
  done
  expect_stdout_contains "GETs of ac/ and cas/ only, no LIST" "the S3 requests checked"
  expect_eq "$(json "$T/raw.json" 'd["s3_upload"]["uploaded"]')" 1 "targets uploaded to S3"
  expect_eq "$(json "$T/raw.json" 'd["s3_requests"]["requests"]')" 2 "S3 requests of one fresh fetch"
fi
