#!/usr/bin/env bash
# The GPU bundle (scripts/gpu-bundle, docs/gpu.md) works before any GPU does:
#   - scripts/gpu-bundle builds it from scratch (its own build directory,
#     Release; the kernel cache for sm_90 + sm_100 + PTX from BUNDLE_CACHE,
#     exported from the kernels fixture) in at most 40 MiB, and its own check
#     passes;
#   - moved to another path (the first copy removed), in a mount namespace
#     where the system's sqlite3, curl, jansson, cmocka, OpenSSL libraries and
#     the CUDA toolkit (so NVRTC and NCCL too) are hidden:
#       * every ELF program of the bundle resolves every library in the
#         bundle's lib/ or glibc (ldd, the real loader), and no ELF has a
#         RUNPATH or links libcuda/libnvrtc/libnccl;
#       * `run tests OUT` on the fake driver (tests/fakecuda, sm_90) passes:
#         probe, warmup --verify with every unit from the bundle's cache and
#         none built (no NVRTC can be found), every gpu test (quick shapes);
#         OUT holds at most 8 files, summary.txt and a tarball of every log;
#       * `run sanitize OUT` records every step as skipped (no
#         compute-sanitizer), and RUN_BUDGET=0 skips every step, not fails;
#       * bad usage exits 2.
# Prints the bundle's size, its build time and the time of `run tests`.
. "$(dirname "$0")/lib.sh" "$@"

require_masking
[[ -n ${IT_FAKECUDA:-} && -f $IT_FAKECUDA ]] || skip "no fake CUDA driver (tests/fakecuda needs a C++ compiler)"
fakenccl=$(dirname "$IT_FAKECUDA")/libkiln_fakenccl.so
[[ -f $fakenccl ]] || skip "no fake libnccl next to $IT_FAKECUDA"
src=${IT_SOURCE_DIR:?}
glibc_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl)\.so\.[0-9.]+$'

# The kernels: the kernels fixture's sm_90, sm_100 and compute_90 (compiling
# them is fixture_kernels' work), as BUNDLE_CACHE, which the script checks
# with `kiln check --arch` before it ships it.
subset_cache "$(fixture kernels)" 90,100,compute_90 '*' "$T/kernels"
log "scripts/gpu-bundle, from scratch (the kernels from BUNDLE_CACHE)"
start=$SECONDS
BUNDLE_CACHE=$T/kernels timeout -k 10 900 "$src/scripts/gpu-bundle" --build-dir "$T/build" "$T/made" >"$OUT" 2>"$ERR" || {
  tail -30 "$ERR" >&2
  die "scripts/gpu-bundle failed"
}
build_s=$((SECONDS - start))
expect_stderr_contains "every ELF resolves its libraries in lib/ or glibc"
bytes=$(du -sb "$T/made" | cut -f1)
((bytes <= 40 * 1024 * 1024)) || fail "the bundle is $bytes bytes, over 40 MiB"
for f in run bin/kiln lib/libkiln.so.0.2 bench/softmax_bw bench/kernels_vs_torch cache.tar.gz BUNDLE.txt tests.list; do
  [[ -e $T/made/$f ]] || fail "the bundle has no $f"
done
grep -q "^toolchain: *nvrtc-" "$T/made/BUNDLE.txt" || fail "BUNDLE.txt names no toolchain"
tar xzf "$T/made/cache.tar.gz" -C "$T" || fail "cache.tar.gz does not unpack"
new_cache "$T/ls-cache"
KILN_CACHE_PATH=$T/cache kiln cache ls --json --cache "$T/ls-cache" >"$T/ls.json" ||
  fail "kiln cache ls over the bundle's cache"
expect_eq "$(json "$T/ls.json" 'sorted({r["target"] for r in d})')" '["compute_90", "sm_100", "sm_90"]' "the cache's targets"
expect_eq "$(json "$T/ls.json" 'len({r["unit"] for r in d}) * 3 == len(d)')" true "every unit for every target"
for f in "$T"/made/lib/lib{cuda,nvrtc,nccl}*; do
  [[ ! -e $f ]] || fail "the bundle ships ${f##*/}, which kiln must find on the GPU machine"
done

log "moved elsewhere; the system's libraries and the toolkit hidden"
mkdir -p "$T/else/where"
cp -a "$T/made" "$T/else/where/bundle"
rm -rf "$T/made"
b=$T/else/where/bundle
HIDE+=(/usr/lib/x86_64-linux-gnu/lib{sqlite3,curl,jansson,cmocka,ssl,crypto}*)
HIDE_ENV+=(LD_LIBRARY_PATH PYTHONPATH VIRTUAL_ENV CONDA_PREFIX)
masked bash -c 'ls -A /usr/local/cuda/ | wc -l; cat /usr/lib/x86_64-linux-gnu/lib{sqlite3,curl,jansson,ssl,crypto}.so* | wc -c' >"$OUT" 2>"$ERR" ||
  die "the namespace did not start: $(cat "$ERR")"
