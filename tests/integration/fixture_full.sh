#!/usr/bin/env bash
# Fixture "full": the three softmax units for sm_80 and sm_90 (CUBIN) plus
# compute_90 (PTX): 3 units x 3 targets. The resources, artifacts, cache and
# loader tests read it. (Every unit on every target: all_targets.sh.)
. "$(dirname "$0")/lib.sh" "$@"

mkdir -p "$FIXTURES"
dest=$FIXTURES/full
staging=$T/full
expect_exit 0 kiln build --arch 80,90+ptx --kernels 'scaled_*' --cache "$staging" --json
cp "$OUT" "$T/build.json"
expect_eq "$(json "$T/build.json" '[d["targets"], d["built"], d["failed"]]')" "[9, 9, 0]" "fixture build"
((FAILURES == 0)) || die "could not build the full fixture"
rm -rf "$dest"
cp -a "$staging" "$dest"
log "fixture cache at $dest ($(json "$T/build.json" 'round(d["wall_ms"] / 1000, 1)') s)"
