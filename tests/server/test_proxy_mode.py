#!/usr/bin/env python3
"""creditloop-server in proxy mode in front of a plain backend: it forwards, charges the
backend's X-Cost (or the response time), maps a hung backend to 504 and an unreachable one to 502,
and reuses pooled connections.

Usage: test_proxy_mode.py --server PATH [unittest args]
"""
import json
import os
import sys
import time
import unittest
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import base_config, wait_for, Server, start_http, free_port  # noqa: E402


class Backend:
    """A real HTTP backend on loopback: answers with an X-Cost, or hangs, as asked."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the stdlib's name
                if "hang" in self.path:
                    time.sleep(3)  # longer than the proxy's timeout: the 504 path
                    return
                if "closing" in self.path:
                    # Answers as if the connection stayed open, then closes it: what a backend
                    # whose idle timeout ran out does to a pooled connection.
                    self.close_connection = True
                body = json.dumps({"path": self.path,
                                   "tenant": self.headers.get("X-Creditloop-Tenant"),
                                   "authorization": self.headers.get("Authorization")}).encode()
                self.send_response(200)
                if "nocost" not in self.path:
                    self.send_header("X-Cost", "7.5")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                self.do_GET()

            def log_message(self, *args):
                pass

        self.httpd = start_http(Handler)
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class ProxyMode(unittest.TestCase):
    def test_forwards_charges_the_backends_cost_and_maps_failures(self):
        backend = Backend()
        config = base_config(mode="proxy", slots=2,
                             proxy={"backend": f"127.0.0.1:{backend.port}", "cost_header": "X-Cost",
                                    "timeout_ms": 500})
        server = Server(config)
        try:
            res, body = server.request("alice-key-0001", "/some/path?x=1")
            self.assertEqual(res.status, 200)
            reply = json.loads(body)
            self.assertEqual(reply["path"], "/some/path?x=1")
            self.assertEqual(reply["tenant"], "alice")
            self.assertIsNone(reply["authorization"])  # the key stays with the proxy
            self.assertEqual(res.getheader("X-Creditloop-Class"), "P1")
            self.assertAlmostEqual(float(res.getheader("X-Creditloop-Cost")), 7.5)
            # Without the header the response time is charged.
            res, _ = server.request("alice-key-0001", "/nocost")
            self.assertLess(float(res.getheader("X-Creditloop-Cost")), 500)
            # A backend that never answers: 504 at the timeout, and the cost is still settled.
            res, _ = server.request("bob-key-00001", "/hang")
            self.assertEqual(res.status, 504)
            self.assertGreaterEqual(float(res.getheader("X-Creditloop-Cost")), 500)
            loop = wait_for("settled", lambda: (lambda l: l if l["in_flight"] == 0 else None)(server.participants()["loop"]))
            self.assertEqual(loop["completed"], loop["dispatched"])
            # A pooled connection the backend closed is seen closed before it is reused, so
            # neither a GET nor a POST (which could not be sent again) is sent on it.
            res, _ = server.request("alice-key-0001", "/closing")
            self.assertEqual(res.status, 200)
            res, _ = server.request("alice-key-0001", "/after-close")
            self.assertEqual(res.status, 200)
            res, _ = server.request("alice-key-0001", "/closing")
            self.assertEqual(res.status, 200)
            res, _ = server.request("alice-key-0001", "/post-after-close", method="POST")
            self.assertEqual(res.status, 200)
            # Keep-alive pooling survives many requests.
            for _ in range(30):
                res, _ = server.request("alice-key-0001", "/again")
                self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()

    def test_unreachable_backend_is_502(self):
        config = base_config(mode="proxy", slots=2,
                             proxy={"backend": f"127.0.0.1:{free_port()}", "timeout_ms": 500})
        server = Server(config)
        try:
            res, body = server.request("alice-key-0001", "/x")
            self.assertEqual(res.status, 502, body)
            self.assertIsNotNone(res.getheader("X-Creditloop-Cost"))
            alice = server.tenant("alice")
            self.assertEqual(sum(alice["served"]), 1)
            self.assertEqual(server.participants()["loop"]["in_flight"], 0)
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    server_harness.main()
