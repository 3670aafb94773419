#!/usr/bin/env bash
# The container pre-build step exactly as examples/Dockerfile runs it, without
# a container engine: `cmake --install` of this build into a scratch prefix
# (the build stage), scripts/image-prebuild into PREFIX/cache with the
# Dockerfile's --arch 80,90,100 (the cache seeded with the kernels fixture's
# artifacts for them: compiling is fixture_kernels' part), then the runtime stage: the cache made
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
# Compiling those 33 targets is fixture_kernels' work (the same kiln build,
# run once per ctest run): the image's cache starts with the fixture's
# artifacts for them (cache export | import), so the step's build finds
# every one, and the rest of the step (check, verify, permissions) runs as is.
subset_cache "$(fixture kernels)" "$arch" '*' "$opt/cache"
units=$("$opt/bin/kiln" list --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["units"]))')
start=$(date +%s)
expect_exit 0 timeout 1500 "$src/scripts/image-prebuild" --kiln "$opt/bin/kiln" --cache "$opt/cache" --arch "$arch"
log "image-prebuild took $(($(date +%s) - start)) s"
expect_stdout_contains "kiln build: $((units * 3)) targets, $((units * 3)) cache hits, 0 built" "the build's summary"
expect_stdout_contains "0 missing" "kiln check's verdict"
expect_stderr_contains "is ready: use it with KILN_CACHE_PATH=$opt/cache KILN_OFFLINE=1"
expect_eq "$(index_query "$opt/cache" "SELECT count(*) FROM records")" "$((units * 3))" "records: every unit x 3 archs"

expect_eq "$(find "$opt/cache" -name 'index.sqlite-*' -o -path "$opt/cache/tmp/*" | wc -l)" 0 \
  "write-ahead log and temp files left"
expect_eq "$(find "$opt/cache" \( -type d ! -perm -a+rx \) -o \( -type f ! -perm -a+r \) -o -perm /go+w | wc -l)" 0 \
  "entries not readable by every user, or writable by others"

log "bad input: exit 2"
expect_exit 2 timeout 60 "$src/scripts/image-prebuild" --kiln "$T/no-kiln"
expect_stderr_contains "no kiln command '$T/no-kiln'"
expect_exit 2 timeout 60 "$src/scripts/image-prebuild" --frobnicate
expect_stderr_contains "unknown argument '--frobnicate'"
expect_exit 2 timeout 300 "$src/scripts/image-prebuild" --kiln "$opt/bin/kiln" --cache "$T/bad" --arch 75x
log "a cache an older driver cannot load fails the step (exit 1)"
nvrtc_major=$("$opt/bin/kiln" --version | sed -n 's/^NVRTC \([0-9]*\)\..*/\1/p')
PREBUILD_DRIVER=$((nvrtc_major - 1)).8 expect_exit 1 timeout 300 "$src/scripts/image-prebuild" \
  --kiln "$opt/bin/kiln" --cache "$opt/cache" --arch "$arch"
expect_stdout_contains "$((units * 3)) cache hits, 0 built" "nothing rebuilt"
expect_stderr_contains "MISSING scaled_softmax for sm_90"

# The cluster variant (examples/Dockerfile.cluster): publish, then a second
# image's pre-build fetches everything and compiles nothing.
if command -v nginx >/dev/null && command -v curl >/dev/null; then
  . "$(dirname "$0")/remote_lib.sh"
  url=$(serve dav)
  log "cluster: -- --remote $url --upload, then a fresh pre-build from the remote"
  expect_exit 0 timeout 600 "$src/scripts/image-prebuild" --kiln "$opt/bin/kiln" --cache "$opt/cache" \
    --arch "$arch" -- --remote "$url" --upload
  expect_exit 0 timeout 600 "$src/scripts/image-prebuild" --kiln "$opt/bin/kiln" --cache "$T/second" \
    --arch "$arch" -- --remote "$url"
  expect_stdout_contains "0 cache hits, $((units * 3)) fetched, 0 built, 0 failed"
  expect_eq "$(index_query "$T/second" "SELECT key, digest FROM records ORDER BY key")" \
    "$(index_query "$opt/cache" "SELECT key, digest FROM records ORDER BY key")" "the fetched cache's keys and digests"
else
  log "cluster variant not run: no nginx or curl"
fi

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
# what a container can check at start: the layer's coverage, doctor's offline check
KILN_CACHE_PATH=$opt/cache KILN_CACHE_DIR=$T/home-cache expect_exit 0 timeout 300 "$opt/bin/kiln" check --arch "$arch"
KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90 KILN_CACHE_PATH=$opt/cache KILN_OFFLINE=1 \
  KILN_CACHE_DIR=$T/home-cache expect_exit 0 timeout 300 "$opt/bin/kiln" doctor --json
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "offline"]')" '["PASS"]' "doctor's offline check"
expect_eq "$(tree_sum "$opt/cache")" "$before" "the image's cache is unchanged"
expect_eq "$(index_query "$T/home-cache" "SELECT count(*) FROM records")" 0 "records in the primary cache"
