#!/usr/bin/env bash
# The file:// remote (cache/remote/file.c) under many writers and killed writers:
#  1. many writers, one directory: 16 kiln processes at once, each with its own
#     local cache (the kernels fixture's index copied, its blobs hard-linked, as
#     if on 16 hosts), upload overlapping windows of the fixture's 44 records
#     into one file:// directory. A window is a product (a build plan is units x
#     targets): writer i takes the units whose first letter is one of 3
#     consecutive of the fixture's first letters (b c e l r s), starting at
#     i mod 6, for 2 consecutive of the 4 targets, starting at i mod 4: 12
#     windows (writers 12-15 repeat 0-3, racing on the very same keys), each key
#     in about 4, their union every record. Every writer exits 0, warns of
#     nothing, builds nothing; the directory then holds exactly one record per
#     key and one blob per digest, each blob's sha256 is its name, each record
#     parses and names its key and a blob of its size; no temp file is left; a
#     fresh cache fetches all 44 (0 built) and verifies. The 16 writers' time is
#     printed against one writer uploading the union alone (and a second upload
#     of it writes nothing).
#  2. killed writers: REMOTE_FILE_ROUNDS rounds (default 30; the sanitizer build
#     fewer), seed REMOTE_FILE_SEED (default 27). An uploader of the 32 records
#     of the units but the softmax ones is SIGKILLed (its process group) at a
#     point drawn from the seed in its writing time: after its last HEAD (it
#     logs them: KILN_LOG=debug), 0 to W ms later, W the time one upload took
#     from there to its last PUT (measured first; lowered when a round finishes
#     before its kill: a loaded machine). A reader process scans the directory
#     all the while, every 10 ms (2 cores on CI), and checks every object that
#     appears or changes as in 1 (a record's blob: it is written first). After
#     each kill: what is there is whole and of the plan, temp files named after
#     their objects; a follow-up upload exits 0 writing just the missing
#     records, leaving the directory complete and whole with the killed
#     writer's temp files, no others, beside it. One directory for every round:
#     between rounds the test deletes its objects (the reader told to pause),
#     not the temp files, which pile up as on a real shared directory, so every
#     uploader writes all 32 among the dead writers' leftovers. The rounds must
#     include kills mid-upload and temp files left. Then `kiln cache gc
#     --remote` keeps them at the default --max-age (they are seconds old),
#     and with --max-age 0 removes every one, counted with their bytes, and
#     no object.
#  3. bad URLs: file://host/x and file:///a/../b refused (exit 2: --remote,
#     KILN_REMOTE_URL, cache gc); a root that does not exist: an upload is a
#     warning naming it and "does not exist" (exit 0), a fetch a miss with that
#     warning (then the compile fails at once: KILN_TEST_INJECT_COMPILE_ERROR,
#     nothing compiled), gc an error; the root is never created.
# Every kiln run is bounded (timeout). Measured on 2 cores busy with other work
# (load 4-6): 27-39 s, the sanitizer build (15 rounds) 18-28 s; most of it the
# rounds, about 1 s each.
. "$(dirname "$0")/lib.sh" "$@"

kiln cache --help | grep -q -- --max-age || skip "this kiln has no file:// remote (kiln cache gc --remote)"
ROUNDS=${REMOTE_FILE_ROUNDS:-30}
SEED=${REMOTE_FILE_SEED:-27}
ARCHES=(80 90 100 compute_90) # the kernels fixture's targets
ALL_ARCH=$(
  IFS=,
  echo "${ARCHES[*]}"
)
WRITERS=16

# ---- the checker: python, one scan of a remote directory ----
cat >"$T/check.py" <<'EOF'
"""scan ROOT: every object of a file:// remote whole (see remote_file.sh).

  check.py verify ROOT EXPECT [--partial] [--tmp-ok] [--summary JSON]
      EXPECT: lines "key digest". Without --partial ac/ holds exactly those keys
      and cas/ exactly those digests; with it, a subset. Prints "ac cas tmp tmp_bytes",
      then [built, failed, upload_error, uploaded] of JSON, a kiln build --json.
  check.py upload HEADS DELAY_MS OUT CMD...
      an upload killed DELAY_MS after its HEADS-th HEAD (upload below).
  check.py reader ROOT STATE STOP OUT
      scans ROOT again and again while STATE holds a round name (not "pause")
      until STOP exists, then writes {"rounds": {round: [scans, objects seen]},
      "violations": [...], "discarded": n, "reads": objects read and checked} to OUT.
"""
import hashlib, json, os, sys, time

