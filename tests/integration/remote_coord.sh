#!/usr/bin/env bash
# The coordination root fetches from the remote before it compiles (4 ranks
# under mpirun, per-rank cache directories, nginx on 127.0.0.1):
#  1. fill: the root fetches scaled_softmax sm_90, nothing is compiled in the
#     job, the other ranks get the bytes over MPI (not from the remote);
#  2. the loader's warmup (fake libcuda, sm_90) with KILN_OFFLINE=1 on every
#     rank: the root may not build, but it may fetch: every rank loads;
#  3. offline and not on the remote: every rank fails with the same error.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"
. "$(dirname "$0")/remote_lib.sh"

sum() { python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))'; }
statuses() { rank_json "$1" 'd["status"]' | tr '\n' ' '; }

URL=$(serve srv)
copy_cache "$(fixture warm)" "$T/A" # scaled_softmax sm_90
expect_exit 0 kiln build --arch 90 --kernels scaled_softmax --cache "$T/A" --remote "$URL" --upload --json
expect_eq "$(json "$OUT" '[d["hits"], d["uploaded"]]')" "[1, 1]" "upload from the fixture"
export KILN_REMOTE_URL=$URL

log "1. fill: the root fetches, nothing compiled, the others receive over MPI"
PER_RANK_CACHE=$T/fill ranks 4 "$T/fill-run" warmup --comm mpi --arch 90 --kernels scaled_softmax --json
expect_eq "$(statuses "$T/fill-run")" "KILN_OK KILN_OK KILN_OK KILN_OK " "statuses"
expect_eq "$(rank_json "$T/fill-run" 'd["fill"]["compiled"]' | sum)" 0 "compiles in the job"
for r in 0 1 2 3; do
  expect_eq "$(index_query "$T/fill/$r" 'SELECT count(*) FROM builds')" 0 "builds in rank $r's index"
done
expect_eq "$(remote_stat "$T/fill/0" hits)" 1 "rank 0's remote hits"
expect_eq "$(remote_stat "$T/fill/1" hits)" 0 "rank 1's remote hits (it got the bytes over MPI)"
expect_eq "$(rank_json "$T/fill-run" 'd["fill"]["received"]' | sum)" 3 "artifacts received by ranks 1..3"

log "2. loader warmup, KILN_OFFLINE=1 everywhere: the root fetches, every rank loads"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA
[[ -e $KILN_CUDA_LIBRARY ]] || die "no fake libcuda at $KILN_CUDA_LIBRARY"
KILN_OFFLINE=1 PER_RANK_CACHE=$T/load ranks 4 "$T/load-run" warmup --comm mpi --kernels scaled_softmax --json
expect_eq "$(statuses "$T/load-run")" "KILN_OK KILN_OK KILN_OK KILN_OK " "statuses"
expect_eq "$(rank_json "$T/load-run" 'd["load"]["compiled"]' | sum)" 0 "compiles in the job"
expect_eq "$(rank_json "$T/load-run" '(d["units"][0]["target"], d["units"][0]["source"])' | sort -u | tr '\n' ' ')" \
  "('sm_90', 'exact CUBIN') " "what every rank loaded"

log "3. offline, and the remote lacks it: the same clear error on every rank"
KILN_OFFLINE=1 PER_RANK_CACHE=$T/miss ranks 4 "$T/miss-run" warmup --comm mpi --kernels rms_norm --json
expect_eq "$(statuses "$T/miss-run")" "KILN_ENOTFOUND KILN_ENOTFOUND KILN_ENOTFOUND KILN_ENOTFOUND " "statuses"
grep -q "KILN_OFFLINE=1 forbids building" "$T/miss-run/2.err" || fail "rank 2: $(tail -3 "$T/miss-run/2.err")"
grep -q "not on the remote" "$T/miss-run/0.err" || fail "rank 0: $(tail -3 "$T/miss-run/0.err")"
