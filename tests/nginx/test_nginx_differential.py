#!/usr/bin/env python3
# One file: one harness; its corpus, backend, nginx setup and allowed differences are one comparison.
"""creditloop-server's proxy mode against Debian's nginx: one corpus, one backend, every difference.

Usage: test_nginx_differential.py --server PATH [--nginx /usr/sbin/nginx] [--cases GLOB] [--dump]
                                  [unittest args]

Three processes on loopback, on ports the kernel chose:

- a recording backend (raw sockets, a thread per connection) that keeps, for every request, its
  request line, its header list in order and original case, its body after de-framing and how it
  was framed, and answers from a script chosen by the path (below);
- nginx, configured as a careful operator would put it in front of the same backend (the
  configuration, with the reason for each choice, is `nginx_conf`);
- creditloop-server in proxy mode in front of the same backend, one tenant `alice`.

The same corpus of requests (raw bytes, so that every byte is ours) goes through each, the two
runs side by side. Every request carries a unique id (`rid=` in its target) that the backend
echoes (`X-Echo-Rid`, and in the body), so that each response is matched to its request. Per
case, the test compares what the backend received and what the client got, prints one table of
every difference, and passes only when each difference is in ALLOWED. It also checks, for either
proxy, what holds regardless of nginx: no tenant header but the proxy's own reaches the backend,
and every response is its own request's.

Not compared, because they legitimately differ (the comparison is otherwise byte for byte, after
the id and the backend's address are replaced by placeholders):
- toward the backend: `Content-Length` and `Transfer-Encoding` (compared as the request's
  framing instead), and the `keep-alive`/`close` tokens of `Connection` (each proxy manages its
  own backend connections);
- anywhere, a header value of 32 hex digits (a per-request random id) is compared as that shape;
- toward the client: `Date` and `Server` (nginx writes its own), `X-Creditloop-Class`,
  `X-Creditloop-Wait-Ms` and `X-Creditloop-Cost` (creditloop's, timing-dependent),
  `Content-Length` and `Transfer-Encoding` (compared as framing, and its legality for the
  client's HTTP version), the `keep-alive`/`close` tokens of `Connection` (compared as what the
  connection did next); and, of an answer the proxy made itself (no backend echo in it), its
  `Content-Type` and body.

Every wait is a read with a deadline on a socket, or a poll of a process; the only pauses are the
backend's between its event-stream events, which are the data of that case.
"""
import argparse
import fnmatch
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
sys.dont_write_bytecode = True  # nothing left beside the sources
import server_harness  # noqa: E402 - the Server wrapper: starts the binary, reads its ports

NGINX = "/usr/sbin/nginx"
KEY = "alice-key-0001"
TENANT = "alice"
CASE_GLOB = "*"
DUMP = False

RESPONSE_DEADLINE = 2.0  # a response on loopback that has not come by then is not coming
EXPECT_TIMEOUT = 1.0     # what curl waits for 100 Continue before it sends the body anyway
CLOSE_DEADLINE = 1.0     # a connection that is to close closes at once; after this it was left open
HELD_OPEN = 0.5          # a close-delimited body whose end came this long after its last byte
SSE_EVENTS, SSE_PAUSE = 4, 0.15
LARGE = 3 * 1024 * 1024
PROXY_TIMEOUT_MS = 1000  # both proxies' backend read timeout, under RESPONSE_DEADLINE
IDLE_TIMEOUT_MS = 1000   # both proxies' idle kept-alive client connection timeout

# case pattern -> difference (aspect pattern) -> why it is legitimate. Patterns are fnmatch's.
ALLOWED = [
    ("*", "req*.client.framing",
     "Content-Length, chunked or close-delimited are each legal; legality is its own row"),
    ("*", "req*.backend.framing",
     "either framing is legal toward an HTTP/1.1 backend; a proxy may hold the body (its body row "
     "is still compared)"),
    *[("resp-closes-mid-*", f"req1.client.{aspect}",
       "a proxy that holds the response can answer 502; one that streams it can only cut the "
       "connection short (nginx): either tells the client the response failed")
      for aspect in ("status", "response", "framing-legal")],
    ("resp-closes-mid-*", "next",
     "follows from the row above: after a 502 the connection may go on, after a cut it cannot"),
    # Where creditloop does what RFC 9110 asks and nginx does not (docs/server.md lists these).
    ("conn-names-x-secret", "req*.backend.header.x-secret",
     "RFC 9110 7.6.1: a header the client's Connection names is hop-by-hop; nginx passes it"),
    ("proxy-connection", "req*.backend.header.proxy-connection",
     "Proxy-Connection is hop-by-hop (RFC 9110 7.6.1 lists it as one to drop); nginx passes it"),
    ("proxy-authorization", "req*.backend.header.proxy-authorization",
     "RFC 9110 11.7.2: Proxy-Authorization is for the proxy, and this proxy takes none"),
    ("*", "req*.backend.header.trailer",
     "the request's trailers are not passed on, so neither is the Trailer header announcing them"),
    ("*", "req*.client.header.trailer",
     "the response's trailers are not passed on, so neither is the Trailer header announcing them"),
    ("*", "req*.client.header.x-foo",
     "RFC 9110 7.6.1: a header the backend's Connection names is hop-by-hop; nginx passes it"),
    ("*", "req*.client.header.upgrade",
     "Upgrade is hop-by-hop (RFC 9110 7.8) and this proxy carries no upgrade; nginx passes it"),
    ("*", "req*.client.header.proxy-authenticate",
     "RFC 9110 11.7.1: Proxy-Authenticate applies only to the next client on the chain, which "
     "is this proxy"),
    ("host-absolute-form", "req*.backend.header.host",
     "RFC 9112 3.2.2: with an absolute-form target the target's host wins over Host; nginx's "
     "$http_host keeps the header"),
    # Where creditloop adds what nginx leaves to configuration.
    ("*", "req*.*.header.x-request-id",
     "creditloop passes X-Request-Id through or makes one, both ways (nginx: $request_id, opt-in)"),
    # Interim responses: nginx 1.22 passes them on but then loses the connection's framing.
    ("*", "req*.client.interim",
     "interim responses are dropped, as the final response follows on the same connection"),
    ("resp-100-and-103", "next",
     "nginx 1.22 takes the backend's 100 as final and loses the connection; creditloop keeps it"),
    ("keep-alive-after-interim*", "*",
     "nginx 1.22 takes the backend's 100 as final and loses the connection; creditloop keeps it"),
]

BACKEND_DROP = {"content-length", "transfer-encoding"}
CLIENT_DROP = {"date", "server", "content-length", "transfer-encoding", "x-creditloop-class",
               "x-creditloop-wait-ms", "x-creditloop-cost"}
RID_RE = re.compile(r"r[nc]\d{5}")
HEX_ID_RE = re.compile(r"\b[0-9a-fA-F]{32}\b")
RIDS = {}  # rid -> "case#n", to name the request a stray response belonged to


# --- bytes on a socket -------------------------------------------------------------------------

class Timeout(Exception):
    pass


class Closed(Exception):
    pass


class ProtocolError(Exception):
    pass


class Truncated(Exception):
    pass


