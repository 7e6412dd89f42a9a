#!/usr/bin/env python3
"""creditloop-server end to end: the real binary on loopback, real sockets, real signals.

Usage: test_server.py --server PATH [unittest args]

Every wait is a poll with a deadline on something observable (a response, the participants
snapshot, the process's exit, a log line), never a fixed sleep.
"""
import argparse
import hashlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVER = None

PLANS = {
    "pro": {"P1": {"rate": 20, "burst": 4}, "P2": {"rate": 50, "burst": 10}},
    "lite": {"P2": {"rate": 50, "burst": 10}},
}


def base_config(**overrides):
    config = {
        "mode": "work",
        "listen": "127.0.0.1:0",
        "admin": {"listen": "127.0.0.1:0"},
        "io_threads": 2,
        "workers": 2,
        "slots": 4,
        "cost_unit_ms": 1,
        "classes": 2,
        "plans": PLANS,
        "tenants": [
            {"name": "alice", "key": "alice-key-0001", "plan": "pro", "shares": 2},
            {"name": "bob", "key": "bob-key-00001", "plan": "lite", "shares": 1},
        ],
        "work": {"max_cpu_ms": 50, "max_wait_ms": 5000},
        "limits": {"header_bytes": 4096, "body_bytes": 1024, "read_timeout_ms": 1000,
                   "idle_timeout_ms": 2000},
        "shutdown_deadline_ms": 5000,
    }
    config.update(overrides)
    return config