HEX = set("0123456789abcdef")
records = {}  # ac/ path: (digest, size) its record named when last read
reads = [0]  # objects read and checked


def hex64(s):
    return isinstance(s, str) and len(s) == 64 and set(s) <= HEX


def read(path, seen):
    """The file's bytes; None when seen holds its (inode, size, mtime, ctime):
    an object checked whole once stays whole unless written in place, which
    changes its mtime and ctime (the reader's scans need not hash it again)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not (st.st_mode & 0o170000 == 0o100000):
            raise OSError(f"not a regular file (mode {st.st_mode:o})")
        ident = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if seen is not None:
            if ident in seen:
                return None
            seen.add(ident)
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def scan(root, strict=True, seen=None):
    """(errors, {key: digest}, {digest: size}, [temp names], temp bytes); with
    seen (a set), objects unchanged since an earlier scan are not read again"""
    errs, ac, cas, tmp, tmp_bytes = [], {}, {}, [], 0
    if strict:
        for e in sorted(os.listdir(root)):
            if e not in ("ac", "cas"):
                errs.append(f"{root}/{e}: not ac/ or cas/")
    for d in ("cas", "ac"):  # blobs first: a record read later names a blob listed or not
        p = os.path.join(root, d)
        try:
            names = sorted(os.listdir(p))
        except FileNotFoundError:
            continue
        for n in names:
            f = os.path.join(p, n)
            if n.startswith(".tmp."):
                if not hex64(n[5:69]) or n[69:70] != ".":
                    errs.append(f"{d}/{n}: a temp file named after no object")
                tmp.append(f"{d}/{n}")
                try:
                    tmp_bytes += os.lstat(f).st_size
                except FileNotFoundError:
                    pass
                continue
            if not hex64(n):
                errs.append(f"{d}/{n}: a name that is no sha256")
                continue
            try:
                data = read(f, seen)
            except OSError as e:
                errs.append(f"{d}/{n}: listed, then unreadable: {e}")
                continue
            reads[0] += data is not None
            if d == "cas":
                if data is not None:
                    h = hashlib.sha256(data).hexdigest()
                    if h != n:
                        errs.append(f"cas/{n}: {len(data)} bytes whose sha256 is {h}")
                cas[n] = 1
                continue
            if data is not None:
                try:
                    r = json.loads(data)
                except ValueError as e:
                    errs.append(f"ac/{n}: {len(data)} bytes that are no JSON: {e}")
                    continue
                if not isinstance(r, dict) or r.get("key") != n or not hex64(r.get("digest")):
                    errs.append(f"ac/{n}: a record of another key or without a digest: {data[:200]!r}")
                    continue
                records[f] = (r["digest"], r.get("size"))
            elif f not in records:  # checked in an earlier scan, and found bad then
                continue
            digest, size = records[f]
            ac[n] = digest
            try:  # blobs are written before records, never removed: it is there
                blob = os.lstat(os.path.join(root, "cas", digest)).st_size
            except FileNotFoundError:
                errs.append(f"ac/{n}: its blob cas/{digest} is not there")
                continue
            if blob != size:
                errs.append(f"ac/{n}: size {size}, its blob cas/{digest} {blob} bytes")
    return errs, ac, cas, tmp, tmp_bytes


def verify(root, expect, partial, tmp_ok, summary):
    want = dict(l.split() for l in open(expect) if l.strip())
    errs, ac, cas, tmp, tmp_bytes = scan(root)
    for k, dg in ac.items():
        if k not in want:
            errs.append(f"ac/{k}: not a key of the plan")
        elif want[k] != dg:
            errs.append(f"ac/{k}: digest {dg}, the fixture's is {want[k]}")
    digests = set(want.values())
    for dg in cas:
        if dg not in digests:
            errs.append(f"cas/{dg}: not a digest of the plan")
    if not partial:
        for k in sorted(set(want) - set(ac)):
            errs.append(f"ac/{k}: missing")
        for dg in sorted(digests - set(cas)):
            errs.append(f"cas/{dg}: missing")
    if tmp and not tmp_ok:
        errs.append(f"{len(tmp)} temp files left: {' '.join(tmp[:5])}")
    for e in errs:
        print(f"{root}: {e}", file=sys.stderr)
    print(len(ac), len(cas), len(tmp), tmp_bytes)
    if summary:  # a kiln build --json's counts, to spare a python
        d = json.load(open(summary))
        print(json.dumps([d["built"], d["failed"], d.get("upload_error", ""), d["uploaded"]]))
    return 1 if errs else 0


def reader(root, state, stop, out):
    def now():
        try:
            return open(state).read().strip()
        except FileNotFoundError:
            return "pause"

    rounds, violations, discarded, seen = {}, [], 0, set()
    while not os.path.exists(stop):
        r = now()
        if r == "pause":
            time.sleep(0.01)
            continue
        errs, ac, cas, _, _ = scan(root, strict=False, seen=seen)
        if errs and now() != r:  # the test emptied the directory meanwhile
            discarded += 1
            seen.clear()
            continue
        violations += [f"round {r}: {e}" for e in errs]
        s = rounds.setdefault(r, [0, 0])
        s[0] += 1
        s[1] += len(ac) + len(cas)
        time.sleep(0.01)  # leave the uploaders the CPU (2 cores on CI, tests side by side)
    json.dump({"rounds": rounds, "violations": violations, "discarded": discarded, "reads": reads[0]},
              open(out, "w"))


def running(pgid):
    """Whether a process of group pgid is alive, not a zombie."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                return True
    return False