class Wire:
    """A socket's bytes as they arrive, with the time at which each recv brought them."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.base = 0        # stream offset of buf[0]
        self.arrivals = []   # (monotonic time, stream offset just past what that recv brought)
        self.eof = False

    def fill(self, deadline):
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout()
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 18)
        except socket.timeout:
            raise Timeout() from None
        except OSError:  # reset
            self.eof = True
            return False
        if not data:
            self.eof = True
            return False
        self.buf += data
        self.arrivals.append((time.monotonic(), self.base + len(self.buf)))
        return True

    def take(self, n):
        data = bytes(self.buf[:n])
        del self.buf[:n]
        self.base += n
        return data

    def _until(self, marker, deadline, limit):
        start = 0
        while True:
            i = self.buf.find(marker, start)
            if i >= 0:
                return self.take(i + len(marker))
            if len(self.buf) > limit:
                raise ProtocolError("header section too long")
            start = max(0, len(self.buf) - len(marker) + 1)
            if not self.fill(deadline):
                return None

    def line(self, deadline, limit=65536):
        data = self._until(b"\r\n", deadline, limit)
        return None if data is None else data[:-2]

    def head(self, deadline, limit=65536):
        """Up to the blank line. None at a clean end before any byte."""
        data = self._until(b"\r\n\r\n", deadline, limit)
        if data is None and self.buf:
            raise Truncated("connection closed inside a header section")
        return data

    def body(self, n, deadline, into, marks):
        """Moves n bytes into `into` as they come; False if the connection closed first."""
        while n > 0:
            if not self.buf and not self.fill(deadline):
                return False
            piece = self.take(min(n, len(self.buf)))
            into += piece
            n -= len(piece)
            marks.append((self.base, len(into)))
        return True

    def time_of(self, offset):
        for t, end in self.arrivals:
            if end >= offset:
                return t
        return None


def parse_head(raw):
    lines = raw[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name.strip() != name or line[:1] in b" \t":
            raise ProtocolError(f"bad header line {line[:60]!r}")
        headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
    return lines[0].decode("latin-1"), headers


def values(headers, name):
    return [v for n, v in headers if n.lower() == name]


def tokens(headers, name):
    return [t.strip().lower() for v in values(headers, name) for t in v.split(",") if t.strip()]


def read_chunked(w, deadline, into, marks):
    """De-chunks into `into`; returns (extensions, trailers)."""
    extensions = []
    while True:
        line = w.line(deadline)
        if line is None:
            raise Truncated("connection closed inside a chunked body")
        size, _, ext = line.partition(b";")
        if not re.fullmatch(rb"[0-9A-Fa-f]+", size.rstrip(b" \t")):
            raise ProtocolError(f"bad chunk size line {line[:40]!r}")
        if ext:
            extensions.append(";" + ext.decode("latin-1"))
        n = int(size, 16)
        if n == 0:
            break
        if not w.body(n, deadline, into, marks):
            raise Truncated("connection closed inside a chunk")
        crlf = w.line(deadline)
        if crlf is None:
            raise Truncated("connection closed inside a chunked body")
        if crlf:
            raise ProtocolError("chunk data longer than its size")
    trailers = []
    while True:
        line = w.line(deadline)
        if line is None:
            raise Truncated("connection closed inside the trailer section")
        if not line:
            return extensions, trailers
        n, _, v = line.partition(b":")
        trailers.append((n.decode("latin-1"), v.strip().decode("latin-1")))


# --- the recording backend ---------------------------------------------------------------------

class Record:
    def __init__(self, conn, seq):
        self.conn, self.seq = conn, seq
        self.method = self.target = self.version = ""
        self.headers = []
        self.framing = "none"
        self.body = bytearray()
        self.extensions = []
        self.trailers = []
        self.rid = None
        self.error = None
        self.sse_sent = []


def large_body(rid):
    first = f"rid={rid}\n".encode()
    pattern = b"0123456789abcdef" * 4096
    out = bytearray(first)
    while len(out) < LARGE:
        out += pattern
    return bytes(out[:LARGE])


class RecordingBackend:
    """HTTP/1.1 on raw sockets; records each request and answers from the script its path names.

    /echo (and any other path)  200, Content-Length, the id, method and body's size and digest
    /chunked                    200, three chunks
    /close                      200, no length: the body ends when the connection closes
    /sse                        200, text/event-stream, chunked, SSE_EVENTS events SSE_PAUSE apart
    /large, /large-chunked      200, LARGE bytes with Content-Length, or in 64 KiB chunks
    /204, /304                  no body
    /head5                      GET: Content-Length: 5, "hello"; HEAD: the same head, no body
    /interim                    100 Continue and 103 Early Hints, then 200
    /midclose, /midclose-chunked  the connection closes inside the body
    /hop                        hop-by-hop response headers, chunked with a trailer, Connection: close
    /hop-ka                     hop-by-hop response headers on a kept-alive connection
    A request with `Expect: 100-continue` is answered 100 Continue before its body is read, as
    Python's http.server does. To an HTTP/1.0 request a chunked script's body is close-delimited.
    """

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.records = {}    # rid -> [Record]
        self.anonymous = []  # records without an id
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.listener.close()

    def received(self, rid):
        with self.lock:
            return list(self.records.get(rid, []))

    def all_records(self):
        with self.lock:
            return [r for rs in self.records.values() for r in rs] + list(self.anonymous)

    def _accept(self):
        n = 0
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            n += 1
            threading.Thread(target=self._serve, args=(sock, n), daemon=True).start()

    def _store(self, rec):
        with self.lock:
            if rec.rid:
                self.records.setdefault(rec.rid, []).append(rec)
            else:
                self.anonymous.append(rec)

    def _serve(self, sock, conn_id):
        w = Wire(sock)
        seq = 0
        try:
            while True:
                deadline = time.monotonic() + 60
                raw = w.head(deadline)
                if raw is None:
                    return
                raw = raw.lstrip(b"\r\n")
                seq += 1
                rec = Record(conn_id, seq)
                if not self._request(sock, w, raw, rec, deadline):
                    return
        except (Timeout, Truncated, ProtocolError, OSError):
            return
        finally:
            sock.close()

    def _request(self, sock, w, raw, rec, deadline):
        try:
            start, rec.headers = parse_head(raw)
        except ProtocolError as e:
            rec.error = str(e)
            self._store(rec)
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return False
        parts = start.split(" ")
        rec.method, rec.target, rec.version = parts if len(parts) == 3 else (start, "", "")
        m = re.search(r"rid=(r[nc]\d{5})", rec.target)
        rec.rid = m[1] if m else None
        if "100-continue" in tokens(rec.headers, "expect"):
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        te = tokens(rec.headers, "transfer-encoding")
        cl = values(rec.headers, "content-length")
        try:
            if te:
                rec.framing = "chunked" if te[-1] == "chunked" else "Transfer-Encoding " + ",".join(te)
                if cl:
                    rec.framing += " and Content-Length"
                if te[-1] != "chunked":
                    raise ProtocolError("a request's last transfer coding must be chunked")
                rec.extensions, rec.trailers = read_chunked(w, deadline, rec.body, [])
            elif cl:
                rec.framing = "Content-Length"
                if len(set(cl)) != 1 or not cl[0].isdigit():
                    rec.framing = "Content-Length " + " | ".join(cl)
                    raise ProtocolError("bad Content-Length")
                if not w.body(int(cl[0]), deadline, rec.body, []):
                    raise Truncated("connection closed inside the body")
        except (ProtocolError, Truncated, Timeout) as e:
            rec.error = str(e) or type(e).__name__
            self._store(rec)
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return False
        self._store(rec)
        return self._respond(sock, rec)

    def _respond(self, sock, rec):
        path = rec.target.split("?", 1)[0]
        if "://" in path:  # absolute form
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        rid = rec.rid or "-"
        v10 = rec.version == "HTTP/1.0"
        conn = tokens(rec.headers, "connection")
        keep = "close" not in conn and (not v10 or "keep-alive" in conn)
        head_only = rec.method == "HEAD"
        base = [("Server", "recording-backend"), ("X-Echo-Rid", rid)]

        def send(status, headers, body=b"", length=True, keep_it=keep):
            hs = base + headers
            if length:
                hs.append(("Content-Length", str(len(body))))
            if not keep_it:
                hs.append(("Connection", "close"))
            elif v10:
                hs.append(("Connection", "keep-alive"))
            out = f"HTTP/1.1 {status}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) + "\r\n"
            sock.sendall(out.encode("latin-1") + (b"" if head_only else body))
            return keep_it

        def stream(status, headers, pieces, pauses=None, trailers=()):
            """Chunked to an HTTP/1.1 request, close-delimited to an HTTP/1.0 one."""
            chunked = not v10
            hs = base + headers + ([("Transfer-Encoding", "chunked")] if chunked else [])
            if not chunked or not keep:
                hs.append(("Connection", "close"))
            sock.sendall((f"HTTP/1.1 {status}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          "\r\n").encode("latin-1"))
            if head_only:
                return chunked and keep
            for i, p in enumerate(pieces):
                if pauses and i:
                    time.sleep(pauses)  # the stream's own timing: the data of the SSE case
                sock.sendall(b"%x\r\n%s\r\n" % (len(p), p) if chunked else p)
                rec.sse_sent.append(time.monotonic())
            if chunked:
                sock.sendall(b"0\r\n" + b"".join(f"{n}: {v}\r\n".encode() for n, v in trailers) +
                             b"\r\n")
            return chunked and keep

        text = [("Content-Type", "text/plain")]
        if path == "/chunked":
            return stream("200 OK", text, [f"rid={rid} part 1\n".encode(), b"part 2\n", b"part 3\n"])
        if path == "/close":
            hs = base + text
            sock.sendall(("HTTP/1.1 200 OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          "\r\n").encode() + (b"" if head_only else
                                              f"rid={rid} close-delimited body\n".encode()))
            return False
        if path == "/sse":
            events = [f"id: {k}\ndata: {rid} event {k}\n\n".encode() for k in range(1, SSE_EVENTS + 1)]
            return stream("200 OK", [("Content-Type", "text/event-stream"),
                                     ("Cache-Control", "no-cache")], events, pauses=SSE_PAUSE)
        if path == "/large":
            return send("200 OK", [("Content-Type", "application/octet-stream")], large_body(rid))
        if path == "/large-chunked":
            body = large_body(rid)
            return stream("200 OK", [("Content-Type", "application/octet-stream")],
                          [body[i:i + 65536] for i in range(0, len(body), 65536)])
        if path == "/204":
            return send("204 No Content", [], length=False)
        if path == "/304":
            return send("304 Not Modified", [("ETag", '"v1"')], length=False)
        if path == "/head5":
            return send("200 OK", text, b"hello")
        if path == "/interim":
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n"
                         b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            return send("200 OK", text, f"rid={rid} after 100 and 103\n".encode())
        if path == "/midclose":
            hs = base + text + [("Content-Length", "100000")]
            sock.sendall(("HTTP/1.1 200 OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          "\r\n").encode() + f"rid={rid}\n".encode().ljust(1000, b"x"))
            return False
        if path == "/midclose-chunked":
            hs = base + text + [("Transfer-Encoding", "chunked")]
            sock.sendall(("HTTP/1.1 200 OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          "\r\n").encode() + b"%x\r\nrid=%s\n\r\n" % (len(rid) + 5, rid.encode()) +
                         b"3e8\r\n" + b"y" * 500)
            return False
        hop = [("X-Foo", "bar"), ("Keep-Alive", "timeout=5, max=100"), ("Upgrade", "h2c"),
               ("Proxy-Authenticate", 'Basic realm="backend"')]
        if path == "/hop":
            hs = base + text + hop + [("Connection", "close, X-Foo, Upgrade"),
                                      ("Trailer", "X-Checksum"), ("Transfer-Encoding", "chunked")]
            body = f"rid={rid} hop-by-hop, closing\n".encode()
            sock.sendall(("HTTP/1.1 200 OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          "\r\n").encode() + b"%x\r\n%s\r\n0\r\nX-Checksum: abc123\r\n\r\n" %
                         (len(body), body))
            return False
        if path == "/hop-ka" and not v10:
            hs = base + text + hop + [("Connection", "X-Foo, Upgrade")]
            body = f"rid={rid} hop-by-hop, kept alive\n".encode()
            sock.sendall(("HTTP/1.1 200 OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in hs) +
                          f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
            return keep
        digest = hashlib.sha256(rec.body).hexdigest()[:16]
        return send("200 OK", text,
                    f"rid={rid} {rec.method} body={len(rec.body)} sha256={digest}\n".encode())


# --- the proxies -------------------------------------------------------------------------------

def nginx_conf(d, port, backend):
    return f"""# Written by test_nginx_differential.py: nginx as a careful operator would put it in front
