#!/usr/bin/env bash
# A cold build gives the same key and the same artifact bytes for every
# target as the full fixture's build of the same plan, made earlier by other
# processes (fixture_warm, fixture_full) in another directory, working
# directory, time zone and -j; only the cache path differs. The key is also
# recomputed here from the documented formula. (Comparing with the fixture,
# not with a second cold build, saves compiling the plan twice.)
. "$(dirname "$0")/lib.sh" "$@"

args=(--arch 90+ptx --kernels scaled_softmax --json)

# a: the fixture's records, read back by a build that finds them all (hits)
copy_cache "$(fixture full)" "$T/a/cache"
cd "$T/a"
TZ=UTC expect_exit 0 kiln build "${args[@]}" --cache "$T/a/cache" -j 2
((RC == 0)) || die "the build over the fixture failed"
cp "$OUT" "$T/a.json"
# b: a cold build
mkdir -p "$T/b/elsewhere"
cd "$T/b"
TZ=Asia/Kolkata KILN_CACHE_DIR=$T/b/elsewhere/cache expect_exit 0 kiln build "${args[@]}" -j 1
((RC == 0)) || die "the cold build failed"
cp "$OUT" "$T/b.json"
cd "$T"

expect_eq "$(json "$T/a.json" '[d["targets"], d["hits"], d["failed"]]')" "[2, 2, 0]" "the fixture's targets (hits)"
expect_eq "$(json "$T/b.json" '[d["targets"], d["built"], d["failed"]]')" "[2, 2, 0]" "the cold build"
a_dir=$(json "$T/a.json" 'd["cache"]')
b_dir=$(json "$T/b.json" 'd["cache"]')
[[ $a_dir != "$b_dir" ]] || fail "both builds report the same cache path $a_dir"

expect_exit 0 kiln list --json
cp "$OUT" "$T/list.json"
expect_exit 0 kiln --version
nvrtc=$(sed -n 's/^NVRTC \([0-9]*\.[0-9]*\).*/\1/p' "$OUT")
[[ -n $nvrtc ]] || fail "kiln --version names no NVRTC version"

python3 - "$T/a.json" "$T/b.json" "$T/list.json" "nvrtc-$nvrtc" "${IT_SOURCE_DIR:-}" <<'PY' || fail "builds are not reproducible (see above)"
import hashlib, json, os, sys
a, b, units = (json.load(open(p)) for p in sys.argv[1:4])
toolchain, src = sys.argv[4], sys.argv[5]
units = {u["name"]: u for u in units["units"]}
bad = []
def by_target(s):
    return {(i["unit"], i["target"]): i for i in s["items"]}
ia, ib = by_target(a), by_target(b)
if set(ia) != set(ib) or len(ia) != 2:
    bad.append(f"the builds cover different targets: {sorted(ia)} vs {sorted(ib)}")
for t, x in sorted(ia.items()):
    y = ib.get(t)
    if y is None:
        continue
    for f in ("key", "digest", "size", "kind", "toolchain", "options"):
        if x[f] != y[f]:
            bad.append(f"{t}: {f} differs: {x[f]} vs {y[f]}")
    pa = os.path.join(a["cache"], "cas", x["digest"][:2], x["digest"][2:])
    pb = os.path.join(b["cache"], "cas", y["digest"][:2], y["digest"][2:])
    if pa == pb:
        bad.append(f"{t}: both blobs at {pa}")
    da, db = open(pa, "rb").read(), open(pb, "rb").read()
    if da != db:
        bad.append(f"{t}: blob bytes differ")
    if hashlib.sha256(da).hexdigest() != x["digest"] or len(da) != x["size"]:
        bad.append(f"{t}: blob {pa} does not hash to the record's digest/size")
    if x["toolchain"] != toolchain:
        bad.append(f"{t}: toolchain {x['toolchain']}, kiln --version says {toolchain}")
    # key = SHA-256("kiln-key-v1" \0 unit \0 unit_digest \0 target \0 options \0 toolchain)
    u = units[x["unit"]]
    if src:
        h = hashlib.sha256()
        for p in sorted(u["files"]):
            data = open(os.path.join(src, "kernels", p), "rb").read()
            h.update(p.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
        if h.hexdigest() != u["digest"]:
            bad.append(f"{x['unit']}: unit digest {u['digest']} is not that of its files in {src}/kernels")
    parts = ["kiln-key-v1", x["unit"], u["digest"], x["target"], x["options"], x["toolchain"]]
    want = hashlib.sha256(b"\0".join(p.encode() for p in parts)).hexdigest()
    if x["key"] != want:
        bad.append(f"{t}: key {x['key']} is not the documented formula's {want}")
for m in bad:
    print("  " + m, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
log "digests: $(json "$T/a.json" '", ".join(i["target"] + "=" + i["digest"][:12] for i in d["items"])')"