def upload(heads_before, delay_ms, out, cmd):
    """Runs cmd (a kiln upload, under timeout) with KILN_LOG=debug; once it logs
    its heads_before-th HEAD (the last record looked up: it writes next), waits
    delay_ms and SIGKILLs its process group (timeout and kiln), unless it exits
    first (delay_ms < 0: never). Prints "killed|finished RC MS HEADS": MS from
    that HEAD to its last PUT (-1: none)."""
    import signal, subprocess, threading

    with open(out, "wb") as o:
        p = subprocess.Popen(cmd, stdout=o, stderr=subprocess.PIPE, start_new_session=True,
                             env=dict(os.environ, KILN_LOG="debug"))
    lines, heads, t_go = [], 0, None
    for line in p.stderr:
        lines.append(line)
        heads += b"kiln debug: remote HEAD " in line
        if heads == heads_before:
            t_go = time.monotonic()
            break
    last_put = [None]

    def drain():
        for line in p.stderr:
            lines.append(line)
            if b"kiln debug: remote PUT " in line:
                last_put[0] = time.monotonic()

    drain = threading.Thread(target=drain)
    drain.start()
    if t_go is not None and delay_ms >= 0:
        try:
            p.wait(timeout=delay_ms / 1000)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    rc = p.wait()
    status = "killed" if rc == -signal.SIGKILL else "finished"
    # timeout is reaped; kiln is dead once no process of the group runs (a
    # syscall it was in, a rename, completes first; a zombie does nothing)
    for _ in range(1000):
        if not running(p.pid):
            break
        time.sleep(0.01)
    else:
        status = "survived"
    drain.join()
    ms = int((last_put[0] - t_go) * 1000) if t_go is not None and last_put[0] else -1
    sys.stderr.buffer.write(b"".join(l for l in lines if not l.startswith(b"kiln debug:")))
    print(status, rc, ms, heads)


if sys.argv[1] == "verify":
    opts = sys.argv[4:]
    summary = opts[opts.index("--summary") + 1] if "--summary" in opts else None
    sys.exit(verify(sys.argv[2], sys.argv[3], "--partial" in opts, "--tmp-ok" in opts, summary))
if sys.argv[1] == "upload":
    upload(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:])
    sys.exit(0)