# of the backend, to compare with creditloop-server's proxy mode.
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;

    # The same limits as creditloop's: 16 KiB of header, 8 MiB of body, 5 s to send a request,
    # a kept-alive client connection closed after {IDLE_TIMEOUT_MS} ms idle.
    large_client_header_buffers 4 16k;
    client_max_body_size 8m;
    client_header_timeout 5s;
    client_body_timeout 5s;
    keepalive_timeout {IDLE_TIMEOUT_MS}ms;
    # Kept at their defaults, and stated: a header with an underscore in its name is dropped
    # (underscores_in_headers off, ignore_invalid_headers on).

    # Kept-alive backend connections, as creditloop's pool.
    upstream backend {{
        server {backend};
        keepalive 8;
    }}

    # The client's Host, or the backend's address (what creditloop sends) when there is none.
    map $http_host $backend_host {{
        ""      "{backend}";
        default $http_host;
    }}

    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backend;
            # HTTP/1.1 with no Connection header toward the backend: what keepalive needs.
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # What creditloop does: the tenant's key stays with the proxy, its name goes on.
            # A header set here is never also passed from the client, in any spelling.
            proxy_set_header Authorization "";
            proxy_set_header X-Creditloop-Tenant {TENANT};
            proxy_set_header Host $backend_host;
            # Who the client was, appended to what it claimed.
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            # Streams are passed as they come, both ways: nothing is held for the comparison.
            proxy_buffering off;
            proxy_request_buffering off;
            # The same backend timeout as creditloop's proxy.timeout_ms.
            proxy_connect_timeout {PROXY_TIMEOUT_MS}ms;
            proxy_send_timeout {PROXY_TIMEOUT_MS}ms;
            proxy_read_timeout {PROXY_TIMEOUT_MS}ms;
            # Default retries: on a connection error or timeout, and never a non-idempotent
            # request once sent (proxy_next_upstream error timeout).
        }}
    }}
}}
"""


def exit_description(proc, wait=0.0):
    """How the process ended, or None while it runs; waits up to `wait` s for it to end."""
    try:
        code = proc.wait(timeout=wait) if wait else proc.poll()
    except subprocess.TimeoutExpired:
        code = None
    if code is None:
        return None
    if code < 0:
        return f"exited on {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Nginx:
    """nginx with its own prefix, logs and temp paths, listening on a socket we bound to port 0
    and hand it (nginx's inherited-socket protocol), so there is no race for the port."""
    name, letter = "nginx", "n"

    def __init__(self, binary, backend):
        self.binary, self.backend = binary, backend
        self.restarts = 0
        self._start()

    def _start(self):
        self.dir = tempfile.mkdtemp(prefix="cl-nginx-")
        if os.geteuid() == 0:
            os.chmod(self.dir, 0o755)  # the worker runs as nobody and creates its temp paths here
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        fd = self.listener.fileno()
        os.set_inheritable(fd, True)
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(nginx_conf(self.dir, self.port, self.backend.addr))
        self.stderr = open(os.path.join(self.dir, "stderr.log"), "w")
        self.proc = subprocess.Popen(
            [self.binary, "-p", self.dir, "-e", os.path.join(self.dir, "error.log"), "-c", conf,
             "-g", "daemon off;"],
            pass_fds=(fd,), env=dict(os.environ, NGINX=f"{fd};"), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        # Ready when it answers: the socket is already listening, so the request waits for it.
        run = probe(self, "nginx-start")
        if run[0] != "200 own response":
            raise AssertionError(f"nginx did not start: {run[0]}\n{self.log()}")

    def exited(self, wait=0.0):
        return exit_description(self.proc, wait)

    def log(self):
        out = []
        for name in ("stderr.log", "error.log"):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    out.append(f.read())
            except OSError:
                pass
        return "\n".join(out)

    def version(self):
        r = subprocess.run([self.binary, "-v"], capture_output=True, text=True)
        return (r.stderr or r.stdout).strip().split("/")[-1]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.listener.close()
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self):
        self.stop()
        self.restarts += 1
        self._start()


class Creditloop:
    name, letter = "creditloop", "c"

    def __init__(self, backend):
        self.config = server_harness.base_config(
            mode="proxy", slots=4, io_threads=2,
            plans={"plenty": {"P1": {"rate": 10000, "burst": 10000}}},
            tenants=[{"name": TENANT, "key": KEY, "plan": "plenty", "shares": 1}],
            proxy={"backend": backend.addr, "cost_header": "X-Cost",
                   "timeout_ms": PROXY_TIMEOUT_MS},
            limits={"header_bytes": 16384, "body_bytes": 8 << 20, "read_timeout_ms": 5000,
                    "idle_timeout_ms": IDLE_TIMEOUT_MS},
            shutdown_deadline_ms=2000)
        self.restarts = 0
        self.logs = []
        self._start()

    def _start(self):
        self.server = server_harness.Server(self.config)
        self.port = self.server.port

    def exited(self, wait=0.0):
        return exit_description(self.server.proc, wait)

    def log(self):
        return "\n".join(self.logs + [self.server.log()])

    def stop(self):
        self.server.stop()
        self.logs.append(self.server.log())

    def restart(self):
        self.stop()
        self.restarts += 1
        self._start()


# --- the client --------------------------------------------------------------------------------

class Req:
    def __init__(self, method="GET", path="/echo", version="1.1", headers=(), host="app.example",
                 body=b"", framing=None, chunks=None, trailers=(), expect=False, target=None):
        self.method, self.path, self.version = method, path, version
        self.headers, self.host, self.body = list(headers), host, body
        self.framing = framing or ("chunked" if chunks else "length" if body else "none")
        self.chunks, self.trailers, self.expect, self.target = chunks, list(trailers), expect, target

    def encode(self, rid):
        target = (self.target or self.path + "?rid={rid}").format(rid=rid)
        hs = [("Host", self.host)] if self.host is not None else []
        hs += [("User-Agent", "differential/1"), ("Accept", "*/*"),
               ("Authorization", f"Bearer {KEY}")] + self.headers
        if self.framing == "length":
            hs.append(("Content-Length", str(len(self.body))))
            body = self.body
        elif self.framing == "chunked":
            hs.append(("Transfer-Encoding", "chunked"))
            body = b"".join(b"%x%s\r\n%s\r\n" % (len(d), e.encode(), d) for d, e in self.chunks)
            body += b"0\r\n" + b"".join(f"{n}: {v}\r\n".encode() for n, v in self.trailers) + b"\r\n"
        else:
            body = b""
        if self.expect:
            hs.append(("Expect", "100-continue"))
        head = f"{self.method} {target} HTTP/{self.version}\r\n" + \
            "".join(f"{n}: {v}\r\n" for n, v in hs) + "\r\n"
        return head.encode("latin-1"), body

    def wants_close(self):
        conn = [t.strip().lower() for n, v in self.headers if n.lower() == "connection"
                for t in v.split(",")]
        return "close" in conn or (self.version == "1.0" and "keep-alive" not in conn)


class Case:
    def __init__(self, name, requests, pipelined=False, note=""):
        self.name, self.requests, self.pipelined, self.note = name, requests, pipelined, note


class Resp:
    def __init__(self):
        self.version = self.reason = ""
        self.status = 0
        self.headers = []
        self.body = bytearray()
        self.framing = "none"
        self.problems = []
        self.interims = []
        self.marks = []
        self.event_times = []
        self.interim_only = False


def read_response(w, method, deadline, r, client_version, stop_on_interim=False):
    """Reads one response into r (1xx interims are kept and skipped unless stop_on_interim)."""
    while True:
        raw = w.head(deadline)
        if raw is None:
            raise Closed()
        start, headers = parse_head(raw)
        m = re.fullmatch(r"HTTP/(\d\.\d) (\d{3})(?: (.*))?", start)
        if not m:
            raise ProtocolError(f"bad status line {start[:60]!r}")
        status = int(m[2])
        if 100 <= status < 200 and status != 101:
            r.interims.append(status)
            if stop_on_interim:
                r.status, r.interim_only = status, True
                return r
            continue
        break
    r.version, r.status, r.reason, r.headers = m[1], status, m[3] or "", headers
    te = tokens(headers, "transfer-encoding")
    cl = values(headers, "content-length")
    if te and cl:
        r.problems.append("both Transfer-Encoding and Content-Length")
    if len(set(cl)) > 1:
        r.problems.append("conflicting Content-Length values")
    if te and client_version == "1.0":
        r.problems.append("Transfer-Encoding sent to an HTTP/1.0 client")
    if status == 204 and (te or cl):
        r.problems.append("a 204 with " + ("Transfer-Encoding" if te else "Content-Length"))
    if status == 304 and te:
        r.problems.append("a 304 with Transfer-Encoding")
    if method == "HEAD" or status in (204, 304):
        r.framing = "none"
        return r
    try:
        if te:
            if te[-1] == "chunked":
                r.framing = "chunked"
                read_chunked(w, deadline, r.body, r.marks)
            else:
                r.framing = "close-delimited"
                read_to_close(w, deadline, r)
        elif cl:
            r.framing = "Content-Length"
            if not cl[0].isdigit():
                r.problems.append("bad Content-Length")
                return r
            if not w.body(int(cl[0]), deadline, r.body, r.marks):
                r.problems.append(f"connection closed inside the body: {len(r.body)} of {cl[0]} bytes")
        else:
            r.framing = "close-delimited"
            read_to_close(w, deadline, r)
    except Truncated as e:
        r.problems.append(str(e))
    except ProtocolError as e:
        r.problems.append(f"bad chunked framing ({e})")
    except Timeout:
        r.problems.append("the body did not end within the deadline")
    if "text/event-stream" in ",".join(values(headers, "content-type")):
        end = 0
        while True:
            i = r.body.find(b"\n\n", end)
            if i < 0:
                break
            end = i + 2
            offset = next((o for o, n in r.marks if n >= end), None)
            r.event_times.append(w.time_of(offset) if offset is not None else None)
    return r


def read_to_close(w, deadline, r):
    last = time.monotonic()
    try:
        while True:
            if w.buf:
                r.body += w.take(len(w.buf))
                r.marks.append((w.base, len(r.body)))
                last = time.monotonic()
            if not w.fill(deadline):
                break
    except Timeout:
        r.problems.append("no length, and the connection stayed open: the body never ended")
        return
    if time.monotonic() - last > HELD_OPEN:
        r.problems.append("no length, and the connection was held open: the body ended only "
                          "with the idle timeout")


class Exchange:
    def __init__(self, req, rid):
        self.req, self.rid = req, rid
        self.resp = None
        self.partial = Resp()
        self.error = None
        self.expect = None


def new_rid(proxy, label):
    with RID_LOCK:
        COUNTERS[proxy.letter] += 1
        rid = f"r{proxy.letter}{COUNTERS[proxy.letter]:05d}"
    RIDS[rid] = label
    return rid


RID_LOCK = threading.Lock()
COUNTERS = {"n": 0, "c": 0}


def exchange(w, ex, send=True):
    """Sends ex's request (unless already sent, pipelined) and reads its response."""
    head, body = ex.req.encode(ex.rid)
    v = ex.req.version
    try:
        if send and ex.req.expect and body:
            w.sock.sendall(head)
            try:
                r = read_response(w, ex.req.method, time.monotonic() + EXPECT_TIMEOUT, Resp(), v,
                                  stop_on_interim=True)
                if not r.interim_only:
                    ex.expect, ex.resp = "a final response before the body", r
                    return
                ex.expect = f"{r.status} before the body"
            except Timeout:
                ex.expect = f"no 100 Continue within {EXPECT_TIMEOUT:g} s: body sent anyway"
            w.sock.sendall(body)
        elif send:
            w.sock.sendall(head + body)
        ex.resp = read_response(w, ex.req.method, time.monotonic() + RESPONSE_DEADLINE,
                                ex.partial, v)
    except Timeout:
        ex.error = f"no response within {RESPONSE_DEADLINE:g} s"
    except Closed:
        ex.error = "connection closed with no response"
    except Truncated as e:
        ex.error = str(e)
    except ProtocolError as e:
        ex.error = f"malformed response: {e}"
    except OSError as e:
        ex.error = f"send failed: {e.strerror or e}"


def belongs(resp, rid):
    echo = values(resp.headers, "x-echo-rid")
    if not echo:
        m = RID_RE.search(resp.body[:200].decode("latin-1"))
        echo = [m[0]] if m else []
    if not echo:
        return "the proxy's own answer"
    if echo[0] == rid:
        return "own response"
    return f"response of {RIDS.get(echo[0], echo[0])}"


def brief(ex):
    if ex.error:
        return ex.error
    return f"{ex.resp.status} {belongs(ex.resp, ex.rid)}"


def persists(ex, w):
    r = ex.resp
    if ex.error or r is None or r.problems or w.eof or ex.expect == "a final response before the body":
        return False
    if "close" in tokens(r.headers, "connection") or ex.req.wants_close():
        return False
    return not (r.version == "1.0" and "keep-alive" not in tokens(r.headers, "connection"))


def probe(proxy, label):
    """A GET on a fresh connection: whether the proxy still answers each request with its own."""
    ex = Exchange(Req(), new_rid(proxy, label))
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=RESPONSE_DEADLINE) as s:
            exchange(Wire(s), ex)
    except OSError as e:
        ex.error = f"connect failed: {e.strerror or e}"
    return brief(ex), ex


