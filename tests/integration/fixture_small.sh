#!/usr/bin/env bash
# Fixture "small": a cache holding bias_gelu for sm_90, the smallest unit (6
# entry points: a compile and a known-answer test take about a second). For
# tests that copy a cache many times and rebuild it in many of them
# (file_states).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"

fixture_from_seed small 90 bias_gelu || grow_fixture small - 90 bias_gelu 1
expect_eq "$(index_query "$T/small" "SELECT unit, target FROM records")" "$(printf 'bias_gelu\tsm_90')" \
  "the small fixture's records"
install_fixture small
