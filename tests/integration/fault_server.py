#!/usr/bin/env python3
"""A small HTTP/1.1 file server with injectable faults, for the remote cache tests.

fault_server.py --port-file F [--root DIR] [--mode MODE] [--token T] [--log FILE]

Binds 127.0.0.1:0 and writes the port to F. Serves GET/HEAD/PUT of files under
--root (PUT stores atomically: temp file + rename). Modes:
  ok          normal
  500         every request answers 500
  409         every PUT answers 409 Conflict (a WebDAV collection that cannot be made)
  stall       read the request, never answer (holds at most 120 s)
  truncate    GET sends the full Content-Length but half the bytes, then closes
  flaky:N     the first N requests answer 503, then ok
  readonly    PUT answers 403
  garbage     GET returns wrong bytes of the same length
PUT /_mode with the mode in the body switches the mode at runtime.
--token T: a request without "Authorization: Bearer T" gets 401.
--log FILE: one line per request "METHOD PATH STATUS auth=yes|no [tok=H]" (never
  the token; H: the first 8 hex of the SHA-256 of its x-amz-security-token).

--upstream URL: a proxy instead of a file server: every request that no fault
answers goes to URL as it came (its Host header too, so an AWS signature made
for this server checks there), and the answer comes back. Two more modes, S3's
answers that servers used in tests do not give:
  s3-expired-token:TOKEN[:GATE]  a request whose x-amz-security-token is TOKEN
                gets 400 ExpiredToken; with GATE, only once the file GATE
                exists (the request is logged "held" and waits at most 120 s),
                so a test can change the credentials while a client waits
  s3-region:REGION  a signed request whose credential scope names another
                region gets AWS's 400 AuthorizationHeaderMalformed naming REGION
"""
import argparse
import hashlib
import http.client
import os
import re
import signal
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STALL_MAX_S = 120


HOP_BY_HOP = {"connection", "keep-alive", "expect", "transfer-encoding", "te", "trailer",
              "upgrade", "proxy-authorization", "proxy-authenticate"}


def s3_error(code, message, extra=""):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '%s<RequestId>fault</RequestId></Error>' % (code, message, extra)).encode()


