#!/usr/bin/env bash
# C packaging: `cmake --install` of this build into a scratch prefix, then
# examples/consumer built against it three ways (CMake find_package with
# kiln::kiln and with COMPONENTS kiln_static -> kiln::kiln_static, and plain
# cc with pkg-config's flags), each run on the fake driver from a read-only
# copy of the warm fixture with KILN_OFFLINE=1: it opens a loader, loads
# scaled_softmax and runs its entry points on known inputs. Also what is
# installed (public headers only, only kiln_* exported, the installed `kiln`
# on the prefix's libkiln), a version file that refuses another minor, an
# unknown component named, and kiln's own error offline on an empty cache.
# In the sanitizer build the consumer is built with the sanitizers too.
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda (tests/fakecuda needs a C++ compiler)"
command -v pkg-config >/dev/null || die "pkg-config is not installed (CMake needed it to build kiln)"
src=${IT_SOURCE_DIR:?}
build=$(dirname "$KILN_BIN")
prefix=$T/prefix
[[ -f $build/CMakeCache.txt ]] || die "$build holds no CMake build"

# The consumer is built as kiln was: a sanitizer build's libkiln needs the
# sanitizer runtime loaded first.
flags="-Wall -Wextra -Wpedantic -Werror"
if grep -q '^KILN_SANITIZE:BOOL=ON' "$build/CMakeCache.txt"; then
  flags+=" -fsanitize=address,undefined -fno-omit-frame-pointer"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
fi
bounded() { timeout -k 10 "$IT_TIMEOUT" "$@"; }
# libkiln_of BINARY: the libkiln.so the dynamic loader gives it, as a plain path.
libkiln_of() { ldd "$1" | awk '/libkiln\.so/ {print $3}' | xargs -r realpath -ms; }

# ---- cmake --install ----
log "cmake --install into $prefix"
bounded cmake --install "$build" --prefix "$prefix" >"$T/install.log" 2>&1 ||
  die "cmake --install failed: $(tail -5 "$T/install.log")"
for f in include/kiln/kiln.h lib/libkiln.so.0.2 lib/libkiln.so lib/libkiln.a bin/kiln \
  lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake \
  lib/cmake/kiln/kilnTargets.cmake lib/cmake/kiln/kilnStaticTargets.cmake lib/pkgconfig/kiln.pc; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
expect_eq "$(cd "$prefix/include" && find . -type f | sort)" \
  "$(cd "$src/include" && find . -type f | sort)" "installed headers (include/kiln/*.h and nothing else)"
bad_syms=$(nm -D --defined-only "$prefix/lib/libkiln.so" | awk '$2 ~ /^[TDBR]$/ && $3 !~ /^kiln_/ {print $3}')
expect_eq "$bad_syms" "" "libkiln.so exports only kiln_* symbols"
# the installed command runs from the prefix, on the prefix's libkiln
expect_exit 0 "$prefix/bin/kiln" --version
expect_stdout_contains "kiln 0.2.0"
expect_eq "$(libkiln_of "$prefix/bin/kiln")" "$prefix/lib/libkiln.so.0.2" \
  "the libkiln the installed kiln loads"

# ---- the consumer, built three ways ----
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cmake_consumer() { # NAME CMAKE-ARGS...: configure and build examples/consumer into $T/NAME
  local name=$1
  shift
  bounded cmake -S "$src/examples/consumer" -B "$T/$name" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="$flags" "$@" >"$T/$name.log" 2>&1 &&
    bounded cmake --build "$T/$name" >>"$T/$name.log" 2>&1 ||
    { fail "examples/consumer ($name) did not build"; sed 's/^/  | /' "$T/$name.log" | tail -25 >&2; }
}
log "CMake: find_package(kiln), kiln::kiln"
cmake_consumer cmake-shared
log "CMake: find_package(kiln COMPONENTS kiln_static), kiln::kiln_static"
cmake_consumer cmake-static -DKILN_CONSUMER_STATIC=ON
log "pkg-config: cc consumer.c \$(pkg-config --cflags --libs kiln)"
mkdir "$T/pc"
expect_eq "$(pkg-config --modversion kiln)" 0.2.0 "pkg-config --modversion kiln"
# shellcheck disable=SC2046 # word splitting of pkg-config's flags is the point
bounded cc $flags "$src/examples/consumer/consumer.c" $(pkg-config --cflags --libs kiln) \
  -Wl,-rpath,"$(pkg-config --variable=libdir kiln)" -o "$T/pc/consumer" >"$T/pc.log" 2>&1 ||
  { fail "examples/consumer (pkg-config) did not build"; sed 's/^/  | /' "$T/pc.log" >&2; }
