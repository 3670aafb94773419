#!/usr/bin/env bash
# Where kiln finds libcuda, libnvrtc and libnccl (common/gpu_libs.c,
# docs/install.md): an explicitly named library is the only one tried and an
# error naming it when it will not load (exit 2), for all three variables; an
# NVRTC older than 12.0 is refused; otherwise NVIDIA's wheels next to Python
# (KILN_PYTHON_PREFIX, the running program's prefix, VIRTUAL_ENV, CONDA_PREFIX),
# then CUDA_HOME/CUDA_PATH, then /usr/local/cuda, then the dynamic loader; a
# file found but broken is an error, never a silent step to the next place.
# --version, probe and KILN_LOG=info name the file loaded.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/wheels.sh"

command -v gcc >/dev/null || skip "no gcc to make the stand-in libraries"
# unset what would choose for us
unset CUDA_HOME CUDA_PATH VIRTUAL_ENV CONDA_PREFIX

gcc -shared -fPIC -o "$T/libnot.so" -x c - <<<'int not_a_gpu_library(void) { return 0; }'
gcc -shared -fPIC -o "$T/libnvrtc.so.11" -x c - <<<'
int nvrtcVersion(int *major, int *minor) { *major = 11; *minor = 8; return 0; }'
printf 'not an ELF file\n' >"$T/text.so"

log "explicit library names: the only one tried, an error naming it"
for var in KILN_CUDA_LIBRARY KILN_NVRTC_LIBRARY KILN_NCCL_LIBRARY; do
  for bad in "$T/nonexistent.so" "$T/text.so" "$T/libnot.so"; do
    env "$var=$bad" "$KILN_BIN" --version >"$OUT" 2>"$ERR" && RC=0 || RC=$?
    expect_eq "$RC" 2 "$var=$(basename "$bad"): kiln --version's exit status"
    expect_stderr_contains "$bad" "$var=$(basename "$bad") is named"
  done
done
# ... and the commands that need the library stop on it
KILN_NVRTC_LIBRARY=$T/nonexistent.so expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$T/c0"
expect_stderr_contains "KILN_NVRTC_LIBRARY=$T/nonexistent.so: cannot load it"
KILN_NVRTC_LIBRARY=$T/libnot.so expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$T/c0"
expect_stderr_contains "$T/libnot.so (KILN_NVRTC_LIBRARY) has no nvrtcVersion: it is not NVRTC"
KILN_CUDA_LIBRARY=$T/text.so expect_exit 2 kiln warmup --cache "$T/c0" --kernels scaled_softmax
expect_stderr_contains "KILN_CUDA_LIBRARY=$T/text.so: cannot load it"

log "an NVRTC older than 12.0 is refused, not replaced"
KILN_NVRTC_LIBRARY=$T/libnvrtc.so.11 expect_exit 2 kiln build --arch 90 --kernels scaled_softmax --cache "$T/c0"
expect_stderr_contains "NVRTC 11.8 at $T/libnvrtc.so.11 (KILN_NVRTC_LIBRARY) is older than 12.0"

log "NVIDIA's wheels next to Python come first"
v12=$(wheel_venv nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86)
v13=$(wheel_venv nvrtc-cu13 nvidia-cuda-nvrtc==13.5.37)
lib12=$(wheel_lib "$v12" libnvrtc.so.12)
lib13=$(wheel_lib "$v13" libnvrtc.so.13)
for how in VIRTUAL_ENV CONDA_PREFIX KILN_PYTHON_PREFIX; do
  env "$how=$v12" CUDA_HOME=/usr/local/cuda "$KILN_BIN" --version >"$OUT" 2>"$ERR" || fail "$how: --version failed"
  expect_stdout_contains "NVRTC 12.9: $lib12 (found by NVIDIA's wheels under $v12 ($how))"
done
# torch's cu13 layout: nvidia/cu13/lib
VIRTUAL_ENV=$v13 expect_exit 0 kiln --version
expect_stdout_contains "NVRTC 13.5: $lib13 (found by NVIDIA's wheels under $v13 (VIRTUAL_ENV))"
# the running program's prefix: a kiln in PREFIX/bin finds PREFIX's wheels
mkdir -p "$T/px/bin" "$T/px/lib/python3.11/site-packages/nvidia/cuda_nvrtc"
ln -s "$(dirname "$lib12")" "$T/px/lib/python3.11/site-packages/nvidia/cuda_nvrtc/lib"
cp "$KILN_BIN" "$T/px/bin/kiln"
timeout 60 "$T/px/bin/kiln" --version >"$OUT" 2>"$ERR" || fail "a kiln in a prefix: --version failed"
expect_stdout_contains "(found by NVIDIA's wheels under $T/px (the running program's prefix))"

log "then CUDA_HOME, CUDA_PATH (lib64, lib, targets/<arch>/lib)"
mkdir -p "$T/cuda/targets/x86_64-linux/lib"
ln -s "$lib12" "$T/cuda/targets/x86_64-linux/lib/libnvrtc.so.12"
for how in CUDA_HOME CUDA_PATH; do
  env "$how=$T/cuda" "$KILN_BIN" --version >"$OUT" 2>"$ERR" || fail "$how: --version failed"
  expect_stdout_contains "NVRTC 12.9: " "$how's NVRTC"
  expect_stdout_contains "(found by $how ($T/cuda))"
done

log "a file found but broken is an error naming it, not a step to the next place"
mkdir -p "$T/broken/lib64"
cp "$T/text.so" "$T/broken/lib64/libnvrtc.so.13"
CUDA_HOME=$T/broken expect_exit 2 kiln --version
expect_stderr_contains "NVRTC found at $T/broken/lib64/libnvrtc.so.13 (CUDA_HOME ($T/broken)) will not load"

log "KILN_LOG=info and probe name the file loaded"
VIRTUAL_ENV=$v12 KILN_LOG=info expect_exit 0 kiln build --arch 90 --kernels scaled_softmax --cache "$T/c12"
expect_stderr_contains "NVRTC 12.9 from $lib12 (NVIDIA's wheels under $v12 (VIRTUAL_ENV))"
expect_eq "$(index_query "$T/c12" "SELECT DISTINCT toolchain FROM records")" nvrtc-12.9 "the records' toolchain"
VIRTUAL_ENV=$v12 expect_exit 0 kiln probe --json --cache "$T/c12"
expect_eq "$(json "$OUT" 'd["nvrtc"]["library"]')" "$lib12" "probe's nvrtc.library"
expect_eq "$(json "$OUT" 'd["nvrtc"]["found_by"]')" "NVIDIA's wheels under $v12 (VIRTUAL_ENV)" "probe's nvrtc.found_by"
