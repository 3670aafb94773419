#!/usr/bin/env bash
# No register spills and no local-memory stack for any softmax entry point:
# from the full fixture (3 units x sm_80, sm_90 CUBIN + compute_90 PTX), every
# CUBIN record has spill_stores == spill_loads == stack_bytes == 0 and
# registers > 0; every PTX record has -1 for every resource. The record's
# figures are cross-checked against ptxas's own lines in the stored build log:
# one per entry point that `kiln list` names, each with no stack and no spills.
. "$(dirname "$0")/lib.sh" "$@"

cache=$T/cache
copy_cache "$(fixture full)" "$cache"
expect_exit 0 kiln list --json
cp "$OUT" "$T/list.json"

cols="unit, target, kind, registers, spill_stores, spill_loads, shared_bytes, stack_bytes, log_digest"
index_query "$cache" "SELECT $cols FROM records ORDER BY unit, target" >"$T/records.tsv"
sed 's/^/  /' "$T/records.tsv" | cut -f1-8
expect_eq "$(wc -l <"$T/records.tsv")" 9 "records in the full fixture"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM records WHERE kind = 'cubin'")" 6 "CUBIN records"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM records WHERE kind = 'ptx'")" 3 "PTX records"

python3 "$IT_SOURCE_DIR/tests/integration/check_resources.py" "$cache" "$T/records.tsv" "$T/list.json" ||
  fail "resource usage check failed (see above)"