reader(*sys.argv[2:6])
EOF
# verify ROOT WHAT [--partial] [--tmp-ok] [--summary JSON]: the directory's objects
# against the plan ($EXPECT); sets AC CAS TMP TMP_BYTES (and SUMMARY); a violation fails.
verify() {
  local root=$1 what=$2 out
  shift 2
  out=$("$PY" -I -S "$T/check.py" verify "$root" "$EXPECT" "$@" 2>"$T/.verify.err") || {
    fail "$what: $root is not whole and complete:"
    sed 's/^/  | /' "$T/.verify.err" | head -20 >&2
  }
  read -r AC CAS TMP TMP_BYTES <<<"${out%%$'\n'*}"
  [[ -n $AC ]] || read -r AC CAS TMP TMP_BYTES <<<"0 0 0 0"
  SUMMARY=${out#*$'\n'}
}
# "$PY" -I -S (lib.sh's interpreter, the standard library only) for the many runs below.
summary() { json "$1" '[d["targets"], d["hits"], d["built"], d["fetched"], d["failed"]]'; }
now() { local t=${EPOCHREALTIME/./}; printf '%s\n' "${t:0:-4}"; } # centiseconds
secs() { local d=$(($2 - $1)); printf '%d.%02d\n' $((d / 100)) $((d % 100)); }

# ---- the plan: every record of the kernels fixture ----
T_START=$(now)
copy_cache "$(fixture kernels)" "$T/base"
# the killed writers' plan: the units but the three softmax ones (1-2 MB a blob): 32 smaller
# records, 7 MB, half the time per round
K_GLOB='[!s]*'
# the fixture's records: $T/expect (every one), $T/expect_k (K_GLOB's), and their first letters
# (index_query's query, one python for the three)
"$PY" -I -S -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "/index.sqlite?mode=rw", uri=True, isolation_level=None)
rows = db.execute("SELECT key, digest, unit FROM records ORDER BY key").fetchall()
db.close()
open(sys.argv[2], "w").write("".join(f"{k} {d}\n" for k, d, u in rows))
open(sys.argv[3], "w").write("".join(f"{k} {d}\n" for k, d, u in rows if not u.startswith("s")))
print("\n".join(sorted({u[0] for k, d, u in rows})))' "$T/base" "$T/expect" "$T/expect_k" >"$T/letters" ||
  die "reading the fixture's records failed"
