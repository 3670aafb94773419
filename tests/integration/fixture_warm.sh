#!/usr/bin/env bash
# Fixture "warm": a cache holding scaled_softmax for sm_90 (one compile). Tests
# that only need a warm cache copy it (cp -a) instead of compiling again.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"

fixture_from_seed warm 90 scaled_softmax || grow_fixture warm - 90 scaled_softmax 1
expect_eq "$(index_query "$T/warm" "SELECT unit, target FROM records")" "$(printf 'scaled_softmax\tsm_90')" \
  "the warm fixture's records"
install_fixture warm