expect_eq "$(tr '\n' ' ' <"$OUT")" "0 0 " "files under /usr/local/cuda, bytes of the system's sqlite3/curl/jansson/OpenSSL libraries"
"$src/scripts/gpu-bundle" --check "$b" >"$OUT" 2>"$ERR" || fail "gpu-bundle --check of the moved bundle: $(cat "$ERR")"

log "every program resolves its libraries in the bundle or glibc (ldd)"
progs=0
for f in "$b"/bin/* "$b"/bench/*; do
  [[ $(od -An -tx1 -N4 "$f" | tr -d ' ') == 7f454c46 ]] || continue
  progs=$((progs + 1))
  masked ldd "$f" >"$OUT" 2>&1 || fail "ldd ${f#"$b"/}: $(head -3 "$OUT")"
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    path=$(realpath -m "$path") # $ORIGIN/../lib, as the loader spelled it
    if [[ $path != "$b"/lib/* && ! $name =~ $glibc_re ]]; then
      fail "${f#"$b"/}: $name resolves to $path, outside the bundle and glibc"
    fi
  done <"$OUT"
  grep -q "not found" "$OUT" && fail "${f#"$b"/}: $(grep "not found" "$OUT" | head -3)"
done
((progs >= 5)) || fail "only $progs ELF programs in bin/ and bench/"

log "run tests on the fake driver, no NVRTC to be found"
start=$SECONDS
KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_GPU_TEST_QUICK=1 KILN_NCCL_LIBRARY=$fakenccl \
  expect_exit 0 masked "$b/run" tests "$T/out"
run_s=$((SECONDS - start))
sed 's/^/  | /' "$OUT"
files=$(find "$T/out" -type f | wc -l)
((files <= 8)) || fail "OUT holds $files files, more than 8"
[[ -f $T/out/summary.txt && -f $T/out/kiln-tests.tar.gz ]] || die "no summary.txt and kiln-tests.tar.gz in OUT"
s=$T/out/summary.txt
grep -q "^NVRTC: none found" "$s" || fail "the runner found an NVRTC: $(grep NVRTC "$s")"
grep -qE "^warmup-verify +pass " "$s" || fail "warmup-verify did not pass"
units=$(masked "$b/bin/kiln" list 2>/dev/null | grep -c '^[a-z]' || true)
grep -qE "^  warmup: device 0 \(Fake GPU sm_90\): $units units, $units from the bundle's cache, 0 built here; [1-9][0-9]* entry points verified, 0 failed" "$s" ||
  fail "warmup did not load every unit from the bundle's cache: $(grep 'warmup:' "$s")"
tar tzf "$T/out/kiln-tests.tar.gz" >"$T/listed" || fail "the tarball does not list"
for f in summary.txt BUNDLE.txt machine.txt nvidia-smi-q.txt logs/probe.log logs/warmup-verify.log; do
  grep -qx "$f" "$T/listed" || fail "the tarball lacks $f"
done
while read -r name _; do
  grep -qx "logs/$name.log" "$T/listed" || fail "the tarball lacks logs/$name.log"
  grep -qE "^$name +pass " "$s" || fail "$name did not pass: $(grep "^$name " "$s")"
done <"$b/tests.list"
gpu_tests=$(ctest --test-dir "$(dirname "$KILN_BIN")" -N -L gpu | sed -n 's/^Total Tests: //p')
expect_eq "$(grep -c . "$b/tests.list")" "$gpu_tests" "tests in tests.list (ctest -L gpu)"

log "run sanitize: skipped without compute-sanitizer; RUN_BUDGET=0: every step skipped"
expect_exit 0 masked "$b/run" sanitize "$T/san"
steps=$(grep -cE '^(memcheck|racecheck|synccheck)\.' "$T/san/summary.txt" || true)
expect_eq "$(grep -cE '^(memcheck|racecheck|synccheck)\.[a-z_]+ +skip ' "$T/san/summary.txt")" "$steps" "sanitize steps skipped"
expect_eq "$steps" $((3 * ($(grep -c . "$b/tests.list") - 1))) "sanitize steps (3 tools x every gpu test but coord_nccl)"
KILN_CUDA_LIBRARY=$IT_FAKECUDA RUN_BUDGET=0 expect_exit 0 masked "$b/run" tests "$T/none"
grep -qE "^probe +skip .*budget is spent" "$T/none/summary.txt" || fail "RUN_BUDGET=0: probe not skipped"
grep -qE " (pass|fail|timeout) " "$T/none/summary.txt" && fail "RUN_BUDGET=0 ran a step"
[[ -f $T/none/kiln-tests.tar.gz ]] || fail "RUN_BUDGET=0: no tarball"

expect_exit 2 "$b/run"
expect_exit 2 "$b/run" bogus "$T/x"
expect_exit 2 "$b/run" tests
expect_exit 2 "$src/scripts/gpu-bundle-run" tests "$T/x"
expect_stderr_contains "not a bundle"

printf '%s: bundle %s bytes (%.1f MiB; %s units x sm_90, sm_100 + PTX), built from scratch in %s s; run tests on the fake driver: %s s\n' \
  "$TEST_NAME" "$bytes" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$units" "$build_s" "$run_s"
