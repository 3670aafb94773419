#!/usr/bin/env bash
# Fixture "kernels": every unit for sm_80, sm_90 and sm_100 (CUBIN) plus
# compute_90 (PTX), grown from "full" (35 compiles). Read as a layer
# (KILN_CACHE_PATH) by the tests that run kernels without being about
# building them: the gpu tests on the fake driver (sm_86 loads the sm_80
# CUBIN), the Python tests (the fake sm_90), and exported from by
# image_prebuild (80,90,100) and gpu_bundle (90,100,compute_90).
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"

units=$(kiln list --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["units"]))')
fixture_from_seed kernels 80,90,100,compute_90 '*' ||
  grow_fixture kernels full 80,90,100,compute_90 '*' $((units * 4))
expect_eq "$(index_query "$T/kernels" "SELECT count(*) FROM records")" $((units * 4)) \
  "the kernels fixture's records"
install_fixture kernels layer
