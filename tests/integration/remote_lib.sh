# Helpers for the remote cache's integration tests; source after lib.sh:
#
#   . "$(dirname "$0")/lib.sh" "$@"
#   . "$(dirname "$0")/remote_lib.sh"
#
# It skips (77) when nginx or curl is missing, and gives:
#   serve NAME [nginx_dav.sh options]   an nginx WebDAV server in $T/NAME (root
#                                       $T/NAME/root); prints its URL
#   fault_serve NAME MODE [options]     tests/integration/fault_server.py serving
#                                       $T/NAME/root; prints its URL
#   (both are stopped when the test ends, by stop_servers)
#   set_mode URL MODE                   switches a fault server's mode
#   fill NAME SRC                       copies the server root $T/SRC/root into $T/NAME/root
#   requests NAME                       lines in NAME's request log so far
#   closed_url                          http://127.0.0.1:PORT with nothing listening
#   remote_stat CACHE FIELD             a field of `kiln cache stats --json`'s "remote"
#   secret_free WHAT STRING FILES...    fails if STRING occurs in any of FILES (folders: recursively)
#   timed CODE CMD...                   expect_exit CODE CMD, and $ELAPSED (seconds, 0.1)
#   under SECS WHAT                     fails unless $ELAPSED < SECS
# A test with a server of its own (remote_s3.sh: SeaweedFS) sets REMOTE_LIB_NO_NGINX=1
# and needs no nginx.
[[ -n ${REMOTE_LIB_NO_NGINX:-} ]] || command -v nginx >/dev/null ||
  skip "nginx is not installed (scripts/install-deps installs nginx-light)"
command -v curl >/dev/null || skip "curl is not installed"
IT_DIR=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
ND=$IT_DIR/nginx_dav.sh
FAULT_SERVER=$IT_DIR/fault_server.py

# Every server under $T is stopped when the test ends, whatever way it ends.
# (serve and fault_serve run inside $(...): a cleanup registered there, or a
# pid added to BG_PIDS there, would be lost with that subshell.)
stop_servers() {
  local d pid
  for d in "$T"/*/; do
    [[ -f $d/conf/nginx.conf ]] && bash "$ND" stop "$d"
    if [[ -f $d/fault.pid ]]; then
      pid=$(cat "$d/fault.pid")
      kill -TERM "$pid" 2>/dev/null && sleep 0.3
      kill -KILL "$pid" 2>/dev/null
    fi
  done
  return 0
}
at_exit stop_servers

serve() {
  local name=$1
  shift
  bash "$ND" start "$T/$name" "$@" >"$T/$name.start" || die "nginx_dav.sh start $name $* failed"
  head -1 "$T/$name.start"
}

fault_serve() {
  local name=$1 mode=$2
  shift 2
  [[ -f $FAULT_SERVER ]] || die "no $FAULT_SERVER"
  mkdir -p "$T/$name/root"
  rm -f "$T/$name/port"
  python3 "$FAULT_SERVER" --port-file "$T/$name/port" --root "$T/$name/root" --mode "$mode" \
    --log "$T/$name/requests.log" "$@" >"$T/$name/server.log" 2>&1 &
  echo $! >"$T/$name/fault.pid"
  wait_for 10 "fault_server.py $name to write its port" test -s "$T/$name/port" ||
    die "fault_server.py did not start: $(cat "$T/$name/server.log")"
  printf 'http://127.0.0.1:%s\n' "$(tr -dc 0-9 <"$T/$name/port")"
}

set_mode() {
  curl -sf --max-time 10 -X PUT --data-binary "$2" "$1/_mode" >/dev/null || die "could not set mode $2 at $1"
}

fill() {
  mkdir -p "$T/$1/root"
  cp -a "$T/$2/root/." "$T/$1/root/"
}

requests() {
  if [[ -f $T/$1/logs/access.log ]]; then wc -l <"$T/$1/logs/access.log"
  else wc -l <"$T/$1/requests.log" 2>/dev/null || echo 0; fi
}

closed_url() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print("http://127.0.0.1:%d" % s.getsockname()[1])
s.close()'
}

remote_stat() {
  kiln cache stats --cache "$1" --json >"$T/.stats" 2>"$T/.stats.err" || {
    fail "kiln cache stats --cache $1 failed: $(cat "$T/.stats.err")"
    echo -1
    return 0
  }
  json "$T/.stats" "d['remote']['$2']"
}

secret_free() {
  local what=$1 secret=$2 hits
  shift 2
  hits=$(grep -rlaF -- "$secret" "$@" 2>/dev/null || true)
  [[ -z $hits ]] || fail "$what: the secret appears in: ${hits//$'\n'/ }"
}

timed() {
  local t0=$EPOCHREALTIME want=$1
  shift
  expect_exit "$want" "$@"
  ELAPSED=$(python3 -c "print(f'{$EPOCHREALTIME - $t0:.1f}')")
}

# under SECS WHAT: fails unless $ELAPSED < SECS.
under() {
  python3 -c "import sys; sys.exit(0 if $ELAPSED < $1 else 1)" || fail "$2 took ${ELAPSED}s (bound: $1 s)"
}