def wait_for(what, predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Server:
    """One creditloop-server process with a config of our own; ports are the kernel's choice."""

    def __init__(self, config, *args, env=None, files=None):
        self.dir = tempfile.TemporaryDirectory()
        self.config_path = os.path.join(self.dir.name, "config.json")
        for name, content in (files or {}).items():
            self.write_file(name, content)
        self.write_config(config)
        self.stderr_path = os.path.join(self.dir.name, "stderr.log")
        self.stderr = open(self.stderr_path, "w")
        self.final_log = None
        self.proc = subprocess.Popen([SERVER, "-c", self.config_path, *args],
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env=None if env is None else {**os.environ, **env})
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line!r} {self.log()}")
        words = line.replace(",", " ").split()
        self.port = int(words[words.index("on") + 1].rsplit(":", 1)[1])
        self.admin_port = int(words[words.index("admin") + 1].rsplit(":", 1)[1])

    def write_config(self, config):
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(config, f)
        os.replace(tmp, self.config_path)

    def write_file(self, name, content):
        """A file next to the configuration (a key file), replaced atomically."""
        path = os.path.join(self.dir.name, name)
        with open(path + ".tmp", "w") as f:
            f.write(content)
        os.replace(path + ".tmp", path)
        return path

    def log(self):
        if self.final_log is not None:
            return self.final_log
        self.stderr.flush()
        with open(self.stderr_path) as f:
            return f.read()

    def request(self, key, path="/work", method="GET", timeout=30, port=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        conn.request(method, path, headers=h)
        res = conn.getresponse()
        body = res.read()
        conn.close()
        return res, body

    def admin(self, path="/debug/participants", key=None):
        return self.request(key, path, port=self.admin_port)

    def participants(self):
        res, body = self.admin()
        assert res.status == 200, (res.status, body)
        return json.loads(body)

    def tenant(self, name):
        for t in self.participants()["tenants"]:
            if t["name"] == name:
                return t
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.final_log is None:
            self.final_log = self.log()
            self.proc.stdout.close()
            self.stderr.close()
            self.dir.cleanup()
        return self.proc.returncode


class Async:
    """A request on its own thread, for requests that must wait their turn."""

    def __init__(self, server, key, path, port=None):
        self.result = None
        self.error = None

        def run():
            try:
                res, body = server.request(key, path, port=port)
                self.result = (res.status, dict(res.getheaders()), body)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def get(self, timeout=30):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("request did not finish")
        if self.error:
            raise self.error
        return self.result


def raw_exchange(port, payload, timeout=5.0):
    """Sends bytes, returns whatever the server answers before closing."""
    return raw_exchange_to("127.0.0.1", port, payload, timeout)


def raw_exchange_to(address, port, payload, timeout=5.0):
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def open_gate(gate):
    """Lets a dispatcher held by CREDITLOOP_SERVER_TEST_DISPATCH_GATE go on: the server is the
    FIFO's reader."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x")
        os.close(fd)
    except OSError:
        pass


def status_of(raw):
    first = raw.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 else None


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


class AdminListener(unittest.TestCase):
    def test_admin_key_and_formats(self):
        config = base_config()
        config["admin"]["key"] = "admin-secret-1"
        server = Server(config)
        try:
            server.request("alice-key-0001", "/work?cpu_ms=1")
            res, _ = server.admin("/metrics")
            self.assertEqual(res.status, 401)
            res, _ = server.admin("/metrics", key="alice-key-0001")
            self.assertEqual(res.status, 401)  # a tenant's key never opens the admin endpoints
            res, body = server.admin("/metrics", key="admin-secret-1")
            self.assertEqual(res.status, 200)
            text = body.decode()
            self.assertIn('creditloop_tenant_requests_total{tenant="alice",class="P1"} 1', text)
            self.assertIn('creditloop_tenant_balance_credits{tenant="bob",class="P2"}', text)
            self.assertIn("creditloop_loop_turns_total", text)
            # The records for 4 slots were reserved up front: no growth, so none failed.
            self.assertIn("creditloop_loop_ticket_growth_failures_total 0", text)
            res, body = server.admin("/debug/participants", key="admin-secret-1")
            snapshot = json.loads(body)
            alice = [t for t in snapshot["tenants"] if t["name"] == "alice"][0]
            self.assertEqual(alice["plan"], "pro")
            self.assertIn("P1", alice["balance"])
            self.assertEqual(snapshot["loop"]["dispatched"], 1)
            self.assertNotIn("alice-key-0001", body.decode())
        finally:
            self.assertEqual(server.stop(), 0)


def sha256_hex(key):
    return hashlib.sha256(key.encode()).hexdigest()


def check_config(config, files=None, env=None):
    """`--check` on a configuration written with `files` beside it: (exit status, stderr)."""
    with tempfile.TemporaryDirectory() as d:
        for name, content in (files or {}).items():
            with open(os.path.join(d, name), "w") as f:
                f.write(content)
        path = os.path.join(d, "c.json")
        with open(path, "w") as f:
            json.dump(config, f)
        r = subprocess.run([SERVER, "-c", path, "--check"], capture_output=True, text=True,
                           timeout=20, env={**os.environ, **(env or {})})
        return r.returncode, r.stderr


def metric(text, line_start):
    """The value of the one sample whose line starts with `line_start` (name and labels)."""
    values = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(line_start + " ")]
    assert len(values) == 1, (line_start, text)
    return values[0]


class KeySources(unittest.TestCase):
    """A tenant's or the admin's key: in the file, as its SHA-256, in a file, or in a variable."""

    def test_keys_from_a_digest_a_file_and_the_environment(self):
        config = base_config()
        config["tenants"] = [
            {"name": "alice", "key_sha256": sha256_hex("alice-key-0001").upper(), "plan": "pro"},
            {"name": "bob", "key_file": "bob.key", "plan": "lite"},  # beside the config file
            {"name": "carol", "key_env": "CREDITLOOP_TEST_CAROL_KEY", "plan": "pro"},
            {"name": "dave", "key": "dave-key-0001", "plan": "lite"},
        ]
        admins = [({"key_sha256": sha256_hex("admin-secret-1")}, {}, {}),
                  ({"key_file": "admin.key"}, {"admin.key": "admin-secret-1"}, {}),  # no newline
                  ({"key_env": "CREDITLOOP_TEST_ADMIN_KEY"}, {},
                   {"CREDITLOOP_TEST_ADMIN_KEY": "admin-secret-1"})]
        for admin, files, env in admins:
            with self.subTest(admin=admin):
                config["admin"] = {"listen": "127.0.0.1:0", **admin}
                server = Server(config, files={"bob.key": "bob-key-00001\n", **files},
                                env={"CREDITLOOP_TEST_CAROL_KEY": "carol-key-001", **env})
                try:
                    for key, name in [("alice-key-0001", "alice"), ("bob-key-00001", "bob"),
                                      ("carol-key-001", "carol"), ("dave-key-0001", "dave")]:
                        res, body = server.request(key, "/work")
                        self.assertEqual(res.status, 200, (name, body))
                        self.assertEqual(json.loads(body)["tenant"], name)
                    res, _ = server.request(sha256_hex("alice-key-0001"), "/work")
                    self.assertEqual(res.status, 401)  # the digest is not a key
                    res, _ = server.admin("/metrics")
                    self.assertEqual(res.status, 401)
                    res, _ = server.admin("/metrics", key="admin-secret-1")
                    self.assertEqual(res.status, 200)
                finally:
                    self.assertEqual(server.stop(), 0, server.log())
                for secret in ["alice-key-0001", "bob-key-00001", "carol-key-001", "admin-secret-1"]:
                    self.assertNotIn(secret, server.log())

    def test_bad_key_sources_name_the_field(self):
        alice = {"name": "alice", "plan": "pro"}
        unset = "CREDITLOOP_TEST_UNSET_VARIABLE"
        os.environ.pop(unset, None)
        cases = [
            ({"key": "alice-key-0001", "key_file": "a.key"}, None,
             "tenants[0].key_file: give one of key, key_sha256, key_file, key_env, not two"),
            ({"key_sha256": sha256_hex("x"), "key_env": "X"}, None,
             "tenants[0].key_env: give one of key, key_sha256, key_file, key_env, not two"),
            ({}, None, "tenants[0].key: is required (or key_sha256, key_file, key_env)"),
            ({"key_sha256": "abc123"}, None, "tenants[0].key_sha256: must be 64 hex digits"),
            ({"key_sha256": "g" * 64}, None, "tenants[0].key_sha256: must be 64 hex digits"),
            ({"key_sha256": 5}, None, "tenants[0].key_sha256: must be a string"),
            ({"key_file": "missing.key"}, None, "tenants[0].key_file: cannot read "),
            ({"key_file": "a.key"}, "", "tenants[0].key_file: the key is empty"),
            ({"key_file": "a.key"}, "\n", "tenants[0].key_file: the key is empty"),
            ({"key_file": "a.key"}, "short\n", "tenants[0].key_file: the key must be at least 8"),
            ({"key_file": "a.key"}, "alice-key-0001\n\n",
             "tenants[0].key_file: the key must not contain white space"),
            ({"key_file": ""}, None, "tenants[0].key_file: must name a file"),
            ({"key_env": unset}, None, f"tenants[0].key_env: {unset} is not set"),
            ({"key_env": "CREDITLOOP_TEST_EMPTY"}, None,
             "tenants[0].key_env: CREDITLOOP_TEST_EMPTY is empty"),
            ({"key_env": ""}, None, "tenants[0].key_env: must name an environment variable"),
            ({"key": ""}, None, "tenants[0].key: the key is empty"),
        ]
        for fields, file_content, message in cases:
            with self.subTest(fields=fields, file=file_content):
                config = base_config()
                config["tenants"][0] = {**alice, **fields}
                files = {} if file_content is None else {"a.key": file_content}
                status, err = check_config(config, files, {"CREDITLOOP_TEST_EMPTY": ""})
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)
                self.assertNotIn("alice-key-0001", err)

        # Two tenants with one key, however each gives it.
        config = base_config()
        config["tenants"][1]["key_sha256"] = sha256_hex("alice-key-0001")
        del config["tenants"][1]["key"]
        status, err = check_config(config)
        self.assertEqual(status, 3, err)
        self.assertIn('tenants[1].key_sha256: is the key of tenant "alice" too', err)

        for admin, message in [
                ({"key": "admin-secret-1", "key_env": "X"},
                 "admin.key_env: give one of key, key_sha256, key_file, key_env, not two"),
                ({"key_sha256": "00"}, "admin.key_sha256: must be 64 hex digits"),
                ({"key_file": "nowhere/admin.key"}, "admin.key_file: cannot read "),
                ({"key_env": unset}, f"admin.key_env: {unset} is not set"),
                ({"key": ""}, "admin.key: the key is empty")]:
            with self.subTest(admin=admin):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0", **admin}))
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)

    def test_sighup_rereads_key_files_and_keeps_the_old_keys_when_one_is_bad(self):
        config = base_config()
        config["tenants"][1] = {"name": "bob", "key_file": "bob.key", "plan": "lite"}
        server = Server(config, files={"bob.key": "bob-key-00001\n"})
        try:
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 200)
            server.write_file("bob.key", "bob-key-00002\n")
            server.proc.send_signal(signal.SIGHUP)
            wait_for("reload", lambda: "configuration reloaded" in server.log())
            res, _ = server.request("bob-key-00002", "/work")
            self.assertEqual(res.status, 200)
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 401)

            os.remove(os.path.join(server.dir.name, "bob.key"))
            server.proc.send_signal(signal.SIGHUP)
            wait_for("refusal logged", lambda: "reload refused" in server.log())
            self.assertIn("tenants[1].key_file: cannot read ", server.log())
            res, _ = server.request("bob-key-00002", "/work")
            self.assertEqual(res.status, 200)  # the old configuration stays
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        self.assertNotIn("bob-key-0000", server.log())


class AdminKeyDistinct(unittest.TestCase):
    def test_an_admin_key_equal_to_a_tenant_key_is_refused_at_start_and_at_reload(self):
        for admin, files, field in [({"key": "alice-key-0001"}, {}, "admin.key"),
                                    ({"key_file": "k"}, {"k": "bob-key-00001\n"}, "admin.key_file")]:
            with self.subTest(admin=admin):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0", **admin}),
                                           files)
                self.assertEqual(status, 3, err)
                self.assertIn(f"{field}: is the key of tenant ", err)
                self.assertNotIn("alice-key-0001", err)
                self.assertNotIn("bob-key-00001", err)

        config = base_config(admin={"listen": "127.0.0.1:0", "key": "admin-secret-1"})
        server = Server(config)
        try:
            config["admin"] = {"listen": "127.0.0.1:0", "key_sha256": sha256_hex("bob-key-00001")}
            server.write_config(config)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("refusal logged", lambda: "reload refused" in server.log())
            self.assertIn('admin.key_sha256: is the key of tenant "bob" too', server.log())
            res, _ = server.admin("/health", key="admin-secret-1")
            self.assertEqual(res.status, 200)  # the old admin key stays
            res, _ = server.admin("/health", key="bob-key-00001")
            self.assertEqual(res.status, 401)
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        self.assertNotIn("bob-key-00001", server.log())


class AdminHosts(unittest.TestCase):
    """The admin listener answers only to its own names: a page on another site that rebinds its
    name to 127.0.0.1 still sends its own name in Host."""

    def get(self, server, host, path="/health", key=None):
        headers = {} if host is None else {"Host": host}
        res, body = server.request(key, path, port=server.admin_port, headers=headers)
        return res.status, body

    def assert_misdirected(self, server, host, path="/metrics"):
        status, body = self.get(server, host, path)
        self.assertEqual(status, 421, (host, body[:80]))
        self.assertLess(len(body), 100)
        self.assertNotIn(b"creditloop_", body)

    def test_default_names_and_others_refused(self):
        server = Server(base_config())
        try:
            p = server.admin_port
            for host in ["localhost", f"localhost:{p}", "LocalHost:1", f"127.0.0.1:{p}",
                         "127.0.0.1", f"[::1]:{p}", "[::1]"]:
                self.assertEqual(self.get(server, host)[0], 200, host)
            for host in ["evil.example", f"evil.example:{p}", "localhost.evil.example",
                         "127.0.0.1.nip.io", "[::2]", f"127.0.0.2:{p}", ""]:
                self.assert_misdirected(server, host)
            self.assert_misdirected(server, "evil.example", "/ui/events")  # no stream either
            self.assert_misdirected(server, "evil.example", "/debug/participants")
            # HTTP/1.1 needs a Host; HTTP/1.0 may go without (no browser sends that).
            raw = raw_exchange(p, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
            raw = raw_exchange(p, b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
                                  b"Connection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
            raw = raw_exchange(p, b"GET /health HTTP/1.0\r\n\r\n")
            self.assertEqual(status_of(raw), 200, raw)
            # The tenants' listener does not care.
            res, _ = server.request("alice-key-0001", "/work", headers={"Host": "evil.example"})
            self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

        # The admin listen address's own host is one of the defaults.
        server = Server(base_config(admin={"listen": "127.0.0.2:0"}))
        try:
            raw = raw_exchange_to("127.0.0.2", server.admin_port,
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.2:%d\r\n"
                                  b"Connection: close\r\n\r\n" % server.admin_port)
            self.assertEqual(status_of(raw), 200, raw)
            raw = raw_exchange_to("127.0.0.2", server.admin_port,
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.3\r\n"
                                  b"Connection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_configured_names_replace_the_defaults_and_reload(self):
        config = base_config(admin={"listen": "127.0.0.1:0",
                                    "hosts": ["Admin.Example", "mon.example:9999", "::1"]})
        server = Server(config)
        try:
            for host in ["admin.example", "ADMIN.EXAMPLE:1234", "mon.example:9999", "[::1]:80"]:
                self.assertEqual(self.get(server, host)[0], 200, host)
            for host in ["mon.example", "mon.example:9998", "localhost", "127.0.0.1",
                         "admin.example.evil"]:
                self.assert_misdirected(server, host)
            config["admin"]["hosts"] = ["other.example"]
            server.write_config(config)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("reload", lambda: "configuration reloaded" in server.log())
            self.assertEqual(self.get(server, "other.example")[0], 200)
            self.assert_misdirected(server, "admin.example")
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_bad_hosts_name_the_field(self):
        for hosts, message in [("localhost", "admin.hosts: must be a list of host names"),
                               ([], "admin.hosts: must name at least one host"),
                               (["ok", 7], "admin.hosts[1]: must be a string"),
                               (["a b"], 'admin.hosts[0]: must be a host name'),
                               (["h:99999"], "admin.hosts[0]: port must be from 1 to 65535"),
                               (["h:"], 'admin.hosts[0]: must be a host name'),
                               (["[::1"], 'admin.hosts[0]: must be a host name')]:
            with self.subTest(hosts=hosts):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0",
                                                              "hosts": hosts}))
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)


class Unauthorized(unittest.TestCase):
    def test_failed_authentications_are_counted_per_listener(self):
        server = Server(base_config(admin={"listen": "127.0.0.1:0", "key": "admin-secret-1"}))
        try:
            def counts():
                res, body = server.admin("/metrics", key="admin-secret-1")
                self.assertEqual(res.status, 200)
                text = body.decode()
                types = [l for l in text.splitlines()
                         if l.startswith("# TYPE creditloop_server_unauthorized_total ")]
                self.assertEqual(types, ["# TYPE creditloop_server_unauthorized_total counter"])
                return (metric(text, 'creditloop_server_unauthorized_total{listener="tenants"}'),
                        metric(text, 'creditloop_server_unauthorized_total{listener="admin"}'))

            self.assertEqual(counts(), (0, 0))
            self.assertEqual(server.request(None, "/work")[0].status, 401)
            self.assertEqual(server.request("alice-key-0002", "/work")[0].status, 401)
            self.assertEqual(server.request(None, "/work", headers={
                "Authorization": "Basic YWxpY2U6eA=="})[0].status, 401)
            self.assertEqual(server.request("alice-key-0001", "/work")[0].status, 200)
            self.assertEqual(server.admin("/metrics")[0].status, 401)
            self.assertEqual(server.admin("/ui/events", key="alice-key-0001")[0].status, 401)
            # A wrong name is not a failed authentication.
            res, _ = server.request("admin-secret-1", "/metrics", port=server.admin_port,
                                    headers={"Host": "evil.example"})
            self.assertEqual(res.status, 421)
            self.assertEqual(counts(), (3, 2))
        finally:
            self.assertEqual(server.stop(), 0, server.log())


class Reload(unittest.TestCase):
    def test_sighup_adds_removes_replans_and_refuses_bad_files(self):
        config = base_config(slots=1)
        server = Server(config)
        try:
            hold = Async(server, "alice-key-0001", "/work?wait_ms=1500")
            wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
            bobs = [Async(server, "bob-key-00001", "/work") for _ in range(3)]
            wait_for("bob queued", lambda: server.tenant("bob")["queued"] == 3)

            config["tenants"] = [
                {"name": "alice", "key": "alice-key-0001", "plan": "lite", "shares": 3},
                {"name": "carol", "key": "carol-key-001", "plan": "pro", "shares": 1},
            ]
            server.write_config(config)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("carol", lambda: server.tenant("carol") is not None)
            for b in bobs:
                status, headers, _ = b.get()
                self.assertEqual(status, 503)
                self.assertEqual(headers.get("Retry-After"), "1")
            self.assertEqual(hold.get()[0], 200)  # in flight across the reload: not dropped
            alice = wait_for("alice re-planned", lambda: (lambda t: t if t["plan"] == "lite" else None)(server.tenant("alice")))
            self.assertEqual(alice["shares"], 3)
            self.assertEqual(list(alice["balance"].keys()), ["P2"])
            res, _ = server.request("carol-key-001", "/work")
            self.assertEqual(res.getheader("X-Creditloop-Class"), "P1")
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 401)

            bad = json.loads(json.dumps(config))
            bad["tenants"][1]["plan"] = "gold"
            server.write_config(bad)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("refusal logged", lambda: "tenants[1].plan" in server.log())
            self.assertIn('unknown plan "gold"', server.log())
            res, _ = server.request("carol-key-001", "/work")
            self.assertEqual(res.status, 200)  # the old configuration stays
            self.assertEqual(server.tenant("carol")["plan"], "pro")

            server.write_config(dict(config, slots=2))
            server.proc.send_signal(signal.SIGHUP)
            wait_for("restart-only change refused", lambda: "slots: changes only at restart" in server.log())
        finally:
            self.assertEqual(server.stop(), 0)

    def test_a_bad_file_at_start_names_the_field(self):
        config = base_config()
        config["tenants"][0]["sharez"] = 3
        d = tempfile.TemporaryDirectory()
        path = os.path.join(d.name, "c.json")
        with open(path, "w") as f:
            json.dump(config, f)
        r = subprocess.run([SERVER, "-c", path], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 3)
        self.assertIn("tenants[0].sharez: unknown field", r.stderr)
        r = subprocess.run([SERVER, "-c", path, "--check"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 3)
        r = subprocess.run([SERVER, "--bogus"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        d.cleanup()


class Shutdown(unittest.TestCase):
    def test_sigterm_answers_queued_503_finishes_in_flight_and_exits_0(self):
        server = Server(base_config(slots=1))
        hold = Async(server, "alice-key-0001", "/work?wait_ms=800")
        wait_for("alice in flight", lambda: server.participants()["loop"]["in_flight"] == 1)
        queued = [Async(server, "bob-key-00001", "/work") for _ in range(4)]
        wait_for("bob queued", lambda: server.tenant("bob")["queued"] == 4)
        server.proc.send_signal(signal.SIGTERM)
        for q in queued:
            try:
                status, headers, _ = q.get()
            except Exception as e:  # noqa: BLE001 - shown with the server's log
                if os.environ.get("DEBUG_STACKS"):
                    subprocess.run(["gdb", "-p", str(server.proc.pid), "-batch", "-ex",
                                    "thread apply all bt 12"], timeout=60)
                server.proc.wait(timeout=20)
                raise AssertionError(f"{e!r}; server log:\n{server.log()}") from e
            self.assertEqual(status, 503)
            self.assertIn("Retry-After", headers)
        status, _, body = hold.get()
        self.assertEqual(status, 200)
        self.assertGreaterEqual(json.loads(body)["device_wait_ms"], 800)
        self.assertEqual(server.proc.wait(timeout=10), 0)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        server.stop()


class Capture(unittest.TestCase):
    def test_capture_has_a_line_for_every_answered_request(self):
        d = tempfile.TemporaryDirectory()
        path = os.path.join(d.name, "capture.jsonl")
        config = base_config(capture={"path": path, "max_bytes": 1 << 20, "files": 2})
        started_ns = time.time_ns()
        server = Server(config)
        answered = []
        try:
            for _ in range(5):
                for key, name in [("alice-key-0001", "alice"), ("bob-key-00001", "bob")]:
                    res, _ = server.request(key, "/work?cpu_ms=1")
                    self.assertEqual(res.status, 200)
                    answered.append((name, res.getheader("X-Creditloop-Class")))
            # The writer thread catches up on its own: poll its counter in /metrics.
            def written():
                res, body = server.admin("/metrics")
                self.assertEqual(res.status, 200)
                for line in body.decode().splitlines():
                    if line.startswith("creditloop_capture_requests_total "):
                        return float(line.split()[1]) == len(answered)
                self.fail("no creditloop_capture_requests_total in /metrics")
            wait_for("the capture's request lines counted in /metrics", written)
            res, body = server.admin("/metrics")
            self.assertIn("creditloop_capture_dropped_total 0", body.decode())
            self.assertIn("creditloop_capture_errors_total 0", body.decode())
            # Changing the capture needs a restart; the running capture goes on.
            server.write_config(dict(config, capture={"path": path, "files": 3}))
            server.proc.send_signal(signal.SIGHUP)
            wait_for("capture change refused",
                     lambda: "capture: changes only at restart" in server.log())
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        d.cleanup()
        header = lines[0]
        self.assertEqual(header["capture"], "creditloop")
        self.assertEqual(header["version"], 1)
        self.assertEqual(header["file"], 0)
        self.assertEqual(header["classes"], ["P1", "P2"])
        self.assertEqual(header["plans"], PLANS)
        self.assertEqual(header["server"], {"slots": 4})
        self.assertLess(abs(header["origin_unix_ns"] - started_ns), 60 * 10**9)
        plans = [(l["participant"], l["plan"], l["shares"]) for l in lines if l.get("ev") == "plan"]
        self.assertEqual(plans, [("alice", "pro", 2), ("bob", "lite", 1)])
        requests = [l for l in lines if l.get("ev") == "request"]
        self.assertEqual(sorted((l["participant"], l["class"]) for l in requests), sorted(answered))
        for l in requests:
            self.assertLessEqual(l["arrive"], l["dispatch"], l)
            self.assertLessEqual(l["dispatch"], l["complete"], l)
            self.assertGreater(l["cost"], 0, l)
        self.assertFalse([l for l in lines if l.get("ev") == "dropped"])

    def test_an_unwritable_capture_is_logged_and_requests_are_still_served(self):
        path = "/nonexistent-creditloop-dir/capture.jsonl"
        server = Server(base_config(capture={"path": path}))
        try:
            res, _ = server.request("alice-key-0001", "/work")
            self.assertEqual(res.status, 200)
            wait_for("the capture's error logged",
                     lambda: f"capture {path}: cannot open: No such file or directory" in server.log())
            res, body = server.admin("/metrics")
            errors = [l for l in body.decode().splitlines()
                      if l.startswith("creditloop_capture_errors_total ")]
            self.assertEqual(len(errors), 1, body)
            self.assertGreaterEqual(float(errors[0].split()[1]), 1)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_bad_capture_field_is_named(self):
        for capture, message in [({"path": "x", "max_byte": 10}, "capture.max_byte: unknown field"),
                                 ({"max_bytes": 10000}, "capture.path: is required"),
                                 ({"path": "x", "files": 0}, "capture.files: must be from 1")]:
            d = tempfile.TemporaryDirectory()
            path = os.path.join(d.name, "c.json")
            with open(path, "w") as f:
                json.dump(base_config(capture=capture), f)
            r = subprocess.run([SERVER, "-c", path, "--check"], capture_output=True, text=True,
                               timeout=20)
            self.assertEqual(r.returncode, 3)
            self.assertIn(message, r.stderr)
            d.cleanup()


class LearnedRoom(unittest.TestCase):
    def test_auto_slots_serve_and_show_the_room_and_fifo_refuses_them(self):
        d = tempfile.TemporaryDirectory()
        path = os.path.join(d.name, "c.json")
        with open(path, "w") as f:
            json.dump(base_config(slots={"auto": {"min": 2, "max": 16}}), f)
        r = subprocess.run([SERVER, "-c", path, "--fifo"], capture_output=True, text=True,
                           timeout=20)
        self.assertEqual(r.returncode, 3)
        self.assertIn('slots: "auto" needs creditloop\'s scheduler', r.stderr)
        d.cleanup()
        server = Server(base_config(slots="auto"))
        try:
            res, _ = server.request("alice-key-0001", "/work?cpu_ms=0.1")
            self.assertEqual(res.status, 200)
            loop = server.participants()["loop"]
            self.assertEqual(loop["room_slots"], 1)  # a learned room starts at its least
            self.assertIn("room_latency_s", loop)
            res, body = server.admin("/metrics")
            self.assertEqual(res.status, 200)
            metrics = body.decode()
            self.assertIn("creditloop_loop_room_slots 1", metrics)
            self.assertIn("creditloop_loop_room_latency_seconds ", metrics)
        finally:
            server.stop()


def start_http(handler):
    """A threading HTTP server for `handler` on a loopback port of the kernel's choice, serving
    on a thread of its own."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args, rest = parser.parse_known_args()
    SERVER = os.path.abspath(args.server)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