class Run:
    def __init__(self, case):
        self.case = case
        self.exchanges = []
        self.next = None
        self.after = None
        self.fresh = None
        self.exited = None
        self.extra = []  # (label, Exchange): the follow-up and the probe, for the invariants


def run_case(case, proxy):
    run = Run(case)
    exs = [Exchange(r, new_rid(proxy, f"{case.name}#{i + 1}")) for i, r in enumerate(case.requests)]
    run.exchanges = exs
    try:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=RESPONSE_DEADLINE)
    except OSError as e:
        for ex in exs:
            ex.error = f"connect failed: {e.strerror or e}"
        return run
    w = Wire(sock)
    alive = True
    closing = False
    if case.pipelined:
        try:
            sock.sendall(b"".join(b"".join(ex.req.encode(ex.rid)) for ex in exs))
        except OSError as e:
            for ex in exs:
                ex.error = f"send failed: {e.strerror or e}"
        for ex in exs:
            if ex.error is None:
                exchange(w, ex, send=False)
        alive = persists(exs[-1], w)
    else:
        for ex in exs:
            if not alive:
                ex.error = "not sent: the connection had ended"
                continue
            exchange(w, ex)
            alive = persists(ex, w)
    last = exs[-1]
    if alive:
        f = Exchange(Req(), new_rid(proxy, f"{case.name} next"))
        exchange(w, f)
        run.next = brief(f)
        run.extra.append(("next", f))
    else:
        run.next = "not sent: the connection was to close" if last.resp and not last.error and \
            not last.resp.problems else "not sent: the connection was unusable"
        if last.resp and not last.error and not last.resp.problems and not w.eof:
            closing = True
    if closing:  # the response said the connection ends: does the server end it?
        extra = 0
        try:
            while w.fill(time.monotonic() + CLOSE_DEADLINE):
                extra += len(w.take(len(w.buf)))
            run.after = "closed by the server" + (f" after {extra} unexpected bytes" if extra else "")
        except Timeout:
            run.after = f"left open (no close within {CLOSE_DEADLINE:g} s)"
    sock.close()
    run.exited = proxy.exited()
    if run.exited:  # it died of this case: a new one for the next
        run.fresh = "the proxy exited (restarted)"
        proxy.restart()
        return run
    run.fresh, fex = probe(proxy, f"{case.name} fresh")
    run.extra.append(("fresh", fex))
    if run.fresh.startswith(("connect failed", "connection closed")):
        # Refused or dropped: a process on its way out (an abort) takes a moment to be reaped.
        run.exited = proxy.exited(wait=1.0)
        if run.exited:  # the same words whether the probe found it dying or dead
            run.fresh = "the proxy exited"
    if run.fresh != "200 own response":
        proxy.restart()  # a proxy left out of step would spoil every later case
        run.fresh += f" ({proxy.name} restarted)"
    return run


