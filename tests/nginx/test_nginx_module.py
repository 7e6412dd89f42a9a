#!/usr/bin/env python3
"""ngx_http_creditloop_module inside Debian's nginx, on loopback, one worker: HTTP/1.1, HTTP/2
over TLS, a streamed (SSE) upstream, an internal redirect, clients that leave while queued, the
queue timeout's 503, reload with changed tenants (each generation's counters apart), quit with
requests queued; the default tenant, queue options, a thousand tenants with 64 workers, and the
.so's exported symbols.

Usage: test_nginx_module.py --module PATH/ngx_http_creditloop_module.so [--nginx PATH]
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_harness  # noqa: E402 - nginx with the module on loopback, and main()
from nginx_harness import wait_for, TENANTS, Nginx  # noqa: E402


class Module(unittest.TestCase):
    def setUp(self):
        self.nginx = Nginx()

    def tearDown(self):
        self.nginx.stop()

    def test_http1_each_answer_names_its_class(self):
        status, headers, body = self.nginx.request("/fast", "alice")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P1"))
        self.assertEqual(body, b"ok /fast")
        status, headers, _ = self.nginx.request("/fast", "bob")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P2"))
        status, _, _ = self.nginx.request("/fast", "mallory")
        self.assertEqual(status, 401)
        status, _, _ = self.nginx.request("/fast")
        self.assertEqual(status, 401)
        self.assertEqual(self.nginx.metric("creditloop_server_unauthorized_total",
                                           listener="tenants"), 2)
        # The backend's X-Cost (2 credits) is what alice was charged.
        self.assertEqual(self.nginx.metric("creditloop_tenant_cost_charged_credits_total",
                                           tenant="alice"), 2)
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "alice", "class": "P1"}), 1)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=self.nginx.metrics_or_none(),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_internal_redirect_keeps_one_place(self):
        status, headers, body = self.nginx.request("/redirected", "alice")
        self.assertEqual((status, headers.get("X-Creditloop-Class"), body),
                         (200, "P1", b"ok /redirected"))
        dispatched = sum(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "alice", "class": c}) for c in
                         ("P1", "P2", "P3"))
        self.assertEqual(dispatched, 1)
        self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)

    def test_http2_over_tls(self):
        r = subprocess.run(["curl", "-sk", "--http2", "-D", "-", "-o", "/dev/null",
                            "-H", "X-Tenant: alice",
                            f"https://127.0.0.1:{self.nginx.tls_port}/fast"],
                           capture_output=True, text=True, timeout=20)
        head = r.stdout.lower()
        self.assertTrue(head.startswith("http/2 200"), r.stdout + r.stderr)
        self.assertIn("x-creditloop-class: p1", head)

    def test_streamed_sse(self):
        c = http.client.HTTPConnection("127.0.0.1", self.nginx.port, timeout=10)
        c.request("GET", "/sse", headers={"X-Tenant": "bob"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("X-Creditloop-Class"), "P2")
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        self.assertEqual(r.read().decode().count("data: event"), 3)
        c.close()

    def test_client_leaving_while_queued_withdraws(self):
        held, out = self.nginx.hold_slot("disconnect")
        s = socket.create_connection(("127.0.0.1", self.nginx.port))
        s.sendall(b"GET /never HTTP/1.1\r\nHost: x\r\nX-Tenant: bob\r\n\r\n")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        s.close()
        wait_for("the withdrawal", lambda: self.nginx.metric(
            "creditloop_server_requests_withdrawn_total") == 1)
        self.assertEqual(self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob"), 0)
        self.nginx.backend.gate("disconnect").set()
        held.join(10)
        self.assertEqual(out["response"][0], 200)
        # The slot is free again, and the withdrawn request never reached the backend.
        self.assertEqual(self.nginx.request("/after", "bob")[0], 200)
        self.assertFalse(self.nginx.backend.saw("/never"))
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_queue_timeout_answers_503_with_retry_after(self):
        held, out = self.nginx.hold_slot("timeout")
        status, headers, _ = self.nginx.request("/late", "carol")  # carol: queue_timeout_ms 300
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("Retry-After"), "1")
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="carol",
                                           reason="queue_timeout"), 1)
        self.nginx.backend.gate("timeout").set()
        held.join(10)
        self.assertFalse(self.nginx.backend.saw("/late"))

    def test_reload_with_changed_tenants_keeps_queued_requests(self):
        self.assertEqual(self.nginx.request("/fast", "dave")[0], 401)
        held, out = self.nginx.hold_slot("reload")
        queued, queued_out = self.nginx.start_in_thread("/queued", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        self.nginx.write_plans(TENANTS + [{"name": "dave", "key": "key-kd-secret", "plan": "pro"}])
        self.nginx.proc.send_signal(signal.SIGHUP)
        # The new workers know dave; the old one keeps what it queued.
        wait_for("dave to be known", lambda: self.nginx.request("/fast", "dave")[0] == 200)
        self.nginx.backend.gate("reload").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(out["response"][0], 200)
        self.assertEqual(queued_out["response"][0], 200)
        self.assertEqual(queued_out["response"][1].get("X-Creditloop-Class"), "P2")

    def test_reload_keeps_each_generations_counters_apart(self):
        # The same tenants with one plan changed: the zone, sized by the tenant count, is kept
        # across the reload, and the old worker dispatches after the new one has started.
        held, out = self.nginx.hold_slot("generations")
        queued, queued_out = self.nginx.start_in_thread("/old-generation", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        self.nginx.write_plans([dict(t, shares=2) if t["name"] == "bob" else t for t in TENANTS])
        self.nginx.proc.send_signal(signal.SIGHUP)
        # The new generation's metrics: it has dispatched nothing yet.
        wait_for("the new workers", lambda: self.nginx.metric(
            "creditloop_tenant_requests_total", **{"tenant": "alice", "class": "P1"}) == 0)
        self.nginx.backend.gate("generations").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        # Once the old worker has answered its last request and exited, every request reaches
        # the new one.
        wait_for("the old worker to exit", lambda: self.nginx.workers() == 1)
        # bob's request went out in the old worker: none of it is the new generation's.
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 0)
        self.assertEqual(self.nginx.request("/fast", "bob")[0], 200)
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_two_reloads_while_long_requests_are_open(self):
        # Three configurations at once: the first's worker holds a long request, the second's
        # another, the third serves; each old worker exits once it has answered.
        first = self.nginx.start_in_thread("/gate/long1", "alice")
        wait_for("the first long request", lambda: self.nginx.backend.saw("/gate/long1"))
        # An old worker accepts until the master's signal reaches it: wait for that too.
        stopping = lambda n: self.nginx.log().count("gracefully shutting down") == n
        self.nginx.proc.send_signal(signal.SIGHUP)
        wait_for("the second configuration", lambda: self.nginx.workers() == 2 and stopping(1))
        second = self.nginx.start_in_thread("/gate/long2", "bob")
        wait_for("the second long request", lambda: self.nginx.backend.saw("/gate/long2"))
        self.nginx.proc.send_signal(signal.SIGHUP)
        wait_for("the third configuration", lambda: self.nginx.workers() == 3 and stopping(2))
        self.assertEqual(self.nginx.request("/fast", "alice")[0], 200)
        for name, (t, out) in (("long1", first), ("long2", second)):
            self.nginx.backend.gate(name).set()
            t.join(10)
            self.assertEqual(out["response"][0], 200)
        wait_for("the old workers to exit", lambda: self.nginx.workers() == 1)
        self.assertEqual(self.nginx.request("/fast", "bob")[0], 200)

    def test_quit_answers_what_is_queued(self):
        held, out = self.nginx.hold_slot("quit")
        waiting = [self.nginx.start_in_thread(f"/q{i}", "bob") for i in range(3)]
        wait_for("three queued",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 3)
        self.nginx.proc.send_signal(signal.SIGQUIT)
        self.nginx.backend.gate("quit").set()
        for t, o in [(held, out)] + waiting:
            t.join(10)
            self.assertEqual(o.get("response", (o.get("error"),))[0], 200)
        self.assertEqual(self.nginx.proc.wait(timeout=10), 0)


class Options(unittest.TestCase):
    """A default tenant instead of 401, and the queue limit."""

    def setUp(self):
        self.nginx = Nginx(extra_http="creditloop_unknown_tenant bob; creditloop_queue_limit 1; "
                                      "creditloop_queue_timeout 0;")

    def tearDown(self):
        self.nginx.stop()

    def test_unknown_tenant_gets_the_default_tenants_queue(self):
        status, headers, _ = self.nginx.request("/fast", "mallory")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P2"))
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_queue_timeout_zero_is_none(self):
        answer = json.loads(self.nginx.request("/debug/participants", timeout=5)[2])
        timeouts = {t["name"]: t["queue_timeout_ms"] for t in answer["tenants"]}
        self.assertEqual(timeouts, {"alice": 0, "bob": 0, "carol": 300})

    def test_queue_limit_answers_503_with_retry_after(self):
        held, out = self.nginx.hold_slot("limit")
        queued, queued_out = self.nginx.start_in_thread("/first", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        status, headers, _ = self.nginx.request("/second", "bob")
        self.assertEqual((status, headers.get("Retry-After")), (503, "1"))
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="bob",
                                           reason="queue_limit"), 1)
        self.nginx.backend.gate("limit").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        self.assertFalse(self.nginx.backend.saw("/second"))


class Scale(unittest.TestCase):
    def test_a_thousand_tenants_and_64_workers(self):
        tenants = [{"name": f"t{i:04}", "key": f"key-{i:04}-secret", "plan": "lite"} for i in range(1000)]
        nginx = Nginx(tenants=tenants + TENANTS, workers=64)
        try:
            self.assertEqual(nginx.request("/fast", "t0999")[0], 200)
            self.assertEqual(nginx.metric("creditloop_tenant_queue_depth", tenant="t0999"), 0)
            wait_for("64 workers", lambda: nginx.workers() == 64)
        finally:
            nginx.stop()


class Build(unittest.TestCase):
    def test_the_module_exports_only_nginx_names(self):
        r = subprocess.run(["nm", "-D", "--defined-only", nginx_harness.ARGS.module],
                           capture_output=True, text=True, check=True)
        names = [line.split()[-1] for line in r.stdout.splitlines() if line.strip()]
        self.assertIn("ngx_http_creditloop_module", names)
        self.assertEqual([n for n in names if not n.startswith("ngx_")], [])


if __name__ == "__main__":
    nginx_harness.main()
