#!/usr/bin/env bash
# Every unit for every target (`kiln build --arch all`: each sm_XY NVRTC
# supports from sm_80 up, plus PTX for the lowest and highest virtual arch):
# everything builds, `kiln list` names every op, direction and dtype, and no
# entry point of any unit spills registers or has a stack frame on any target
# (check_resources.py, as resources.sh does for the softmax fixture). This is
# the quick start's main job; it runs in the normal build only (NVRTC's time
# is the same under the sanitizers).
. "$(dirname "$0")/lib.sh" "$@"

cache=$T/cache
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

IT_TIMEOUT=2000 expect_exit 0 kiln build --arch all --cache "$cache" --json
cp "$OUT" "$T/build.json"
targets=$(json "$T/build.json" 'd["targets"]')
expect_eq "$(json "$T/build.json" '[d["failed"], d["built"] + d["hits"] == d["targets"]]')" "[0, true]" \
  "build --arch all: failures, every target accounted for"
log "$units units, $targets unit x target builds in $(json "$T/build.json" 'round(d["wall_ms"] / 1000, 1)') s"

cols="unit, target, kind, registers, spill_stores, spill_loads, shared_bytes, stack_bytes, log_digest"
index_query "$cache" "SELECT $cols FROM records ORDER BY unit, target" >"$T/records.tsv"
expect_eq "$(wc -l <"$T/records.tsv")" "$targets" "records"
per_unit=$(index_query "$cache" "SELECT count(DISTINCT target) FROM records GROUP BY unit" | sort -u)
expect_eq "$per_unit" "$((targets / units))" "every unit has every target"
# the largest register count per unit, for the log
index_query "$cache" "SELECT unit, max(registers) FROM records WHERE kind = 'cubin' GROUP BY unit" |
  sed 's/^/  max registers: /'
python3 "$IT_SOURCE_DIR/tests/integration/check_resources.py" "$cache" "$T/records.tsv" "$T/list.json" ||
  fail "resource usage check failed (see above)"
