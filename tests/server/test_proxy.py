#!/usr/bin/env python3
"""creditloop-server's proxy mode as a careful reverse proxy: framing, interim responses, HEAD,
hop-by-hop and forged headers, streaming both ways, pool hygiene, withdrawn and timed-out queued
requests, connection limits and shutdown order. The real binary in front of a real Python
HTTP/1.1 backend (`http.server`, as a new user would try it first), all on loopback.

Usage: test_proxy.py --server PATH [unittest args]

Every wait is a poll with a deadline on something observable, or an event the backend sets;
never a fixed sleep.
"""
import argparse
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server  # noqa: E402 - the shared Server helper and base configuration
from test_server import Server, base_config, wait_for  # noqa: E402

ALICE = "alice-key-0001"
BOB = "bob-key-00001"


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

        self.httpd = test_server.start_http(Handler)
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


class ProxyFraming(unittest.TestCase):
    def setUp(self):
        self.backend = Backend()
        self.server = Server(proxy_config(self.backend))

    def tearDown(self):
        try:
            self.assertEqual(self.server.stop(), 0, self.server.log())
        finally:
            self.backend.close()

    def test_expect_100_continue_answers_its_own_request_and_the_pool_stays_in_step(self):
        c = Client(self.server.port)
        c.send(request("POST", "/upload?n=1", headers=[("Expect", "100-continue"),
                                                      ("Content-Length", "11")]))
        status, _ = c.head()
        self.assertEqual(status, 100)  # the client may now send its body
        c.send(b"hello world")
        status, headers, body, _ = c.response()
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["path"], "/upload?n=1")
        self.assertEqual(json.loads(body)["body_len"], 11)
        c.close()
        # Every later request, from another tenant and on the pooled connection, gets its own.
        for i in range(4):
            c = Client(self.server.port)
            c.send(request("GET", f"/mine?i={i}", key=BOB))
            status, _, body, _ = c.response()
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body)["path"], f"/mine?i={i}")
            c.close()
        self.assertNotIn("expect", names(self.backend.recorder.find("/upload?n=1")["headers"]))

    def test_head_is_bodiless_and_the_connection_goes_on(self):
        c = Client(self.server.port)
        c.send(request("HEAD", "/five"))
        status, headers, _, _ = c.response(head_request=True)
        self.assertEqual(status, 200)
        self.assertEqual(dict(headers)["content-length"], "5")
        self.assertLess(float(dict(headers)["x-creditloop-cost"]), 100)  # no timeout charged
        c.send(request("GET", "/five"))
        status, _, body, _ = c.response()
        self.assertEqual((status, body), (200, b"12345"))
        for code in (204, 304):
            c.send(request("GET", f"/{code}"))
            status, headers, body, _ = c.response()
            self.assertEqual((status, body), (code, b""))
            self.assertNotIn("transfer-encoding", names(headers))
        c.send(request("GET", "/after"))
        self.assertEqual(c.response()[0], 200)
        c.close()

    def test_trace_with_a_body_is_refused_and_the_server_lives(self):
        c = Client(self.server.port)
        c.send(request("TRACE", "/t", body=b"body"))
        status, headers, _, _ = c.response()
        self.assertEqual(status, 405)
        c.close()
        self.assertIsNone(self.server.proc.poll())
        res, _ = self.server.request(ALICE, "/still-here")
        self.assertEqual(res.status, 200)
        self.assertNotIn("/t", self.backend.recorder.paths())

    def test_forged_tenant_and_hop_by_hop_headers_never_reach_the_backend(self):
        c = Client(self.server.port)
        c.send(request("GET", "/forged", key=BOB, headers=[
            ("X-Creditloop-Tenant", "mallory"), ("x-creditloop-tenant", "mallory"),
            ("X_Creditloop_Tenant", "mallory"), ("X-CREDITLOOP_TENANT", "mallory"),
            ("Connection", "keep-alive, X-Secret"), ("X-Secret", "s"), ("Keep-Alive", "300"),
            ("TE", "trailers"), ("Upgrade", "websocket"), ("Proxy-Authorization", "Basic eA=="),
            ("Proxy-Connection", "keep-alive"), ("X-Forwarded-For", "203.0.113.7"),
            ("X-Request-Id", "req-42")]))
        status, headers, _, _ = c.response()
        self.assertEqual(status, 200)
        self.assertEqual(dict(headers).get("x-request-id"), "req-42")
        seen = self.backend.recorder.find("/forged")["headers"]
        tenant = [v for k, v in seen if k.lower().replace("_", "-") == "x-creditloop-tenant"]
        self.assertEqual(tenant, ["bob"])
        for hop in ("connection", "x-secret", "keep-alive", "te", "upgrade",
                    "proxy-authorization", "proxy-connection", "authorization"):
            self.assertNotIn(hop, names(seen), hop)
        h = {k.lower(): v for k, v in seen}
        self.assertEqual(h["host"], "front.example")  # preserved by default
        self.assertEqual(h["x-forwarded-for"], "203.0.113.7, 127.0.0.1")
        self.assertEqual(h["x-forwarded-proto"], "http")
        self.assertEqual(h["x-request-id"], "req-42")
        # The backend's hop-by-hop headers stay with the proxy; a request id is made when the
        # client sent none.
        c.send(request("GET", "/hop"))
        status, headers, _, _ = c.response()
        self.assertEqual(status, 200)
        self.assertNotIn("x-backend-private", names(headers))
        self.assertNotIn("keep-alive", names(headers))
        made = dict(headers).get("x-request-id", "")
        self.assertGreaterEqual(len(made), 16)
        self.assertEqual({k.lower(): v for k, v in self.backend.recorder.find("/hop")["headers"]}
                         ["x-request-id"], made)
        c.close()

    def test_a_close_delimited_response_is_reframed_for_a_kept_alive_client(self):
        c = Client(self.server.port)
        c.send(request("GET", "/closing"))
        status, headers, body, _ = c.response()
        self.assertEqual((status, body), (200, b"until the end"))
        h = dict(headers)
        self.assertTrue(h.get("transfer-encoding") == "chunked" or "content-length" in h, h)
        c.send(request("GET", "/next"))  # the client's connection is still good
        self.assertEqual(c.response()[0], 200)
        c.close()

    def test_a_streamed_response_reaches_the_client_as_it_is_sent(self):
        c = Client(self.server.port)
        c.send(request("GET", "/stream"))
        status, headers = c.head()
        self.assertEqual(status, 200)
        self.assertEqual(dict(headers).get("transfer-encoding"), "chunked")
        size = int(c.line(), 16)
        # The backend sends the second event only once this one has arrived here.
        self.assertEqual(c.exactly(size), b"data: first\n\n")
        self.backend.recorder.gate("stream").set()
        c.line()
        self.assertEqual(c.exactly(int(c.line(), 16)), b"data: second\n\n")
        c.close()

    def test_an_unbuffered_body_larger_than_body_bytes_streams_through(self):
        body = os.urandom(3 * 1024 * 1024)  # limits.body_bytes is 1 KiB here
        self.server.stop()
        self.server = Server(proxy_config(self.backend, proxy={
            "backend": f"127.0.0.1:{self.backend.port}", "timeout_ms": 3000,
            "request_buffering": False}))
        c = Client(self.server.port)
        c.send(request("PUT", "/big", body=body))
        status, _, reply, _ = c.response()
        self.assertEqual(status, 200, reply)
        seen = self.backend.recorder.find("/big")
        self.assertEqual(seen["body_len"], len(body))
        self.assertEqual(seen["body_sha"], hashlib.sha256(body).hexdigest())
        chunked = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
        c.send(request("POST", "/chunked", headers=[("Transfer-Encoding", "chunked")]) + chunked)
        self.assertEqual(c.response()[0], 200)
        self.assertEqual(self.backend.recorder.find("/chunked")["body_len"], 11)
        c.close()

    def test_a_transfer_coding_other_than_chunked_is_refused(self):
        # Otherwise its body, never decoded, would be read as the connection's next request.
        for coding in ("gzip", "chunked, gzip", "identity", "gzip, chunked"):
            c = Client(self.server.port)
            c.send(request("POST", "/coded", headers=[("Transfer-Encoding", coding)]) +
                   b"3\r\nabc\r\n0\r\n\r\n")
            status, headers, _, _ = c.response()
            self.assertEqual(status, 501, coding)
            self.assertEqual(dict(headers).get("connection"), "close")
            c.close()
        self.assertNotIn("/coded", self.backend.recorder.paths())

    def test_headers_are_checked_before_the_body_is_read(self):
        c = Client(self.server.port)
        c.send(request("POST", "/x", key="not-a-key-0000",
                       headers=[("Content-Length", "100000000")]))
        status, headers, _, _ = c.response()  # no body was sent: the answer cannot wait for it
        self.assertEqual(status, 401)
        c.close()

    def test_chunk_extensions_and_trailers_are_bounded(self):
        for tail in (b"1;" + b"e" * 200000 + b"\r\n", b"0\r\n" + b"X-T: v\r\n" * 20000):
            c = Client(self.server.port)
            c.send(request("POST", "/bounded", headers=[("Transfer-Encoding", "chunked")]))
            try:
                c.send(tail)
                status, _, _, _ = c.response()
                self.assertIn(status, (400, 413, 431))
            except (BrokenPipeError, ConnectionResetError, EOFError):
                pass  # refused before all of it was sent: as bounded as an answer
            c.close()
        self.assertIsNone(self.server.proc.poll())
        self.assertNotIn("/bounded", self.backend.recorder.paths())


