"""What the proxy-mode tests share: a real Python HTTP/1.1 backend (`http.server`, as a new user
would try it first) that records what it saw and holds what a test gates, the proxy's
configuration in front of it, a raw client that sees each byte, and readings of the server's
process (its metrics, memory, sockets and open files).
"""
import hashlib
import json
import os
import socket
import threading
import unittest
from http.server import BaseHTTPRequestHandler

from server_harness import ALICE, Server, base_config, start_http


class Recorder:
    """What the backend saw, request by request, and the gates a test opens."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []
        self.closed = 0  # connections the backend closed after an idle wait
        self.gates = {}

    def gate(self, name):
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def record(self, entry):
        with self.lock:
            self.seen.append(entry)

    def paths(self):
        with self.lock:
            return [e["path"] for e in self.seen]

    def find(self, path):
        with self.lock:
            for e in self.seen:
                if e["path"] == path:
                    return e
        return None


class Backend:
    """http.server speaking HTTP/1.1 with keep-alive: answers `Expect: 100-continue` with an
    interim 100 on its own, as Python's server does for every HTTP/1.1 client."""

    def __init__(self, idle_close_s=None):
        recorder = self.recorder = Recorder()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_close_s  # a backend's keep-alive timeout: closes an idle connection

            def finish(self):
                super().finish()
                with recorder.lock:
                    recorder.closed += 1

            def body(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b""):
                                pass
                            return data, "chunked"
                        data += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length", "0"))
                return self.rfile.read(length), "length"

            def answer(self):
                data, framing = self.body() if self.command not in ("GET", "HEAD") or \
                    "Content-Length" in self.headers or "Transfer-Encoding" in self.headers \
                    else (b"", "none")
                path = self.path.split("?")[0]
                recorder.record({"path": self.path, "method": self.command,
                                 "headers": [(k, v) for k, v in self.headers.items()],
                                 "body_len": len(data), "framing": framing,
                                 "body_sha": hashlib.sha256(data).hexdigest()})
                if path == "/stream":  # server-sent events: one now, one once the test has it
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.chunk(b"data: first\n\n")
                    recorder.gate("stream").wait(10)
                    self.chunk(b"data: second\n\n")
                    self.chunk(b"")
                    return
                if path == "/hold":  # holds its slot until the test opens the gate
                    recorder.gate("hold").wait(20)
                if path == "/closing":  # framed by the connection's close, as HTTP/1.0 is
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b"until the end")
                    self.close_connection = True
                    return
                if path in ("/204", "/304"):
                    self.send_response(int(path[1:]))
                    self.send_header("X-Cost", "1")
                    self.end_headers()
                    return
                body = json.dumps({"path": self.path, "method": self.command,
                                   "body_len": len(data)}).encode()
                if path == "/five":
                    body = b"12345"
                self.send_response(200)
                self.send_header("X-Cost", "1.5")
                if path == "/hop":  # hop-by-hop headers the client must not see
                    self.send_header("Connection", "X-Backend-Private")
                    self.send_header("X-Backend-Private", "secret")
                    self.send_header("Keep-Alive", "timeout=5")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = answer  # noqa: N815

            def log_message(self, *args):
                pass

        self.httpd = start_http(Handler)
        self.port = self.httpd.server_address[1]

    def close(self):
        for gate in list(self.recorder.gates.values()):
            gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def proxy_config(backend, **overrides):
    config = base_config(mode="proxy", slots=2,
                         proxy={"backend": f"127.0.0.1:{backend.port}", "timeout_ms": 3000})
    config["limits"]["read_timeout_ms"] = 5000
    config.update(overrides)
    return config


class ProxyCase(unittest.TestCase):
    """A proxy with the default configuration in front of a fresh backend, per test; the server
    must exit cleanly."""

    def setUp(self):
        self.backend = Backend()
        self.server = Server(proxy_config(self.backend))

    def tearDown(self):
        try:
            self.assertEqual(self.server.stop(), 0, self.server.log())
        finally:
            self.backend.close()


class Client:
    """One raw client connection, so that each byte and each response is the test's to see."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def head(self):
        """The next response's status and headers (lower-cased names, in order)."""
        status = self.line()
        headers = []
        while True:
            line = self.line()
            if not line:
                break
            name, _, value = line.partition(b":")
            headers.append((name.decode().strip().lower(), value.decode().strip()))
        return int(status.split()[1]), headers

    def exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def response(self, head_request=False):
        """Status, headers and body of the next final response; interim ones are returned
        in `interim`."""
        interim = []
        while True:
            status, headers = self.head()
            if 100 <= status < 200:
                interim.append(status)
                continue
            break
        h = dict(headers)
        if head_request or status in (204, 304):
            body = b""
        elif h.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line():
                        pass
                    break
                body += self.exactly(size)
                self.line()
        elif "content-length" in h:
            body = self.exactly(int(h["content-length"]))
        else:
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            body, self.buf = self.buf, b""
        return status, headers, body, interim

    def close(self):
        self.sock.close()


def request(method, path, key=ALICE, headers=(), body=None, version="HTTP/1.1"):
    lines = [f"{method} {path} {version}", "Host: front.example"]
    if key:
        lines.append(f"Authorization: Bearer {key}")
    lines += [f"{k}: {v}" for k, v in headers]
    if body is not None and not any(k.lower() in ("content-length", "transfer-encoding")
                                    for k, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def names(headers):
    return [k.lower() for k, _ in headers]


def metric(server, name):
    res, body = server.admin("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def socket_inodes(pid):
    """The inodes of the sockets process `pid` holds descriptors to (/proc/PID/net/tcp's)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def unread_on(pid, port):
    """The sockets on `port` the server holds, and the bytes they have left unread."""
    inodes = socket_inodes(pid)
    held, unread = 0, 0
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] != "0A" and \
                    fields[9] in inodes:
                held += 1
                unread += int(fields[4].split(":")[1], 16)
    return held, unread


def files_open_in(pid, directory):
    """The server's descriptors on files in `directory`: a file with no name shows there as
    `DIR/#INODE (deleted)` (O_TMPFILE) or `DIR/NAME (deleted)`."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(directory + "/"):
            count += 1
    return count
