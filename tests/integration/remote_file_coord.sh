#!/usr/bin/env bash
# The coordination protocol with a shared file:// directory (8 ranks under
# mpirun, a local cache per rank as on 8 hosts, one remote directory):
#  1. cold: the root compiles each key once and uploads it before READY;
#     the other ranks fetch from the directory, nothing crosses MPI;
#  2. ranks 3 and 5 cannot read the directory (it is not there for them, as
#     on a node where it is not mounted): the communicator carries the bytes
#     to those two only, the others fetch; nothing is compiled;
#  3. the directory holds everything: nothing is compiled or received.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"

sum() { python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))'; }
statuses() { rank_json "$1" 'd["status"]' | sort | uniq -c | tr -s ' \n' ' '; }
hits() { kiln cache stats --cache "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["remote"]["hits"])'; }
KERNELS='bias_[gs]*' # bias_gelu, bias_swiglu: two keys for sm_90
mkdir -p "$T/shared"
export KILN_REMOTE_URL=file://$T/shared KILN_REMOTE_UPLOAD=1

log "1. cold: one compile per key, on the root; the others fetch from the directory"
PER_RANK_CACHE=$T/cold ranks 8 "$T/cold-run" warmup --comm mpi --arch 90 --kernels "$KERNELS" --json
expect_eq "$(statuses "$T/cold-run")" " 8 KILN_OK " "statuses"
expect_eq "$(rank_json "$T/cold-run" 'd["fill"]["compiled"]' | sum)" 2 "compiles in the job"
for r in 1 2 3 4 5 6 7; do
  expect_eq "$(index_query "$T/cold/$r" 'SELECT count(*) FROM builds')" 0 "builds in rank $r's index"
done
expect_eq "$(rank_json "$T/cold-run" 'd["fill"]["received"]' | sum)" 0 "artifacts sent over MPI"
expect_eq "$(hits "$T/cold/4")" 2 "rank 4's fetches from the directory"
expect_eq "$(ls "$T/shared/ac" | wc -l) $(ls "$T/shared/cas" | wc -l)" "2 2" "objects in the directory"
expect_eq "$(find "$T/shared" -name '.tmp.*' | wc -l)" 0 "temp files left"

log "2. ranks 3 and 5 cannot read the directory: only they receive over MPI"
RANK_ENV_3="KILN_REMOTE_URL=file://$T/not-mounted" RANK_ENV_5="KILN_REMOTE_URL=file://$T/not-mounted" \
  PER_RANK_CACHE=$T/mixed ranks 8 "$T/mixed-run" warmup --comm mpi --arch 90 --kernels "$KERNELS" --json
expect_eq "$(statuses "$T/mixed-run")" " 8 KILN_OK " "statuses"
expect_eq "$(rank_json "$T/mixed-run" 'd["fill"]["compiled"]' | sum)" 0 "compiles in the job"
expect_eq "$(rank_json "$T/mixed-run" 'd["fill"]["received"]' | tr '\n' ' ')" "0 0 0 2 0 2 0 0 " \
  "artifacts received over MPI, per rank"
grep -q "does not exist" "$T/mixed-run/3.err" || fail "rank 3 does not say why: $(tail -3 "$T/mixed-run/3.err")"

log "3. warm directory, fresh caches: nothing compiled, nothing received"
PER_RANK_CACHE=$T/warm ranks 8 "$T/warm-run" warmup --comm mpi --arch 90 --kernels "$KERNELS" --json
expect_eq "$(statuses "$T/warm-run")" " 8 KILN_OK " "statuses"
expect_eq "$(rank_json "$T/warm-run" '(d["fill"]["compiled"], d["fill"]["received"])' | sort -u | tr '\n' ' ')" \
  "(0, 0) " "compiled and received, per rank"