mapfile -t LETTERS <"$T/letters"
N=$(wc -l <"$T/expect")
N_DIGESTS=$(cut -d' ' -f2 "$T/expect" | sort -u | wc -l)
N_K=$(wc -l <"$T/expect_k")
N_K_DIGESTS=$(cut -d' ' -f2 "$T/expect_k" | sort -u | wc -l)
EXPECT=$T/expect
((N >= 20 && ${#LETTERS[@]} >= 3)) || die "the kernels fixture has $N records of ${#LETTERS[@]} first letters"

# ---- 1. 16 writers at once into one directory ----
mkdir "$T/R16" "$T/R1"
for ((i = 0; i < WRITERS; i++)); do
  # a cache of its own: the index (which a build writes) copied, the blobs (immutable,
  # content-addressed: an upload only reads them) hard links: 16 x 25 MB not written
  writer_cache "$T/base" "$T/w$i"
  l=${#LETTERS[@]} s=$((i % ${#LETTERS[@]})) a=$((i % 4))
  GLOBS[i]="[${LETTERS[s]}${LETTERS[(s + 1) % l]}${LETTERS[(s + 2) % l]}]*"
  WARCH[i]="${ARCHES[a]},${ARCHES[(a + 1) % 4]}"
done
writer() {
  exec timeout -k 10 "$IT_TIMEOUT" "$KILN_BIN" build --arch "${WARCH[$1]}" --kernels "${GLOBS[$1]}" \
    --cache "$T/w$1" --remote "file://$T/R16" --upload --json >"$T/w$1.json" 2>"$T/w$1.err"
}
gate_start "$WRITERS" writer
pids=("${GATE_PIDS[@]}")
t0=${GATE_T0/./}
t0=${t0:0:-4} # centiseconds, as now()
for ((i = 0; i < WRITERS; i++)); do
  rc=0
  wait "${pids[i]}" || rc=$?
  ((rc == 0)) || { fail "writer $i (--arch ${WARCH[i]} --kernels '${GLOBS[i]}') exited $rc: $(head -5 "$T/w$i.err")"; }
done
t16=$(secs "$t0" "$(now)")
BG_PIDS=() # all waited for
sum_up=0 sum_items=0
: >"$T/union"
for ((i = 0; i < WRITERS; i++)); do
  [[ -s $T/w$i.json ]] || { fail "writer $i printed no JSON"; continue; }
  grep -qi warn "$T/w$i.err" && fail "writer $i warned: $(grep -i warn "$T/w$i.err" | head -3)"
  { # one python for all: the checked fields, the counts, then the keys
    read -r got
    read -r up targets
    cat >>"$T/union"
  } < <(json "$T/w$i.json" '"\n".join([json.dumps([d["built"], d["fetched"], d["failed"], d.get("upload_error", ""),
    sorted({i["outcome"] for i in d["items"]})]), str(d["uploaded"]) + " " + str(d["targets"])] + [i["key"] for i in d["items"]])')
  expect_eq "$got" '[0, 0, 0, "", ["hit"]]' "writer $i: built, fetched, failed, upload_error, outcomes"
  sum_up=$((sum_up + up)) sum_items=$((sum_items + targets))
done
expect_eq "$(sort -u "$T/union" | wc -l)" "$N" "keys in the union of the writers' windows"
((sum_up >= N)) || fail "the writers uploaded $sum_up records in all, fewer than the $N keys"
verify "$T/R16" "16 writers"
expect_eq "$AC/$CAS/$TMP" "$N/$N_DIGESTS/0" "16 writers: records/blobs/temp files in the directory"
rm -rf "$T"/w[0-9]*

# The union, alone, into a directory of its own: one writer's time.
t0=$(now)
expect_exit 0 kiln build --arch "$ALL_ARCH" --kernels '*' --cache "$T/base" --remote "file://$T/R1" --upload --json
t1=$(secs "$t0" "$(now)")
expect_eq "$(json "$OUT" '[d["targets"], d["built"], d["uploaded"]]')" "[$N, 0, $N]" "one writer: targets, built, uploaded"
verify "$T/R1" "one writer"
# again: every record is there (HEAD), nothing is written
expect_exit 0 kiln build --arch "$ALL_ARCH" --kernels '*' --cache "$T/base" --remote "file://$T/R1" --upload --json
expect_eq "$(json "$OUT" '[d["built"], d["uploaded"]]')" "[0, 0]" "one writer, again: built, uploaded"
ratio=$(awk -v a="$t16" -v b="$t1" 'BEGIN { printf "%.1f", a / (b > 0 ? b : 0.01) }')
log "16 writers at once: $t16 s for $sum_items keys in windows ($sum_up records written, $N distinct);" \
  "one writer, the union alone: $t1 s; ratio $ratio"

# A fresh cache fetches everything from the 16 writers' directory, compiles nothing.
new_cache "$T/fresh"
expect_exit 0 kiln build --arch "$ALL_ARCH" --kernels '*' --cache "$T/fresh" --remote "file://$T/R16" --json
{ # one python: targets, hits, built, fetched, failed; the outcomes; the (key, digest) pairs
  read -r got
  read -r outcomes
  cat >"$T/fresh.pairs"
} < <(json "$OUT" '"\n".join([json.dumps([d["targets"], d["hits"], d["built"], d["fetched"], d["failed"]]),
  json.dumps(sorted({i["outcome"] for i in d["items"]}))] + sorted(i["key"] + " " + i["digest"] for i in d["items"]))')
expect_eq "$got" "[$N, 0, 0, $N, 0]" "fresh fetch: targets, hits, built, fetched, failed"
expect_eq "$outcomes" '["fetched"]' "fresh fetch: outcomes"
expect_eq "$(cat "$T/fresh.pairs")" "$(sort "$T/expect")" "fresh fetch: (key, digest) pairs against the fixture's"
expect_exit 0 kiln cache verify --cache "$T/fresh" --json
expect_eq "$(json "$OUT" '[d["checked"], d["bad"]]')" "[$N, 0]" "fresh fetch: verify checked, bad"
rm -rf "$T/fresh" "$T/R1"
log "16 writers: $N records and $N_DIGESTS blobs, each once and whole, no temp file; a fresh cache fetched all $N" \
  "($(secs "$T_START" "$(now)") s so far)"

