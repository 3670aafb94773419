#!/usr/bin/env bash
# kiln doctor: every check driven into the states it reports, with the exit
# status (0 pass, 1 warn, 2 fail or bad usage); golden JSON in tests/data
# (machine-specific values normalised; UPDATE_GOLDEN=1 rewrites); and the
# cache byte-identical afterwards.
. "$(dirname "$0")/lib.sh" "$@"

DATA=${IT_SOURCE_DIR:?}/tests/data
F=$T/full
copy_cache "$(fixture full)" "$F"
NODRV=$T/no-libcuda.so

normalise() {
  python3 - "$1" "$T" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
t = sys.argv[2]
for c in d["checks"]:
    for k in ("summary", "fix"):
        if isinstance(c[k], str): c[k] = c[k].replace(t, "<T>")
    if c["id"] == "disk_space": c["summary"] = re.sub(r"^[0-9.]+ MiB free on \S+", "<free> on <fs>", c["summary"])
    if c["id"] == "cache_fs": c["summary"] = re.sub(r": \S+ \(local\)", ": <fstype> (local)", c["summary"])
    if c["id"] == "nvrtc" and c["status"] == "PASS": c["summary"] = re.sub(r"NVRTC [0-9.]+$", "NVRTC <version>", c["summary"])
print(json.dumps(d, indent=2, sort_keys=True))
PY
}
golden() {
  normalise "$OUT" >"$T/got.json"
  if [[ ${UPDATE_GOLDEN:-} == 1 ]]; then cp "$T/got.json" "$DATA/$1"; log "wrote $DATA/$1"; fi
  diff -u "$DATA/$1" "$T/got.json" >&2 || fail "doctor --json differs from tests/data/$1"
}
# status ID: the status of check ID in $OUT (JSON)
# state DIR: tree_sum without the directory's own mtime, which SQLite changes
# by creating and removing the index's -wal/-shm files when it opens it.
state() { tree_sum "$1" | grep -v '^\. d '; }
status() { json "$OUT" "[c['status'] for c in d['checks'] if c['id'] == '$1'][0]"; }

log "healthy cache, no driver: driver SKIP, everything else PASS, exit 0; nothing changes"
before=$(state "$F")
KILN_CUDA_LIBRARY=$NODRV expect_exit 0 kiln doctor --cache "$F" --json
golden doctor_nogpu.json
expect_eq "$(json "$OUT" 'd["schema"]')" kiln-doctor/1 schema
expect_eq "$(json "$OUT" '[c["id"] for c in d["checks"]]')" \
  '["env", "cache_dir", "cache_fs", "disk_space", "driver", "nvrtc", "driver_artifacts", "offline", "leases", "quarantine", "conflicts", "timeouts", "remote"]' "check ids"
expect_eq "$(status driver)" SKIP driver
expect_eq "$(status remote)" SKIP remote
KILN_CUDA_LIBRARY=$NODRV expect_exit 0 kiln doctor --cache "$F"
expect_stdout_contains "PASS  cache_dir"
expect_stdout_contains "SKIP  driver"
expect_stdout_contains "kiln doctor: "
expect_eq "$(state "$F")" "$before" "the cache (every file: mode, size, mtime, bytes) after kiln doctor"

log "a cache that does not exist yet: PASS (will be created), and doctor does not create it"
KILN_CUDA_LIBRARY=$NODRV expect_exit 0 kiln doctor --cache "$T/never"
expect_stdout_contains "does not exist yet"
[[ ! -e $T/never ]] || fail "kiln doctor created $T/never"

log "unknown KILN_* variable: WARN naming the right one, exit 1"
KILN_OFLINE=1 KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$F"
expect_stdout_contains "WARN  env"
expect_stdout_contains "fix: rename KILN_OFLINE to KILN_OFFLINE"

log "timeouts: a malformed KILN_BUILD_TIMEOUT fails, a short one warns, a short NCCL watchdog warns"
KILN_BUILD_TIMEOUT=soon KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$F"
expect_stdout_contains "FAIL  timeouts          KILN_BUILD_TIMEOUT is malformed"
KILN_BUILD_TIMEOUT=30 KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$F"
expect_stdout_contains "fix: raise KILN_BUILD_TIMEOUT"
TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=60 KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$F"
expect_stdout_contains "raise TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
KILN_OFFLINE=maybe KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$F"
expect_stdout_contains "FAIL  offline           KILN_OFFLINE='maybe' is malformed"

log "stale lease (a dead holder, an old heartbeat): WARN naming unit, target and holder, exit 1"
L=$T/lease
copy_cache "$(fixture full)" "$L"
index_query "$L" "INSERT INTO leases VALUES('k1', 'rope', 'sm_90', '$(hostname)', 999999999, 'tok', 0, 0)"
KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$L"
expect_stdout_contains "WARN  leases            1 stale build lease(s): rope/sm_90 held by $(hostname) pid 999999999"
expect_stdout_contains "takes a stale lease over"
ahead=$(($(date +%s%N) / 1000000 + 86400000))
index_query "$L" "UPDATE leases SET pid = 1, host = 'another-host', heartbeat_ms = $ahead"
KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$L"
expect_stdout_contains "rope/sm_90 held by another-host pid 1 (heartbeat in the future: that host's clock runs ahead)"

