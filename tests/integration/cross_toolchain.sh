#!/usr/bin/env bash
# A cache built by one NVRTC is used by a process with another (docs/loader.md,
# "Artifacts of another NVRTC"). Caches of the 3 bias_* units (the smallest:
# seconds to compile) are built with
# the wheels' NVRTCs (KILN_NVRTC_LIBRARY), then the loader runs on the fake
# driver with the toolkit's NVRTC 13.0 as its own. Each case is a cache, a GPU
# arch and a driver version; what the loader does (kiln warmup --json: the
# source of every unit, and how many it built) must be what `kiln probe` and
# `kiln check --driver` say it would do.
#
# NVRTC 12.9 (nvidia-cuda-nvrtc-cu12), sm_90 + compute_90 (PTX ISA 8.8):
#   sm_90,  driver 13.0: the 12.9 CUBIN, 0 builds
#   sm_90,  driver 12.8: the 12.9 CUBIN (same CUDA major), 0 builds
#   sm_100, driver 13.0: the 12.9 PTX JIT-ed, 0 builds
#   sm_80,  driver 13.0: nothing loads (a CUBIN of another major, PTX newer than
#           the GPU): built with NVRTC 13.0, 3 builds
#   sm_100, driver 12.8: nothing loads (PTX ISA 8.8 > the driver's 8.7) and
#           NVRTC 13.0's output would not load either: an error saying so
# NVRTC 13.5 (nvidia-cuda-nvrtc 13.5.37), compute_90 only (PTX ISA 9.5):
#   sm_100, driver 13.5: the 13.5 PTX JIT-ed, 0 builds
#   sm_100, driver 13.1: PTX ISA 9.5 > 9.1: built with NVRTC 13.0, 3 builds
# A remote filled by NVRTC 12.9 (nginx; skipped without it), local caches empty
# but for one unit's 12.9 records in a read-only layer, so the loader knows to
# ask for 12.9's keys:
#   sm_90,  driver 13.0: the other 2 units' 12.9 CUBINs fetched, 0 builds
#   sm_100, driver 13.0: their 12.9 PTX fetched, 0 builds
#   sm_90 with no 12.9 record anywhere here: the remote's artifacts are not
#           found (keys name a toolchain; docs/loader.md), 3 builds
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/wheels.sh"

[[ -f ${IT_FAKECUDA:-} ]] || skip "the fake libcuda was not built"
unset CUDA_HOME CUDA_PATH VIRTUAL_ENV CONDA_PREFIX KILN_REMOTE_URL KILN_CACHE_PATH KILN_OFFLINE
lib12=$(wheel_lib "$(wheel_venv nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86)" libnvrtc.so.12)
lib135=$(wheel_lib "$(wheel_venv nvrtc-cu13 nvidia-cuda-nvrtc==13.5.37)" libnvrtc.so.13)

expect_exit 0 kiln --version
own=$(sed -n 's/^NVRTC \([0-9.]*\): .*/\1/p' "$OUT")
[[ $own == 13.0 ]] || skip "the NVRTC found by default here is '${own:-none}', not the toolkit's 13.0"

log "the caches: NVRTC 12.9 (sm_90 + compute_90), NVRTC 13.5 (compute_90)"
KILN_NVRTC_LIBRARY=$lib12 expect_exit 0 kiln build --arch 90+ptx --kernels 'bias_*' --cache "$T/c12"
expect_eq "$(index_query "$T/c12" "SELECT DISTINCT toolchain FROM records")" nvrtc-12.9 "c12's toolchain"
expect_eq "$(index_query "$T/c12" "SELECT count(*) FROM records")" 6 "c12's records (3 units x sm_90, compute_90)"
KILN_NVRTC_LIBRARY=$lib135 expect_exit 0 kiln build --arch compute_90 --kernels 'bias_*' --cache "$T/c135"
expect_eq "$(index_query "$T/c135" "SELECT DISTINCT toolchain FROM records")" nvrtc-13.5 "c135's toolchain"
digest=$(index_query "$T/c135" "SELECT digest FROM records LIMIT 1")
expect_eq "$(grep -m1 '^\.version' "$(blob_path "$T/c135" "$digest")")" ".version 9.5" "the PTX ISA NVRTC 13.5 writes"

