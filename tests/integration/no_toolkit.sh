#!/usr/bin/env bash
# kiln builds and runs without the CUDA toolkit: in a mount namespace where
# every /usr/local/cuda* is hidden under an empty tmpfs (so no cuda.h, nvrtc.h,
# nvcc or toolkit library can be found), configure and build libkiln and the
# `kiln` command from this source tree, then `kiln build --arch 90 --kernels
# 'bias_*'` with the NVRTC of the nvidia-cuda-nvrtc-cu12 wheel (12.9) and of
# the torch-style nvidia/cu13 layout (nvidia-cuda-nvrtc, 13.5), each found
# through VIRTUAL_ENV. Prints the build's time with the toolkit hidden and
# with it present (both from scratch, same targets, same -j).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/wheels.sh"

require_masking
src=${IT_SOURCE_DIR:?}
v12=$(wheel_venv nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86)
v13=$(wheel_venv nvrtc-cu13 nvidia-cuda-nvrtc==13.5.37)
jobs=$(nproc)

# build DIR: configure and build the library and the command; prints seconds.
cat >"$T/build.sh" <<'SH'
set -euo pipefail
src=$1 dir=$2 jobs=$3
start=$(date +%s.%N)
cmake -S "$src" -B "$dir" -DKILN_WERROR=ON -DKILN_BUILD_TESTS=OFF >"$dir.configure.log" 2>&1
cmake --build "$dir" -j"$jobs" --target kiln_cli >"$dir.build.log" 2>&1
awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }'
SH

# masked (lib.sh) runs a command with the toolkit hidden.
log "the toolkit is hidden in the namespace"
masked bash -c 'ls -A /usr/local/cuda/ | wc -l; nvcc --version >/dev/null 2>&1 && echo nvcc-runs || echo no-nvcc' >"$OUT" 2>"$ERR" ||
  die "the namespace did not start: $(cat "$ERR")"
expect_eq "$(head -1 "$OUT")" 0 "files left under /usr/local/cuda"
expect_eq "$(tail -1 "$OUT")" no-nvcc "nvcc"
masked bash -c 'echo "#include <cuda.h>" | cc -E -x c - >/dev/null 2>&1' &&
  fail "cuda.h is still found with the toolkit hidden"

log "configure and build without the toolkit"
masked bash "$T/build.sh" "$src" "$T/nt" "$jobs" >"$T/nt.secs" 2>"$ERR" || {
  tail -30 "$T/nt.build.log" "$T/nt.configure.log" "$ERR" >&2
  die "kiln did not build without the CUDA toolkit"
}
kiln_nt=$T/nt/kiln

for case in "cu12 $v12 12.9 libnvrtc.so.12" "cu13 $v13 13.5 libnvrtc.so.13"; do
  read -r name venv ver soname <<<"$case"
  lib=$(wheel_lib "$venv" "$soname")
  log "$name: kiln build --arch 90 --kernels 'bias_*' with the wheel's NVRTC $ver"
  VIRTUAL_ENV=$venv masked "$kiln_nt" --version >"$OUT" 2>"$ERR" || fail "$name: kiln --version failed"
  expect_stdout_contains "NVRTC $ver: $lib (found by NVIDIA's wheels under $venv (VIRTUAL_ENV))"
  VIRTUAL_ENV=$venv KILN_LOG=info masked "$kiln_nt" build --arch 90 --kernels 'bias_*' --cache "$T/c-$name" >"$OUT" 2>"$ERR" ||
    { fail "$name: kiln build failed"; sed 's/^/  stderr| /' "$ERR" | tail -20 >&2; }
  expect_stderr_contains "NVRTC $ver from $lib"
  expect_eq "$(index_query "$T/c-$name" "SELECT DISTINCT toolchain FROM records")" "nvrtc-$ver" "$name: the records' toolchain"
  expect_eq "$(index_query "$T/c-$name" "SELECT count(*) FROM records WHERE target = 'sm_90'")" \
    "$(index_query "$T/c-$name" "SELECT count(DISTINCT unit) FROM records")" "$name: one sm_90 CUBIN per unit"
  VIRTUAL_ENV=$venv masked "$kiln_nt" cache verify --cache "$T/c-$name" >"$OUT" 2>"$ERR" || fail "$name: cache verify failed"
done

log "the same build with the toolkit present, for the time"
bash "$T/build.sh" "$src" "$T/wt" "$jobs" >"$T/wt.secs" 2>"$ERR" || die "kiln did not build with the toolkit: $(cat "$ERR")"
printf '%s: build of libkiln + kiln from scratch (-j%s): without the toolkit %.1f s, with it %.1f s\n' \
  "$TEST_NAME" "$jobs" "$(cat "$T/nt.secs")" "$(cat "$T/wt.secs")"
