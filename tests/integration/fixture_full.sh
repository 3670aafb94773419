#!/usr/bin/env bash
# Fixture "full": the three softmax units for sm_80 and sm_90 (CUBIN) plus
# compute_90 (PTX): 3 units x 3 targets, grown from "warm" (8 compiles). The
# resources, artifacts, cache and loader tests read it.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"

fixture_from_seed full 80,90+ptx 'scaled_*' || grow_fixture full warm 80,90+ptx 'scaled_*' 9
expect_eq "$(index_query "$T/full" "SELECT count(*) FROM records")" 9 "the full fixture's records"
install_fixture full