class State:
    def __init__(self, mode, token, log, root, upstream=None):
        self.lock = threading.Lock()
        self.mode = mode
        self.flaky_left = 0
        self.token = token
        self.log = log
        self.root = root
        self.upstream = upstream  # (host, port) or None
        self.set_mode(mode)

    def set_mode(self, mode):
        with self.lock:
            self.mode = mode
            if mode.startswith("flaky:"):
                self.flaky_left = int(mode.split(":", 1)[1])

    def take_mode(self):
        """The mode for one request (flaky counts down)."""
        with self.lock:
            if self.mode.startswith("flaky:"):
                if self.flaky_left > 0:
                    self.flaky_left -= 1
                    return "flaky"
                return "ok"
            return self.mode

    def write_log(self, line):
        if not self.log:
            return
        with self.lock:
            with open(self.log, "a") as f:
                f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fault_server/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _auth(self):
        st = self.server.state
        got = self.headers.get("Authorization")
        ok = st.token is None or got == "Bearer " + st.token
        return ok, got is not None

    def _path(self):
        rel = self.path.split("?", 1)[0].lstrip("/")
        parts = [p for p in rel.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            return None
        return os.path.join(self.server.state.root, *parts)

    def _answer(self, status, body=b"", length=None, send_body=True):
        self._logged(status)  # before answering: a client may read the log next
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def _logged(self, status):
        ok, present = self._auth()
        tok = self.headers.get("x-amz-security-token")
        self.server.state.write_log(
            "%s %s %s auth=%s%s" % (self.command, self.path, status, "yes" if present else "no",
                                   " tok=" + hashlib.sha256(tok.encode()).hexdigest()[:8]
                                   if tok else ""))

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        data = b""
        while len(data) < n:
            chunk = self.rfile.read(n - len(data))
            if not chunk:
                break
            data += chunk
        return data

    def _common(self):
        """Handles auth and the faults shared by every method; returns the
        mode to go on with, or None when answered."""
        st = self.server.state
        if self.command == "PUT" and self.path == "/_mode":
            st.set_mode(self._read_body().decode().strip())
            self._answer(200)
            return None
        if self.command == "PUT":
            self._body = self._read_body()
        mode = st.take_mode()
        if mode == "stall":
            self._logged(0)
            deadline = time.time() + STALL_MAX_S
            while time.time() < deadline and not self.server.stopping:
                time.sleep(0.1)
            self.close_connection = True
            return None
        ok, _ = self._auth()
        if not ok:
            self._answer(401, b"unauthorized\n")
            return None
        if mode == "500":
            self._answer(500, b"injected failure\n")
            return None
        if mode == "409" and self.command == "PUT":
            self._answer(409, b"conflict\n")
            return None
        if mode == "flaky":
            self._answer(503, b"flaky\n")
            return None
        return mode

    def _s3_fault(self, mode):
        """The s3-* modes: answers and returns True, or returns False."""
        if mode.startswith("s3-expired-token:"):
            parts = mode.split(":", 2)
            if self.headers.get("x-amz-security-token") != parts[1]:
                return False
            if len(parts) > 2:
                self._logged("held")
                deadline = time.time() + STALL_MAX_S
                while not os.path.exists(parts[2]) and time.time() < deadline:
                    time.sleep(0.05)
            self._answer(400, s3_error("ExpiredToken", "The provided token has expired."),
                         send_body=self.command != "HEAD")
            return True
        if mode.startswith("s3-region:"):
            want = mode.split(":", 1)[1]
            m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/s3/",
                          self.headers.get("Authorization") or "")
            if not m or m.group(1) == want:
                return False
            self._answer(400, s3_error(
                "AuthorizationHeaderMalformed",
                "The authorization header is malformed; the region '%s' is wrong; expecting '%s'"
                % (m.group(1), want), "<Region>%s</Region>" % want),
                send_body=self.command != "HEAD")
            return True
        return False

    def _proxy(self, mode):
        """Forwards the request upstream as it came, and its answer back."""
        if self._s3_fault(mode):
            return
        host, port = self.server.state.upstream
        body = getattr(self, "_body", None) if self.command in ("PUT", "POST") else None
        if self.command == "POST":
            body = self._read_body()
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                    conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(body or b"")
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self._answer(502, ("upstream: %s\n" % e).encode())
            return
        finally:
            conn.close()
        self._logged(resp.status)
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() not in ("content-length", "date", "server"):
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)

    def _get(self, send_body):
        mode = self._common()
        if mode is None:
            return
        if self.server.state.upstream:
            self._proxy(mode)
            return
        path = self._path()
        if path is None or not os.path.isfile(path):
            self._answer(404, b"not found\n", send_body=send_body)
            return
        with open(path, "rb") as f:
            data = f.read()
        if send_body and mode == "truncate":
            self._logged(200)
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "garbage":
            data = bytes((b ^ 0x5A) for b in data) if data else data
        self._answer(200, data, send_body=send_body)

    def do_GET(self):
        self._get(True)

    def do_HEAD(self):
        self._get(False)

    def _proxy_only(self):
        """POST and DELETE: forwarded by a proxy; a file server has neither."""
        mode = self._common()
        if mode is not None and self.server.state.upstream:
            self._proxy(mode)
        elif mode is not None:
            self._answer(405, ("no %s here\n" % self.command).encode())

    do_POST = _proxy_only
    do_DELETE = _proxy_only

    def do_PUT(self):
        mode = self._common()
        if mode is None:
            return
        if self.server.state.upstream:
            self._proxy(mode)
            return
        if mode == "readonly":
            self._answer(403, b"read-only\n")
            return
        path = self._path()
        if path is None:
            self._answer(400, b"bad path\n")
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".put-")
        with os.fdopen(fd, "wb") as f:
            f.write(self._body)
        os.replace(tmp, path)
        self._answer(201)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--root", default=".")
    ap.add_argument("--mode", default="ok")
    ap.add_argument("--token")
    ap.add_argument("--log")
    ap.add_argument("--upstream", help="http://HOST:PORT: a proxy, not a file server")
    a = ap.parse_args()
    upstream = None
    if a.upstream:
        m = re.match(r"^http://([^/:]+):(\d+)/?$", a.upstream)
        if not m:
            ap.error("--upstream is http://HOST:PORT")
        upstream = (m.group(1), int(m.group(2)))

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.stopping = False
    srv.state = State(a.mode, a.token, a.log, os.path.abspath(a.root), upstream)

    def stop(signum, frame):
        srv.stopping = True
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.replace(tmp, a.port_file)
    srv.serve_forever(poll_interval=0.2)
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