# run_ CACHE ARCH DRIVER: warmup's JSON in $OUT, its exit status in $RC; the
# cache is a copy, so every case starts from the same one.
run_() {
  local dir=$T/run-$(basename "$1")-$2-$3
  cp -a "$1" "$dir"
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DRIVER=$3 KILN_FAKE_CUDA_DEVICES=$2 \
    kiln warmup --kernels 'bias_*' --cache "$dir" --json >"$OUT" 2>"$ERR" && RC=0 || RC=$?
  RUN_DIR=$dir
}
loaded() { json "$OUT" 'sorted({u["source"] for u in d["devices"][0].get("units", [])}) or ["none"]'; }
built() { json "$OUT" 'sum(u["source"] == "built" for u in d["devices"][0].get("units", []))'; }

# case CACHE ARCH DRIVER WANT_SOURCE WANT_BUILT
case_() {
  local cache=$1 arch=$2 drv=$3 want=$4 want_built=$5 ver rc dir
  ver="$((drv / 1000)).$((drv % 1000 / 10))"
  dir=$T/probe-$(basename "$cache")-$arch-$drv
  cp -a "$cache" "$dir"
  log "$(basename "$cache"), sm_$arch, driver $ver: $want"
  # what probe and check say, before the loader runs
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DRIVER=$drv KILN_FAKE_CUDA_DEVICES=$arch \
    expect_exit 0 kiln probe --json --cache "$dir"
  cp "$OUT" "$T/probe.json"
  kiln check --arch "$arch" --driver "$ver" --kernels 'bias_*' --cache "$dir" --json >"$T/check.json" 2>"$ERR" && rc=0 || rc=$?
  run_ "$cache" "$arch" "$drv"
  local probe_says check_says
  probe_says=$(json "$T/probe.json" 'sorted({u["would_load"] if u["would_load"] != "missing" else ("built" if u["if_missing"].startswith("would build") else "none") for u in d["units"] if u["unit"].startswith("bias_")})')
  # check covers the cache only: what loads from it, or "missing"
  check_says=$(json "$T/check.json" 'sorted({i["source"] or "missing" for i in d["items"]})')
  if [[ $want == none ]]; then
    expect_eq "$RC" 1 "sm_$arch/$ver: warmup's exit status"
    expect_stderr_contains "cannot load" "sm_$arch/$ver: the reason"
    expect_true "sm_$arch/$ver: probe says why building would not help" \
      grep -q "would fail: NVRTC 13" "$T/probe.json"
  else
    expect_eq "$RC" 0 "sm_$arch/$ver: warmup's exit status"
  fi
  expect_eq "$(loaded)" "[\"$want\"]" "sm_$arch/$ver: what the loader did"
  expect_eq "$(built)" "$want_built" "sm_$arch/$ver: units built"
  expect_eq "$probe_says" "[\"$want\"]" "sm_$arch/$ver: what kiln probe said it would do"
  expect_eq "$check_says" "[\"$([[ $want == built || $want == none ]] && echo missing || echo "$want")\"]" \
    "sm_$arch/$ver: what kiln check --driver $ver said"
  expect_eq "$rc" "$([[ $want == exact* || $want == PTX* ]] && echo 0 || echo 1)" "sm_$arch/$ver: kiln check's exit status"
}
case_ "$T/c12" 90 13000 "exact CUBIN" 0
case_ "$T/c12" 90 12080 "exact CUBIN" 0
case_ "$T/c12" 100 13000 "PTX JIT" 0
case_ "$T/c12" 80 13000 built 3
case_ "$T/c12" 100 12080 none 0
case_ "$T/c135" 100 13050 "PTX JIT" 0
case_ "$T/c135" 100 13010 built 3

