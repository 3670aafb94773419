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
--log FILE: one line per request "METHOD PATH STATUS auth=yes|no" (never the token).
"""
import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STALL_MAX_S = 120


class State:
    def __init__(self, mode, token, log, root):
        self.lock = threading.Lock()
        self.mode = mode
        self.flaky_left = 0
        self.token = token
        self.log = log
        self.root = root
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
        self.server.state.write_log(
            "%s %s %d auth=%s" % (self.command, self.path, status, "yes" if present else "no"))

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

    def _get(self, send_body):
        mode = self._common()
        if mode is None:
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

    def do_PUT(self):
        mode = self._common()
        if mode is None:
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
    a = ap.parse_args()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.stopping = False
    srv.state = State(a.mode, a.token, a.log, os.path.abspath(a.root))

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
