#!/usr/bin/env bash
# Four `kiln build` processes started at once on one cold cache directory:
# all exit 0 and agree on the key and digest; afterwards `kiln cache verify`
# is clean, the index holds exactly one record per key (and the expected
# number of keys), every record's blob hashes to its name, and tmp/ is empty.
. "$(dirname "$0")/lib.sh" "$@"

N=4
cache=$T/shared/cache
mkdir -m 700 "$T/shared"
# A start gate: every process waits on the same FIFO, so they start together.
mkfifo "$T/gate"
for i in $(seq $N); do
  (read -r _ <"$T/gate" || true; exec timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" build --arch 90 \
    --kernels scaled_softmax --cache "$cache" -j 1 --json >"$T/out.$i" 2>"$T/err.$i") &
  BG_PIDS+=($!)
done
sleep 0.2
exec 3>"$T/gate" # opening the write end releases every reader at once
exec 3>&-

for i in $(seq $N); do
  rc=0
  wait "${BG_PIDS[i - 1]}" || rc=$?
  if ((rc != 0)); then
    fail "build process $i exited $rc"
    sed 's/^/  stderr| /' "$T/err.$i" >&2 || true
    continue
  fi
  expect_eq "$(json "$T/out.$i" '[d["targets"], d["hits"] + d["built"] + d["shared"], d["failed"]]')" \
    "[1, 1, 0]" "process $i: targets, hits + built + shared, failed"
  json "$T/out.$i" 'd["items"][0]["key"] + " " + d["items"][0]["digest"]' >>"$T/keys"
  log "process $i: $(json "$T/out.$i" '"%d built, %d hits" % (d["built"], d["hits"])')"
done
BG_PIDS=()
expect_eq "$(sort -u "$T/keys" | wc -l)" 1 "distinct (key, digest) pairs reported by the $N processes"

expect_exit 0 kiln cache verify --cache "$cache" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "verify: bad blobs and issues"
expect_eq "$(index_query "$cache" "SELECT count(*), count(DISTINCT key) FROM records")" $'1\t1' \
  "records, distinct keys"
expect_eq "$(index_query "$cache" "SELECT key || ' ' || digest FROM records")" "$(sort -u "$T/keys")" \
  "the record is the one the processes reported"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM failures")" 0 "failure records"
expect_eq "$(index_query "$cache" "SELECT count(*) FROM builds")" 1 "compile runs (single flight)"
expect_eq "$(tmp_files "$cache")" 0 "files left in tmp/"
expect_eq "$(find "$cache/quarantine" -mindepth 1 | wc -l)" 0 "files in quarantine/"
digest=$(index_query "$cache" "SELECT digest FROM records")
expect_eq "$(sha256sum <"$(blob_path "$cache" "$digest")" | cut -d' ' -f1)" "$digest" "the blob's hash"
# A further build is a pure hit.
expect_exit 0 kiln build --arch 90 --kernels scaled_softmax --cache "$cache" --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"]]')" "[1, 0]" "hits, built after the race"