log "what was built is NVRTC 13.0's, beside the other NVRTC's records"
expect_eq "$(index_query "$T/run-c12-80-13000" "SELECT DISTINCT toolchain FROM records WHERE target = 'sm_80'")" \
  "nvrtc-$own" "sm_80's toolchain"
expect_eq "$(index_query "$T/run-c12-80-13000" "SELECT count(*) FROM records WHERE toolchain = 'nvrtc-12.9'")" 6 "12.9's records kept"
expect_eq "$(index_query "$T/run-c135-100-13010" "SELECT DISTINCT toolchain FROM records WHERE target = 'sm_100'")" \
  "nvrtc-$own" "sm_100's toolchain"

log "kiln check --driver for the PTX targets themselves"
for c in "c12 12.8 1" "c12 12.9 0" "c135 13.1 1" "c135 13.5 0" "c135 12.9 1"; do
  set -- $c
  kiln check --arch compute_90 --driver "$2" --kernels 'bias_*' --cache "$T/$1" >"$OUT" 2>"$ERR" && rc=0 || rc=$?
  expect_eq "$rc" "$3" "check --arch compute_90 --driver $2 of $1"
done

# ---- a remote filled by NVRTC 12.9 ----
if ! command -v nginx >/dev/null || ! command -v curl >/dev/null; then
  log "nginx or curl is missing: the remote cases are skipped"
  exit 0
fi
. "$(dirname "$0")/remote_lib.sh"
R=$(serve r12)
KILN_NVRTC_LIBRARY=$lib12 expect_exit 0 kiln build --arch 90+ptx --kernels 'bias_*' --cache "$T/c12" \
  --remote "$R" --upload --json
expect_eq "$(json "$OUT" 'd["uploaded"]')" 6 "records uploaded to the remote"
# A read-only layer holding one unit's 12.9 records (bias_gelu), as an
# image's cache for part of the kernels would.
cp -a "$T/c12" "$T/layer"
kiln cache rm --cache "$T/layer" 'bias_[ds]*' >"$OUT" 2>"$ERR" || die "kiln cache rm: $(cat "$ERR")"
expect_eq "$(index_query "$T/layer" "SELECT count(*) FROM records")" 2 "the layer's records (bias_gelu)"

# remote_case ARCH LAYER WANT_SOURCES WANT_BUILT
remote_case() {
  local arch=$1 layer=$2 want=$3 want_built=$4 dir
  dir=$T/remote-$arch-$([[ -n $layer ]] && echo layer || echo bare)
  new_cache "$dir"
  log "remote of 12.9, sm_$arch, driver 13.0, $([[ -n $layer ]] && echo "a layer with one unit's 12.9 records" || echo "no 12.9 record here")"
  KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DRIVER=13000 KILN_FAKE_CUDA_DEVICES=$arch \
    KILN_REMOTE_URL=$R KILN_CACHE_PATH=$layer \
    kiln warmup --kernels 'bias_*' --cache "$dir" --json >"$OUT" 2>"$ERR" && RC=0 || RC=$?
  expect_eq "$RC" 0 "remote sm_$arch: warmup's exit status"
  expect_eq "$(loaded)" "$want" "remote sm_$arch: what the loader did"
  expect_eq "$(built)" "$want_built" "remote sm_$arch: units built"
  if [[ -n $layer ]]; then
    expect_eq "$(index_query "$dir" "SELECT DISTINCT toolchain FROM records")" nvrtc-12.9 \
      "remote sm_$arch: the toolchain of what was fetched"
  fi
}
remote_case 90 "$T/layer" '["exact CUBIN"]' 0
remote_case 100 "$T/layer" '["PTX JIT"]' 0
remote_case 90 "" '["built"]' 3
