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
#       * `run all OUT` with RUN_BUDGET=30 ends within it (every group in its
#         share, what does not fit skipped; python3 there has no torch, so
#         the torch steps skip), writes only summary.txt, kiln-all.tar.gz
#         and results.json, records every step, and the gpu tests it passes
#         ran trimmed (KILN_GPU_TEST_TRIM: their device line says ", trim");
#       * `run all OUT --only probe,torch` with the test venv's Python
#         (IT_TEST_PYTHON): the op tests pass on CPU tensors through the fake
#         driver's host memory, torch.compile capped at 1 s (RUN_LIMITS) is
#         recorded as timeout and the run goes on to torch.graphs (skipped:
#         no CUDA), nothing outside --only runs;
#       * bad usage exits 2.
# Prints the bundle's size, its build time and the times of `run tests`, `run all`
# (RUN_BUDGET=30) and `run all --only probe,torch`.
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
for f in run bin/kiln lib/libkiln.so.0.2 bench/softmax_bw bench/kernels_vs_torch bench/megatron_layer.py \
  python/kiln/__init__.py python/tests/test_ops_cuda.py cache.tar.gz BUNDLE.txt tests.list; do
  [[ -e $T/made/$f ]] || fail "the bundle has no $f"
done
grep -q "^toolchain: *nvrtc-" "$T/made/BUNDLE.txt" || fail "BUNDLE.txt names no toolchain"
grep -qE "^wheels: +megatron_core-0\.16\.1-cp312-" "$T/made/BUNDLE.txt" || fail "BUNDLE.txt: $(grep '^wheels' "$T/made/BUNDLE.txt")"
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

log "run all, RUN_BUDGET=30: every group in its share, what does not fit skipped"
fake_env=(KILN_CUDA_LIBRARY="$IT_FAKECUDA" KILN_FAKE_CUDA_DEVICES=90 KILN_NCCL_LIBRARY="$fakenccl")
start=$SECONDS
rc=0
masked env "${fake_env[@]}" RUN_BUDGET=30 "$b/run" all "$T/all" >"$OUT" 2>"$ERR" || rc=$?
all_s=$((SECONDS - start))
s=$T/all/summary.txt
sed 's/^/  | /' "$s"
((rc <= 1)) || fail "run all exited $rc: $(tail -5 "$ERR")"
((all_s <= 30 + 10)) || fail "run all took $all_s s with RUN_BUDGET=30"
expect_eq "$(find "$T/all" -type f -printf '%f\n' | sort | tr '\n' ' ')" "kiln-all.tar.gz results.json summary.txt " "run all's files"
for g in probe warmup-verify gpu.softmax torch.ops torch.compile torch.graphs memcheck.softmax bench.megatron_layer bench.loader_warm; do
  grep -qE "^$g +(pass|fail|timeout|skip) " "$s" || fail "run all recorded no $g: $(cat "$s")"
done
# python3 there has no torch; no compute-sanitizer; the fake driver's timings mean nothing
grep -qE "^torch.ops +skip .*cannot import torch" "$s" || fail "torch.ops: $(grep '^torch.ops' "$s")"
grep -qE "^memcheck.softmax +skip .*no compute-sanitizer" "$s" || fail "memcheck: $(grep '^memcheck.softmax' "$s")"
grep -qE "^bench.loader_warm +skip .*fake driver" "$s" || fail "bench.loader_warm: $(grep '^bench.loader_warm' "$s")"
grep -qE "^bench.megatron_layer +skip .*(wheel is for cp312|cannot import torch)" "$s" || fail "bench.megatron_layer: $(grep '^bench.megatron_layer' "$s")"
expect_eq "$(json "$T/all/results.json" 'len(d["steps"]) == len([l for l in open("'"$s"'") if l.split()[1:2] and l.split()[1] in ("pass", "fail", "skip", "timeout")]) and d["budget_s"]')" 30 \
  "results.json: every step of summary.txt, and the budget"
tar tzf "$T/all/kiln-all.tar.gz" >"$T/listed" || fail "kiln-all.tar.gz does not list"
for f in summary.txt results.json BUNDLE.txt nvidia-smi-q.txt machine.txt; do
  grep -qx "$f" "$T/listed" || fail "kiln-all.tar.gz lacks $f"
