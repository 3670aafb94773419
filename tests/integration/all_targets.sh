#!/usr/bin/env bash
# Every unit for every target (`kiln build --arch all`: each sm_XY NVRTC
# supports from sm_80 up, plus PTX for the lowest and highest virtual arch),
# the quick start's main job, in pieces that ctest runs side by side (a
# single build of all of it takes longer than any test may):
#
#   all_targets.sh KILN FIXTURES part NAME ARCHS GLOB [compile|store]
#       the units GLOB for those of ARCHS (XY, compute_XY, XY+ptx: both)
#       that --arch all names, in one build, into the fixture all_NAME
#       (ARCHS not in --arch all here, e.g. sm_121 on an older NVRTC, are
#       left out, said). compile (the default): always compiled. store: taken
#       from the fixture store when it holds the part with this build's keys
#       (fixture_lib.sh, fixture_from_seed: copied, every blob verified, and
#       brought up to date by `kiln build`, which compiles what a changed
#       source, option or NVRTC changed), else compiled and published there
#   all_targets.sh KILN FIXTURES check NAME...     over the "kernels" fixture
#       (sm_80, sm_90, sm_100, compute_90) and the parts named: every target
#       of --arch all is in exactly one of them for every unit, `kiln check
#       --arch all` passes over them (the parts merged by export | import),
#       `kiln list` names every op, direction and dtype, and no entry point
#       of any unit spills registers or has a stack frame on any target
#       (check_resources.py, as resources.sh does for the softmax fixture)
#
# Normal build only (NVRTC's time is the same under the sanitizers).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"
mode=${3:?usage: all_targets.sh KILN FIXTURES part NAME ARCHS | check NAME...}

# The targets --arch all names here, one per line (what `kiln check` finds
# missing in an empty cache, for one unit).
all_targets() {
  new_cache "$T/empty"
  kiln check --arch all --kernels bias_gelu --cache "$T/empty" --json >"$T/all.json" || true
  json "$T/all.json" '"\n".join(m["target"] for m in d["missing"])'
}

if [[ $mode == part ]]; then
  name=${4:?part NAME} glob=${6:?part NAME ARCHS GLOB} how=${7:-compile}
  [[ $how == compile || $how == store ]] || die "part $name: '$how' is neither compile nor store"
  rm -rf "${FIXTURES:?}/all_$name" # a part built on another NVRTC must not count here
  wanted=$(all_targets)
  archs=()
  for a in ${5//,/ }; do
    ts=$a
    [[ $a == [0-9]*+ptx ]] && ts="sm_${a%+ptx} compute_${a%+ptx}" # both, in one build
    [[ $a == [0-9]* && $a != *+ptx ]] && ts=sm_$a
    for t in $ts; do
      if grep -qx "$t" <<<"$wanted"; then archs+=("$t"); else log "$t: not in --arch all here, left out"; fi
    done
  done
  ((${#archs[@]})) || skip "none of $5 is in --arch all here"
  list=$(IFS=,; echo "${archs[*]}")
  pairs=$(plan_pairs "$list" "$glob") || exit 1
  store=
  [[ $how == compile ]] || store=${IT_FIXTURE_STORE:-} # the store is the only seed, and where it goes
  IT_FIXTURE_SEED=$store IT_FIXTURE_STORE=$store make_fixture "all_$name" - "$list" "$glob" "$pairs"
  exit 0
fi
[[ $mode == check ]] || die "unknown mode '$mode'"

expect_exit 0 kiln list --json
cp "$OUT" "$T/list.json"
units=$(json "$T/list.json" 'len(d["units"])')

# every family of the kernel library is registered, with both directions and all three dtypes
python3 - "$T/list.json" <<'PY' || fail "kiln list misses an op, direction or dtype (see above)"
import json, sys
units = {u["name"]: u for u in json.load(open(sys.argv[1]))["units"]}
want = ["scaled_softmax", "scaled_masked_softmax", "scaled_upper_triang_masked_softmax",
        "layer_norm", "rms_norm", "embedding", "bias_gelu", "bias_swiglu", "bias_dropout_add",
        "rope", "cross_entropy"]
bad = [f"unit {n} is not registered" for n in want if n not in units]
for n, u in units.items():
    dirs = {e["direction"] for e in u["entries"]}
    dts = {e["dtype"] for e in u["entries"]} & {"f32", "f16", "bf16"}
    if not {"fwd", "bwd"} <= dirs:
        bad.append(f"{n}: directions {sorted(dirs)}, expected fwd and bwd")
    if dts != {"f32", "f16", "bf16"}:
        bad.append(f"{n}: dtypes {sorted(dts)}, expected f32, f16, bf16")
for m in bad:
    print("  " + m, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# Private copies of the kernels fixture and of every part (index_query writes beside an index).
caches=()
parts=("${@:4}")
for d in "$(fixture kernels)" "${parts[@]/#/$FIXTURES/all_}"; do
  [[ -f $d/index.sqlite ]] || { log "part ${d##*/all_}: none (its targets are not in --arch all here)"; continue; }
  copy_cache "$d" "$T/c/${d##*/}"
  caches+=("$T/c/${d##*/}")
done
all_targets >"$T/targets"
targets=$(wc -l <"$T/targets")
cols="unit, target, kind, registers, spill_stores, spill_loads, shared_bytes, stack_bytes, log_digest"
in_list=$(sed "s/.*/'&'/" "$T/targets" | paste -sd,)
: >"$T/pairs"
for c in "${caches[@]}"; do
  index_query "$c" "SELECT $cols FROM records WHERE target IN ($in_list) ORDER BY unit, target" >"$c.tsv"
  cut -f1,2 "$c.tsv" >>"$T/pairs"
  python3 "$IT_SOURCE_DIR/tests/integration/check_resources.py" "$c" "$c.tsv" "$T/list.json" ||
    fail "resource usage check failed in ${c##*/} (see above)"
  index_query "$c" "SELECT unit, max(registers) FROM records WHERE kind = 'cubin' GROUP BY unit" |
    sed "s/^/  max registers (${c##*/}): /"
done
expect_eq "$(sort "$T/pairs" | uniq -d | wc -l)" 0 "(unit, target) pairs held twice"
expect_eq "$(sort -u "$T/pairs" | wc -l)" $((units * targets)) \
  "(unit, target) pairs of --arch all held ($units units x $targets targets)"
for t in $(cat "$T/targets"); do
  grep -q "	$t\$" "$T/pairs" || fail "$t (of --arch all) is in no part: add it to KILN_ALL_TARGETS in tests/integration/CMakeLists.txt"
done
# The parts merged into one cache (kiln cache export | import: every blob
# verified on the way), then `kiln check --arch all` over it and the kernels
# fixture (it takes at most 16 layers).
new_cache "$T/merged"
for c in "${caches[@]:1}"; do
  kiln cache export - --cache "$c" 2>"$ERR" | kiln cache import - --cache "$T/merged" >"$OUT" 2>>"$ERR" ||
    fail "merging ${c##*/}: $(tail -3 "$ERR")"
done
expect_exit 0 kiln check --arch all --cache "$T/merged" --cache "${caches[0]}"
log "$units units x $targets targets: every one built, none spills"
