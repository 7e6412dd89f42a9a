#!/usr/bin/env python3
"""ngx_http_creditloop_module as production runs it: authentication before the queue, the
tenant by its key or basic-auth user, clients that close at once or read slowly, error pages for
refusals, the result and tenant as variables, refusals logged without the value, dry run, the
participants for creditloop-top, the wait histogram, metrics never queued, request bodies,
cache hits, and HTTP/2 resets while queued and after dispatch.

Usage: test_nginx_production.py --module PATH/ngx_http_creditloop_module.so [--nginx PATH]
"""
import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_harness  # noqa: E402 - nginx with the module on loopback, and main()
from nginx_harness import wait_for, PASSWORDS, Nginx  # noqa: E402


def basic_auth(user, password):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class H2Client:
    """One HTTP/2 connection over TLS, kept open, whose streams the test opens and resets."""

    def __init__(self, port):
        try:
            import h2.config
            import h2.connection
        except ImportError:
            # Debian's python3-h2, for an interpreter outside Debian's.
            sys.path.append("/usr/lib/python3/dist-packages")
            import h2.config
            import h2.connection
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                        server_hostname="localhost")
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def get(self, path, tenant):
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "GET"), (":path", path), (":scheme", "https"),
                                        (":authority", "localhost"), ("x-tenant", tenant)],
                               end_stream=True)
        self.flush()
        return stream

    def reset(self, stream):
        self.conn.reset_stream(stream, error_code=8)  # CANCEL, as a browser that navigates away
        self.flush()

    def close(self):
        self.sock.close()