class SlowBodies(unittest.TestCase):
    """A body is read whole before its request is queued: a client that trickles it holds its
    connection, never a slot."""

    def setUp(self):
        self.backend = Backend()

    def tearDown(self):
        self.backend.close()

    def test_bodies_trickled_by_one_tenant_do_not_hold_the_room(self):
        config = proxy_config(self.backend, slots=2)
        config["proxy"]["timeout_ms"] = 30000
        config["limits"].update(read_timeout_ms=30000, body_timeout_ms=30000)
        server = Server(config)
        try:
            trickling = [Client(server.port) for _ in range(2)]
            for i, c in enumerate(trickling):
                c.send(request("POST", f"/slow{i}", key=BOB, headers=[
                    ("Transfer-Encoding", "chunked"), ("Expect", "100-continue")]))
                # The interim answer says the head was taken and its body is awaited.
                self.assertEqual(c.head()[0], 100)
                c.send(b"1\r\na\r\n")
            fast = Client(server.port, timeout=5)  # fails on a wait for the trickled bodies
            fast.send(request("GET", "/fast", key=ALICE))
            status, _, _, _ = fast.response()
            self.assertEqual(status, 200)
            for c in trickling:  # nothing answered yet: their bodies are still arriving
                self.assertEqual(select.select([c.sock], [], [], 0)[0], [])
            for c in trickling:
                c.send(b"1\r\nb\r\n0\r\n\r\n")
                status, _, body, _ = c.response()
                self.assertEqual(status, 200, body)
                c.close()
            fast.close()
            self.assertEqual(self.backend.recorder.paths()[0], "/fast")
            for i in range(2):
                seen = self.backend.recorder.find(f"/slow{i}")
                self.assertEqual((seen["body_len"], seen["framing"]), (2, "length"))
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_stalled_or_endless_body_is_cut_off_before_it_is_queued(self):
        config = proxy_config(self.backend)
        config["limits"].update(read_timeout_ms=1500, body_timeout_ms=300)
        server = Server(config)
        try:
            # Stalled: no byte within the body timeout; closed without an answer, as nginx does.
            stalled = Client(server.port, timeout=3)
            stalled.send(request("POST", "/stalled", headers=[("Content-Length", "10")]) + b"ab")
            self.assertRaises(EOFError, stalled.response)
            stalled.close()
            # Trickled within the body timeout, but past the whole request's deadline.
            slow = Client(server.port, timeout=3)
            slow.send(request("POST", "/endless", headers=[("Content-Length", "1000")]))
            sent = 0
            began = time.monotonic()
            with self.assertRaises((EOFError, BrokenPipeError, ConnectionResetError)):
                while sent < 1000:
                    slow.send(b"x")
                    sent += 1
                    if select.select([slow.sock], [], [], 0.1)[0]:
                        slow._fill()
            self.assertLess(time.monotonic() - began, 3)
            self.assertLess(sent, 1000)
            slow.close()
            # Too large: refused from its length before a byte is read, or once it passes.
            big = Client(server.port)
            big.send(request("POST", "/big", headers=[("Content-Length", "2048")]))
            self.assertEqual(big.response()[0], 413)
            big.close()
            chunked = Client(server.port)
            chunked.send(request("POST", "/big-chunked", headers=[
                ("Transfer-Encoding", "chunked")]) + b"800\r\n" + b"y" * 2048 + b"\r\n0\r\n\r\n")
            self.assertEqual(chunked.response()[0], 413)
            chunked.close()
            self.assertEqual(self.backend.recorder.paths(), [])
            res, _ = server.request(ALICE, "/after")
            self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())


