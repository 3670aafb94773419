#!/usr/bin/env bash
# C packaging: `cmake --install` of this build into a scratch prefix, then
# examples/consumer built against that prefix both ways a C user would (CMake
# find_package(kiln CONFIG) -> kiln::kiln, and pkg-config kiln), and run on
# the fake driver from a read-only fixture cache with KILN_OFFLINE=1: it opens
# a loader, loads scaled_softmax and runs its entry points on known inputs.
# Also: the installed `kiln` runs from the prefix, and kiln::kiln_mpi is there
# when this build has libkiln_mpi.
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "the fake libcuda was not built"
command -v pkg-config >/dev/null || skip "no pkg-config"
build=$(dirname "$KILN_BIN")
src=${IT_SOURCE_DIR:?}
prefix=$T/prefix

log "cmake --install into $prefix"
timeout 300 cmake --install "$build" --prefix "$prefix" >"$T/install.log" 2>&1 ||
  die "cmake --install failed: $(tail -5 "$T/install.log")"
for f in bin/kiln include/kiln/kiln.h include/kiln/loader.h lib/libkiln.so lib/libkiln.a \
  lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake lib/pkgconfig/kiln.pc; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
expect_exit 0 timeout 60 "$prefix/bin/kiln" --version
expect_stdout_contains "kiln $(sed -n 's/^project(kiln VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"

export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_OFFLINE=1
export KILN_CACHE_DIR=$T/cache KILN_CACHE_PATH
KILN_CACHE_PATH=$(fixture warm) # scaled_softmax sm_90, read-only
before=$(tree_sum "$KILN_CACHE_PATH")

log "find_package(kiln CONFIG)"
timeout 300 cmake -S "$src/examples/consumer" -B "$T/bc" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$T/bc.log" 2>&1 || die "configuring the consumer failed: $(tail -20 "$T/bc.log")"
timeout 300 cmake --build "$T/bc" >>"$T/bc.log" 2>&1 || die "building the consumer failed: $(tail -20 "$T/bc.log")"
expect_exit 0 timeout 120 "$T/bc/consumer"
expect_stdout_contains "on Fake GPU sm_90: scaled_softmax,"
expect_stdout_contains "entry points passed"
if [[ -e $prefix/lib/libkiln_mpi.so ]]; then
  mkdir -p "$T/mpi"
  printf '%s\n' 'cmake_minimum_required(VERSION 3.16)' 'project(m LANGUAGES C)' \
    'find_package(kiln CONFIG REQUIRED COMPONENTS kiln_mpi)' \
    'if(NOT TARGET kiln::kiln_mpi)' '  message(FATAL_ERROR "no kiln::kiln_mpi")' 'endif()' >"$T/mpi/CMakeLists.txt"
  timeout 300 cmake -S "$T/mpi" -B "$T/mpi/b" -DCMAKE_PREFIX_PATH="$prefix" >"$T/mpi.log" 2>&1 ||
    fail "find_package(kiln COMPONENTS kiln_mpi): $(tail -5 "$T/mpi.log")"
fi

log "pkg-config kiln"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
expect_eq "$(pkg-config --modversion kiln)" "$(sed -n 's/^Version: //p' "$prefix/lib/pkgconfig/kiln.pc")" "pkg-config --modversion"
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is the point
cc "$src/examples/consumer/consumer.c" $(pkg-config --cflags --libs kiln) -Wl,-rpath,"$prefix/lib" \
  -o "$T/consumer-pc" 2>"$ERR" || die "cc with pkg-config's flags failed: $(cat "$ERR")"
expect_exit 0 timeout 120 "$T/consumer-pc"
expect_stdout_contains "entry points passed"
expect_eq "$(tree_sum "$KILN_CACHE_PATH")" "$before" "the read-only fixture cache is unchanged"