# ---- 2. killed writers, a reader checking all the while ----
t2=$(now)
EXPECT=$T/expect_k
K=$T/K
mkdir "$K"
echo pause >"$T/state"
"$PY" -I -S "$T/check.py" reader "$K" "$T/state" "$T/stop" "$T/reader.json" 2>"$T/reader.err" &
reader=$!
BG_PIDS+=("$reader")
set_state() {
  echo "$1" >"$T/state.new"
  mv "$T/state.new" "$T/state"
}
upload_to_K() { # DELAY_MS (-1: no kill): sets KSTATUS KRC KMS
  local line
  line=$("$PY" -I -S "$T/check.py" upload "$N_K" "$1" "$T/k.json" timeout -k 5 "$IT_TIMEOUT" "$KILN_BIN" build \
    --arch "$ALL_ARCH" --kernels "$K_GLOB" --cache "$T/base" --remote "file://$K" --upload --json 2>"$T/k.err")
  read -r KSTATUS KRC KMS KHEADS <<<"${line:-error 1 -1 0}"
  ((KHEADS == N_K)) || fail "an upload to $K logged $KHEADS HEADs, not $N_K: $(head -3 "$T/k.err")"
}
empty_K() { # its objects, not the temp files, with the reader paused
  set_state pause
  find "$K/ac" "$K/cas" -maxdepth 1 -type f ! -name '.tmp.*' -delete
}
# One upload's writing time: from its last HEAD (every record looked up; the
# blobs and records are written next) to its last PUT. The kills land in it
# (a fraction of it drawn from the seed; a shorter one, when a round finishes
# before its kill).
set_state 0
upload_to_K -1
expect_eq "$KSTATUS $KRC" "finished 0" "the upload timed for the kills"
W_MS=$((KMS > 20 ? KMS : 20)) W0_MS=$W_MS
empty_K
RANDOM=$SEED
killed=0 finished=0 partial=0 tmp_rounds=0 tmp_total=0
for ((r = 1; r <= ROUNDS; r++)); do
  set_state "$r"
  ms=$((W_MS * RANDOM / 32767))
  upload_to_K "$ms"
  case $KSTATUS/$KRC in
  finished/0) # done before its kill: the writing time measured was long (a loaded machine)
    finished=$((finished + 1))
    ((KMS < 20 || KMS >= W_MS)) || W_MS=$KMS ;;
  killed/-9) killed=$((killed + 1)) ;;
  *) fail "round $r: the uploader ended $KSTATUS, status $KRC: $(head -3 "$T/k.err")" ;;
  esac
  # what the killed writer left: whole objects of the plan, and temp files
  verify "$K" "round $r, after the kill at $ms ms" --partial --tmp-ok
  new_tmp=$((TMP - tmp_total))
  if ((new_tmp > 0)); then tmp_rounds=$((tmp_rounds + 1)); fi
  if ((AC < N_K)); then partial=$((partial + 1)); fi
  # a follow-up upload completes it
  missing=$((N_K - AC))
  expect_exit 0 kiln build --arch "$ALL_ARCH" --kernels "$K_GLOB" --cache "$T/base" --remote "file://$K" --upload --json
  verify "$K" "round $r, after the follow-up" --tmp-ok --summary "$OUT"
  expect_eq "$SUMMARY" "[0, 0, \"\", $missing]" \
    "round $r, follow-up: built, failed, upload_error, uploaded (the records missing)"
  expect_eq "$TMP" "$((tmp_total + new_tmp))" "round $r: temp files after the follow-up (the killed writer's only)"
  tmp_total=$TMP
  if ((r < ROUNDS)); then empty_K; fi # for the next round; the temp files stay
done
set_state pause
touch "$T/stop"
wait_for 30 "the reader to stop" test -s "$T/reader.json" || fail "the reader wrote no report: $(tail -5 "$T/reader.err")"
rc=0
wait "$reader" || rc=$?
((rc == 0)) || fail "the reader exited $rc: $(tail -5 "$T/reader.err")"
BG_PIDS=()
if [[ -s $T/reader.json ]]; then
  { # violations, rounds without a scan, scans, objects checked
    read -r violations idle scans reads
    sed 's/^/  reader| /' >&2
  } < <(json "$T/reader.json" "\"\\n\".join([' '.join(str(v) for v in (len(d['violations']),
    len([r for r in range(1, $ROUNDS + 1) if d['rounds'].get(str(r), [0])[0] == 0]),
    sum(s[0] for s in d['rounds'].values()), d['reads']))] + d['violations'][:20])")
  expect_eq "${violations:-?}" 0 "the reader's violations"
  expect_eq "${idle:-?}" 0 "rounds in which the reader did not scan"