# --- comparison --------------------------------------------------------------------------------

def normalizer(rid, backend):
    def norm(text):
        text = text.replace(backend.addr, "<backend>")
        return RID_RE.sub(lambda m: "<rid>" if m[0] == rid else f"<rid of {RIDS.get(m[0], '?')}>",
                          text)
    return norm


def body_desc(data, norm):
    text = norm(bytes(data).decode("latin-1"))
    if not text:
        return "(empty)"
    if len(text) <= 160 and text.isprintable() or len(text) <= 160 and \
            all(c.isprintable() or c in "\r\n\t" for c in text):
        return repr(text)
    return f"{len(text)} bytes, sha256 {hashlib.sha256(text.encode('latin-1')).hexdigest()[:16]}"


def header_map(headers, drop, norm):
    out = {}
    for n, v in headers:
        k = n.lower()
        if k not in drop:  # a per-request random id (say, a request id) compares as its shape
            out.setdefault(k, []).append(HEX_ID_RE.sub("<32 hex digits>", norm(v)))
    if "connection" in out:
        toks = [t.strip().lower() for v in out["connection"] for t in v.split(",")]
        toks = [t for t in toks if t and t not in ("keep-alive", "close")]
        if toks:
            out["connection"] = [", ".join(toks)]
        else:
            del out["connection"]
    return {k: " | ".join(v) for k, v in out.items()}