class Production(unittest.TestCase):
    """What ordinary nginx configurations do around the module: authentication, headers that
    name the cost, slow readers, clients that leave at once or by RST_STREAM, request bodies,
    the cache."""

    def setUp(self):
        self.nginx = Nginx(extra_server="""
            location /limited/ { error_page 503 /busy.html; proxy_pass http://backend; }
            location = /busy.html { root @DIR@/html; }""",
                           extra_http="creditloop_queue_limit 1;")

    def tearDown(self):
        self.nginx.stop()

    def queued(self, tenant, count):
        wait_for(f"{count} of {tenant}'s requests to queue", lambda: self.nginx.metric(
            "creditloop_tenant_queue_depth", tenant=tenant) == count)

    def test_the_cost_variable_in_a_header_never_fixes_the_cost_early(self):
        for i in range(5):
            status, headers, _ = self.nginx.request(f"/slow/{i}", "bob")
            self.assertEqual(status, 200)
            # Unknown when the head goes out: the header is left out, not filled with a guess.
            self.assertIn(headers.get("X-Cost"), (None, ""))
        cost = self.nginx.metric("creditloop_tenant_cost_charged_credits_total", tenant="bob")
        # Five upstream times of at least 20 ms, at 1 ms a credit, and nothing like the
        # 1,000,000 credits a request an unfinished response time gave.
        self.assertGreaterEqual(cost, 5 * 20)
        self.assertLess(cost, 5 * 1000)

    def test_authentication_comes_before_the_queue(self):
        held, out = self.nginx.hold_slot("auth")
        # A wrong password is answered at once, the room still full, and takes no place.
        status, headers, _ = self.nginx.request("/private/wrong", headers=basic_auth("bob", "guess"),
                                                timeout=5)
        self.assertEqual(status, 401)
        self.assertIn("Basic", headers.get("WWW-Authenticate", ""))
        self.assertEqual(self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob"), 0)
        right, right_out = self.nginx.start_in_thread(
            "/private/right", None, headers=basic_auth("bob", PASSWORDS["bob"]))
        self.queued("bob", 1)
        self.nginx.backend.gate("auth").set()
        held.join(10)
        right.join(10)
        self.assertEqual(right_out["response"][0], 200)
        self.assertFalse(self.nginx.backend.saw("/private/wrong"))

    def test_a_client_that_closes_at_once_is_withdrawn(self):
        held, out = self.nginx.hold_slot("gone")
        for i in range(5):
            # The request and the close in one go: nginx reads both in one read event, and no
            # other event comes for that connection.
            s = socket.create_connection(("127.0.0.1", self.nginx.port))
            s.sendall(f"GET /gone/{i} HTTP/1.1\r\nHost: x\r\nX-Tenant: bob\r\n\r\n".encode())
            s.close()
        wait_for("five withdrawals", lambda: self.nginx.metric(
            "creditloop_server_requests_withdrawn_total") == 5)
        self.nginx.backend.gate("gone").set()
        held.join(10)
        self.assertEqual(self.nginx.request("/after-gone", "bob")[0], 200)
        self.assertFalse(any(self.nginx.backend.saw(f"/gone/{i}") for i in range(5)))

    def test_a_slow_reader_does_not_hold_the_room(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", self.nginx.port))
        try:
            s.sendall(b"GET /buffered/big/1 HTTP/1.1\r\nHost: x\r\nX-Tenant: alice\r\n\r\n")
            self.assertTrue(s.recv(1024).startswith(b"HTTP/1.1 200"))
            # nginx has the response whole (in its buffers and a temporary file) while the
            # client reads nothing more: the one slot is free for bob.
            status, _, _ = self.nginx.request("/after-big", "bob", timeout=5)
            self.assertEqual(status, 200)
            self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)
        finally:
            s.close()

    def test_the_tenant_by_its_key(self):
        status, headers, _ = self.nginx.request("/keyed/a", headers={"X-Api-Key": "key-ka-secret"})
        self.assertEqual((status, headers.get("X-Creditloop-Tenant")), (200, "alice"))
        status, headers, _ = self.nginx.request("/keyed/b", headers={"X-Api-Key": "key-kb-secret"})
        self.assertEqual((status, headers.get("X-Creditloop-Tenant")), (200, "bob"))
        # A name is no key, and no header is no tenant: both 401, logged with the reason and
        # never the value.
        self.assertEqual(self.nginx.request("/keyed/c", headers={"X-Api-Key": "alice"})[0], 401)
        self.assertEqual(self.nginx.request("/keyed/d")[0], 401)
        log = self.nginx.log()
        self.assertIn("the key is no tenant's", log)
        self.assertNotIn("key-ka-secret", log)

    def test_a_user_who_is_no_tenant_is_asked_for_credentials(self):
        status, headers, _ = self.nginx.request(
            "/private/m", headers=basic_auth("mallory", PASSWORDS["mallory"]), timeout=5)
        self.assertEqual(status, 401)
        self.assertIn("Basic", headers.get("WWW-Authenticate", ""))

    def test_an_error_page_for_a_refusal_is_not_queued_again(self):
        held, out = self.nginx.hold_slot("errorpage")
        queued, queued_out = self.nginx.start_in_thread("/limited/first", "bob")
        self.queued("bob", 1)
        status, _, body = self.nginx.request("/limited/second", "bob", timeout=5)
        self.assertEqual((status, body), (503, b"busy, try later\n"))
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="bob",
                                           reason="queue_limit"), 1)
        self.nginx.backend.gate("errorpage").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)

    def test_the_result_and_the_tenant_as_variables(self):
        _, headers, _ = self.nginx.request("/fast", "alice")
        self.assertEqual((headers.get("X-Creditloop-Result"), headers.get("X-Creditloop-Tenant")),
                         ("dispatched", "alice"))
        status, headers, _ = self.nginx.request("/fast", "mallory-secret")
        self.assertEqual((status, headers.get("X-Creditloop-Result")), (401, "refused"))
        self.assertIsNone(headers.get("X-Creditloop-Tenant"))

    def test_refusals_are_logged_with_their_reason_never_the_value(self):
        self.assertEqual(self.nginx.request("/fast", "mallory-secret")[0], 401)
        self.assertEqual(self.nginx.request("/fast")[0], 401)
        wait_for("the refusals in error.log", lambda: "the tenant value is empty" in self.nginx.log())
        log = self.nginx.log()
        self.assertIn("creditloop: refused: the tenant value names no tenant", log)
        self.assertNotIn("mallory-secret", log)

    def test_dry_run_decides_and_never_delays(self):
        held, out = self.nginx.hold_slot("dry")
        status, headers, _ = self.nginx.request("/dry/now", "bob", timeout=5)
        self.assertEqual((status, headers.get("X-Creditloop-Result")), (200, "dry-run"))
        self.assertEqual(self.nginx.request("/dry/stranger", "mallory", timeout=5)[0], 200)
        self.assertIn('creditloop: dry run, would refuse: the tenant value names no tenant',
                      self.nginx.log())
        self.nginx.backend.gate("dry").set()
        held.join(10)

    def test_the_participants_for_creditloop_top(self):
        self.assertEqual(self.nginx.request("/fast", "alice")[0], 200)
        held, out = self.nginx.hold_slot("top")
        queued, queued_out = self.nginx.start_in_thread("/behind-top", "bob")
        self.queued("bob", 1)
        status, headers, body = self.nginx.request("/debug/participants", timeout=5)
        self.assertEqual((status, headers.get("Content-Type")), (200, "application/json"))
        answer = json.loads(body)
        self.assertEqual(answer["class_names"], ["P1", "P2", "P3"])
        self.assertEqual((answer["loop"]["waiting"], answer["loop"]["in_flight"],
                          answer["loop"]["dispatched"]), (1, 1, 1))
        tenants = {t["name"]: t for t in answer["tenants"]}
        self.assertEqual(sorted(tenants), ["alice", "bob", "carol"])
        self.assertEqual((tenants["alice"]["served"], tenants["alice"]["cost_charged"]),
                         ([1, 0, 0], 2.0))
        self.assertEqual((tenants["bob"]["queued"], tenants["bob"]["plan"]), (1, "lite"))
        # Without creditloop_queue_timeout a queued request still has a timer, nginx's 60 s;
        # the JSON's own timeout comes first.
        self.assertEqual((tenants["alice"]["queue_timeout_ms"], tenants["carol"]["queue_timeout_ms"]),
                         (60000, 300))
        self.assertGreaterEqual(tenants["bob"]["oldest_queued_age_s"], 0)
        self.assertIn("P2", tenants["bob"]["balance"])
        if nginx_harness.ARGS.top:
            r = subprocess.run([nginx_harness.ARGS.top, "--once", "--no-color",
                                f"http://127.0.0.1:{self.nginx.port}"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("bob", r.stdout)
        self.nginx.backend.gate("top").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        # bob's wait, from queued to the slot's release, is in his histogram and its quantiles.
        answer = json.loads(self.nginx.request("/debug/participants", timeout=5)[2])
        waits = {t["name"]: t["wait_s"] for t in answer["tenants"]}
        self.assertEqual((waits["bob"]["count"], waits["alice"]["count"]), (1, 2))
        self.assertGreater(waits["bob"]["p99"], 0)
        self.assertLessEqual(waits["bob"]["p50"], waits["bob"]["p99"])

    def test_the_wait_histogram(self):
        held, out = self.nginx.hold_slot("histogram")
        queued, queued_out = self.nginx.start_in_thread("/behind-histogram", "bob")
        self.queued("bob", 1)
        self.nginx.backend.gate("histogram").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        m = self.nginx.metric
        name = "creditloop_tenant_queue_wait_seconds"
        self.assertEqual(m(name + "_count", tenant="bob"), 1)
        self.assertEqual(m(name + "_count", tenant="alice"), 1)
        self.assertEqual(m(name + "_bucket", tenant="bob", le="+Inf"), 1)
        # Queued for at least the metrics' poll that saw it queued: above the first bound.
        self.assertEqual(m(name + "_bucket", tenant="bob", le="0.000050"), 0)
        self.assertGreater(m(name + "_sum", tenant="bob"), 0.00005)
        self.assertLess(m(name + "_sum", tenant="bob"), 10)
        self.assertEqual(m(name + "_bucket", tenant="alice", le="104.857600"), 1)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=self.nginx.metrics_or_none(),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_metrics_are_never_queued(self):
        # creditloop_tenant is set at server level, and the metrics' location inherits it.
        held, out = self.nginx.hold_slot("metrics")
        queued, queued_out = self.nginx.start_in_thread("/behind", "bob")
        self.queued("bob", 1)
        self.assertEqual(self.nginx.request("/metrics", timeout=5)[0], 200)
        self.nginx.backend.gate("metrics").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)

    def test_request_bodies_buffered_and_not(self):
        body = b"x" * 100000
        for path in ("/posted/1", "/unbuffered-body/1"):
            status, _, answer = self.nginx.request(path, "bob", method="POST", body=body)
            self.assertEqual((status, answer), (200, b"got 100000"))
        # A body waits in the socket while its request is queued.
        held, out = self.nginx.hold_slot("bodies")
        queued = [self.nginx.start_in_thread(p, "bob", method="POST", body=body)
                  for p in ("/unbuffered-body/q",)]
        self.queued("bob", 1)
        self.nginx.backend.gate("bodies").set()
        held.join(10)
        for t, o in queued:
            t.join(10)
            self.assertEqual(o["response"][0], 200)
            self.assertEqual(o["response"][2], b"got 100000")

    def test_a_cache_hit_gives_the_room_back(self):
        _, first, _ = self.nginx.request("/cached/a", "bob")
        _, second, _ = self.nginx.request("/cached/a", "bob")
        self.assertEqual((first.get("X-Cache"), second.get("X-Cache")), ("MISS", "HIT"))
        self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)
        self.assertEqual(self.nginx.request("/after-cache", "bob", timeout=5)[0], 200)

    def test_http2_reset_while_queued_is_withdrawn(self):
        held, out = self.nginx.hold_slot("h2queued")
        client = H2Client(self.nginx.tls_port)
        try:
            stream = client.get("/h2/queued", "bob")
            self.queued("bob", 1)
            client.reset(stream)
            wait_for("the withdrawal", lambda: self.nginx.metric(
                "creditloop_server_requests_withdrawn_total") == 1)
            self.nginx.backend.gate("h2queued").set()
            held.join(10)
            self.assertEqual(self.nginx.request("/after-h2", "bob")[0], 200)
            self.assertFalse(self.nginx.backend.saw("/h2/queued"))
        finally:
            client.close()

    def test_http2_reset_after_dispatch_gives_the_room_back(self):
        client = H2Client(self.nginx.tls_port)
        try:
            stream = client.get("/gate/h2dispatched", "bob")
            wait_for("the backend to hold it", lambda: self.nginx.backend.saw("/gate/h2dispatched"))
            client.reset(stream)
            # The upstream still holds its request; the room is free all the same.
            wait_for("nothing in flight", lambda: self.nginx.metric("creditloop_loop_in_flight") == 0)
            self.assertEqual(self.nginx.request("/after-h2", "alice", timeout=5)[0], 200)
        finally:
            self.nginx.backend.gate("h2dispatched").set()
            client.close()


if __name__ == "__main__":
    nginx_harness.main()
