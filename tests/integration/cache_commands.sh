#!/usr/bin/env bash
# kiln cache stats / ls / rm / gc / verify on copies of the full fixture
# (9 records), and read-only layers: a cache given through KILN_CACHE_PATH is
# listed as layer 1, a build over it with an empty primary is all hits, and
# nothing in the layer changes (not even when one of its blobs is bad).
. "$(dirname "$0")/lib.sh" "$@"

full=$(fixture full)
plan=(build --arch 80,90+ptx --kernels 'scaled_*' --json) # the full fixture's plan: 3 units x 3 targets

# cas_bytes DIR: bytes of every file under DIR/cas
cas_bytes() { find "$1/cas" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }

log "stats"
c=$T/stats
copy_cache "$full" "$c"
expect_exit 0 kiln cache stats --json --cache "$c"
cp "$OUT" "$T/stats.json"
blobs=$(index_query "$c" "SELECT count(*) FROM (SELECT digest FROM records UNION SELECT log_digest FROM records WHERE log_digest != '')")
expect_eq "$(json "$T/stats.json" '[d["records"], d["failures"], d["quarantined"], d["layers"], d["layer_records"]]')" \
  "[9, 0, 0, 0, 0]" "stats: records, failures, quarantined, layers, layer_records"
expect_eq "$(json "$T/stats.json" 'd["blobs"]')" "$blobs" "stats: blobs (artifacts and logs)"
expect_eq "$(json "$T/stats.json" 'd["blob_bytes"]')" "$(cas_bytes "$c")" "stats: blob_bytes"
expect_eq "$(json "$T/stats.json" 'd["cache"]')" "$c" "stats: cache"
expect_exit 0 kiln cache stats --cache "$c"
expect_stdout_contains "records:      9"

log "ls"
expect_exit 0 kiln cache ls --json --cache "$c"
cp "$OUT" "$T/ls.json"
expect_eq "$(json "$T/ls.json" 'len(d)')" 9 "ls: records"
expect_eq "$(json "$T/ls.json" 'sorted({r["layer"] for r in d})')" "[0]" "ls: layers"
expect_eq "$(json "$T/ls.json" 'sorted(r["key"] for r in d)')" \
  "$(index_query "$c" "SELECT key FROM records ORDER BY key" | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))')" \
  "ls: the keys of the index"
expect_exit 0 kiln cache ls --cache "$c"
expect_stdout_contains "UNIT"
expect_eq "$(grep -c '^scaled_' "$OUT")" 9 "ls: lines of records"

log "rm by key, by glob, everything"
key=$(index_query "$c" "SELECT key FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_80'")
gone=$(index_query "$c" "SELECT digest FROM records WHERE key = '$key'")
expect_exit 0 kiln cache rm "$key" --json --cache "$c"
expect_eq "$(json "$OUT" 'd["removed"]')" 1 "rm KEY: removed"
expect_eq "$(index_query "$c" "SELECT count(*) FROM records")" 8 "records after rm KEY"
[[ -e $(blob_path "$c" "$gone") ]] && fail "rm KEY left the record's blob"
expect_exit 0 kiln cache rm '*masked*' --cache "$c"
expect_stdout_contains "removed 6 records"
expect_eq "$(index_query "$c" "SELECT group_concat(target) FROM (SELECT target FROM records ORDER BY target)")" \
  "compute_90,sm_90" "records left after rm '*masked*'"
expect_exit 0 kiln cache rm 'scaled_*' --json --cache "$c"
expect_eq "$(json "$OUT" 'd["removed"]')" 2 "rm 'scaled_*': removed"
expect_exit 0 kiln cache stats --json --cache "$c"
expect_eq "$(json "$OUT" '[d["records"], d["blobs"], d["blob_bytes"]]')" "[0, 0, 0]" \
  "stats after rm: records, blobs, blob_bytes"
c=$T/rm-all
copy_cache "$full" "$c"
expect_exit 0 kiln cache rm --all --json --cache "$c"
expect_eq "$(json "$OUT" 'd["removed"]')" 9 "rm --all: removed"
expect_eq "$(find "$c/cas" -type f | wc -l)" 0 "blobs after rm --all"