def aspects(run, backend):
    a = {}
    for i, ex in enumerate(run.exchanges, 1):
        p = f"req{i}"
        norm = normalizer(ex.rid, backend)
        recs = backend.received(ex.rid)
        a[f"{p}.backend.received"] = f"{len(recs)} request(s)"
        if recs:
            rec = recs[0]
            a[f"{p}.backend.request-line"] = norm(f"{rec.method} {rec.target} {rec.version}")
            a[f"{p}.backend.framing"] = rec.framing
            a[f"{p}.backend.body"] = body_desc(rec.body, norm)
            if rec.extensions:
                a[f"{p}.backend.chunk-extensions"] = " ".join(rec.extensions)
            if rec.trailers:
                a[f"{p}.backend.trailers"] = "; ".join(f"{n}: {v}" for n, v in rec.trailers)
            if rec.error:
                a[f"{p}.backend.error"] = rec.error
            for k, v in header_map(rec.headers, BACKEND_DROP, norm).items():
                a[f"{p}.backend.header.{k}"] = v
        if ex.expect:
            a[f"{p}.client.expect"] = ex.expect
        r = ex.resp or ex.partial
        if r.interims:
            a[f"{p}.client.interim"] = ", ".join(map(str, r.interims))
        if ex.error:
            a[f"{p}.client.response"] = ex.error
            continue
        a[f"{p}.client.response"] = belongs(r, ex.rid)
        a[f"{p}.client.status"] = str(r.status)
        a[f"{p}.client.version"] = f"HTTP/{r.version}"
        a[f"{p}.client.framing"] = r.framing
        a[f"{p}.client.framing-legal"] = "; ".join(r.problems) if r.problems else "ok"
        own = belongs(r, ex.rid) == "the proxy's own answer"
        drop = CLIENT_DROP | ({"content-type"} if own else set())
        for k, v in header_map(r.headers, drop, norm).items():
            a[f"{p}.client.header.{k}"] = v
        a[f"{p}.client.body"] = "(the proxy's own)" if own and r.body else body_desc(r.body, norm)
        if r.event_times:
            times = [t for t in r.event_times if t is not None]
            if len(times) < SSE_EVENTS:
                a[f"{p}.client.streaming"] = f"{len(times)} of {SSE_EVENTS} events"
            else:
                spread = times[-1] - times[0]
                a[f"{p}.client.streaming"] = "streamed" if spread >= SSE_PAUSE * (SSE_EVENTS - 1) / 2 \
                    else "buffered"
    a["next"] = run.next
    if run.after:
        a["connection-after"] = run.after
    a["fresh"] = run.fresh.split(" (")[0]
    a["process"] = run.exited or "running"
    return a


def differences(an, ac):
    """(aspect, nginx, creditloop) where they differ, less what follows from an earlier row: an
    exchange answered on one side only is compared by its outcome alone, a proxy's own answer by
    its status and framing, a request that reached the backend on one side only by that count."""
    diff = {k: (an.get(k, "(absent)"), ac.get(k, "(absent)")) for k in set(an) | set(ac)}
    diff = {k: v for k, v in diff.items() if v[0] != v[1]}
    out = []
    for k, (nv, cv) in diff.items():
        p, _, rest = k.partition(".")
        if k == "connection-after" and "(absent)" in (nv, cv):
            continue  # the connection went on, on one side: the "next" row says so
        if p.startswith("req"):
            resp = (an.get(f"{p}.client.response", ""), ac.get(f"{p}.client.response", ""))
            answered = [not v.startswith(("own", "the proxy", "response of")) for v in resp]
            if rest.startswith("client.") and rest not in ("client.response", "client.expect",
                                                           "client.interim") and any(answered):
                continue
            if any(v.startswith("not sent") for v in resp) and rest != "client.response":
                continue
            if rest.startswith(("client.header.", "client.body")) and \
                    "the proxy's own answer" in resp:
                continue
            got = (an.get(f"{p}.backend.received"), ac.get(f"{p}.backend.received"))
            if rest.startswith("backend.") and rest != "backend.received" and got[0] != got[1]:
                continue
        out.append((k, nv, cv))
    return sorted(out, key=lambda d: (d[0].split(".")[0], d[0]))


def sse_detail(run, backend):
    """Per event: when the backend sent it and the client got it, in ms from the first send."""
    for ex in run.exchanges:
        r = ex.resp
        recs = backend.received(ex.rid)
        if r and r.event_times and recs and recs[0].sse_sent:
            t0 = recs[0].sse_sent[0]
            sent = " ".join(f"{(t - t0) * 1e3:.0f}" for t in recs[0].sse_sent)
            got = " ".join(f"{(t - t0) * 1e3:.0f}" if t else "?" for t in r.event_times)
            return f"sent at {sent} ms, received at {got} ms"
    return None


RESPONSE_HOP = {"/hop": ["x-foo", "upgrade", "keep-alive"], "/hop-ka": ["x-foo", "upgrade", "keep-alive"]}


def hop_by_hop_passed(run, backend):
    """The hop-by-hop fields (RFC 9110 7.6.1) that went through: named in Connection, or
    Keep-Alive, Proxy-Connection, TE, Upgrade. Informational: nginx forwards some of them too."""
    found = []
    for ex in run.exchanges:
        named = {t for t in tokens(ex.req.headers, "connection") if t not in ("close", "keep-alive")}
        hop = named | {"keep-alive", "proxy-connection", "te", "upgrade"}
        for rec in backend.received(ex.rid)[:1]:
            found += [f"{n} (request)" for n, _ in rec.headers if n.lower() in hop]
        r = ex.resp
        if r and not ex.error and ex.req.path in RESPONSE_HOP:
            names = {n.lower(): n for n, _ in r.headers}
            found += [f"{names[h]} (response)" for h in RESPONSE_HOP[ex.req.path] if h in names]
            extra = [t for t in tokens(r.headers, "connection") if t not in ("close", "keep-alive")]
            if extra:
                found.append(f"Connection: {', '.join(extra)} (response)")
    return found


