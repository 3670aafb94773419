#!/usr/bin/env bash
# A fixture cache (tests/README.md, "Fixture caches"), made once per ctest run:
#
#   fixture.sh KILN FIXTURES NAME FROM ARCH GLOB [layer]
#
# $FIXTURES/NAME holds exactly the units GLOB for the targets ARCH: a copy of
# the fixture FROM (- for none) grown by `kiln build --arch ARCH --kernels
# GLOB`, so only what FROM lacks is compiled; or, with IT_FIXTURE_SEED, a
# seed's NAME copied, verified and brought up to date (fixture_lib.sh). One
# that was compiled or changed, in part or whole, is published in IT_FIXTURE_STORE, when
# set, for the next run. "layer": it is read as a read-only layer
# (KILN_CACHE_PATH), so its index's empty -wal and -shm files are removed.
. "$(dirname "$0")/lib.sh" "$@"
. "$(dirname "$0")/fixture_lib.sh"
(($# >= 6)) || die "usage: fixture.sh KILN FIXTURES NAME FROM ARCH GLOB [layer]"
name=$3 from=$4 arch=$5 glob=$6 how=${7:-}

pairs=$(plan_pairs "$arch" "$glob") || exit 1

make_fixture "$name" "$from" "$arch" "$glob" "$pairs" $how
