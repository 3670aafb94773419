#!/usr/bin/env bash
# The runtime loader through `kiln warmup`, against tests/fakecuda (a test
# double of libcuda that checks images as the driver does and runs the
# kernels on the CPU emulator): selection order (exact CUBIN > compatible
# CUBIN > PTX the driver can JIT > build), offline mode and its error naming
# what the caches hold, an old GPU, no GPU, and a blob the driver refuses
# (quarantined once, never retried in a loop). The units are the three bias_*
# ones (the smallest: the builds on a miss take a second each).
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_LOG=$T/fake.log

full=$T/full # 3 units x sm_80, sm_90, compute_90, from the kernels fixture
subset_cache "$(fixture kernels)" 80,90,compute_90 'bias_*' "$full"
fresh() { rm -rf "$T/c" && copy_cache "$full" "$T/c" && : >"$T/fake.log"; }
sources() { json "$OUT" '" ".join(u["source"].replace(" ", "_") + ":" + u["target"] for d_ in d["devices"] for u in d_["units"])'; }

# ---- exact CUBIN on sm_90 ----
fresh
KILN_FAKE_CUDA_DEVICES=90 expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline --json
expect_eq "$(sources)" "exact_CUBIN:sm_90 exact_CUBIN:sm_90 exact_CUBIN:sm_90" "sm_90 loads"
expect_eq "$(grep -c '^load ok cubin sm_90' "$T/fake.log")" 3 "CUBINs the driver loaded"

# ---- compatible CUBIN: sm_86 runs sm_80's; the choice is logged at info ----
fresh
KILN_FAKE_CUDA_DEVICES=86 KILN_LOG=info expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline --json
expect_eq "$(sources)" "compatible_CUBIN:sm_80 compatible_CUBIN:sm_80 compatible_CUBIN:sm_80" "sm_86 loads"
expect_stderr_contains "bias_gelu: loaded compatible CUBIN sm_80 on sm_86"
expect_eq "$(grep -c 'loaded compatible CUBIN' "$ERR")" 3 "info lines, one per unit"

# ---- PTX: no CUBIN of this major (sm_100), and sm_90 with its CUBINs removed ----
fresh
KILN_FAKE_CUDA_DEVICES=100 KILN_LOG=info expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline --json
expect_eq "$(sources)" "PTX_JIT:compute_90 PTX_JIT:compute_90 PTX_JIT:compute_90" "sm_100 loads"
expect_stderr_contains "loaded PTX JIT compute_90 on sm_100"
index_query "$T/c" "DELETE FROM records WHERE target = 'sm_90'" >/dev/null
KILN_FAKE_CUDA_DEVICES=90 expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline --json
expect_eq "$(sources)" "PTX_JIT:compute_90 PTX_JIT:compute_90 PTX_JIT:compute_90" "sm_90 without its CUBINs"

# ---- offline, nothing loadable: the error names what the caches hold and the fix ----
# (a CUDA 12.8 driver loads nothing a CUDA 13 toolkit built)
: >"$T/fake.log"
KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_DRIVER=12080 expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline
expect_stderr_contains "the caches hold compute_90, sm_80"
expect_stderr_contains "compute_90: built by CUDA 13.0, newer than the driver (12.8)"
expect_stderr_contains "KILN_OFFLINE=1 forbids building it here"
expect_stderr_contains "kiln build --arch 90 --cache $T/c"
[[ -s $T/fake.log ]] && fail "the driver was handed PTX it cannot JIT: $(cat "$T/fake.log")"
# the environment variable does the same as --offline
KILN_OFFLINE=1 KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_DRIVER=12080 expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c"
expect_stderr_contains "KILN_OFFLINE=1 forbids building it here"

# not offline, but NVRTC 13 cannot build for a CUDA 12 driver: said so, nothing built
KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_DRIVER=12080 expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c"
expect_stderr_contains "builds code that this driver (CUDA 12.8) cannot load"
index_query "$T/c" "DELETE FROM records WHERE kind = 'ptx'" >/dev/null
KILN_FAKE_CUDA_DEVICES=120 expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline
expect_stderr_contains "sm_80: CUBIN for 8.0 cannot run on 12.0 (another major)"