class ReviewItems(unittest.TestCase):
    """Corner cases compared with Debian's nginx 1.22 (docs/server.md)."""

    def setUp(self):
        self.backend = Backend()
        self.server = Server(proxy_config(self.backend))

    def tearDown(self):
        try:
            self.assertEqual(self.server.stop(), 0, self.server.log())
        finally:
            self.backend.close()

    def answer_then_close(self, raw):
        c = Client(self.server.port)
        c.send(raw)
        status, _, _, _ = c.response()
        c.sock.settimeout(1)  # shorter than limits.idle_timeout_ms: the close is the answer's
        with self.assertRaises((EOFError, ConnectionResetError)):
            c._fill()
        c.close()
        return status

    def test_an_http_version_other_than_1_0_and_1_1_gets_505(self):
        # nginx 1.22 answers HTTP/2.0 with 505 and serves HTTP/1.9 as 1.1; the parser here takes
        # only 1.0 and 1.1, so every other well-formed version is 505, and a malformed one 400.
        for version, status in (("HTTP/2.0", 505), ("HTTP/1.9", 505), ("HTTP/x.1", 400)):
            self.assertEqual(self.answer_then_close(request("GET", "/v", version=version)),
                             status, version)
        self.assertEqual(self.backend.recorder.paths(), [])

    def test_header_names_with_an_underscore_are_dropped(self):
        c = Client(self.server.port)
        c.send(request("GET", "/underscore", headers=[("X_Secret", "1"), ("X-Kept", "2")]))
        self.assertEqual(c.response()[0], 200)
        c.close()
        seen = names(self.backend.recorder.find("/underscore")["headers"])
        self.assertNotIn("x_secret", seen)  # nginx: underscores_in_headers off
        self.assertIn("x-kept", seen)

    def test_a_401_closes_the_connection(self):
        self.assertEqual(self.answer_then_close(request("GET", "/who", key="not-a-key-0000")), 401)

    def test_an_absolute_form_authority_passes_the_host_check(self):
        for authority in ("a\\b", "a@b", "a:b:c", "", "a b"):
            raw = request("GET", f"http://{authority}/abs").replace(b"GET http", b"GET http", 1)
            self.assertEqual(self.answer_then_close(raw), 400, authority)
        c = Client(self.server.port)
        c.send(request("GET", "http://good.example:8080/abs"))
        self.assertEqual(c.response()[0], 200)
        c.close()
        self.assertEqual(self.backend.recorder.paths(), ["/abs"])


