#!/usr/bin/env bash
# nginx_dav.sh: a private nginx WebDAV server on 127.0.0.1 for the remote
# cache's tests and benchmarks (the same config docs/remote-cache.md, "Running a server"
# describes). Everything lives under DIR, so it runs as any user, root
# included, and several can run at once.
#
#   nginx_dav.sh start DIR [--token T] [--basic USER:PASS] [--readonly] [--tls]
#       creates DIR/{conf,root,logs,tmp} (and DIR/tls), writes DIR/conf/nginx.conf,
#       starts nginx on a free port and waits (bounded) until it answers.
#       stdout: line 1 the base URL (http://127.0.0.1:PORT or https://...),
#               line 2 with --tls: the CA certificate to trust (DIR/tls/ca.pem).
#       The same are left in DIR/url and DIR/ca_file. Files are served from
#       DIR/root: {base}/ac/{key} is DIR/root/ac/{key}. Requests are logged
#       one line each to DIR/logs/access.log.
#       --token T        every request needs "Authorization: Bearer T" (else 401)
#       --basic U:P      HTTP basic auth (htpasswd made with openssl passwd -apr1)
#       --readonly       GET and HEAD only: PUT and DELETE answer 403
#       --strict-dav     a plain RFC 4918 server: MKCOL on, no create_full_put_path
#                        (a PUT under a missing collection answers 409)
#       --tls            https with a self-signed CA and a server certificate for
#                        IP 127.0.0.1 (HTTP/2 offered through ALPN)
#       --cache-of URL   not a WebDAV server: a pull-through cache of the remote
#                        at URL (http://), as docs/remote-cache.md ("Many jobs
#                        at once") configures one: GET and HEAD answered from
#                        DIR/cache, each key fetched from URL once however many
#                        clients ask at the same time (proxy_cache_lock); 200s
#                        kept, misses not; PUT and DELETE refused (upload to URL)
#   nginx_dav.sh stop DIR
#       stops it (QUIT, then KILL of the master and its workers after a
#       bounded wait); fine to call when it is not running.
#
# Exit status: 0, or 1 with the reason (and nginx's error log) on stderr; on a
# failed start nothing is left running. Tests call `stop` from their exit trap:
#   url=$(bash nginx_dav.sh start "$T/srv") || die ...; at_exit "bash nginx_dav.sh stop $T/srv"
set -euo pipefail

ND_NAME=nginx_dav.sh
err() { printf '%s: %s\n' "$ND_NAME" "$*" >&2; }

usage() {
  err "usage: nginx_dav.sh start DIR [--token T] [--basic USER:PASS] [--readonly] [--strict-dav] [--tls] [--cache-of URL] | stop DIR"
  exit 2
}

# The master's pid, when DIR's nginx runs.
master_pid() {
  local pid
  [[ -f $1/nginx.pid ]] || return 1
  pid=$(tr -dc 0-9 <"$1/nginx.pid")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  # A recycled pid would not be an nginx master running our config.
  grep -qa "nginx" "/proc/$pid/cmdline" 2>/dev/null || return 1
  printf '%s\n' "$pid"
}

# Pids of the nginx processes that have DIR's error log open: the master and
# its workers, and workers left behind by a master that was killed.
ours() {
  local log=$1/logs/error.log p
  # one find over every process's fds (no fork per fd: a busy machine has many)
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$log" 2>/dev/null | cut -d/ -f3 | sort -u |
    while read -r p; do
      [[ $(cat "/proc/$p/comm" 2>/dev/null) == nginx ]] && printf '%s\n' "$p"
    done
  return 0
}

# alive PID: running and not a zombie (a daemon's exit is reaped by init,
# which may take a while).
alive() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [[ ${st:0:1} != Z ]]
}

stop() {
  local dir=$1 pid i left
  [[ -d $dir ]] || return 0
  dir=$(realpath "$dir")
  if pid=$(master_pid "$dir"); then
    kill -QUIT "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do # 5 s for a graceful stop
      alive "$pid" || break
      sleep 0.05
    done
  fi
  for ((i = 0; i < 3; i++)); do
    left=$(ours "$dir")
    [[ -n $left ]] || break
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.2
  done
  [[ -z $(ours "$dir") ]] || { err "$dir: nginx processes survive SIGKILL: $(ours "$dir" | tr '\n' ' ')"; return 1; }
  rm -f "$dir/nginx.pid"
}

free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

