#!/usr/bin/env bash
# Single flight across processes sharing one cache directory (no
# communicator: torchrun workers before the process group exists):
#  1. 16 processes on one cold cache: the target is compiled exactly once
#     (the builds log in the index holds one run), all 16 exit 0;
#  2. the lease holder killed with SIGKILL mid-build: a waiter takes over at
#     once (the holder's pid is gone on this host), exits 0, verify is clean;
#  3. a lease left by a dead pid of this host is reclaimed at once, even with
#     a stale timeout of 10 minutes;
#  4. a lease of another host that stopped renewing holds others back for the
#     stale timeout, no longer.
# The target is bias_gelu sm_90 (the small fixture's): the smallest unit, so
# each of the runs that compile costs about a second.
. "$(dirname "$0")/lib.sh" "$@"

args=(build --arch 90 --kernels bias_gelu -j 1 --json)
key=$(index_query "$(copy_cache "$(fixture small)" "$T/small" && echo "$T/small")" \
  "SELECT key FROM records WHERE unit = 'bias_gelu' AND target = 'sm_90'")
[[ $key =~ ^[0-9a-f]{64}$ ]] || die "no key for bias_gelu sm_90 in the small fixture"

# ---- 1. sixteen processes, one build ----
N=16
cache=$T/c1
new_cache "$cache"
mkfifo "$T/gate"
pids=()
for i in $(seq $N); do
  (read -r _ <"$T/gate" || true; exec timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" "${args[@]}" \
    --cache "$cache" >"$T/out.$i" 2>"$T/err.$i") &
  pids+=($!)
done
BG_PIDS+=("${pids[@]}")
sleep 0.3
exec 3>"$T/gate"
exec 3>&-
built=0
for i in $(seq $N); do
  rc=0
  wait "${pids[i - 1]}" || rc=$?
  if ((rc != 0)); then
    fail "process $i exited $rc"
    sed 's/^/  stderr| /' "$T/err.$i" >&2
    continue
  fi
  built=$((built + $(json "$T/out.$i" 'd["built"]')))
  expect_eq "$(json "$T/out.$i" 'd["built"] + d["shared"] + d["hits"]')" 1 "process $i: built + shared + hits"
done
BG_PIDS=()
expect_eq "$built" 1 "processes that report having built the target"
expect_eq "$(index_query "$cache" "SELECT count(*), sum(ok) FROM builds")" $'1\t1' "compile runs in the builds log"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM leases")" 0 "leases left"
expect_eq "$(index_query "$cache" "SELECT key FROM records")" "$key" "the record"

# ---- 2. the holder killed mid-build ----
cache=$T/c2
new_cache "$cache"
KILN_TEST_COMPILE_DELAY_MS=60000 "$KILN_BIN" "${args[@]}" --cache "$cache" >"$T/a.out" 2>"$T/a.err" &
holder=$!
BG_PIDS+=("$holder")
holds_lease() { [[ $(index_query "$cache" "SELECT count(*) FROM leases WHERE pid = $holder" 2>/dev/null) == 1 ]]; }
wait_for 60 "the first process to take the lease" holds_lease || die "no lease: $(cat "$T/a.err")"
KILN_LOG=info timeout -k 5 300 "$KILN_BIN" "${args[@]}" --cache "$cache" >"$T/b.out" 2>"$T/b.err" &
waiter=$!
BG_PIDS+=("$waiter")
wait_for 60 "the second process to wait" grep -q 'another process builds it' "$T/b.err"
kill -9 "$holder"
wait "$holder" 2>/dev/null || true
start=$SECONDS
rc=0
wait "$waiter" || rc=$?
BG_PIDS=()
expect_eq "$rc" 0 "exit status of the process that took over"
expect_eq "$(json "$T/b.out" '[d["built"], d["taken_over"]]')" "[1, 1]" "built, taken over"
grep -q "took over the build of bias_gelu sm_90 from $(hostname | cut -c1-63) pid $holder (process gone" "$T/b.err" ||
  fail "no take-over line naming the dead holder: $(cat "$T/b.err")"
log "took over and built in $((SECONDS - start)) s after the kill"
expect_exit 0 kiln cache verify --cache "$cache" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "verify after the take-over"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM leases")" 0 "leases left"

# ---- 3. a lease of a dead pid on this host ----
cache=$T/c3
new_cache "$cache"
kiln cache verify --cache "$cache" >/dev/null 2>&1 || true # creates the index
true &
dead=$!
wait "$dead"
now_ms=$(($(date +%s%N) / 1000000))
index_query "$cache" "INSERT INTO leases VALUES('$key', 'bias_gelu', 'sm_90', '$(hostname | cut -c1-63)',
  $dead, 'deadbeef', $now_ms, $now_ms)" >/dev/null
start=$SECONDS
KILN_LEASE_STALE=600 expect_exit 0 kiln "${args[@]}" --cache "$cache"
expect_eq "$(json "$OUT" '[d["built"], d["taken_over"]]')" "[1, 1]" "dead pid's lease: built, taken over"
((SECONDS - start < 120)) || fail "reclaiming a dead pid's lease took $((SECONDS - start)) s"

# ---- 4. another host's lease, not renewed ----
cache=$T/c4
new_cache "$cache"
kiln cache verify --cache "$cache" >/dev/null 2>&1 || true # creates the index
now_ms=$(($(date +%s%N) / 1000000))
index_query "$cache" "INSERT INTO leases VALUES('$key', 'bias_gelu', 'sm_90', 'another-host',
  1, 'cafebabe', $now_ms, $now_ms)" >/dev/null
start=$(date +%s%N)
KILN_LEASE_STALE=4 KILN_LOG=info expect_exit 0 kiln "${args[@]}" --cache "$cache"
waited_ms=$((($(date +%s%N) - start) / 1000000))
expect_eq "$(json "$OUT" '[d["built"], d["taken_over"]]')" "[1, 1]" "stale lease: built, taken over"
expect_stderr_contains "from another-host pid 1 (stale"
((waited_ms >= 4000)) || fail "took over a live-looking lease after $waited_ms ms (< 4 s stale timeout)"
((waited_ms < 4000 + 120000)) || fail "waited $waited_ms ms for a 4 s stale lease"
log "stale lease of another host: taken over and built in $waited_ms ms"

# ---- 4b. another host's lease whose heartbeat is a day in the future (its clock runs ahead) ----
cache=$T/c4b
new_cache "$cache"
kiln cache verify --cache "$cache" >/dev/null 2>&1 || true # creates the index
ahead_ms=$(($(date +%s%N) / 1000000 + 86400000))
index_query "$cache" "INSERT INTO leases VALUES('$key', 'bias_gelu', 'sm_90', 'another-host',
  1, 'cafebabe', $ahead_ms, $ahead_ms)" >/dev/null
start=$SECONDS
KILN_LEASE_STALE=4 KILN_BUILD_TIMEOUT=120 KILN_LOG=info expect_exit 0 kiln "${args[@]}" --cache "$cache"
expect_eq "$(json "$OUT" '[d["built"], d["taken_over"]]')" "[1, 1]" "future heartbeat: built, taken over"
expect_stderr_contains "in the future: a clock ahead"
((SECONDS - start < 60)) || fail "a lease with a heartbeat a day ahead held the build $((SECONDS - start)) s"
