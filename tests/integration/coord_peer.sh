#!/usr/bin/env bash
# Peer liveness under mpirun (4 ranks): once the protocol is under way, a
# waiting rank gives up on a root that sends no status frame for the peer
# timeout (--peer-timeout), not the builder timeout (--timeout, 600 s here).
#  1. the root SIGSTOPped mid-build (as a stuck NFS write or a swapped-out
#     host would stop it; its compile is held 10 s): ranks 1..3 fail with KILN_EPEER naming rank 0, its
#     host and pid and "the peer timeout", within the peer timeout + 2
#     heartbeats (+ 1 s for 4 processes on 2 shared cores) of the stop; then
#     SIGCONT, and the root ends too, bounded;
#  2. a root slow but alive (its compile held 6 s, heartbeat 100 ms, peer
#     timeout 1 s): nobody gives up, every rank ends KILN_OK;
#  3. a peer timeout under two heartbeats is a usage error naming both.
# Compiles: bias_gelu sm_90, delayed (the test hook), twice.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"

NP=4
ARGS=(warmup --comm mpi --arch 90 --kernels bias_gelu --json --heartbeat 100 --timeout 600)
statuses() { rank_json "$1" 'd.get("status")' | sort | uniq -c | awk '{print $1"x"$2}' | tr '\n' ' '; }

log "the root SIGSTOPped mid-build: the others fail within the peer timeout"
start=$SECONDS
KILN_TEST_COMPILE_DELAY_MS=10000 STOP_RANK=0 STOP_AFTER=3 STOP_FOR=6 PER_RANK_CACHE=$T/stop \
  ranks $NP "$T/stop" --enable-recovery -- "${ARGS[@]}" --peer-timeout 2
took=$((SECONDS - start))
expect_eq "$(rank_json "$T/stop" 'd.get("status")' | tail -n +2 | sort | uniq -c | awk '{print $1"x"$2}' | tr '\n' ' ')" \
  "$((NP - 1))xKILN_EPEER " "statuses of ranks 1..3"
for r in 1 2 3; do
  grep -q "the root (rank 0 on .*, pid [0-9]*) went silent: no status frame for [0-9.]* s (the peer timeout: --peer-timeout, KILN_PEER_TIMEOUT); its last progress: frame" \
    "$T/stop/$r.err" || fail "rank $r does not name the silent root and the peer timeout: $(cat "$T/stop/$r.err")"
done
[[ -f $T/stop/stopped ]] || die "rank 0 was not stopped"
late=$(cat "$T/stop"/[1-3].end | python3 -c "import sys; s=$(cat "$T/stop/stopped"); print(f'{max(float(x) for x in sys.stdin.read().split()) - s:.2f}')")
python3 -c "import sys; sys.exit(0 if $late <= 2 + 0.2 + 1 else 1)" ||
  fail "the last rank failed ${late} s after the stop (peer timeout 2 s, heartbeat 100 ms)"
[[ -f $T/stop/0.rc ]] || fail "the root did not end after SIGCONT"
((took < 30)) || fail "the whole job, root included, took ${took} s (bound: 30 s)"
log "  ranks 1..3: KILN_EPEER, the last ${late} s after the stop; the root ended after SIGCONT (job ${took} s)"

log "a root slow but alive: nobody gives up"
start=$SECONDS
KILN_TEST_COMPILE_DELAY_MS=6000 PER_RANK_CACHE=$T/slow ranks $NP "$T/slow" "${ARGS[@]}" --peer-timeout 1
expect_eq "$(statuses "$T/slow")" "${NP}xKILN_OK " "statuses"
log "  every rank KILN_OK after a $((SECONDS - start)) s job (compile held 6 s, peer timeout 1 s)"

log "a peer timeout under two heartbeats: refused, naming both"
PER_RANK_CACHE=$T/bad ranks 2 "$T/bad" "${ARGS[@]}" --peer-timeout 0.15
grep -q "the peer timeout (0.15 s: --peer-timeout, KILN_PEER_TIMEOUT) must be at least two heartbeats (100 ms)" "$T/bad/0.err" ||
  fail "no clear refusal: $(cat "$T/bad/0.err")"
