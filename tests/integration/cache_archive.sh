#!/usr/bin/env bash
# kiln cache export / import (docs/cache-format.md, "Archives"): a round trip
# between two caches; --arch/--kernels filters; stdout to stdin; an archive
# with a flipped byte (in a blob, in a header), a truncated one and one with a
# member that does not belong are refused with nothing imported; 8 concurrent
# imports into one cache give one record per key and a clean verify; a key
# already present with another digest is reported, counted (cache stats,
# doctor) and the original kept; an archive of a newer format is a clear error.
. "$(dirname "$0")/lib.sh" "$@"
F=$(fixture full) # 3 softmax units x sm_80, sm_90, compute_90: 9 records

keys() { kiln cache ls --cache "$1" --json >"$T/ls.json" && json "$T/ls.json" 'sorted((r["key"], r["digest"]) for r in d)'; }
records() { index_query "$1" "SELECT count(*) FROM records"; }
# tarpy SRC DST PYTHON: rewrites archive SRC into DST, member by member, with
# PYTHON run on each (m: the TarInfo, data: its bytes; set data, or skip = True),
# and a new kiln-archive.sha256 computed as kiln does (every byte before its
# data, but the blobs' data), so only the change made is wrong in DST.
tarpy() {
  python3 - "$1" "$2" "$3" <<'PY'
import hashlib, io, sys, tarfile
src, dst, code = sys.argv[1:]
h, out = hashlib.sha256(), io.BytesIO()
with tarfile.open(src) as a:
    members = [(m, a.extractfile(m).read()) for m in a.getmembers() if m.name != "kiln-archive.sha256"]
b = tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT)
for m, data in members:
    skip = False
    exec(code)
    if skip:
        continue
    m.size, pos = len(data), out.tell()
    b.addfile(m, io.BytesIO(data))
    raw = out.getvalue()[pos:]
    h.update(raw[:512] + raw[512 + len(data):] if m.name.startswith("cas/") else raw)
s = tarfile.TarInfo("kiln-archive.sha256")
s.size, s.mode = 65, 0o444
h.update(s.tobuf(tarfile.USTAR_FORMAT))
b.addfile(s, io.BytesIO((h.hexdigest() + "\n").encode()))
b.close()
open(dst, "wb").write(out.getvalue())
PY
}
empty_cache() { # CACHE: nothing was imported
  expect_eq "$(records "$1")" 0 "records in $1"
  expect_eq "$(find "$1/cas" -type f | wc -l)" 0 "blobs in $1"
  expect_eq "$(tmp_files "$1")" 0 "temp files left in $1/tmp"
}
copy_cache "$F" "$T/A"

log "round trip"
expect_exit 0 kiln cache export "$T/a.tar" --cache "$T/A"
expect_stdout_contains "9 records, 9 blobs"
expect_eq "$(tar tf "$T/a.tar" | head -1)" kiln-archive.json "the first member (tar can list it)"
expect_exit 0 kiln cache import "$T/a.tar" --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["records"], d["added"], d["present"], len(d["conflicts"])]')" "[9, 9, 0, 0]" "import: records, added, present, conflicts"
expect_exit 0 kiln cache verify --cache "$T/B"
expect_eq "$(keys "$T/B")" "$(keys "$T/A")" "keys and digests after the round trip"
expect_exit 0 kiln cache import "$T/a.tar" --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["added"], d["present"]]')" "[0, 9]" "importing again: added, present"

log "filters, and stdout to stdin"
expect_exit 0 kiln cache export "$T/f.tar" --cache "$T/A" --arch 90 --kernels scaled_softmax --json
expect_eq "$(json "$OUT" 'd["records"]')" 1 "--arch 90 --kernels scaled_softmax"
expect_exit 0 kiln cache export "$T/f.tar" --cache "$T/A" --arch 80,90 --json
expect_eq "$(json "$OUT" 'd["records"]')" 6 "--arch 80,90"
expect_exit 2 kiln cache export "$T/f.tar" --cache "$T/A" --kernels 'nothing*'
expect_stderr_contains "no record in the cache matches"
(kiln cache export - --cache "$T/A" | kiln cache import - --cache "$T/P") >"$OUT" 2>"$ERR" || fail "export - | import -: $(cat "$ERR")"
expect_eq "$(records "$T/P")" 9 "records through a pipe"

log "a flipped byte in a blob: refused, nothing imported"
tarpy "$T/a.tar" "$T/flip.tar" 'if m.name.startswith("cas/") and not skip and "done" not in globals():
    data = data[:100] + bytes([data[100] ^ 1]) + data[101:]; globals()["done"] = 1'