class LongConnectionLists(unittest.TestCase):
    def test_hundreds_of_fields_named_by_a_long_connection_list(self):
        """Every field the Connection header names is dropped and every other one forwarded,
        with hundreds of each (the proxy reads the list once, not once per field)."""
        backend = Backend()
        config = proxy_config(backend)
        config["limits"]["header_bytes"] = 32 * 1024
        server = Server(config)
        try:
            hops, kept = 300, 50  # the backend, Python's http.server, takes 100 fields at most
            listed = ["keep-alive"] + [f"X-Hop-{i}" for i in range(hops)]
            headers = [("Connection", ", ".join(listed[:150])),
                       ("Connection", ", ".join(listed[150:]).upper())]
            for i in range(max(hops, kept)):
                if i < hops:
                    headers.append((f"x-hop-{i}", "hop"))
                if i < kept:
                    headers.append((f"X-Kept-{i}", f"k{i}"))
            c = Client(server.port)
            c.send(request("GET", "/listed", headers=headers))
            status, _, body, _ = c.response()
            self.assertEqual(status, 200, body)
            c.send(request("GET", "/after"))  # kept alive: the list's keep-alive was read too
            self.assertEqual(c.response()[0], 200)
            c.close()
            seen = names(backend.recorder.find("/listed")["headers"])
            self.assertEqual([n for n in seen if n.startswith("x-hop-")], [])
            self.assertEqual([n for n in seen if n.startswith("x-kept-")],
                             [f"x-kept-{i}" for i in range(kept)])
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()


class ProxyPool(unittest.TestCase):
    def test_a_connection_the_backend_closed_while_idle_is_not_reused(self):
        backend = Backend(idle_close_s=0.2)
        server = Server(proxy_config(backend))
        try:
            res, _ = server.request(ALICE, "/first")
            self.assertEqual(res.status, 200)
            wait_for("the backend to close its idle connection",
                     lambda: backend.recorder.closed >= 1)
            # Not idempotent: no retry would save it. The pool must not hand out the dead one.
            res, body = server.request(ALICE, "/after-gap", method="POST")
            self.assertEqual(res.status, 200, body)
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()

    def test_a_connection_the_backend_closed_while_idle_is_closed_at_once(self):
        backend = Backend(idle_close_s=1.0)
        config = proxy_config(backend)
        config["proxy"]["idle_timeout_ms"] = 60000  # the pool's own reaping plays no part
        config["limits"]["idle_timeout_ms"] = 60000  # nor the client's idle timeout
        server = Server(config)

        def to_backend():
            """The server's descriptors that are TCP sockets to the backend's port. Counted by
            socket, not by descriptor: other descriptors (a thread's, the sanitizers') come and
            go."""
            inodes = socket_inodes(server.proc.pid)
            count = 0
            with open(f"/proc/{server.proc.pid}/net/tcp") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if int(fields[2].split(":")[1], 16) == backend.port and fields[9] in inodes:
                        count += 1
            return count

        try:
            c = Client(server.port)  # kept open: the client's side holds its descriptor still
            c.send(request("GET", "/first"))
            self.assertEqual(c.response()[0], 200)
            pooled = to_backend()
            # Pooled and idle, unless the backend's idle close came first (a slow build can
            # take a second to pass the response on): counted before the close, it is there.
            if backend.recorder.closed == 0:
                self.assertEqual(pooled, 1)
            wait_for("the backend to close its idle connection",
                     lambda: backend.recorder.closed >= 1)
            # No CLOSE_WAIT until the next lease: nginx watches idle pooled connections too.
            wait_for("the pooled connection closed", lambda: to_backend() == 0)
            c.send(request("POST", "/after-gap", body=b"x"))
            self.assertEqual(c.response()[0], 200)
            c.close()
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()


