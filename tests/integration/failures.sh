#!/usr/bin/env bash
# Failure records, with kiln's test hook KILN_TEST_INJECT_COMPILE_ERROR (a
# unit glob whose compiles fail in NVRTC with a real log):
#  - a build where one unit fails and one compiles exits 1, names the failed
#    unit and target with its log tail, stores the good one, and records the
#    failure under the failed target's key;
#  - a build with the hook gone fails at once from that record (no compile)
#    and says how to retry; --rebuild retries, succeeds and drops the record;
#  - KILN_FAILURE_TTL=0 leaves no failure that outlives the build.
. "$(dirname "$0")/lib.sh" "$@"

# bias_gelu and bias_swiglu (two of the smallest units: a second each to compile)
copy_cache "$(fixture small)" "$T/small"
key=$(index_query "$T/small" "SELECT key FROM records") # bias_gelu sm_90
build=(build --arch 90 --kernels bias_gelu)

log "one unit fails, another compiles"
c=$T/cache
KILN_TEST_INJECT_COMPILE_ERROR=bias_gelu expect_exit 1 kiln build --arch 90 --kernels 'bias_[gs]*' --cache "$c"
expect_stderr_contains "FAILED bias_gelu sm_90"
expect_stderr_contains "log tail"
expect_stderr_contains "kiln_injected_compile_error" "the log tail shows NVRTC's error"
expect_stdout_contains "2 targets, 0 cache hits, 1 built, 1 failed"
expect_eq "$(index_query "$c" "SELECT unit || ' ' || target FROM records")" "bias_swiglu sm_90" \
  "records after the partly failed build"
expect_eq "$(index_query "$c" "SELECT key || ' ' || unit || ' ' || target FROM failures")" \
  "$key bias_gelu sm_90" "the failure record: key, unit, target"
index_query "$c" "SELECT log FROM failures" | grep -F "kiln_injected_compile_error" >/dev/null ||
  fail "the failure record does not hold NVRTC's log"
expect_exit 0 kiln cache stats --json --cache "$c"
expect_eq "$(json "$OUT" '[d["records"], d["failures"]]')" "[1, 1]" "stats: records, failures"
expect_eq "$(tmp_files "$c")" 0 "files in tmp/"

log "the failure is remembered: no compile, a clear error"
expect_exit 1 kiln "${build[@]}" --cache "$c" --json
cp "$OUT" "$T/again.json"
expect_eq "$(json "$T/again.json" '[d["built"], d["failed"], d["items"][0]["status"]]')" '[0, 1, "KILN_ECOMPILE"]' \
  "remembered failure: built, failed, status"
json "$T/again.json" 'd["items"][0]["error"]' | grep -- "--rebuild" >/dev/null || fail "the error does not mention --rebuild"
json "$T/again.json" 'd["items"][0].get("log_tail", "")' | grep -F "kiln_injected_compile_error" >/dev/null ||
  fail "the remembered failure does not carry the log tail"
expect_exit 1 kiln "${build[@]}" --cache "$c"
expect_stderr_contains "failed to compile recently"
expect_stderr_contains "kiln_injected_compile_error" "the remembered failure shows the log tail"

log "--rebuild retries now and drops the failure record"
expect_exit 0 kiln "${build[@]}" --cache "$c" --rebuild --json
expect_eq "$(json "$OUT" '[d["built"], d["failed"]]')" "[1, 0]" "--rebuild: built, failed"
expect_eq "$(json "$OUT" 'd["items"][0]["key"]')" "$key" "--rebuild: the key"
expect_eq "$(index_query "$c" "SELECT count(*) FROM failures")" 0 "failure records after the rebuild"
expect_exit 0 kiln "${build[@]}" --cache "$c" --json
expect_eq "$(json "$OUT" '[d["hits"], d["failed"]]')" "[1, 0]" "a build after the rebuild: hits, failed"
expect_exit 0 kiln cache verify --cache "$c"
expect_stdout_contains "0 bad"

log "KILN_FAILURE_TTL=0"
c=$T/ttl0
KILN_FAILURE_TTL=0 KILN_TEST_INJECT_COMPILE_ERROR='*' expect_exit 1 kiln "${build[@]}" --cache "$c"
expect_stderr_contains "FAILED bias_gelu sm_90"
expect_exit 0 kiln cache stats --json --cache "$c"
expect_eq "$(json "$OUT" 'd["failures"]')" 0 "unexpired failures with KILN_FAILURE_TTL=0"
expect_exit 0 kiln "${build[@]}" --cache "$c" --json
expect_eq "$(json "$OUT" '[d["built"], d["failed"]]')" "[1, 0]" "build after a failure with TTL 0: built, failed"
