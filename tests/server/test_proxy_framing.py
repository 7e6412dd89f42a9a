#!/usr/bin/env python3
"""creditloop-server's proxy mode as a careful reverse proxy, message by message: framing,
interim responses, HEAD, hop-by-hop and forged headers, streaming both ways, bounded chunk
extensions and trailers, and the corner cases compared with Debian's nginx.

Usage: test_proxy_framing.py --server PATH [unittest args]
"""
import hashlib
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, BOB, Server  # noqa: E402
from proxy_harness import Backend, ProxyCase, proxy_config, Client, request, names  # noqa: E402


class ProxyFraming(ProxyCase):
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


class ReviewItems(ProxyCase):
    """Corner cases compared with Debian's nginx 1.22 (docs/server.md)."""

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


if __name__ == "__main__":
    server_harness.main()