def metric(server, name):
    res, body = server.admin("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class QueuedRequests(unittest.TestCase):
    def setUp(self):
        self.backend = Backend()

    def tearDown(self):
        self.backend.close()

    def test_a_client_that_leaves_while_queued_is_not_run(self):
        server = Server(proxy_config(self.backend, slots=1))
        try:
            hold = test_server.Async(server, ALICE, "/hold")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            c = Client(server.port)
            c.send(request("GET", "/abandoned", key=BOB))
            wait_for("bob queued", lambda: server.tenant("bob")["queued"] == 1)
            c.close()
            wait_for("the departure counted",
                     lambda: metric(server, "creditloop_server_requests_withdrawn_total") == 1)
            self.backend.recorder.gate("hold").set()
            self.assertEqual(hold.get()[0], 200)
            res, _ = server.request(BOB, "/later")
            self.assertEqual(res.status, 200)
            self.assertNotIn("/abandoned", self.backend.recorder.paths())
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_clients_that_left_count_in_no_limit_and_hold_nothing(self):
        config = proxy_config(self.backend, slots=1)
        config["proxy"]["timeout_ms"] = 30000  # alice holds the room until the test is done
        config["tenants"][1]["queue_limit"] = 2
        server = Server(config)
        try:
            hold = test_server.Async(server, ALICE, "/hold")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            left = [Client(server.port) for _ in range(2)]
            for i, c in enumerate(left):
                c.send(request("GET", f"/left{i}", key=BOB))
            wait_for("bob's two queued", lambda: server.tenant("bob")["queued"] == 2)
            for c in left:
                c.close()
            wait_for("both departures seen",
                     lambda: metric(server, "creditloop_server_requests_withdrawn_total") == 2)
            # Withdrawn, not merely marked: out of the queue and its limit, and each connection
            # gone with its session (the gauge counts alice's and the admin one reading it).
            third = Client(server.port)
            third.send(request("GET", "/third", key=BOB))
            wait_for("the third queued, not refused",
                     lambda: server.tenant("bob")["queued"] == 1 or
                     select.select([third.sock], [], [], 0)[0])
            if server.tenant("bob")["queued"] != 1:
                self.fail(third.sock.recv(200))
            wait_for("the departed connections closed",
                     lambda: metric(server, "creditloop_server_connections") == 3)
            self.backend.recorder.gate("hold").set()
            self.assertEqual(hold.get()[0], 200)
            status, _, _, _ = third.response()
            self.assertEqual(status, 200)
            third.close()
            self.assertEqual(self.backend.recorder.paths(), ["/hold", "/third"])
        finally:
            self.backend.recorder.gate("hold").set()
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_departure_is_seen_when_the_read_ahead_is_full(self):
        config = proxy_config(self.backend, slots=1)
        config["proxy"]["timeout_ms"] = 30000  # alice holds the room until the test is done
        server = Server(config)
        try:
            hold = test_server.Async(server, ALICE, "/hold")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            flooders = [Client(server.port) for _ in range(3)]
            for c in flooders:
                # A request, then pipelined bytes well past the read-ahead's bound
                # (header_bytes + 16 KiB), then gone.
                c.send(request("GET", "/flood", key=BOB) + b"x" * (64 * 1024))
            wait_for("bob's three queued", lambda: server.tenant("bob")["queued"] == 3)
            for c in flooders:
                c.close()
            wait_for("the flooders' descriptors closed",
                     lambda: metric(server, "creditloop_server_connections") == 2)
            wait_for("the flood withdrawn", lambda: server.tenant("bob")["queued"] == 0)
            self.backend.recorder.gate("hold").set()
            self.assertEqual(hold.get()[0], 200)
            self.assertNotIn("/flood", self.backend.recorder.paths())
        finally:
            self.backend.recorder.gate("hold").set()
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_fault_while_queued_withdraws_the_request(self):
        """A throw in the session while its request waits for its turn (a test hook here; a
        failed allocation in life) ends that connection alone, and withdraws its request: the
        runtime is never left holding an exchange the session has freed."""
        server = Server(proxy_config(self.backend, slots=1),
                        env={"CREDITLOOP_SERVER_TEST_FAULT_IN_TURN": "1"})
        try:
            hold = test_server.Async(server, ALICE, "/hold")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            c = Client(server.port)
            c.send(request("GET", "/faulty", key=BOB, headers=[("X-Request-Id",
                                                                "test-fault-in-turn")]))
            wait_for("the fault", lambda: "a fault while queued" in server.log())
            wait_for("the faulty request withdrawn", lambda: server.tenant("bob")["queued"] == 0)
            with self.assertRaises((EOFError, ConnectionResetError)):
                c._fill()  # its connection ended with it
            c.close()
            self.backend.recorder.gate("hold").set()
            self.assertEqual(hold.get()[0], 200)
            res, _ = server.request(BOB, "/later")
            self.assertEqual(res.status, 200)
            self.assertNotIn("/faulty", self.backend.recorder.paths())
        finally:
            self.backend.recorder.gate("hold").set()
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_fault_as_its_turn_comes_gives_its_slot_back(self):
        """A throw in the session once the dispatcher has started its request (a test hook
        again) ends that connection alone and gives the slot back: the next request is served."""
        server = Server(proxy_config(self.backend, slots=1),
                        env={"CREDITLOOP_SERVER_TEST_FAULT_IN_TURN": "1"})
        try:
            c = Client(server.port)
            c.send(request("GET", "/faulty", headers=[("X-Request-Id", "test-fault-at-turn")]))
            wait_for("the fault", lambda: "a fault as its turn came" in server.log())
            wait_for("the slot given back",
                     lambda: server.participants()["loop"]["in_flight"] == 0)
            with self.assertRaises((EOFError, ConnectionResetError)):
                c._fill()  # its connection ended with it
            c.close()
            res, _ = server.request(BOB, "/next", timeout=10)
            self.assertEqual(res.status, 200)
            self.assertNotIn("/faulty", self.backend.recorder.paths())
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_queue_timeout_answers_503_with_retry_after(self):
        config = proxy_config(self.backend, slots=1)
        config["tenants"][1]["queue_timeout_ms"] = 200
        server = Server(config)
        try:
            hold = test_server.Async(server, ALICE, "/hold")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            began = time.monotonic()
            res, body = server.request(BOB, "/too-late")
            self.assertEqual(res.status, 503, body)
            self.assertGreaterEqual(time.monotonic() - began, 0.2)
            self.assertGreaterEqual(int(res.getheader("Retry-After")), 1)
            self.backend.recorder.gate("hold").set()
            self.assertEqual(hold.get()[0], 200)
            self.assertNotIn("/too-late", self.backend.recorder.paths())
            self.assertEqual(metric(server, "creditloop_server_requests_timed_out_total"), 1)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_shutdown_answers_the_queue_at_once_then_waits_for_flight(self):
        d = test_server.tempfile.TemporaryDirectory()
        log_path = os.path.join(d.name, "access.jsonl")
        server = Server(proxy_config(self.backend, slots=1, access_log={"path": log_path}))
        hold = test_server.Async(server, ALICE, "/hold")
        wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
        queued = [test_server.Async(server, BOB, f"/q{i}") for i in range(3)]
        wait_for("bob queued", lambda: server.tenant("bob")["queued"] == 3)
        server.proc.send_signal(signal.SIGTERM)
        for q in queued:  # while alice's request still holds its slot
            status, headers, _ = q.get()
            self.assertEqual(status, 503)
            self.assertIn("Retry-After", headers)
        self.assertIsNone(server.proc.poll())
        self.backend.recorder.gate("hold").set()
        self.assertEqual(hold.get()[0], 200)
        self.assertEqual(server.proc.wait(timeout=10), 0)
        server.stop()
        with open(log_path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(sorted(l["status"] for l in lines), [200, 503, 503, 503])
        done = [l for l in lines if l["status"] == 200][0]
        self.assertEqual(done["tenant"], "alice")
        self.assertEqual(done["class"], "P1")
        for field in ("wait_ms", "cost", "bytes", "request_id"):
            self.assertIn(field, done)
        d.cleanup()


class AccessLogRotation(unittest.TestCase):
    def test_sigusr1_reopens_the_access_log_after_a_rotation(self):
        d = test_server.tempfile.TemporaryDirectory()
        path = os.path.join(d.name, "access.jsonl")
        server = Server(base_config(access_log={"path": path}))
        def targets(p):
            with open(p) as f:
                return [json.loads(line)["target"] for line in f]

        try:
            self.assertEqual(server.request(ALICE, "/work?cpu_ms=1")[0].status, 200)
            # The line is written once the answer is: waited for, not assumed.
            wait_for("the first line", lambda: targets(path) == ["/work?cpu_ms=1"])
            os.rename(path, path + ".1")  # as logrotate does, then it signals, as for nginx
            server.proc.send_signal(signal.SIGUSR1)
            wait_for("the log reopened", lambda: "access log reopened" in server.log())
            self.assertEqual(server.request(ALICE, "/work?cpu_ms=2")[0].status, 200)
            wait_for("the second line", lambda: targets(path) == ["/work?cpu_ms=2"])
            self.assertEqual(targets(path + ".1"), ["/work?cpu_ms=1"])
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            d.cleanup()


class Connections(unittest.TestCase):
    def test_connections_beyond_the_limit_are_refused_and_room_comes_back(self):
        config = base_config()
        config["limits"]["max_connections"] = 3
        server = Server(config)
        try:
            held = [Client(server.port) for _ in range(3)]
            # The gauge counts the admin connection reading it too; that listener has no limit,
            # so that an operator can look at a server whose tenants' listener is full.
            wait_for("three connections open",
                     lambda: metric(server, "creditloop_server_connections") == 4)
            extra = Client(server.port)
            try:
                status, _, _, _ = extra.response()
                self.assertEqual(status, 503)
            except (EOFError, ConnectionResetError):
                pass  # closed at once: refused all the same
            self.assertGreaterEqual(metric(server, "creditloop_server_connections_refused_total"), 1)
            held.pop().close()
            wait_for("a place free", lambda: metric(server, "creditloop_server_connections") == 3)
            res, _ = server.request(ALICE, "/work")
            self.assertEqual(res.status, 200)
            for c in held:
                c.close()
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    @unittest.skipIf(os.environ.get("CREDITLOOP_SANITIZE"),
                     "a sanitizer's shadow memory and quarantine count in the resident size too")
    def test_a_lingering_close_drains_through_a_small_buffer(self):
        """A closing connection's unread bytes are drained (lingering close) through a buffer of
        4 KiB, as nginx's lingering_close does, not through the 64 KiB relay buffer: the
        server's memory grows by little more than that per lingering connection."""
        config = base_config()
        config["limits"]["body_bytes"] = 1 << 20  # the relay buffer at its largest, 64 KiB
        server = Server(config)
        pid = server.proc.pid
        count, sent = 128, 60 * 1024

        def lingering():
            return unread_on(pid, server.port)

        def rss_kib():
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
            raise AssertionError("no VmRSS")

        clients = []
        try:
            self.assertEqual(server.request(ALICE, "/work")[0].status, 200)
            before = rss_kib()
            clients = [Client(server.port) for _ in range(count)]
            for c in clients:  # refused before its body is read: answered, then lingering
                c.send(request("POST", "/work", key=None,
                               headers=[("Content-Length", str(1 << 20))]))
            for c in clients:
                self.assertEqual(c.response()[0], 401)
            for c in clients:
                c.send(b"x" * sent)  # the body it was never asked for, dropped by the server
            wait_for("the bodies drained", lambda: lingering() == (count, 0))
            grown = rss_kib() - before
            # Still lingering (each for 2 s): the figure is one of lingering connections.
            self.assertEqual(lingering()[0], count, "the lingering ended before it was measured")
            # A connection's own state (session, coroutine frames, read-ahead) takes some
            # 8 KiB; a 64 KiB drain buffer on top of it would stand out (76 KiB a connection).
            self.assertLess(grown / count, 32, f"{grown} KiB for {count} lingering connections")
        finally:
            for c in clients:
                c.close()
            self.assertEqual(server.stop(), 0, server.log())

    @unittest.skipIf("undefined" in os.environ.get("CREDITLOOP_SANITIZE", ""),
                     "UBSan checks a virtual call's object with pipe(2), which fails without "
                     "descriptors, and then reports every such call falsely")
    def test_out_of_descriptors_pauses_the_accept_loop(self):
        config = base_config()
        config["limits"]["max_connections"] = 100000
        server = Server(config)
        try:
            # A small descriptor limit the process reaches with a few dozen connections.
            subprocess.run(["prlimit", f"--pid={server.proc.pid}", "--nofile=64:64"], check=True)
            clients = []
            for _ in range(80):
                try:
                    clients.append(socket.create_connection(("127.0.0.1", server.port),
                                                            timeout=2))
                except OSError:
                    break
            wait_for("descriptors exhausted", lambda: "accept" in server.log())

            def cpu_seconds():
                with open(f"/proc/{server.proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

            before, t0 = cpu_seconds(), time.monotonic()
            wait_for("a second of wall time", lambda: time.monotonic() - t0 >= 1.0)
            used = (cpu_seconds() - before) / (time.monotonic() - t0)
            self.assertLess(used, 0.3, "the accept loop spins on EMFILE")
            for c in clients:
                c.close()
            wait_for("serving again", lambda: server.request(ALICE, "/work")[0].status == 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())


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


class SpilledBodies(unittest.TestCase):
    """A buffered body stays in memory up to `limits.body_buffer_bytes`; a longer one goes to a
    temporary file with no name in `proxy.body_temp_dir`, gone when its exchange ends, whichever
    way it ends (nginx's client_body_buffer_size and client_body_temp_path)."""

    BODY = 900 * 1024

    def setUp(self):
        self.backend = Backend()
        self.temp = tempfile.mkdtemp(prefix="creditloop-spill-")

    def tearDown(self):
        self.backend.close()
        shutil.rmtree(self.temp, ignore_errors=True)

    def config(self, **limits):
        config = proxy_config(self.backend)
        config["proxy"]["body_temp_dir"] = self.temp
        config["limits"].update(body_bytes=1 << 20, body_buffer_bytes=16 * 1024,
                                read_timeout_ms=30000, body_timeout_ms=30000)
        config["limits"].update(limits)
        return config

    def no_file_left(self, server, what):
        wait_for(f"no temporary file open after {what}",
                 lambda: files_open_in(server.proc.pid, self.temp) == 0)
        self.assertEqual(os.listdir(self.temp), [], what)

    def post(self, server, path, body, chunked=False):
        c = Client(server.port)
        try:
            if chunked:
                pieces = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 100_000]),
                                                     body[i:i + 100_000])
                                  for i in range(0, len(body), 100_000))
                c.send(request("POST", path, headers=[("Transfer-Encoding", "chunked")]) +
                       pieces + b"0\r\n\r\n")
            else:
                c.send(request("POST", path, body=body))
            return c.response()
        finally:
            c.close()

    def test_a_body_past_the_memory_bound_reaches_the_backend_whole(self):
        server = Server(self.config())
        try:
            for path, size, chunked in (("/small", 1000, False), ("/large", self.BODY, False),
                                        ("/large-chunked", self.BODY, True),
                                        ("/at-the-cap", 1 << 20, False)):
                body = os.urandom(size)
                status, _, answer, _ = self.post(server, path, body, chunked)
                self.assertEqual(status, 200, answer)
                seen = self.backend.recorder.find(path)
                self.assertEqual((seen["body_len"], seen["framing"]), (size, "length"), path)
                self.assertEqual(seen["body_sha"], hashlib.sha256(body).hexdigest(), path)
            self.no_file_left(server, "bodies forwarded")
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    @unittest.skipIf(os.environ.get("CREDITLOOP_SANITIZE"),
                     "a sanitizer's shadow memory and quarantine count in the resident size too")
    def test_slow_uploads_hold_the_memory_bound_not_their_bodies(self):
        """Clients that stop near the end of their 900 KiB bodies: each connection holds its
        memory bound and a piece, not its body."""
        server = Server(self.config())
        pid, count, held_back = server.proc.pid, 16, 20 * 1024
        clients = []
        try:
            self.assertEqual(self.post(server, "/warm", os.urandom(self.BODY))[0], 200)
            before = rss_kib(pid)
            bodies = [os.urandom(self.BODY) for _ in range(count)]
            clients = [Client(server.port) for _ in range(count)]
            for i, (c, body) in enumerate(zip(clients, bodies)):
                c.send(request("POST", f"/slow{i}", body=body)[:-held_back])
            wait_for("the bodies so far read",
                     lambda: unread_on(pid, server.port) == (count, 0))
            self.assertEqual(files_open_in(pid, self.temp), count)
            grown = rss_kib(pid) - before
            # A connection's own state (session, read-ahead, coroutine frames) and a 16 KiB
            # piece; each body held in memory would add its 880 KiB.
            self.assertLess(grown / count, 128, f"{grown} KiB for {count} uploads")
            for c, body in zip(clients, bodies):
                c.send(body[-held_back:])
            for i, (c, body) in enumerate(zip(clients, bodies)):
                self.assertEqual(c.response()[0], 200)
                seen = self.backend.recorder.find(f"/slow{i}")
                self.assertEqual(seen["body_sha"], hashlib.sha256(body).hexdigest())
            self.no_file_left(server, "slow uploads")
        finally:
            for c in clients:
                c.close()
            self.assertEqual(server.stop(), 0, server.log())

    def test_no_temporary_file_outlives_its_exchange(self):
        server = Server(self.config(body_timeout_ms=500))
        pid = server.proc.pid
        try:
            # A client that leaves mid-body.
            leaving = Client(server.port)
            leaving.send(request("POST", "/leaving", headers=[("Content-Length", str(self.BODY))])
                         + b"x" * 100_000)
            wait_for("its body in a file", lambda: files_open_in(pid, self.temp) == 1)
            leaving.close()
            self.no_file_left(server, "a client that left")
            # A client that stalls mid-body: closed at its body timeout.
            stalling = Client(server.port)
            stalling.send(request("POST", "/stalling",
                                  headers=[("Content-Length", str(self.BODY))]) + b"x" * 100_000)
            wait_for("its body in a file", lambda: files_open_in(pid, self.temp) == 1)
            self.assertRaises(EOFError, stalling.response)
            stalling.close()
            self.no_file_left(server, "a body timeout")
            # A body of unknown length that passes the cap once it is in the file: 413.
            large = Client(server.port)
            large.send(request("POST", "/too-large", headers=[("Transfer-Encoding", "chunked")])
                       + b"%x\r\n" % 600_000 + b"y" * 600_000 + b"\r\n")
            wait_for("its body in a file", lambda: files_open_in(pid, self.temp) == 1)
            try:
                large.send(b"%x\r\n" % 600_000 + b"y" * 600_000 + b"\r\n0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered and closed while it was still sending
            self.assertEqual(large.response()[0], 413)
            self.no_file_left(server, "a 413")
            large.close()
            self.assertEqual(self.backend.recorder.paths(), [])
            # A client that leaves while its request, body read, waits for a slot.
            holding = [Client(server.port) for _ in range(2)]
            for c in holding:
                c.send(request("GET", "/hold"))
            wait_for("both slots held", lambda: len(self.backend.recorder.paths()) == 2)
            queued = Client(server.port)
            queued.send(request("POST", "/queued", body=os.urandom(self.BODY)))
            wait_for("it queued", lambda: server.tenant("alice")["queued"] == 1)
            self.assertEqual(files_open_in(pid, self.temp), 1)
            queued.close()
            wait_for("the departure counted",
                     lambda: metric(server, "creditloop_server_requests_withdrawn_total") == 1)
            self.no_file_left(server, "a client that left while queued")
            self.backend.recorder.gate("hold").set()
            for c in holding:
                self.assertEqual(c.response()[0], 200)
                c.close()
            self.assertEqual(self.post(server, "/after", os.urandom(self.BODY))[0], 200)
            self.no_file_left(server, "a forwarded body")
            self.assertNotIn("/queued", self.backend.recorder.paths())
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_disk_error_answers_500_and_the_server_goes_on(self):
        server = Server(self.config())
        try:
            # The process may write no file past 64 KiB: the temporary file's write fails (EFBIG),
            # as it would on a full disk (ENOSPC).
            subprocess.run(["prlimit", f"--pid={server.proc.pid}", "--fsize=65536:unlimited"],
                           check=True)
            status, _, answer, _ = self.post(server, "/disk-full", os.urandom(self.BODY))
            self.assertEqual(status, 500, answer)
            self.assertIn("cannot buffer a request body", server.log())
            self.no_file_left(server, "a disk error")
            self.assertEqual(self.post(server, "/in-memory", b"z" * 1000)[0], 200)
            subprocess.run(["prlimit", f"--pid={server.proc.pid}", "--fsize=unlimited"],
                           check=True)
            self.assertEqual(self.post(server, "/disk-back", os.urandom(self.BODY))[0], 200)
            self.assertEqual(self.backend.recorder.paths(), ["/in-memory", "/disk-back"])
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_bound_or_a_directory_that_cannot_serve_is_refused_at_start(self):
        def refusal(config):
            status, stderr = test_server.check_config(config)
            self.assertEqual(status, 3, stderr)
            return stderr

        config = self.config()
        config["limits"]["body_buffer_bytes"] = 2 << 20
        self.assertIn("limits.body_buffer_bytes: must be at most limits.body_bytes (1048576), "
                      "got 2097152", refusal(config))
        missing = os.path.join(self.temp, "missing")
        config = self.config()
        config["proxy"]["body_temp_dir"] = missing
        self.assertIn(f'proxy.body_temp_dir: "{missing}" does not exist', refusal(config))
        a_file = os.path.join(self.temp, "a-file")
        open(a_file, "w").close()
        config["proxy"]["body_temp_dir"] = a_file
        self.assertIn(f'proxy.body_temp_dir: "{a_file}" is not a directory', refusal(config))
        os.unlink(a_file)
        # Unwritable: by its mode, or (for root, whom a mode does not stop) by being immutable.
        locked = os.path.join(self.temp, "locked")
        os.mkdir(locked)
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", locked], capture_output=True).returncode != 0:
                self.skipTest("root here cannot make a directory immutable (chattr +i)")
        else:
            os.chmod(locked, 0o555)
        try:
            config["proxy"]["body_temp_dir"] = locked
            self.assertIn(f'proxy.body_temp_dir: cannot make a file in "{locked}"',
                          refusal(config))
            # The server itself refuses to start, with the same line.
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "c.json")
                with open(path, "w") as f:
                    json.dump(config, f)
                r = subprocess.run([test_server.SERVER, "-c", path], capture_output=True,
                                   text=True, timeout=20)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn(f'proxy.body_temp_dir: cannot make a file in "{locked}"', r.stderr)
        finally:
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", locked], check=True)
            else:
                os.chmod(locked, 0o755)
        # Streamed bodies need no directory: none is checked.
        config["proxy"].update(request_buffering=False, body_temp_dir=missing)
        self.assertEqual(test_server.check_config(config)[0], 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args, rest = parser.parse_known_args()
    test_server.SERVER = os.path.abspath(args.server)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
