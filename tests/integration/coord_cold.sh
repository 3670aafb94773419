#!/usr/bin/env bash
# The coordination protocol under mpirun (8 ranks, Open MPI, one process
# each) on cold caches: every missing (unit, target) is compiled exactly once
# in the job, every rank ends with the same bytes, a shared directory needs no
# transfers, per-rank directories get the artifacts over MPI, and a warm job
# is one collective. Also the loader's warmup (fake libcuda) across ranks.
# The unit is bias_gelu (the smallest: a compile takes a second), so the
# protocol, not NVRTC, is what this test spends its time on.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"

NP=8
FILL=(warmup --comm mpi --arch 80,90 --kernels bias_gelu --json)

all_ok() { # OUTDIR WHAT
  local bad
  bad=$(cd "$1" && for f in [0-9]*.rc; do [[ $(cat "$f") == 0 ]] || echo "${f%.rc}"; done)
  [[ -z $bad ]] || { fail "$2: ranks $(echo $bad) failed"; for r in $bad; do sed 's/^/  | /' "$1/$r.err" | tail -5 >&2; done; }
  expect_eq "$(ls "$1"/*.rc 2>/dev/null | wc -l)" "$NP" "$2: ranks that reported"
}
sum() { python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))'; }
distinct() { sort -u | wc -l; }

log "shared directory, cold"
ranks $NP "$T/shared" "${FILL[@]}" --cache "$T/shared-cache"
all_ok "$T/shared" "shared directory"
expect_eq "$(rank_json "$T/shared" 'd["fill"]["compiled"]' | sum)" 2 "compiles in the job (2 targets)"
expect_eq "$(rank_json "$T/shared" 'd["fill"]["missing"]' | distinct)" 1 "every rank saw the same union"
expect_eq "$(index_query "$T/shared-cache" 'SELECT count(*) FROM builds')" 2 "builds recorded in the shared index"
expect_eq "$(rank_json "$T/shared" 'd["fill"]["received"]' | sum)" 0 "transfers into a shared directory"
expect_eq "$(rank_json "$T/shared" '[a["digest"] for a in d["artifacts"]]' | distinct)" 1 "digests across ranks"
expect_eq "$(rank_json "$T/shared" 'd["fill"]["fingerprint"]' | distinct)" 1 "fingerprints across ranks"
shared_digests=$(rank_json "$T/shared" '[a["digest"] for a in d["artifacts"]]' | head -1)
[[ $shared_digests != *null* ]] || fail "an artifact is missing: $shared_digests"

log "per-rank directories, cold"
PER_RANK_CACHE=$T/per-rank ranks $NP "$T/split" "${FILL[@]}"
all_ok "$T/split" "per-rank directories"
expect_eq "$(rank_json "$T/split" 'd["fill"]["compiled"]' | sum)" 2 "compiles in the job"
expect_eq "$(rank_json "$T/split" 'd["fill"]["compiled"]' | head -1)" 2 "rank 0 compiled both"
for r in $(seq 0 $((NP - 1))); do
  want=$([[ $r == 0 ]] && echo 2 || echo 0)
  expect_eq "$(index_query "$T/per-rank/$r" 'SELECT count(*) FROM builds')" "$want" "builds in rank $r's index"
done
expect_eq "$(rank_json "$T/split" 'd["fill"]["received"]' | sort | uniq -c | awk '{print $1"x"$2}' | tr '\n' ' ')" \
  "1x0 $((NP - 1))x2 " "artifacts received (rank 0 none, every other rank both)"
expect_eq "$(rank_json "$T/split" '[a["digest"] for a in d["artifacts"]]' | distinct)" 1 "digests across ranks"
expect_eq "$(rank_json "$T/split" '[a["digest"] for a in d["artifacts"]]' | head -1)" "$shared_digests" \
  "digests equal the shared run's"

log "per-rank directories, warm: the whole protocol is one collective"
PER_RANK_CACHE=$T/per-rank ranks $NP "$T/warm" "${FILL[@]}"
all_ok "$T/warm" "warm"
expect_eq "$(rank_json "$T/warm" 'd["fill"]["collectives"]' | sort -u | tr '\n' ' ')" "1 " "collectives per rank (fill)"
expect_eq "$(rank_json "$T/warm" 'd["fill"]["compiled"]' | sum)" 0 "compiles when warm"