log "gc --max-size 0 evicts everything"
c=$T/gc0
copy_cache "$full" "$c"
total=$(cas_bytes "$c")
expect_exit 0 kiln cache gc --max-size 0 --json --cache "$c"
cp "$OUT" "$T/gc0.json"
expect_eq "$(json "$T/gc0.json" '[d["removed_records"], d["remaining_bytes"], d["pinned_skipped"]]')" "[9, 0, 0]" \
  "gc 0: removed_records, remaining_bytes, pinned_skipped"
expect_eq "$(json "$T/gc0.json" 'd["freed_bytes"]')" "$total" "gc 0: freed_bytes"
expect_eq "$(find "$c/cas" -type f | wc -l)" 0 "blobs after gc 0"
expect_exit 0 kiln cache verify --cache "$c"
expect_stdout_contains "0 bad"

log "gc evicts the least recently used first, never what a live process pinned"
c=$T/gc-lru
copy_cache "$full" "$c"
total=$(cas_bytes "$c")
old=$(index_query "$c" "SELECT key FROM records WHERE unit = 'scaled_masked_softmax' AND target = 'sm_80'")
old_size=$(index_query "$c" "SELECT size FROM records WHERE key = '$old'")
index_query "$c" "UPDATE records SET last_used = last_used - 86400 WHERE key = '$old'" >/dev/null
expect_exit 0 kiln cache gc --max-size $((total - old_size)) --json --cache "$c"
expect_eq "$(json "$OUT" 'd["removed_records"]')" 1 "gc to just under the total: removed_records"
expect_eq "$(index_query "$c" "SELECT count(*) FROM records WHERE key = '$old'")" 0 "the oldest record is gone"
expect_eq "$(index_query "$c" "SELECT count(*) FROM records")" 8 "records after the LRU gc"
c=$T/gc-pin
copy_cache "$full" "$c"
pinned=$(index_query "$c" "SELECT key FROM records WHERE unit = 'scaled_softmax' AND target = 'sm_90'")
host=$(python3 -c 'import socket; print(socket.gethostname())')
sleep 300 &
holder=$!
BG_PIDS+=("$holder")
index_query "$c" "INSERT INTO pins(key, host, pid, created) VALUES('$pinned', '$host', $holder, strftime('%s'))" >/dev/null
expect_exit 0 kiln cache gc --max-size 0 --json --cache "$c"
expect_eq "$(json "$OUT" '[d["removed_records"], d["pinned_skipped"]]')" "[8, 1]" \
  "gc 0 with a live pin: removed_records, pinned_skipped"
expect_eq "$(index_query "$c" "SELECT key FROM records")" "$pinned" "the record left is the pinned one"
kill "$holder" && wait "$holder" 2>/dev/null || true
expect_exit 0 kiln cache gc --max-size 0 --json --cache "$c"
expect_eq "$(json "$OUT" '[d["removed_records"], d["pinned_skipped"]]')" "[1, 0]" \
  "gc 0 once the pinning process is gone: removed_records, pinned_skipped"

log "gc and rm leave young unreferenced blobs alone (puts whose record is on its way)"
# kiln_cache_put writes the blob, then the record: in between, the blob is
# unreferenced. docs/cache-format.md: such a blob is removed by gc "after 10
# minutes" (ORPHAN_GRACE_S), so a gc or rm racing a build cannot delete it.
# orphan DIR TEXT: a well-formed blob no record references; prints its path.
orphan() {
  local d
  d=$(printf '%s' "$2" | sha256sum | cut -d' ' -f1)
  mkdir -p -m 700 "$1/cas/${d:0:2}"
  printf '%s' "$2" >"$1/cas/${d:0:2}/${d:2}"
  chmod 0444 "$1/cas/${d:0:2}/${d:2}"
  printf '%s\n' "$1/cas/${d:0:2}/${d:2}"
}
c=$T/orphans
copy_cache "$full" "$c"
young=$(orphan "$c" "a blob whose record is on its way")
old=$(orphan "$c" "a blob left by a crash an hour ago")
touch -d '-1 hour' "$old"
expect_exit 0 kiln cache gc --max-size 100G --json --cache "$c"
expect_eq "$(json "$OUT" 'd["removed_records"]')" 0 "gc under the limit: removed_records"
[[ -e $old ]] && fail "gc kept an unreferenced blob an hour old"
[[ -e $young ]] || fail "gc deleted an unreferenced blob a second old (an in-flight put's blob)"
old=$(orphan "$c" "another blob left by a crash an hour ago")
touch -d '-1 hour' "$old"
young=$(orphan "$c" "another blob whose record is on its way")
expect_exit 0 kiln cache rm "$(index_query "$c" "SELECT key FROM records LIMIT 1")" --cache "$c"
[[ -e $young ]] || fail "rm KEY deleted an unrelated unreferenced blob a second old (an in-flight put's blob)"

