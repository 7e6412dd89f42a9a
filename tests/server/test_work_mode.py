#!/usr/bin/env python3
"""creditloop-server in work mode end to end: a request's class, wait and cost, keys, bad
parameters, malformed, oversized, slow and random requests beside a good tenant, the queue limit,
refusals and scrapes that never wait for the dispatcher, and --fifo.

Usage: test_work_mode.py --server PATH [unittest args]
"""
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import (  # noqa: E402
    base_config, wait_for, Server, Async, raw_exchange, open_gate, status_of)


class WorkMode(unittest.TestCase):
    def setUp(self):
        self.server = Server(base_config())

    def tearDown(self):
        self.assertEqual(self.server.stop(), 0, self.server.log())

    def test_a_request_says_its_class_wait_and_cost(self):
        res, body = self.server.request("alice-key-0001", "/work?cpu_ms=2&wait_ms=3")
        self.assertEqual(res.status, 200)
        self.assertEqual(res.getheader("X-Creditloop-Class"), "P1")
        self.assertGreaterEqual(float(res.getheader("X-Creditloop-Wait-Ms")), 0)
        reply = json.loads(body)
        self.assertGreaterEqual(reply["cpu_ms"], 2)
        self.assertGreaterEqual(reply["device_wait_ms"], 3)
        # The cost is what the request really used, in credits of 1 ms.
        self.assertAlmostEqual(reply["cost"], reply["cpu_ms"] + reply["device_wait_ms"], places=3)
        self.assertAlmostEqual(float(res.getheader("X-Creditloop-Cost")), reply["cost"], places=3)
        alice = self.server.tenant("alice")
        self.assertEqual(alice["served"], [1, 0, 0])
        self.assertAlmostEqual(alice["cost_charged"], reply["cost"], places=3)
        # lite holds only P2.
        res, _ = self.server.request("bob-key-00001", "/work")
        self.assertEqual(res.getheader("X-Creditloop-Class"), "P2")

    def test_keys_are_checked(self):
        res, _ = self.server.request(None, "/work")
        self.assertEqual(res.status, 401)
        self.assertEqual(res.getheader("WWW-Authenticate"), "Bearer")
        res, _ = self.server.request("alice-key-0002", "/work")
        self.assertEqual(res.status, 401)
        res, _ = self.server.request(None, "/work", headers={"Authorization": "Basic YWxpY2U6eA=="})
        self.assertEqual(res.status, 401)
        # The tenants' listener has no admin endpoints, whatever the key.
        res, _ = self.server.request("alice-key-0001", "/metrics")
        self.assertEqual(res.status, 404)
        self.assertNotIn("alice-key-0001", self.server.log())

    def test_bad_work_parameters(self):
        for query, word in [("cpu_ms=abc", "cpu_ms"), ("cpu_ms=51", "at most"),
                            ("wait_ms=-1", "wait_ms"), ("sleep=3", "unknown parameter")]:
            res, body = self.server.request("alice-key-0001", "/work?" + query)
            self.assertEqual(res.status, 400, query)
            self.assertIn(word, body.decode())
        res, _ = self.server.request("alice-key-0001", "/elsewhere")
        self.assertEqual(res.status, 404)

    def test_malformed_oversized_and_slow_requests(self):
        port = self.server.port
        self.assertEqual(status_of(raw_exchange(port, b"NONSENSE\r\n\r\n")), 400)
        self.assertEqual(status_of(raw_exchange(port, b"GET /work HTTP/1.1\r\nBad Header\r\n\r\n")),
                         400)
        big = b"GET /work HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 8000 + b"\r\n\r\n"
        self.assertEqual(status_of(raw_exchange(port, big)), 431)
        body = (b"POST /work HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-key-0001\r\n"
                b"Content-Length: 5000\r\n\r\n" + b"x" * 5000)
        self.assertEqual(status_of(raw_exchange(port, body)), 413)
        # A client that trickles its request is cut off at the read timeout (1 s here).
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            start = time.monotonic()
            closed = False
            for ch in b"GET /work HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"z" * 100:
                try:
                    s.sendall(bytes([ch]))
                    s.settimeout(0.1)
                    if s.recv(1) == b"":
                        closed = True
                        break
                except socket.timeout:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
            self.assertTrue(closed, "a trickling client kept its connection")
            self.assertLess(time.monotonic() - start, 4)
        # An idle kept-alive connection is closed after the idle timeout (2 s here).
        with socket.create_connection(("127.0.0.1", port), timeout=6) as s:
            start = time.monotonic()
            self.assertEqual(s.recv(1), b"")
            self.assertGreater(time.monotonic() - start, 1.5)
        self.assertGreaterEqual(self.server.participants()["loop"]["completed"], 0)

    def test_random_and_truncated_requests_never_disturb_a_good_tenant(self):
        rng = random.Random(int(os.environ.get("SEED", "1")))
        print(f"seed {rng.random()}", file=sys.stderr)
        stop = threading.Event()
        sent = [0]

        def garbage():
            while not stop.is_set():
                kind = rng.randrange(4)
                if kind == 0:
                    payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
                elif kind == 1:
                    full = b"GET /work?cpu_ms=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bob-key-00001\r\n\r\n"
                    payload = full[: rng.randrange(1, len(full))]
                elif kind == 2:
                    payload = b"GET /work HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"
                else:
                    payload = b"GET /" + bytes(rng.choice(b"abc%\x00\xff") for _ in range(50)) + b" HTTP/1.1\r\n\r\n"
                try:
                    with socket.create_connection(("127.0.0.1", self.server.port), timeout=2) as s:
                        s.sendall(payload)
                        s.shutdown(socket.SHUT_WR)
                        s.recv(4096)
                except OSError:
                    pass
                sent[0] += 1

        threads = [threading.Thread(target=garbage) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            # alice asks less than her P1 refill (20/s, 1 ms each): every request goes out at P1
            # and its wait stays within one credit's refill (50 ms) plus a turn.
            waits = []
            for _ in range(40):
                res, _ = self.server.request("alice-key-0001", "/work?cpu_ms=1")
                self.assertEqual(res.status, 200)
                self.assertEqual(res.getheader("X-Creditloop-Class"), "P1")
                waits.append(float(res.getheader("X-Creditloop-Wait-Ms")))
                time.sleep(0.06)  # pacing the client below its refill, not synchronisation
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertGreater(sent[0], 20)
        self.assertLess(max(waits), 250, waits)
        self.assertEqual(self.server.proc.poll(), None)

    def test_queue_limit_answers_429_with_retry_after(self):
        self.server.stop()
        config = base_config(slots=1)
        config["tenants"][1]["queue_limit"] = 1
        self.server = Server(config)
        hold = Async(self.server, "alice-key-0001", "/work?wait_ms=1500")
        wait_for("alice in flight", lambda: self.server.participants()["loop"]["in_flight"] == 1)
        queued = Async(self.server, "bob-key-00001", "/work")
        wait_for("bob queued", lambda: self.server.tenant("bob")["queued"] == 1)
        res, body = self.server.request("bob-key-00001", "/work")
        self.assertEqual(res.status, 429, body)
        self.assertGreaterEqual(int(res.getheader("Retry-After")), 1)
        self.assertEqual(hold.get()[0], 200)
        self.assertEqual(queued.get()[0], 200)

    def test_refusals_never_wait_for_the_dispatcher(self):
        self.server.stop()
        gate = os.path.join(tempfile.mkdtemp(), "dispatch-gate")
        os.mkfifo(gate)
        config = base_config(slots=1)
        config["tenants"][1].update(queue_limit=1, queue_timeout_ms=300)
        self.server = Server(config, env={"CREDITLOOP_SERVER_TEST_DISPATCH_GATE": gate})
        try:
            # The dispatcher blocks in starting alice's request until the gate gets a byte: any
            # round trip to it (a snapshot, a next-credit look-up) waits as long.
            held = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            held.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\nX-Request-Id: test-hold-dispatcher\r\n"
                         b"Authorization: Bearer alice-key-0001\r\n\r\n")
            wait_for("the dispatcher held", lambda: "test: dispatcher held" in self.server.log())
            # Bob's requests queue behind it (and time out) or are refused at his queue limit:
            # each is answered while the dispatcher is still held.
            bobs = [socket.create_connection(("127.0.0.1", self.server.port), timeout=3)
                    for _ in range(3)]
            for b in bobs:
                b.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\n"
                          b"Authorization: Bearer bob-key-00001\r\n\r\n")
            statuses = []
            for b in bobs:
                raw = b.recv(4096)  # a timeout here is a refusal waiting for the dispatcher
                statuses.append(status_of(raw))
                self.assertIn(b"Retry-After: ", raw)
                b.close()
            self.assertIn(503, statuses)  # the first queued: its queue timeout passed
            self.assertLessEqual(set(statuses), {429, 503})
        finally:
            open_gate(gate)
        self.assertEqual(status_of(held.recv(4096)), 200)
        held.close()

    def test_a_scrape_waiting_for_the_dispatcher_holds_no_io_thread(self):
        """/metrics and /debug/participants wait for the dispatcher (its snapshots); they do it
        off the I/O threads, so that with one I/O thread a tenant is still answered while a
        scrape waits."""
        self.server.stop()
        gate = os.path.join(tempfile.mkdtemp(), "dispatch-gate")
        os.mkfifo(gate)
        self.server = Server(base_config(io_threads=1),
                             env={"CREDITLOOP_SERVER_TEST_DISPATCH_GATE": gate})
        scrapes = []
        try:
            held = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            held.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\nX-Request-Id: test-hold-dispatcher\r\n"
                         b"Authorization: Bearer alice-key-0001\r\n\r\n")
            wait_for("the dispatcher held", lambda: "test: dispatcher held" in self.server.log())
            for path in ("/metrics", "/debug/participants"):
                scrape = socket.create_connection(("127.0.0.1", self.server.admin_port),
                                                  timeout=10)
                scrape.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                scrapes.append(scrape)
            # Answered by the one I/O thread while both scrapes wait for the dispatcher: a
            # refusal (an unknown path) and the admin listener's health check.
            raw = raw_exchange(self.server.port, b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n"
                               b"Authorization: Bearer bob-key-00001\r\nConnection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 404, raw)
            raw = raw_exchange(self.server.admin_port, b"GET /health HTTP/1.1\r\n"
                               b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 200, raw)
        finally:
            open_gate(gate)
        self.assertEqual(status_of(held.recv(4096)), 200)
        held.close()
        for scrape in scrapes:
            self.assertEqual(status_of(scrape.recv(4096)), 200)
            scrape.close()

    def test_fifo_flag_serves_in_arrival_order_without_classes(self):
        self.server.stop()
        self.server = Server(base_config(), "--fifo")
        res, _ = self.server.request("alice-key-0001", "/work?cpu_ms=1")
        self.assertEqual(res.status, 200)
        self.assertEqual(res.getheader("X-Creditloop-Class"), "fifo")
        self.assertEqual(self.server.participants()["scheduler"], "fifo")


if __name__ == "__main__":
    server_harness.main()