def allowed(case, aspect):
    for cp, ap, why in ALLOWED:
        if fnmatch.fnmatchcase(case, cp) and fnmatch.fnmatchcase(aspect, ap):
            return why
    return None


def invariants(runs, proxy, backend):
    bad = []
    for rec in backend.all_records():
        if rec.rid is None or rec.rid[1] != proxy.letter:
            continue
        tenant = [(n, v) for n, v in rec.headers
                  if n.lower().replace("_", "-") == "x-creditloop-tenant"]
        if tenant != [(n, TENANT) for n, _ in tenant] or len(tenant) != 1:
            bad.append((RIDS.get(rec.rid, rec.rid), "tenant header at the backend: " +
                        ("; ".join(f"{n}: {v}" for n, v in tenant) or "none")))
    for run in runs.values():
        for ex in run.exchanges + [e for _, e in run.extra]:
            if ex.resp and not ex.error:
                b = belongs(ex.resp, ex.rid)
                if b.startswith("response of"):
                    bad.append((RIDS[ex.rid], f"got the {b}"))
    return bad


def corpus():
    c = []

    def add(name, *reqs, pipelined=False):
        c.append(Case(name, list(reqs), pipelined))

    # Methods and request bodies.
    add("get", Req())
    add("head", Req("HEAD"))
    add("get-with-body", Req(body=b"a body on a GET"))
    add("post-length", Req("POST", body=b'{"hello":"world"}',
                           headers=[("Content-Type", "application/json")]))
    add("put-length", Req("PUT", body=b"new contents\n"))
    add("delete", Req("DELETE"))
    add("options", Req("OPTIONS"))
    add("trace-with-body", Req("TRACE", body=b"trace me"))
    add("post-empty-length", Req("POST", framing="length"))
    add("post-no-length", Req("POST"))
    add("post-chunked", Req("POST", chunks=[(b"hello ", ""), (b"world", "")]))
    add("post-chunked-extensions",
        Req("POST", chunks=[(b"hello ", ";name=value"), (b"world", ';q="quoted"')]))
    add("post-chunked-trailers", Req("POST", headers=[("Trailer", "X-Checksum")],
                                     chunks=[(b"hello world", "")],
                                     trailers=[("X-Checksum", "5eb63bbbe0")]))
    add("post-expect-length", Req("POST", body=b"sent after 100 Continue", expect=True))
    add("post-expect-chunked",
        Req("POST", chunks=[(b"sent after ", ""), (b"100 Continue", "")], expect=True))
    add("post-large", Req("POST", body=large_body("upload")))
    # Hop-by-hop request headers.
    add("conn-keep-alive", Req(headers=[("Connection", "keep-alive")]))
    add("conn-close", Req(headers=[("Connection", "close")]))
    add("conn-names-x-secret", Req(headers=[("Connection", "X-Secret"), ("X-Secret", "s3cret")]))
    add("keep-alive-header", Req(headers=[("Connection", "keep-alive"),
                                          ("Keep-Alive", "timeout=5, max=10")]))
    add("te-trailers", Req(headers=[("TE", "trailers"), ("Connection", "TE")]))
    add("upgrade-websocket", Req(headers=[("Connection", "Upgrade"), ("Upgrade", "websocket"),
                                          ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                          ("Sec-WebSocket-Version", "13")]))
    add("proxy-authorization", Req(headers=[("Proxy-Authorization", "Basic bWFsbG9yeTpzM2NyZXQ=")]))
    add("proxy-connection", Req(headers=[("Proxy-Connection", "keep-alive")]))
    # A tenant's name forged in every spelling, and a forwarding chain claimed.
    for suffix, name in [("", "X-Creditloop-Tenant"), ("-lower", "x-creditloop-tenant"),
                         ("-underscore", "X_Creditloop_Tenant"), ("-upper", "X-CREDITLOOP-TENANT")]:
        add("forged-tenant" + suffix, Req(headers=[(name, "mallory")]))
    add("forged-tenant-all", Req(headers=[("X-Creditloop-Tenant", "mallory"),
                                          ("x-creditloop-tenant", "mallory"),
                                          ("X_Creditloop_Tenant", "mallory"),
                                          ("X-CREDITLOOP-TENANT", "mallory")]))
    add("client-x-forwarded-for", Req(headers=[("X-Forwarded-For", "203.0.113.7")]))
    # Host.
    add("host-with-port", Req(host="app.example:8443"))
    add("host-mixed-case", Req(host="App.EXAMPLE"))
    add("host-missing-http11", Req(host=None))
    add("host-duplicate", Req(headers=[("Host", "other.example")]))
    add("host-absolute-form", Req(target="http://other.example/echo?rid={rid}"))
    # HTTP/1.0 clients.
    add("http10-get", Req(version="1.0", host=None))
    add("http10-post", Req("POST", version="1.0", host=None, body=b"an old client"))
    add("http10-chunked-response", Req(path="/chunked", version="1.0"))
    add("http10-close-delimited-response", Req(path="/close", version="1.0"))
    add("http10-keep-alive", Req(version="1.0", headers=[("Connection", "keep-alive")]),
        Req(version="1.0", headers=[("Connection", "keep-alive")]))
    # What the backend answers.
    add("resp-chunked", Req(path="/chunked"))
    add("resp-close-delimited", Req(path="/close"))
    add("resp-sse", Req(path="/sse", headers=[("Accept", "text/event-stream")]))
    add("resp-large-length", Req(path="/large"))
    add("resp-large-chunked", Req(path="/large-chunked"))
    add("resp-204", Req(path="/204"))
    add("resp-304", Req(path="/304", headers=[("If-None-Match", '"v1"')]))
    add("head-of-length-5", Req("HEAD", path="/head5"))
    add("get-of-length-5", Req(path="/head5"))
    add("resp-100-and-103", Req(path="/interim"))
    add("resp-closes-mid-body", Req(path="/midclose"))
    add("resp-closes-mid-chunk", Req(path="/midclose-chunked"))
    add("resp-hop-by-hop-closing", Req(path="/hop"))
    add("resp-hop-by-hop", Req(path="/hop-ka"))
    # Pipelined: every request sent before any response is read.
    add("pipelined-gets", Req(), Req(path="/chunked"), Req(), pipelined=True)
    add("pipelined-post-get", Req("POST", body=b"first"), Req(), pipelined=True)
    add("pipelined-head-get", Req("HEAD", path="/head5"), Req(), pipelined=True)
    # Several requests on one connection, each after the previous response.
    add("keep-alive-three", Req(), Req("POST", body=b"second"), Req(path="/chunked"))
    add("keep-alive-after-expect", Req("POST", body=b"expect, then reuse", expect=True), Req(),
        Req())
    add("keep-alive-after-head", Req("HEAD", path="/head5"), Req())
    add("keep-alive-after-204-304", Req(path="/204"), Req(path="/304"), Req())
    add("keep-alive-after-interim", Req(path="/interim"), Req())
    add("keep-alive-after-chunked-post", Req("POST", chunks=[(b"chunked", "")]), Req())
    add("keep-alive-after-hop-by-hop", Req(path="/hop-ka"), Req())
    return [x for x in c if fnmatch.fnmatchcase(x.name, CASE_GLOB)]