log "read-only layers"
layer=$T/layer
copy_cache "$full" "$layer"
copy_cache "$(fixture warm)" "$T/layer2"
tree_sum "$layer" >"$T/layer.before"
tree_sum "$T/layer2" >"$T/layer2.before"
primary=$T/primary
new_cache "$primary"
export KILN_CACHE_PATH=$layer:$T/layer2
expect_exit 0 kiln cache ls --json --cache "$primary"
cp "$OUT" "$T/ls-layers.json"
expect_eq "$(json "$T/ls-layers.json" '[sum(r["layer"] == 1 for r in d), sum(r["layer"] == 2 for r in d), len(d)]')" \
  "[9, 1, 10]" "ls over two layers: records of layer 1, of layer 2, in all"
expect_exit 0 kiln cache ls --cache "$primary"
grep -Eq '^scaled_softmax +sm_90 +cubin .* 1$' "$OUT" || fail "text ls does not show scaled_softmax sm_90 in layer 1"
expect_exit 0 kiln cache stats --json --cache "$primary"
expect_eq "$(json "$OUT" '[d["records"], d["layers"], d["layer_records"]]')" "[0, 2, 10]" \
  "stats with layers: records, layers, layer_records"
expect_exit 0 kiln "${plan[@]}" --cache "$primary"
cp "$OUT" "$T/layer-build.json"
expect_eq "$(json "$T/layer-build.json" '[d["targets"], d["hits"], d["built"], d["failed"]]')" "[9, 9, 0, 0]" \
  "build over the layers: targets, hits, built, failed"
expect_eq "$(json "$T/layer-build.json" 'sorted({i["layer"] for i in d["items"]})')" "[1]" "layers the hits came from"
expect_eq "$(index_query "$primary" "SELECT count(*) FROM records")" 0 "records written to the primary"
expect_exit 0 kiln cache verify --cache "$primary"
expect_exit 0 kiln cache gc --max-size 0 --cache "$primary"
expect_exit 0 kiln cache rm --all --cache "$primary"
diff -u "$T/layer.before" <(tree_sum "$layer") >&2 || fail "the read-only layer changed"
diff -u "$T/layer2.before" <(tree_sum "$T/layer2") >&2 || fail "the second read-only layer changed"

log "a bad blob in a read-only layer is a miss, and the layer is left alone"
bad_layer=$T/bad-layer
copy_cache "$full" "$bad_layer"
digest=$(index_query "$bad_layer" "SELECT digest FROM records WHERE unit = 'scaled_softmax' AND target = 'compute_90'")
blob=$(blob_path "$bad_layer" "$digest")
chmod u+w "$blob" && printf 'X' | dd of="$blob" bs=1 seek=100 conv=notrunc status=none && chmod 0444 "$blob"
tree_sum "$bad_layer" >"$T/bad-layer.before"
new_cache "$T/primary2"
KILN_CACHE_PATH=$bad_layer expect_exit 0 kiln build --arch compute_90 --kernels scaled_softmax --json --cache "$T/primary2"
expect_eq "$(json "$OUT" '[d["hits"], d["built"], d["failed"]]')" "[0, 1, 0]" "build over a bad layer blob: hits, built, failed"
expect_eq "$(json "$OUT" 'd["items"][0]["digest"]')" "$digest" "the rebuilt PTX's digest"
diff -u "$T/bad-layer.before" <(tree_sum "$bad_layer") >&2 || fail "the read-only layer with a bad blob changed"
unset KILN_CACHE_PATH
