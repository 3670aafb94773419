#!/usr/bin/env bash
# A cache built by one NVRTC is used by a process with another (docs/loader.md,
# "Artifacts of another NVRTC"): a cache of 3 softmax units for sm_90 + PTX
# compute_90 is built with NVRTC 12.9 (the nvidia-cuda-nvrtc-cu12 wheel), then
# the loader runs on the fake driver with the toolkit's NVRTC (13.x) as its own.
# Each case is a GPU arch and a driver version; what the loader does (kiln
# warmup --json: the source of every unit, and how many it built) must be what
# `kiln probe` and `kiln check --driver` say it would do:
#   sm_90,  driver 13.0: the 12.9 CUBIN, 0 builds
#   sm_90,  driver 12.8: the 12.9 CUBIN (same CUDA major), 0 builds
#   sm_100, driver 13.0: the 12.9 PTX (ISA 8.8) JIT-ed, 0 builds
#   sm_80,  driver 13.0: nothing loads (a CUBIN of another arch, PTX newer than
#           the GPU): built with NVRTC 13.x, 3 builds
#   sm_100, driver 12.8: nothing loads (PTX ISA 8.8 > the driver's 8.7) and
#           NVRTC 13.x's output would not load either: an error saying so
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/wheels.sh"

[[ -f ${IT_FAKECUDA:-} ]] || skip "the fake libcuda was not built"
unset CUDA_HOME CUDA_PATH VIRTUAL_ENV CONDA_PREFIX
v12=$(wheel_venv nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86)

expect_exit 0 kiln --version
own=$(sed -n 's/^NVRTC \([0-9.]*\): .*/\1/p' "$OUT")
[[ $own == 13.* ]] || skip "the NVRTC found by default here is '${own:-none}', not a 13.x (the toolkit's)"

log "the cache, built by NVRTC 12.9 (wheel)"
VIRTUAL_ENV=$v12 expect_exit 0 kiln build --arch 90+ptx --kernels 'scaled_*' --cache "$T/c12"
expect_eq "$(index_query "$T/c12" "SELECT DISTINCT toolchain FROM records")" nvrtc-12.9 "the cache's toolchain"
expect_eq "$(index_query "$T/c12" "SELECT count(*) FROM records")" 6 "records (3 units x sm_90, compute_90)"

# case ARCH DRIVER WANT_SOURCE WANT_BUILT
case_() {
  local arch=$1 drv=$2 want=$3 want_built=$4 dir=$T/run-$1-$2 ver rc
  ver="$((drv / 1000)).$((drv % 1000 / 10))"
  cp -a "$T/c12" "$dir"
  export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DRIVER=$drv KILN_FAKE_CUDA_DEVICES=$arch
  log "sm_$arch, driver $ver: $want"
  # what probe and check say, before the loader runs
  expect_exit 0 kiln probe --json --cache "$dir"
  cp "$OUT" "$T/probe.json"
  kiln check --arch "$arch" --driver "$ver" --kernels 'scaled_*' --cache "$dir" --json >"$T/check.json" 2>"$ERR" && rc=0 || rc=$?
  kiln warmup --kernels 'scaled_*' --cache "$dir" --json >"$OUT" 2>"$ERR" && RC=0 || RC=$?
  unset KILN_CUDA_LIBRARY KILN_FAKE_CUDA_DRIVER KILN_FAKE_CUDA_DEVICES
  local got built probe_says check_says
  got=$(json "$OUT" 'sorted({u["source"] for u in d["devices"][0].get("units", [])}) or ["none"]')
  built=$(json "$OUT" 'sum(u["source"] == "built" for u in d["devices"][0].get("units", []))')
  probe_says=$(json "$T/probe.json" 'sorted({u["would_load"] if u["would_load"] != "missing" else ("built" if u["if_missing"].startswith("would build") else "none") for u in d["units"] if u["unit"].startswith("scaled_")})')
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
  expect_eq "$got" "[\"$want\"]" "sm_$arch/$ver: what the loader did"
  expect_eq "$built" "$want_built" "sm_$arch/$ver: units built"
  expect_eq "$probe_says" "[\"$want\"]" "sm_$arch/$ver: what kiln probe said it would do"
  expect_eq "$check_says" "[\"$([[ $want == built || $want == none ]] && echo missing || echo "$want")\"]" \
    "sm_$arch/$ver: what kiln check --driver $ver said"
  expect_eq "$rc" "$([[ $want == exact* || $want == PTX* ]] && echo 0 || echo 1)" "sm_$arch/$ver: kiln check's exit status"
}
case_ 90 13000 "exact CUBIN" 0
case_ 90 12080 "exact CUBIN" 0
case_ 100 13000 "PTX JIT" 0
case_ 80 13000 built 3
case_ 100 12080 none 0

log "what was built for sm_80 is NVRTC 13's, beside 12.9's records"
expect_eq "$(index_query "$T/run-80-13000" "SELECT DISTINCT toolchain FROM records WHERE target = 'sm_80'")" \
  "nvrtc-$own" "sm_80's toolchain"
expect_eq "$(index_query "$T/run-80-13000" "SELECT count(*) FROM records WHERE toolchain = 'nvrtc-12.9'")" 6 "12.9's records kept"