# ---- not offline: the miss is built for exactly this arch, once ----
index_query "$T/c" "DELETE FROM builds" >/dev/null
index_query "$T/c" "DELETE FROM records" >/dev/null
KILN_FAKE_CUDA_DEVICES=90 expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --device 0 --json
expect_eq "$(sources)" "built:sm_90 built:sm_90 built:sm_90" "built on a miss"
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM builds WHERE target = 'sm_90'")" 3 "compile runs"
KILN_FAKE_CUDA_DEVICES=90 expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline --json
expect_eq "$(sources)" "exact_CUBIN:sm_90 exact_CUBIN:sm_90 exact_CUBIN:sm_90" "warm after the build"

# ---- a GPU older than the kernels, and no GPU at all ----
KILN_FAKE_CUDA_DEVICES=75 expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c" --offline
expect_stderr_contains "needs sm_80 or newer; this GPU (Fake GPU sm_75) is sm_75"
KILN_FAKE_CUDA_DEVICES= expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c"
expect_stderr_contains "no CUDA device is visible"
# a named libcuda that will not load is bad input (exit 2), naming the file
KILN_CUDA_LIBRARY=$T/no-such-libcuda.so expect_exit 2 kiln warmup --kernels 'bias_*' --cache "$T/c"
expect_stderr_contains "KILN_CUDA_LIBRARY=$T/no-such-libcuda.so: cannot load it"
# no driver anywhere (a machine without one): exit 1, saying so
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  env -u KILN_CUDA_LIBRARY -u CUDA_HOME -u CUDA_PATH "$KILN_BIN" warmup --kernels 'bias_*' \
    --cache "$T/c" >"$OUT" 2>"$ERR" && RC=0 || RC=$?
  expect_eq "$RC" 1 "warmup with no driver anywhere: exit status"
  expect_stderr_contains "the CUDA driver (libcuda) not found"
fi
KILN_FAKE_CUDA_DEVICES=90 expect_exit 2 kiln warmup --kernels 'bias_*' --cache "$T/c" --device 3
expect_stderr_contains "this machine has 1 device"

# ---- a CUBIN the driver refuses: quarantined, the next candidate loads ----
fresh
KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_REJECT=cubin expect_exit 0 kiln warmup --kernels 'bias_*' --cache "$T/c" \
  --offline --json
expect_eq "$(sources)" "PTX_JIT:compute_90 PTX_JIT:compute_90 PTX_JIT:compute_90" "after refused CUBINs"
expect_eq "$(grep -c '^load fail CUDA_ERROR_INVALID_IMAGE' "$T/fake.log")" 3 "refused loads (one per unit)"
expect_eq "$(find "$T/c/quarantine" -type f | wc -l)" 3 "blobs quarantined"
expect_eq "$(index_query "$T/c" "SELECT count(*) FROM records WHERE target = 'sm_90'")" 0 "sm_90 records left"

# ---- everything refused, builds included: a bounded failure, no retry loop ----
fresh
KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_REJECT=all expect_exit 1 kiln warmup --kernels 'bias_*' --cache "$T/c" \
  --device 0
expect_stderr_contains "the freshly built sm_90"
# the driver's JIT error log is in the message, not only its error code
expect_stderr_contains "CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid): kiln fakecuda: cubin rejected by KILN_FAKE_CUDA_REJECT"
expect_eq "$(grep -c '^load fail' "$T/fake.log")" 9 "refused loads: sm_90, compute_90, then the build, per unit"

# ---- 16 processes on one cold cache (torchrun workers): each unit built once ----
cache=$T/cold
new_cache "$cache"
pids=()
for i in $(seq 16); do
  KILN_FAKE_CUDA_DEVICES=90 timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" warmup --kernels 'bias_*' --cache "$cache" --json \
    >"$T/w.$i" 2>&1 &
  pids+=($!)
done
BG_PIDS+=("${pids[@]}")
for i in $(seq 16); do
  rc=0
  wait "${pids[i - 1]}" || rc=$?
  ((rc == 0)) || { fail "warmup process $i exited $rc"; sed 's/^/  | /' "$T/w.$i" >&2; }
done
BG_PIDS=()
expect_eq "$(index_query "$cache" "SELECT count(*), count(DISTINCT key), sum(ok) FROM builds")" $'3\t3\t3' \
  "compile runs across 16 processes (runs, keys, successes)"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM leases")" 0 "leases left"
expect_exit 0 kiln cache verify --cache "$cache" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "verify after the 16 warmups"
