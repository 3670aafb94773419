#!/usr/bin/env bash
# fixture_lib.sh's seeding (fixture_from_seed), on which the fixture setup
# tests and all_targets' softmax parts rely to take a fixture from the store
# instead of compiling it: a seed whose records are this build's serves with
# nothing compiled; one holding a record the plan does not name serves with
# that record removed; one missing the plan's record compiles just that; one
# with a damaged blob does not serve (its caller then compiles), nor does a
# name the seed folder lacks. The seeds are copies of the small and warm
# fixtures: one compile of bias_gelu for sm_90 in all.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"

seed=$T/seed
records() { index_query "$T/$1" "SELECT unit || ' ' || target FROM records ORDER BY unit, target"; }
# serves NAME CHANGED: the seed NAME serves the plan bias_gelu sm_90 (1
# target), having compiled or removed CHANGED records, and then holds just
# bias_gelu sm_90
serves() {
  SEED_CHANGED=
  if ! IT_FIXTURE_SEED=$seed fixture_from_seed "$1" 90 bias_gelu 1; then
    fail "the seed $1 did not serve"
    return
  fi
  expect_eq "$SEED_CHANGED" "$2" "records the seed $1 compiled or removed"
  expect_eq "$(records "$1")" "bias_gelu sm_90" "the seed $1's records once served"
}

copy_cache "$(fixture small)" "$seed/current"
serves current 0

copy_cache "$(fixture small)" "$seed/stale" # + the warm fixture's scaled_softmax record
kiln cache export - --cache "$(fixture warm)" 2>"$ERR" | kiln cache import - --cache "$seed/stale" >"$OUT" 2>>"$ERR" ||
  die "adding the warm fixture's record: $(tail -3 "$ERR")"
expect_eq "$(index_query "$seed/stale" "SELECT count(*) FROM records")" 2 "records in the stale seed"
serves stale 1

copy_cache "$(fixture warm)" "$seed/missing" # scaled_softmax only: bias_gelu compiled, the rest stale
serves missing 2

copy_cache "$(fixture small)" "$seed/damaged"
blob=$(find "$seed/damaged/cas" -type f | head -1)
[[ -n $blob ]] || die "the small fixture has no blob under cas/"
printf 'kiln' | dd of="$blob" bs=1 seek=64 conv=notrunc status=none
if IT_FIXTURE_SEED=$seed fixture_from_seed damaged 90 bias_gelu 1; then
  fail "a seed with a damaged blob served"
fi
[[ ! -e $T/damaged ]] || fail "the damaged seed's copy was left in place"
if IT_FIXTURE_SEED=$seed fixture_from_seed absent 90 bias_gelu 1; then
  fail "a name the seed folder lacks served"
fi
log "seeds: current, stale and missing served as they should; damaged and absent did not"
