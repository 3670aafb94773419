#!/usr/bin/env bash
# bench/remote_file --smoke: the file:// remote benchmark runs end to end on
# the kernels fixture (every unit for sm_90, nothing compiled: one upload,
# a fetch into an empty cache, an upload, the cp -r + sync + sha256sum
# baseline, 4 writers against 1, each once). Checks that it runs and that its
# table is whole, not the figures (this machine is shared).
. "$(dirname "$0")/lib.sh" "$@"

bench=$(realpath "$(dirname "$0")/../../bench/remote_file")
rc=0
timeout -k 10 "$IT_TIMEOUT" python3 "$bench" --build "$(dirname "$KILN_BIN")" --smoke \
  --from "$(fixture kernels)" --arch 90 --raw "$T/raw.json" >"$OUT" 2>"$ERR" || rc=$?
expect_eq "$rc" 0 "bench/remote_file --smoke exit status"
((rc == 0)) || sed 's/^/  | /' "$ERR" "$OUT" | tail -30 >&2
sed 's/^/  | /' "$OUT"
for row in fetch upload "by hand" "4 writers" "1 writers"; do
  grep -qE "^$row +[0-9]" "$OUT" || fail "no '$row' row in the table"
done
expect_eq "$(json "$T/raw.json" 'len(d["runs"])')" 5 "runs in the raw results"