log "quarantined blob: WARN with the count, exit 1"
Q=$T/quar
copy_cache "$(fixture full)" "$Q"
mkdir -p "$Q/quarantine" && echo junk >"$Q/quarantine/deadbeef"
KILN_CUDA_LIBRARY=$NODRV expect_exit 1 kiln doctor --cache "$Q"
expect_stdout_contains "WARN  quarantine        1 blob(s) quarantined"

log "group/world-writable directory: FAIL (kiln refuses it), fix chmod 700, exit 2"
W=$T/ww
copy_cache "$(fixture full)" "$W"
chmod 777 "$W"
KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$W"
expect_stdout_contains "FAIL  cache_dir"
expect_stdout_contains "fix: \`chmod 700 $W\`"

log "directory owned by another user: FAIL, exit 2"
if [[ $(id -u) == 0 ]] && id nobody >/dev/null 2>&1; then
  O=$T/other
  copy_cache "$(fixture full)" "$O"
  chown nobody "$O"
  KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$O"
  expect_stdout_contains "FAIL  cache_dir"
  expect_stdout_contains "not this user"
else
  log "skipped: not root (cannot chown to nobody)"
fi

log "full disk: FAIL, exit 2"
M=$T/tmpfs
mkdir -p "$M"
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=1m,mode=700 tmpfs "$M" 2>/dev/null; then
  at_exit "umount '$M'"
  dd if=/dev/zero of="$M/fill" bs=64k count=100 status=none 2>/dev/null || true
  KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$M/c"
  expect_stdout_contains "FAIL  disk_space"
  expect_stdout_contains "kiln cache gc --max-size"
else
  log "skipped: cannot mount a tmpfs here (not root, or no mount permission)"
fi

log "unreachable remote: FAIL naming KILN_REMOTE_URL, exit 2"
KILN_REMOTE_URL=http://127.0.0.1:1 KILN_REMOTE_RETRIES=0 KILN_CUDA_LIBRARY=$NODRV \
  expect_exit 2 kiln doctor --cache "$F" --json
expect_eq "$(status remote)" FAIL remote
expect_eq "$(json "$OUT" '"KILN_REMOTE_URL" in [c["fix"] for c in d["checks"] if c["id"] == "remote"][0]')" true "the fix names KILN_REMOTE_URL"

KILN_REMOTE_URL=ftp://nowhere KILN_CUDA_LIBRARY=$NODRV expect_exit 2 kiln doctor --cache "$F"
expect_stdout_contains "FAIL  remote"
expect_stdout_contains "PASS  cache_dir" "a bad remote setting is the remote's failure, not the cache's"

log "remote server (nginx WebDAV): reachable PASS; wrong token FAIL naming KILN_REMOTE_TOKEN_FILE"
ND="bash $(dirname "$0")/nginx_dav.sh"
if command -v nginx >/dev/null && url=$($ND start "$T/srv" --token sekrit 2>"$T/nd.err"); then
  at_exit "$ND stop '$T/srv'"
  echo sekrit >"$T/token" && chmod 600 "$T/token"
  echo wrong >"$T/bad" && chmod 600 "$T/bad"
  KILN_REMOTE_URL=$url KILN_REMOTE_TOKEN_FILE=$T/token KILN_CUDA_LIBRARY=$NODRV \
    expect_exit 0 kiln doctor --cache "$F"
  expect_stdout_contains "PASS  remote            remote $url reachable"
  expect_stdout_contains "not signed, upload off"
  KILN_REMOTE_URL=$url KILN_REMOTE_TOKEN_FILE=$T/bad KILN_CUDA_LIBRARY=$NODRV \
    expect_exit 2 kiln doctor --cache "$F"
  expect_stdout_contains "FAIL  remote            remote $url refused (HTTP 401)"
  expect_stdout_contains "KILN_REMOTE_TOKEN_FILE"
else
  log "skipped: no nginx to serve a remote ($(head -1 "$T/nd.err" 2>/dev/null))"
fi

log "bad usage: exit 2 with the usage"
expect_exit 2 kiln doctor --bogus
expect_stderr_contains "usage: kiln doctor"
expect_exit 2 kiln doctor extra
expect_exit 0 kiln doctor --help
expect_stdout_contains "Exit status"

log "fake GPU sm_90: driver PASS; offline with units missing: FAIL listing them, exit 2"
[[ -f ${IT_FAKECUDA:-} ]] || skip "no fake libcuda"
export KILN_CUDA_LIBRARY=$IT_FAKECUDA KILN_FAKE_CUDA_DEVICES=90
expect_exit_any() { set +e; kiln "$@" >"$OUT" 2>"$ERR"; RC=$?; set -e; }
expect_exit_any doctor --cache "$F" --json
golden doctor_fake.json
expect_eq "$(status driver)" PASS driver
KILN_OFFLINE=1 expect_exit 2 kiln doctor --cache "$F"
expect_stdout_contains "FAIL  offline"
expect_stdout_contains "rope/sm_90"
expect_stdout_contains "fix: \`kiln build --arch 90\` in the image, or unset KILN_OFFLINE"
log "a driver older than the toolkit that built the artifacts: driver_artifacts FAIL"
KILN_FAKE_CUDA_DRIVER=12080 expect_exit 2 kiln doctor --cache "$F" --json
expect_eq "$(status driver_artifacts)" FAIL driver_artifacts

# (nvrtc FAIL / WARN are not driven here: KILN_NVRTC_LIBRARY cannot hide
# NVRTC, the loader falls back to the toolkit's soname and directory.)
expect_eq "$(state "$F")" "$before" "the cache after every kiln doctor above"
