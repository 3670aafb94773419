#!/usr/bin/env bash
# A builder killed with SIGKILL half-way through its plan leaves a cache that
# `kiln cache verify` finds clean (and rid of the dead writer's temp files),
# and a rerun of the same build exits 0 with every target in the cache.
. "$(dirname "$0")/lib.sh" "$@"

cache=$T/cache
args=(build --arch 80,90 --kernels bias_gelu --cache "$cache" -j 1)
# One job and a delay before every compile: once the first target is reported
# stored, the second compile is sleeping, so the kill lands between the two.
KILN_TEST_COMPILE_DELAY_MS=3000 "$KILN_BIN" "${args[@]}" >"$T/build.out" 2>"$T/build.err" &
pid=$!
BG_PIDS+=("$pid")
wait_for 180 "the first target to be stored" grep -q '^\[1/2\] built' "$T/build.err" || die "no progress"
kill -0 "$pid" 2>/dev/null || die "the build finished before it could be killed: $(cat "$T/build.err")"
kill -9 "$pid"
rc=0
wait "$pid" || rc=$?
BG_PIDS=()
expect_eq "$rc" 137 "exit status of the killed build"
grep -q '^\[2/2\]' "$T/build.err" && fail "the build got to its second target before the kill"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM records")" 1 "records after the kill"

# What a writer killed inside kiln_write_atomic leaves: a temp file named for
# its pid and host, here a minute and more old (verify leaves younger ones,
# which may be a live writer's in another pid namespace).
debris=$(mktemp "$cache/tmp/tmp.$pid.$(hostname).XXXXXX")
printf 'half a blob' >"$debris"
touch -d '2 minutes ago' "$debris"
young=$(mktemp "$cache/tmp/tmp.$pid.$(hostname).XXXXXX")

expect_exit 0 kiln cache verify --cache "$cache" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "verify after the kill: bad, issues"
expect_eq "$(tmp_files "$cache")" 1 "temp files left after verify (only the young one)"
[[ -e $young ]] || fail "verify removed a temp file younger than a minute"
rm -f "$young"

expect_exit 0 kiln "${args[@]}" --json
expect_eq "$(json "$OUT" '[d["targets"], d["hits"], d["built"], d["failed"]]')" "[2, 1, 1, 0]" \
  "rerun: targets, hits, built, failed"
expect_eq "$(index_query "$cache" "SELECT group_concat(target, ' ') FROM (SELECT target FROM records ORDER BY target)")" \
  "sm_80 sm_90" "targets in the cache after the rerun"
expect_exit 0 kiln cache verify --cache "$cache"
expect_stdout_contains "0 bad"
expect_eq "$(tmp_files "$cache")" 0 "files in tmp/"