done
# the gpu tests that ran, ran trimmed (KILN_GPU_TEST_TRIM: the riskiest shapes)
mkdir -p "$T/all-logs" && tar xzf "$T/all/kiln-all.tar.gz" -C "$T/all-logs" logs || fail "kiln-all.tar.gz's logs"
trimmed=0
while read -r name _; do
  [[ $name != gpu.coord_nccl ]] && grep -qE "^$name +pass " "$s" || continue
  grep -qE '^device 0: .*, trim$' "$T/all-logs/logs/$name.log" || fail "$name did not run trimmed: $(head -1 "$T/all-logs/logs/$name.log")"
  trimmed=$((trimmed + 1))
done <"$b/tests.list"
((trimmed > 0)) || fail "run all (RUN_BUDGET=30) passed no gpu test: $(grep '^gpu\.' "$s")"

log "run all --only probe,torch: the torch op tests on the fake driver's host memory, one step past its timeout"
py=${IT_TEST_PYTHON:-}
if [[ -n $py && -x $py ]] && "$py" -c 'import torch, pytest' 2>/dev/null; then
  start=$SECONDS
  expect_exit 1 masked env "${fake_env[@]}" KILN_FAKE_CUDA_HOST_MEMORY=1 RUN_PYTHON="$py" RUN_BUDGET=90 \
    RUN_LIMITS=torch.compile=1 RUN_PYTEST_ARGS="-k scaled_softmax" "$b/run" all "$T/only" --only probe,torch
  only_s=$((SECONDS - start))
  s=$T/only/summary.txt
  sed 's/^/  | /' "$s"
  grep -qE "^probe +pass " "$s" || fail "probe: $(grep '^probe' "$s")"
  grep -qE "^torch.ops +pass " "$s" || fail "torch.ops on the fake driver: $(grep '^torch.ops' "$s"); $(tail -20 "$ERR")"
  grep -qE "^torch.compile +timeout +[0-9]+ s  after 1 s" "$s" || fail "torch.compile was not stopped at 1 s: $(grep '^torch.compile' "$s")"
  grep -qE "^torch.graphs +skip .*CUDA graphs need CUDA tensors" "$s" || fail "the run did not go on to torch.graphs: $(grep '^torch.graphs' "$s")"
  grep -qE "^(warmup-verify|gpu\.|memcheck\.|bench\.)" "$s" && fail "--only probe,torch ran other steps: $(cat "$s")"
  grep -qE "^  torch.ops: [1-9][0-9]* passed" "$s" || fail "no pytest figure for torch.ops in the key figures"
  expect_eq "$(json "$T/only/results.json" '[s["name"] + " " + s["result"] for s in d["steps"]]')" \
    '["probe pass", "torch.ops pass", "torch.compile timeout", "torch.graphs skip"]' "results.json's steps"
  expect_eq "$(find "$T/only" -type f | wc -l)" 3 "files of run all --only"
else
  only_s=-
  log "no test Python with torch and pytest (IT_TEST_PYTHON='$py'): the torch steps on the fake driver are not run"
fi
expect_exit 2 "$b/run" all "$T/x" --only
expect_exit 2 "$b/run" all "$T/x" --only bogus
expect_stderr_contains "not a group"
RUN_LIMITS=torch.ops expect_exit 2 "$b/run" all "$T/x"

expect_exit 2 "$b/run"
expect_exit 2 "$b/run" bogus "$T/x"
expect_exit 2 "$b/run" tests
expect_exit 2 "$src/scripts/gpu-bundle-run" tests "$T/x"
expect_stderr_contains "not a bundle"

printf '%s: bundle %s bytes (%.1f MiB; %s units x sm_90, sm_100 + PTX), built from scratch in %s s; on the fake driver: run tests %s s, run all (RUN_BUDGET=30) %s s, run all --only probe,torch %s s\n' \
  "$TEST_NAME" "$bytes" "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$units" "$build_s" "$run_s" "$all_s" "$only_s"