static_libs=" $(pkg-config --static --libs kiln) "
for l in -lkiln -lsqlite3 -lcrypto -lcurl -ljansson -ldl -lm; do
  [[ $static_libs == *" $l "* ]] || fail "pkg-config --static --libs kiln lacks $l: $static_libs"
done

expect_eq "$(libkiln_of "$T/cmake-shared/consumer")" "$prefix/lib/libkiln.so.0.2" \
  "the libkiln the CMake consumer loads"
expect_eq "$(libkiln_of "$T/pc/consumer")" "$prefix/lib/libkiln.so.0.2" \
  "the libkiln the pkg-config consumer loads"
ldd "$T/cmake-static/consumer" | grep -q libkiln && fail "the kiln::kiln_static consumer loads a libkiln.so"

# ---- each runs the op on the fake driver, from a read-only cache, offline ----
copy_cache "$(fixture warm)" "$T/ro" # scaled_softmax for sm_90
chmod -R a-w "$T/ro"
at_exit "chmod -R u+w '$T/ro'"
before=$(tree_sum "$T/ro")
new_cache "$T/primary"
for c in cmake-shared/consumer cmake-static/consumer pc/consumer; do
  [[ -x $T/$c ]] || continue
  log "$c: softmax on the fake sm_90, offline, from the read-only cache"
  : >"$T/fake.log"
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_FAKE_CUDA_LOG=$T/fake.log KILN_OFFLINE=1 \
    KILN_CACHE_DIR=$T/primary KILN_CACHE_PATH=$T/ro expect_exit 0 bounded "$T/$c"
  grep -qE '^kiln 0\.2\.0 on Fake GPU sm_90: scaled_softmax, [1-9][0-9]* entry points passed$' "$OUT" ||
    fail "$c printed '$(cat "$OUT")'"
  grep -q '^load ok cubin sm_90' "$T/fake.log" || fail "$c: the driver loaded no sm_90 CUBIN"
  grep -q '^launch kiln_scaled_softmax_fwd_f32' "$T/fake.log" || fail "$c: no softmax launch"
done
expect_eq "$(tree_sum "$T/ro")" "$before" "the read-only cache after the runs"
expect_eq "$(index_query "$T/primary" "SELECT count(*) FROM records")" 0 "records in the primary cache"

# an empty cache, offline: kiln's own error, exit 1
KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_OFFLINE=1 KILN_CACHE_DIR=$T/empty \
  expect_exit 1 bounded "$T/cmake-shared/consumer"
expect_stderr_contains "KILN_OFFLINE=1 forbids building it here"

# ---- find_package: versions and components ----
log "find_package(kiln VERSION COMPONENTS ...)"
mkdir "$T/fp"
cat >"$T/fp/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(fp LANGUAGES C)
find_package(kiln ${WANT} CONFIG REQUIRED ${COMPONENTS})
foreach(t kiln::kiln kiln::kiln_static kiln::kiln_mpi)
  if(TARGET ${t})
    message(STATUS "target ${t}")
  endif()
endforeach()
EOF
find_kiln() { # expected-status WANT COMPONENTS
  local want=$1
  rm -rf "$T/fp/b"
  RC=0
  bounded cmake -S "$T/fp" -B "$T/fp/b" -DCMAKE_PREFIX_PATH="$prefix" -DWANT="$2" -DCOMPONENTS="$3" \
    >"$OUT" 2>"$ERR" || RC=$?
  [[ $RC == "$want" ]] || { fail "find_package(kiln $2 COMPONENTS $3): cmake exited $RC, expected $want"; head -20 "$ERR" >&2; }
}
find_kiln 0 0.2 ""
expect_eq "$(grep -o 'target kiln::.*' "$OUT" | tr '\n' ' ')" \
  "target kiln::kiln $([[ -e $prefix/lib/libkiln_mpi.so ]] && echo 'target kiln::kiln_mpi ')" \
  "targets without components (no static one unless asked)"
find_kiln 0 0.2.0 kiln_static
expect_stdout_contains "target kiln::kiln_static"
find_kiln 1 0.3 ""
expect_stderr_contains "0.2.0"
find_kiln 1 0.1 ""
find_kiln 1 0.2 nosuch
expect_stderr_contains "unknown component 'nosuch' (kiln has kiln, kiln_static and kiln_mpi)"
if [[ -e $prefix/lib/libkiln_mpi.so ]]; then
  find_kiln 0 0.2 kiln_mpi
  expect_stdout_contains "target kiln::kiln_mpi"
else
  find_kiln 1 0.2 kiln_mpi
  expect_stderr_contains "this kiln was built without MPI"
fi