def clip(s, n=70):
    s = str(s)
    return s if len(s) <= n else s[:n - 3] + "..."


class NginxDifferential(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(NGINX, os.X_OK):
            raise AssertionError(f"{NGINX} not found: tools/install-deps installs nginx")
        began = time.monotonic()
        cls.backend = RecordingBackend()
        cls.nginx = Nginx(NGINX, cls.backend)
        try:
            cls.creditloop = Creditloop(cls.backend)
        except BaseException:
            cls.nginx.stop()
            raise
        cls.cases = corpus()
        cls.runs = {"n": {}, "c": {}}
        errors = []

        def drive(proxy):
            try:
                for case in cls.cases:
                    cls.runs[proxy.letter][case.name] = run_case(case, proxy)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append((proxy.name, e))

        threads = [threading.Thread(target=drive, args=(p,)) for p in (cls.nginx, cls.creditloop)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cls.elapsed = time.monotonic() - began
        if errors:
            raise AssertionError(f"the corpus did not run: {errors}")
        cls.report()

    @classmethod
    def tearDownClass(cls):
        for p in ("nginx", "creditloop"):
            if hasattr(cls, p):
                getattr(cls, p).stop()
        if hasattr(cls, "backend"):
            cls.backend.close()

    @classmethod
    def report(cls):
        out = []
        cls.unallowed = []
        groups = {}
        for case in cls.cases:
            an = aspects(cls.runs["n"][case.name], cls.backend)
            ac = aspects(cls.runs["c"][case.name], cls.backend)
            for k, nv, cv in differences(an, ac):
                why = allowed(case.name, k)
                if not why:
                    cls.unallowed.append((case.name, k, nv, cv))
                generic = re.sub(r"^req\d+\.", "req*.", k)
                idx = k.split(".")[0]
                where = case.name + (f"#{idx[3:]}" if idx.startswith("req") and
                                     len(case.requests) > 1 else "")
                groups.setdefault((generic, nv, cv, why), []).append(where)
        out.append(f"\nnginx {cls.nginx.version()} vs creditloop-server (proxy mode): "
                   f"{len(cls.cases)} cases, in {cls.elapsed:.1f} s")
        out.append("Not compared: toward the backend " + ", ".join(sorted(BACKEND_DROP)) +
                   " (framing) and Connection's keep-alive/close; toward the client " +
                   ", ".join(sorted(CLIENT_DROP)) + ", Connection's keep-alive/close, and the "
                   "Content-Type and body of a proxy's own answer.")
        out.append(f"\nDIFFERENCES: {len(groups)} distinct, "
                   f"{sum(len(v) for v in groups.values())} in all, "
                   f"{len(cls.unallowed)} not allowed\n")
        order = sorted(groups.items(), key=lambda kv: (kv[0][3] is not None, kv[0][0], -len(kv[1])))
        for n, ((aspect, nv, cv, why), where) in enumerate(order, 1):
            out.append(f"{n:3}. {'allowed' if why else 'NOT ALLOWED'}  {aspect}")
            out.append(f"       nginx       {clip(nv, 110)}")
            out.append(f"       creditloop  {clip(cv, 110)}")
            out.append(f"       cases ({len(where)}): {clip(', '.join(where), 400)}")
            if why:
                out.append(f"       why allowed: {why}")
        for letter, proxy in (("n", cls.nginx), ("c", cls.creditloop)):
            for case in cls.cases:
                d = sse_detail(cls.runs[letter][case.name], cls.backend)
                if d:
                    out.append(f"\n{proxy.name} {case.name}: {d}")
        out.append("\nHOP-BY-HOP FIELDS PASSED ON (RFC 9110 7.6.1; informational, whatever nginx "
                   "does)")
        for letter, proxy in (("n", cls.nginx), ("c", cls.creditloop)):
            seen = {}
            for case in cls.cases:
                for f in hop_by_hop_passed(cls.runs[letter][case.name], cls.backend):
                    seen.setdefault(f, []).append(case.name)
            out.append(f"  {proxy.name}: " + ("; ".join(f"{f} in {', '.join(sorted(set(c)))}"
                                                         for f, c in sorted(seen.items())) or "none"))
        cls.broken = {}
        out.append("\nINVARIANTS (either proxy, whatever nginx does)")
        for letter, proxy in (("n", cls.nginx), ("c", cls.creditloop)):
            bad = invariants(cls.runs[letter], proxy, cls.backend)
            cls.broken[proxy.name] = bad
            restarted = [c.name for c in cls.cases
                         if "restarted" in cls.runs[letter][c.name].fresh]
            died = [(c.name, cls.runs[letter][c.name].exited) for c in cls.cases
                    if cls.runs[letter][c.name].exited]
            bad += [(name, f"the proxy {how}") for name, how in died]
            out.append(f"  {proxy.name}: {len(bad)} violation(s); restarted {proxy.restarts} "
                       f"time(s) when a fresh connection got a wrong answer"
                       + (f" (after {', '.join(restarted)})" if restarted else ""))
            for where, what in bad:
                out.append(f"    {where}: {what}")
        if DUMP:
            for case in cls.cases:
                out.append(f"\n== {case.name}")
                for letter in ("n", "c"):
                    run = cls.runs[letter][case.name]
                    for ex in run.exchanges:
                        for rec in cls.backend.received(ex.rid):
                            out.append(f"  {letter} backend got: {rec.method} {rec.target} "
                                       f"{rec.version} {rec.headers} {rec.framing} "
                                       f"{bytes(rec.body[:80])!r}")
                        r = ex.resp or ex.partial
                        out.append(f"  {letter} client got: {ex.error or ''} {r.status} "
                                   f"{r.headers} {bytes(r.body[:80])!r} {r.problems}")
        print("\n".join(out), flush=True)

    def test_no_forged_tenant_header_reaches_the_backend(self):
        for name, bad in self.broken.items():
            forged = [b for b in bad if b[1].startswith("tenant header")]
            if forged:
                self.fail(f"{name}: {forged}")

    def test_each_response_is_its_own_requests(self):
        for name, bad in self.broken.items():
            stray = [b for b in bad if b[1].startswith("got the")]
            if stray:
                self.fail(f"{name}: {stray}")

    def test_no_request_stops_the_proxy(self):
        for name, bad in self.broken.items():
            died = [b for b in bad if b[1].startswith("the proxy")]
            if died:
                self.fail(f"{name}: {died}")

    def test_every_difference_from_nginx_is_allowed(self):
        if self.unallowed:
            self.fail(f"{len(self.unallowed)} differences not in ALLOWED (the table above)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--nginx", default=NGINX)
    parser.add_argument("--cases", default="*", help="run only the cases whose name matches")
    parser.add_argument("--dump", action="store_true", help="print every exchange as received")
    args, rest = parser.parse_known_args()
    server_harness.SERVER = os.path.abspath(args.server)
    NGINX, CASE_GLOB, DUMP = args.nginx, args.cases, args.dump
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