log "the loader's warmup across ranks (fake libcuda, sm_90): cold, then warm"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA
[[ -e $KILN_CUDA_LIBRARY ]] || die "no fake libcuda at $KILN_CUDA_LIBRARY"
LOAD=(warmup --comm mpi --kernels bias_gelu --json)
PER_RANK_CACHE=$T/load ranks 4 "$T/load-cold" "${LOAD[@]}"
NP=4 all_ok "$T/load-cold" "loader warmup"
expect_eq "$(rank_json "$T/load-cold" 'd["load"]["compiled"]' | sum)" 1 "compiles in the job (one unit, sm_90)"
expect_eq "$(rank_json "$T/load-cold" '[(u["unit"], u["target"], u["digest"]) for u in d["units"]]' | distinct)" 1 \
  "loaded code across ranks"
expect_eq "$(rank_json "$T/load-cold" 'd["units"][0]["target"]' | head -1)" sm_90 "loaded target"
PER_RANK_CACHE=$T/load ranks 4 "$T/load-warm" "${LOAD[@]}"
NP=4 all_ok "$T/load-warm" "loader warmup, warm"
expect_eq "$(rank_json "$T/load-warm" 'd["load"]["collectives"]' | sort -u | tr '\n' ' ')" "1 " "collectives per rank (loader, warm)"

log "rank 0 holds only PTX: after the build every rank runs the exact CUBIN"
kiln build --arch compute_90 --kernels bias_gelu --cache "$T/ptx/0" >/dev/null
PER_RANK_CACHE=$T/ptx ranks 4 "$T/ptx-run" "${LOAD[@]}"
NP=4 all_ok "$T/ptx-run" "stand-in upgraded"
expect_eq "$(rank_json "$T/ptx-run" 'd["units"][0]["source"]' | sort | uniq -c | awk '{print $1"x"$2,$3}' | tr '\n' ' ')" \
  "4xexact CUBIN " "what every rank loaded"
expect_eq "$(rank_json "$T/ptx-run" 'd["load"]["compiled"]' | sum)" 1 "compiles"

log "ranks with different GPUs would run different code: KILN_EMISMATCH"
RANK_ENV_1="KILN_FAKE_CUDA_DEVICES=80" PER_RANK_CACHE=$T/load ranks 4 "$T/hetero" "${LOAD[@]}"
expect_eq "$(rank_json "$T/hetero" 'd["status"]' | sort -u | tr '\n' ' ')" "KILN_EMISMATCH " "status on every rank"
grep -q "rank 1 differs" "$T/hetero/0.err" || fail "the mismatch does not name rank 1: $(cat "$T/hetero/0.err")"
log "a rank without a GPU stops every rank at once (no waiting out the timeout)"
start=$SECONDS
RANK_ENV_2="KILN_CUDA_LIBRARY=$T/no-libcuda.so" PER_RANK_CACHE=$T/load ranks 4 "$T/nogpu" "${LOAD[@]}"
((SECONDS - start < 60)) || fail "the job took $((SECONDS - start)) s"
expect_eq "$(rank_json "$T/nogpu" 'd["status"]' | tr '\n' ' ')" "KILN_EPEER KILN_EPEER KILN_EDRIVER KILN_EPEER " \
  "statuses (rank 2 has no driver)"
grep -q "another rank failed before the exchange" "$T/nogpu/0.err" || fail "rank 0: $(cat "$T/nogpu/0.err")"
grep -q "no usable GPU on this rank" "$T/nogpu/2.err" || fail "rank 2: $(cat "$T/nogpu/2.err")"
unset KILN_CUDA_LIBRARY

log "--comm single and the plugin's absence"
expect_exit 0 kiln warmup --arch 90 --kernels bias_gelu --cache "$T/single" --json
expect_eq "$(json "$OUT" 'd["fill"]["compiled"]')" 1 "single: compiled"
expect_eq "$(json "$OUT" 'd["loaded"]')" false "single without a GPU: nothing loaded"
KILN_MPI_LIBRARY=$T/nope.so expect_exit 2 kiln warmup --comm mpi --arch 90 --cache "$T/single"
expect_stderr_contains "KILN_MPI_LIBRARY"
expect_exit 2 kiln warmup --comm tcp --arch 90
expect_stderr_contains "expected single or mpi"
expect_exit 2 kiln warmup --comm single --arch 90 --heartbeat 5
expect_stderr_contains "--heartbeat '5'"
expect_exit 2 kiln warmup --comm single --verify
expect_exit 2 kiln warmup --comm single --arch sm_9x
expect_exit 2 kiln warmup --arch 90 --heartbeat 3000 --timeout 2 --cache "$T/single" # bad input, found once started
expect_stderr_contains "at most half the builder timeout"
