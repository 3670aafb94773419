#!/usr/bin/env bash
# The container pre-build step exactly as examples/Dockerfile runs it, without
# a container engine: `cmake --install` of this build into a scratch prefix
# (the build stage), scripts/image-prebuild into PREFIX/cache with the
# Dockerfile's --arch 80,90,100, then the runtime stage: the cache made
# read-only and used alone, as KILN_CACHE_PATH with KILN_OFFLINE=1, by the
# loader on the fake driver with GPUs sm_80, sm_86, sm_90 and sm_100: every
# unit loads on every GPU, nothing is built, and the cache is unchanged.
. "$(dirname "$0")/lib.sh" "$@"

[[ -f ${IT_FAKECUDA:-} ]] || skip "the fake libcuda was not built"
src=${IT_SOURCE_DIR:?}
opt=$T/opt/kiln
arch=$(sed -n 's/.*image-prebuild .*--arch \([0-9,]*\).*/\1/p; s/^ *--arch \([0-9,]*\).*/\1/p' \
  "$src/examples/Dockerfile" | head -1)
expect_eq "$arch" 80,90,100 "the Dockerfile's --arch"

log "the build stage: install, then scripts/image-prebuild --arch $arch"
timeout 300 cmake --install "$(dirname "$KILN_BIN")" --prefix "$opt" >"$T/install.log" 2>&1 ||
  die "cmake --install failed: $(tail -5 "$T/install.log")"
start=$(date +%s)
expect_exit 0 timeout 1500 "$src/scripts/image-prebuild" --kiln "$opt/bin/kiln" --cache "$opt/cache" --arch "$arch"
log "image-prebuild took $(($(date +%s) - start)) s"
expect_stdout_contains "kiln build:" "the build's summary"
expect_stdout_contains "0 missing" "kiln check's verdict"
expect_stderr_contains "is ready: use it with KILN_CACHE_PATH=$opt/cache KILN_OFFLINE=1"
"$opt/bin/kiln" list --json >"$T/units.json" || die "kiln list failed"
units=$(json "$T/units.json" 'len(d["units"])')
expect_eq "$(index_query "$opt/cache" "SELECT count(*) FROM records")" "$((units * 3))" "records: every unit x 3 archs"

log "the runtime stage: the cache read-only, KILN_OFFLINE=1, four GPUs"
chmod -R a-w "$opt/cache"
at_exit "chmod -R u+w '$opt/cache'"
before=$(tree_sum "$opt/cache")
KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=80,86,90,100 KILN_CACHE_PATH=$opt/cache \
  KILN_OFFLINE=1 KILN_CACHE_DIR=$T/home-cache expect_exit 0 timeout 600 "$opt/bin/kiln" warmup --json
expect_eq "$(json "$OUT" 'len(d["devices"])')" 4 "devices warmed"
expect_eq "$(json "$OUT" 'sorted({len(v["units"]) for v in d["devices"]})')" "[$units]" "units loaded per device"
expect_eq "$(json "$OUT" 'sum(u["source"] == "built" for v in d["devices"] for u in v["units"])')" 0 "units built"
expect_eq "$(json "$OUT" 'sorted({u["source"] for v in d["devices"] for u in v["units"]})')" \
  '["compatible CUBIN", "exact CUBIN"]' "how they loaded (sm_86: the sm_80 CUBIN)"
expect_eq "$(json "$OUT" 'sorted({u["layer"] for v in d["devices"] for u in v["units"]})')" "[1]" "the layer they came from"
expect_eq "$(tree_sum "$opt/cache")" "$before" "the image's cache is unchanged"
