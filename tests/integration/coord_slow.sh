#!/usr/bin/env bash
# A slow build (20 s, the test-only KILN_TEST_COMPILE_DELAY_MS hook) with a
# 200 ms heartbeat under mpirun -np 8: no rank ever waits in one collective
# for longer than two heartbeats plus the transfer of an artifact, so no
# NCCL / torch.distributed watchdog could fire, however long the build.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"

NP=8 HB=200
# Two heartbeats, plus what moving one artifact (~0.7 MB) between processes
# may take on a loaded 2-core CI machine.
TRANSFER_MS=250
KILN_TEST_COMPILE_DELAY_MS=20000 PER_RANK_CACHE=$T/c \
  ranks $NP "$T/slow" warmup --comm mpi --arch 90 --kernels scaled_softmax --json --heartbeat $HB
for r in $(seq 0 $((NP - 1))); do
  [[ $(cat "$T/slow/$r.rc" 2>/dev/null) == 0 ]] || fail "rank $r failed: $(tail -3 "$T/slow/$r.err" 2>/dev/null)"
done
rank_json "$T/slow" '"rank %d: longest wait %.1f ms (%s), %d collectives, %.1f s" % (d["rank"], d["fill"]["longest_wait_ms"], d["fill"]["longest_wait"], d["fill"]["collectives"], d["fill"]["total_ms"] / 1e3)' |
  sed "s/^/$TEST_NAME: /"
limit=$((2 * HB + TRANSFER_MS))
bad=$(rank_json "$T/slow" "d['rank'] if d['fill']['longest_wait_ms'] > $limit else ''" | grep . || true)
[[ -z $bad ]] || fail "ranks $(echo $bad) waited longer than $limit ms in one collective"
# The build really spanned many heartbeats: every waiting rank took >= 20 s
# and saw a frame about every 200 ms.
short=$(rank_json "$T/slow" "d['rank'] if d['fill']['total_ms'] < 20000 else ''" | grep . || true)
[[ -z $short ]] || fail "ranks $(echo $short) finished before the 20 s build could have"
few=$(rank_json "$T/slow" "d['rank'] if d['fill']['collectives'] < 20000 / $HB * 0.8 else ''" | grep . || true)
[[ -z $few ]] || fail "ranks $(echo $few) saw fewer status frames than 20 s / ${HB} ms"