expect_exit 1 kiln cache import "$T/flip.tar" --cache "$T/C1"
expect_stderr_contains "has other bytes"
empty_cache "$T/C1"
log "a flipped byte anywhere else (values that stay valid JSON, padding, the sum): refused"
# flip ARCHIVE WHAT: prints the offset of a byte to flip (python, with the tar's layout)
flipped() { # NAME OFFSET-EXPRESSION: writes $T/NAME.tar with that byte's low bit flipped
  python3 - "$T/a.tar" "$T/$1.tar" "$2" <<'PY'
import sys, tarfile
src, dst, expr = sys.argv[1:]
b = bytearray(open(src, "rb").read())
with tarfile.open(src) as t:
    ms = {m.name: m for m in t.getmembers()}
    man = ms["kiln-archive.json"]
    rec = [m for m in t.getmembers() if m.name.startswith("ac/")][0]
    summ = ms["kiln-archive.sha256"]
def digit_after(m, key):  # a digit of a number in m's JSON: its low bit flipped is still a digit
    d = bytes(b[m.offset_data:m.offset_data + m.size]); i = d.index(key) + len(key)
    while not chr(d[i]).isdigit(): i += 1
    return m.offset_data + i
off = eval(expr)
b[off] ^= 1
open(dst, "wb").write(b)
PY
}
i=0
for where in 'digit_after(man, b"\"created\"")' 'digit_after(rec, b"\"registers\"")' \
  'rec.offset_data + rec.size + 3' 'summ.offset_data + 10' 'len(b) - 1'; do
  i=$((i + 1))
  flipped "flip$i" "$where"
  expect_exit 1 kiln cache import "$T/flip$i.tar" --cache "$T/F$i"
  expect_stderr_contains "flip$i.tar" "flip $i ($where): the error names the archive"
  empty_cache "$T/F$i"
done
log "a flipped byte in a header: refused"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[1024 + 20] ^= 1; open(sys.argv[2], "wb").write(b)' \
  "$T/a.tar" "$T/hdr.tar" # the 3rd block: the first blob's header (the manifest fits one block)
expect_exit 1 kiln cache import "$T/hdr.tar" --cache "$T/C2"
expect_stderr_contains "checksum is wrong"
empty_cache "$T/C2"
log "a truncated archive: refused"
head -c "$(($(stat -c %s "$T/a.tar") / 2))" "$T/a.tar" >"$T/half.tar"
expect_exit 1 kiln cache import "$T/half.tar" --cache "$T/C3"
expect_stderr_contains "is truncated"
empty_cache "$T/C3"
head -c "$(($(stat -c %s "$T/a.tar") - 1024))" "$T/a.tar" >"$T/noend.tar" # no end-of-archive blocks
expect_exit 1 kiln cache import "$T/noend.tar" --cache "$T/C4"
empty_cache "$T/C4"
log "a member that does not belong: refused"
tarpy "$T/a.tar" "$T/evil.tar" 'if m.name.startswith("ac/") and "done" not in globals():
    m.name = "../../etc/" + m.name[3:]; globals()["done"] = 1'
expect_exit 1 kiln cache import "$T/evil.tar" --cache "$T/C5"
expect_stderr_contains "does not belong in a kiln archive"
empty_cache "$T/C5"

log "8 concurrent imports into one cache"
pids=()
for i in 1 2 3 4 5 6 7 8; do
  kiln cache import "$T/a.tar" --cache "$T/D" --json >"$T/imp$i.json" 2>"$T/imp$i.err" &
  pids+=($!)
done
added=0
for i in 1 2 3 4 5 6 7 8; do
  wait "${pids[i - 1]}" || fail "concurrent import $i failed: $(cat "$T/imp$i.err")"
  added=$((added + $(json "$T/imp$i.json" 'd["added"]')))
done
expect_eq "$added" 9 "records added over the 8 imports"
expect_eq "$(records "$T/D")" 9 "records in the cache"
expect_eq "$(index_query "$T/D" "SELECT count(DISTINCT key) FROM records")" 9 "distinct keys"
expect_exit 0 kiln cache verify --cache "$T/D"
expect_eq "$(tmp_files "$T/D")" 0 "temp files left"

log "a key present with another digest: reported, counted, the original kept"
tarpy "$T/a.tar" "$T/conflict.tar" '
import json as J
if m.name.startswith("ac/"):
    r = J.loads(data)
    if r["target"] == "sm_80" and r["unit"] == "scaled_softmax":
        other = [J.loads(x) for mm, x in members if mm.name.startswith("ac/") and J.loads(x)["target"] == "sm_90" and J.loads(x)["unit"] == "scaled_softmax"][0]
        r["digest"], r["size"] = other["digest"], other["size"]
        data = J.dumps(r).encode()'
before=$(keys "$T/B")
expect_exit 1 kiln cache import "$T/conflict.tar" --cache "$T/B" --json
expect_eq "$(json "$OUT" '[d["added"], d["present"], len(d["conflicts"])]')" "[0, 8, 1]" "added, present, conflicts"
expect_eq "$(json "$OUT" 'd["conflicts"][0]["unit"] + " " + d["conflicts"][0]["target"]')" "scaled_softmax sm_80" "the conflict's unit and target"
expect_stderr_contains "CONFLICT scaled_softmax sm_80"
expect_eq "$(keys "$T/B")" "$before" "the cache's records are unchanged"
expect_exit 0 kiln cache stats --cache "$T/B" --json
expect_eq "$(json "$OUT" 'd["conflicts"]')" 1 "cache stats: conflicts"
KILN_CACHE_DIR=$T/B kiln doctor --json >"$OUT" 2>"$ERR" || true
expect_eq "$(json "$OUT" '[c["status"] for c in d["checks"] if c["id"] == "conflicts"]')" '["WARN"]' "kiln doctor's conflicts check"

log "an archive of a newer format: a clear error"
tarpy "$T/a.tar" "$T/v2.tar" 'if m.name == "kiln-archive.json":
    import json as J; x = J.loads(data); x["version"] = 2; data = J.dumps(x).encode()'
expect_exit 2 kiln cache import "$T/v2.tar" --cache "$T/C6"
expect_stderr_contains "format version 2, newer than this kiln's (1)"
empty_cache "$T/C6"
