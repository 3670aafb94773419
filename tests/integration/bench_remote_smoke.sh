#!/usr/bin/env bash
# bench/remote_fetch --smoke: the remote-cache benchmark runs end to end (one
# unit, one repetition: a cold build uploading to nginx, a fetch into an empty
# cache that must fetch every target, the curl baseline). Checks that it runs
# and that its table is whole, not the figures (this machine is shared).
. "$(dirname "$0")/lib.sh" "$@"

command -v nginx >/dev/null || skip "nginx is not installed (scripts/install-deps installs nginx-light)"
command -v curl >/dev/null || skip "curl is not installed"
bench=$(realpath "$(dirname "$0")/../../bench/remote_fetch")
rc=0
timeout -k 10 "$IT_TIMEOUT" python3 "$bench" --build "$(dirname "$KILN_BIN")" --smoke \
  --raw "$T/raw.json" >"$OUT" 2>"$ERR" || rc=$?
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