make_tls() {
  local d=$1/tls
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
      -keyout ca.key -out ca.pem -subj "/CN=kiln test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout server.key -out server.csr -subj "/CN=127.0.0.1"
    printf '%s\n' "subjectAltName=IP:127.0.0.1" "basicConstraints=CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
      -extfile server.ext -out server.pem
  ) >"$1/logs/openssl.log" 2>&1 || { err "openssl failed: $(tail -5 "$1/logs/openssl.log")"; return 1; }
  chmod 600 "$d"/*.key
}

write_conf() {
  local dir=$1 port=$2 user_line="" listen auth="" ro="" dav="dav_methods PUT DELETE;
      create_full_put_path on;"
  ((EUID == 0)) && user_line="user root;"
  listen="listen 127.0.0.1:$port;"
  ((TLS)) && listen="listen 127.0.0.1:$port ssl http2;
    ssl_certificate $dir/tls/server.pem;
    ssl_certificate_key $dir/tls/server.key;"
  [[ -n $TOKEN ]] && auth="if (\$http_authorization != \"Bearer $TOKEN\") { return 401; }"
  [[ -n $BASIC ]] && auth="auth_basic \"kiln\";
    auth_basic_user_file $dir/conf/htpasswd;"
  ((READONLY)) && ro="limit_except GET HEAD { deny all; }"
  ((STRICT)) && dav="dav_methods PUT DELETE MKCOL;"
  local serve="root $dir/root;
      log_not_found off;
      $dav
      dav_access user:rw group:r all:r;
      client_max_body_size 1g;
      $ro" cache_path=""
  if [[ -n $CACHE_OF ]]; then
    cache_path="proxy_cache_path $dir/cache levels=1:2 keys_zone=kiln:10m max_size=10g inactive=30d use_temp_path=off;
  upstream origin { server ${CACHE_OF#http://}; keepalive 32; }"
    serve="limit_except GET HEAD { deny all; }
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
      proxy_cache kiln;
      proxy_cache_key \$uri;
      proxy_cache_valid 200 365d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 60s;
      proxy_cache_lock_age 60s;
      add_header X-Cache \$upstream_cache_status;"
  fi
  cat >"$dir/conf/nginx.conf" <<EOF
# written by tests/integration/nginx_dav.sh
$user_line
daemon on;
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  access_log $dir/logs/access.log;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  sendfile on;
  keepalive_requests 100000;
  $cache_path
  server {
    $listen
    server_name 127.0.0.1;
    $auth
    location / {
      $serve
    }
  }
}
EOF
}

start() {
  local dir=$1 port url scheme=http attempt rc curl_args=() deadline
  mkdir -p "$dir"
  dir=$(realpath "$dir")
  if master_pid "$dir" >/dev/null; then err "$dir: nginx already runs there"; return 1; fi
  mkdir -p "$dir"/{conf,root,logs,tmp}
  command -v nginx >/dev/null || { err "nginx is not installed"; return 1; }
  if ((TLS)); then
    make_tls "$dir" || return 1
    scheme=https
    curl_args+=(--cacert "$dir/tls/ca.pem")
  fi
  if [[ -n $BASIC ]]; then
    local u=${BASIC%%:*} p=${BASIC#*:}
    printf '%s:%s\n' "$u" "$(openssl passwd -apr1 "$p")" >"$dir/conf/htpasswd"
    chmod 644 "$dir/conf/htpasswd"
  fi
  # A free port: the kernel picks one; another process may take it before
  # nginx binds, so a bind failure is retried with a new port (bounded).
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$(free_port)
    write_conf "$dir" "$port"
    rc=0
    nginx -p "$dir" -c "$dir/conf/nginx.conf" -e "$dir/logs/error.log" >"$dir/logs/start.log" 2>&1 || rc=$?
    ((rc == 0)) && break
    if grep -q "Address already in use" "$dir/logs/start.log" "$dir/logs/error.log" 2>/dev/null; then
      stop "$dir"
      continue
    fi
    err "nginx did not start (exit $rc): $(cat "$dir/logs/start.log")"
    stop "$dir"
    return 1
  done
  ((rc == 0)) || { err "no free port after $attempt attempts"; return 1; }
  url="$scheme://127.0.0.1:$port"
  # Ready when it answers (any status: 401 with a token is an answer).
  deadline=$((SECONDS + 10))
  until curl -s -o /dev/null --max-time 2 "${curl_args[@]}" "$url/"; do
    if ((SECONDS >= deadline)) || ! master_pid "$dir" >/dev/null; then
      err "nginx at $url did not answer within 10 s; error log:"
      tail -20 "$dir/logs/error.log" >&2 2>/dev/null || true
      stop "$dir"
      return 1
    fi
    sleep 0.1
  done
  printf '%s\n' "$url" >"$dir/url"
  printf '%s\n' "$url"
  if ((TLS)); then
    printf '%s\n' "$dir/tls/ca.pem" >"$dir/ca_file"
    printf '%s\n' "$dir/tls/ca.pem"
  fi
}

(($# >= 2)) || usage
cmd=$1 dir=$2
shift 2
TOKEN="" BASIC="" READONLY=0 STRICT=0 TLS=0 CACHE_OF=""
while (($#)); do
  case $1 in
    --token) (($# >= 2)) || usage; TOKEN=$2; shift 2 ;;
    --basic) (($# >= 2)) || usage; BASIC=$2; shift 2 ;;
    --readonly) READONLY=1; shift ;;
    --strict-dav) STRICT=1; shift ;;
    --tls) TLS=1; shift ;;
    --cache-of) (($# >= 2)) || usage; CACHE_OF=$2; shift 2 ;;
    *) usage ;;
  esac
done
# The token goes into nginx.conf inside double quotes: keep it to safe characters.
[[ -z $TOKEN || $TOKEN =~ ^[A-Za-z0-9._~+/=-]+$ ]] || { err "--token: use [A-Za-z0-9._~+/=-] only"; exit 2; }
[[ -z $BASIC || $BASIC =~ ^[^:]+:.+$ ]] || { err "--basic wants USER:PASS"; exit 2; }
[[ -z $TOKEN || -z $BASIC ]] || { err "--token and --basic exclude each other"; exit 2; }
[[ -z $CACHE_OF || $CACHE_OF =~ ^http://[A-Za-z0-9.-]+:[0-9]+$ ]] || { err "--cache-of wants http://HOST:PORT"; exit 2; }
case $cmd in
  start) start "$dir" ;;
  stop) stop "$dir" ;;
  *) usage ;;
esac