fi
log "$ROUNDS rounds in $(secs "$t2" "$(now)") s (seed $SEED, kills 0-$W0_MS ms into the writing, at the end 0-$W_MS): $killed killed" \
  "($partial mid-upload, $tmp_rounds leaving temp files), $finished finished first; the reader: ${scans:-?} scans," \
  "${reads:-?} objects read whole as they appeared"
((partial > 0)) || fail "no kill landed mid-upload ($killed killed, $finished finished): the rounds proved nothing"
((tmp_total > 0)) || fail "no killed writer left a temp file: gc below is not tested"

# gc: the temp files are seconds old: kept by default, removed with --max-age 0.
verify "$K" "before gc" --tmp-ok
tmp_bytes=$TMP_BYTES
expect_exit 0 kiln cache gc --remote "file://$K" --cache "$T/base" --json
expect_eq "$(json "$OUT" 'd["remote_temp_removed"]')" 0 "gc (default --max-age): temp files removed"
expect_exit 0 kiln cache gc --remote "file://$K" --cache "$T/base"
expect_stdout_contains "removed 0 temp files" "gc's text summary"
expect_exit 0 kiln cache gc --remote "file://$K" --max-age 0 --cache "$T/base" --json
expect_eq "$(json "$OUT" '[d["remote_temp_removed"], d["remote_temp_bytes"]]')" "[$tmp_total, $tmp_bytes]" \
  "gc --max-age 0: temp files and bytes removed"
verify "$K" "after gc"
expect_eq "$AC/$CAS/$TMP" "$N_K/$N_K_DIGESTS/0" "after gc: records/blobs/temp files"
log "gc: kept the $tmp_total temp files at the default --max-age, removed them ($tmp_bytes bytes) with --max-age 0, every object kept"

# ---- 3. bad URLs ----
for url in "file://host$T/x" "file://$T/a/../K"; do
  case $url in
  file://host*) want="names an absolute path on this host" ;;
  *) want="no '.' or '..'" ;;
  esac
  expect_exit 2 kiln build --arch 90 --kernels bias_gelu --cache "$T/base" --remote "$url" --upload
  expect_stderr_contains "$want" "--remote $url"
  KILN_REMOTE_URL=$url expect_exit 2 kiln build --arch 90 --kernels bias_gelu --cache "$T/base"
  expect_stderr_contains "$want" "KILN_REMOTE_URL=$url"
  expect_exit 2 kiln cache gc --remote "$url" --cache "$T/base"
  expect_stderr_contains "$want" "cache gc --remote $url"
done
[[ -e $T/x || -e $T/a ]] && fail "a refused URL's path was created"
nope=$T/no-such-dir
expect_exit 0 kiln build --arch 90 --kernels bias_gelu --cache "$T/base" --remote "file://$nope" --upload --json
expect_eq "$(json "$OUT" '[d["hits"], d["built"], d["uploaded"]]')" "[1, 0, 0]" "missing root, upload: hits, built, uploaded"
[[ $(json "$OUT" 'd.get("upload_error", "")') == *"$nope does not exist"* ]] ||
  fail "missing root, upload: upload_error does not name $nope and 'does not exist': $(json "$OUT" 'd.get("upload_error")')"
expect_stderr_contains "$nope does not exist" "missing root, upload"
new_cache "$T/empty"
KILN_TEST_INJECT_COMPILE_ERROR=bias_gelu expect_exit 1 kiln build --arch 90 --kernels bias_gelu --cache "$T/empty" \
  --remote "file://$nope" --json
expect_eq "$(summary "$OUT")" "[1, 0, 0, 0, 1]" "missing root, fetch: targets, hits, built, fetched, failed"
expect_stderr_contains "$nope does not exist" "missing root, fetch"
expect_exit 1 kiln cache gc --remote "file://$nope" --cache "$T/base"
expect_stderr_contains "$nope does not exist" "missing root, gc"
[[ -e $nope ]] && fail "kiln created the missing root $nope"
log "bad URLs refused (exit 2); a missing root named in a warning (upload, fetch) or an error (gc), never created" \
  "($(secs "$T_START" "$(now)") s in all)"
