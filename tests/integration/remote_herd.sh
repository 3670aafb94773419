#!/usr/bin/env bash
# The herd: J jobs of N ranks start at once against one remote cache (nginx
# on 127.0.0.1), J = 4, N = 4, every rank with an empty cache of its own:
#  1. straight to the origin: every job's root alone fetches, so the origin
#     sees J x (a record and a blob per missing artifact), not J x N x ...;
#  2. through a pull-through cache in front of the origin (nginx_dav.sh
#     --cache-of: proxy_cache with proxy_cache_lock, docs/remote-cache.md
#     "Many jobs at once"): the origin sees each object once, however many
#     jobs ask for it at the same moment.
# Every rank ends KILN_OK with 0 compiles (KILN_OFFLINE=1: the roots may only
# fetch). Compiles: none (the fixture's artifacts are uploaded).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/mpi_lib.sh"
. "$(dirname "$0")/remote_lib.sh"

J=${HERD_JOBS:-4} N=${HERD_RANKS:-4} KERNELS='bias_*'
sum() { python3 -c 'import sys; print(sum(int(x) for x in sys.stdin.read().split()))'; }
origin_gets() { grep -cE '"(GET|HEAD) /(ac|cas)/' "$T/origin/logs/access.log" || true; }

ORIGIN=$(serve origin)
copy_cache "$(fixture kernels)" "$T/A"
expect_exit 0 kiln build --arch 90 --kernels "$KERNELS" --cache "$T/A" --remote "$ORIGIN" --upload --json
M=$(json "$OUT" 'd["uploaded"]')
((M >= 2)) || die "only $M artifacts of $KERNELS at sm_90 in the kernels fixture"
PROXY=$(serve proxy --cache-of "$ORIGIN")
log "origin $ORIGIN holds $M artifacts; pull-through cache $PROXY"

# herd NAME URL: J jobs of N ranks at once, each rank an empty cache of its own
herd() {
  local name=$1
  export KILN_REMOTE_URL=$2 KILN_OFFLINE=1
  job() { PER_RANK_CACHE=$T/$name/c$1 ranks "$N" "$T/$name/j$1" warmup --comm mpi --arch 90 --kernels "$KERNELS" --json; }
  : >"$T/origin/logs/access.log"
  gate_start "$J" job
  for pid in "${GATE_PIDS[@]}"; do wait "$pid" || fail "$name: a job's mpirun failed"; done
  HERD_S=$(python3 -c "print(f'{$EPOCHREALTIME - $GATE_T0:.1f}')")
  unset KILN_REMOTE_URL KILN_OFFLINE
  for ((j = 0; j < J; j++)); do
    expect_eq "$(rank_json "$T/$name/j$j" 'd["status"]' | sort | uniq -c | awk '{print $1"x"$2}')" "${N}xKILN_OK" "$name: job $j's statuses"
    expect_eq "$(rank_json "$T/$name/j$j" 'd["fill"]["compiled"]' | sum)" 0 "$name: job $j's compiles"
    expect_eq "$(remote_stat "$T/$name/c$j/1" hits)" 0 "$name: job $j rank 1's remote hits (the root sent it the bytes)"
  done
}

log "1. $J jobs x $N ranks straight to the origin"
herd direct "$ORIGIN"
expect_eq "$(origin_gets)" "$((J * 2 * M))" "origin requests (J x records and blobs: only the roots fetch)"
log "  origin requests: $(origin_gets) = $J jobs x 2 x $M artifacts; the last job ready after ${HERD_S} s"

log "2. the same through the pull-through cache"
herd proxied "$PROXY"
expect_eq "$(origin_gets)" "$((2 * M))" "origin requests through the cache (each object once)"
expect_eq "$(grep -cE '"(GET|HEAD) /(ac|cas)/' "$T/proxy/logs/access.log")" "$((J * 2 * M))" "the cache's own requests"
log "  origin requests: $(origin_gets) = 2 x $M artifacts (the cache served $((J * 2 * M))); the last job ready after ${HERD_S} s"
