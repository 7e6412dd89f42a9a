#!/usr/bin/env python3
"""creditloop-server's queued proxy requests: a client that leaves is not run and holds
nothing, a fault while queued withdraws its request, the queue timeout answers 503, and shutdown
answers the queue at once before it waits for what is in flight.

Usage: test_proxy_queue.py --server PATH [unittest args]
"""
import json
import os
import select
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, BOB, Async, wait_for, Server  # noqa: E402
from proxy_harness import Backend, proxy_config, Client, request, metric  # noqa: E402


class QueuedRequests(unittest.TestCase):
    def setUp(self):
        self.backend = Backend()

    def tearDown(self):
        self.backend.close()

    def test_a_client_that_leaves_while_queued_is_not_run(self):
        server = Server(proxy_config(self.backend, slots=1))
        try:
            hold = Async(server, ALICE, "/hold")
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
            hold = Async(server, ALICE, "/hold")
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
            hold = Async(server, ALICE, "/hold")
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
            hold = Async(server, ALICE, "/hold")
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
            hold = Async(server, ALICE, "/hold")
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
        d = tempfile.TemporaryDirectory()
        log_path = os.path.join(d.name, "access.jsonl")
        server = Server(proxy_config(self.backend, slots=1, access_log={"path": log_path}))
        hold = Async(server, ALICE, "/hold")
        wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
        queued = [Async(server, BOB, f"/q{i}") for i in range(3)]
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


if __name__ == "__main__":
    server_harness.main()
