#!/usr/bin/env bash
# The coordination protocol's failures under mpirun (8 ranks): a compile
# error reaches every rank as the same message with the log tail, at once;
# a root killed mid-build makes every other rank fail with KILN_EPEER within
# the builder timeout (never a hang); ranks with different build options
# refuse to run (KILN_EMISMATCH) before anything is built.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"

NP=8
ARGS=(warmup --comm mpi --arch 90 --kernels scaled_softmax --json)
statuses() { rank_json "$1" 'd["status"]' | sort | uniq -c | awk '{print $1"x"$2}' | tr '\n' ' '; }
spread() { # OUTDIR: max - min of the ranks' exit times, seconds
  cat "$1"/[0-9]*.end | python3 -c 'import sys; t=[float(x) for x in sys.stdin.read().split()]; print(f"{max(t)-min(t):.2f}")'
}

log "a compile error on the root reaches every rank"
KILN_TEST_INJECT_COMPILE_ERROR=scaled_softmax PER_RANK_CACHE=$T/err ranks $NP "$T/err" "${ARGS[@]}"
expect_eq "$(statuses "$T/err")" "${NP}xKILN_ECOMPILE " "statuses"
expect_eq "$(rank_json "$T/err" 'json.dumps(d["error"])' | sort -u | wc -l)" 1 "one message on every rank"
grep -q "kiln_injected_compile_error" "$T/err/5.err" || fail "rank 5's error lacks the build log tail: $(cat "$T/err/5.err")"
grep -q "building scaled_softmax for sm_90 failed on rank 0" "$T/err/7.err" || fail "rank 7's error lacks unit and target"
s=$(spread "$T/err")
python3 -c "import sys; sys.exit(0 if $s <= 2.0 else 1)" || fail "ranks failed ${s}s apart (limit 2 s)"
log "  every rank failed within ${s} s of each other"

log "a rank whose own settings are bad stops the others at once"
start=$SECONDS
RANK_ENV_2="KILN_HEARTBEAT_MS=5" PER_RANK_CACHE=$T/bad ranks 4 "$T/bad" "${ARGS[@]}"
((SECONDS - start < 60)) || fail "the job took $((SECONDS - start)) s"
expect_eq "$(rank_json "$T/bad" 'd["status"]' | tr '\n' ' ')" "KILN_EPEER KILN_EPEER KILN_EINVAL KILN_EPEER " "statuses"
grep -q "KILN_HEARTBEAT_MS" "$T/bad/2.err" || fail "rank 2 does not name the variable: $(cat "$T/bad/2.err")"

log "one rank with different build options: KILN_EMISMATCH before any build"
RANK_ENV_3="KILN_NVRTC_OPTIONS=-lineinfo" PER_RANK_CACHE=$T/mm ranks $NP "$T/mm" "${ARGS[@]}"
expect_eq "$(statuses "$T/mm")" "${NP}xKILN_EMISMATCH " "statuses"
grep -q "rank 3 differs from rank 0" "$T/mm/0.err" || fail "the mismatch does not name rank 3: $(cat "$T/mm/0.err")"
grep -q "KILN_NVRTC_OPTIONS" "$T/mm/3.err" || fail "the mismatch does not say what differs"
for r in 0 3; do
  expect_eq "$(index_query "$T/mm/$r" 'SELECT count(*) FROM builds')" 0 "builds on rank $r"
done

log "the root SIGKILLed mid-build: the others fail with KILN_EPEER within the builder timeout"
# A 60 s compile; rank 0 dies at 3 s; the others give up 6 s after its last
# frame. --enable-recovery keeps mpirun from killing them first, so each can
# say what happened (without it mpirun ends the job at once: no hang either).
start=$SECONDS
KILN_TEST_COMPILE_DELAY_MS=60000 KILL_RANK=0 KILL_AFTER=3 PER_RANK_CACHE=$T/kill \
  ranks $NP "$T/kill" --enable-recovery -- "${ARGS[@]}" --heartbeat 200 --timeout 6
took=$((SECONDS - start))
((took < 40)) || fail "the job took ${took}s after the root died (limit 40 s)"
expect_eq "$(rank_json "$T/kill" 'd.get("status")' | tail -n +2 | sort | uniq -c | awk '{print $1"x"$2}' | tr '\n' ' ')" \
  "$((NP - 1))xKILN_EPEER " "statuses of ranks 1..7"
for r in 1 4 7; do
  grep -q "the root (rank 0 on .*, pid [0-9]*) went silent" "$T/kill/$r.err" ||
    fail "rank $r does not name the silent root: $(cat "$T/kill/$r.err")"
  grep -q "last progress: frame" "$T/kill/$r.err" || fail "rank $r does not give the root's last progress"
done
if [[ -f $T/kill/killed ]]; then
  late=$(cat "$T/kill"/[1-9]*.end | python3 -c "import sys; k=$(cat "$T/kill/killed"); print(f'{max(float(x) for x in sys.stdin.read().split()) - k:.1f}')")
  python3 -c "import sys; sys.exit(0 if $late <= 6 + 4 else 1)" || fail "the last rank failed ${late}s after the kill (timeout 6 s)"
  log "  the last rank failed ${late} s after the kill (builder timeout 6 s)"
else
  fail "rank 0 was not killed"
fi
