#!/usr/bin/env bash
# Fixture "warm": a cache holding scaled_softmax for sm_90 (one compile). Tests
# that only need a warm cache copy it (cp -a) instead of compiling again.
. "$(dirname "$0")/lib.sh" "$@"

mkdir -p "$FIXTURES"
dest=$FIXTURES/warm
staging=$T/warm
expect_exit 0 kiln build --arch 90 --kernels scaled_softmax --cache "$staging" --json
expect_eq "$(json "$OUT" '[d["targets"], d["built"], d["failed"]]')" "[1, 1, 0]" "fixture build"
((FAILURES == 0)) || die "could not build the warm fixture"
rm -rf "$dest"
cp -a "$staging" "$dest"
log "fixture cache at $dest"
