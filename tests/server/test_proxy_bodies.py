#!/usr/bin/env python3
"""creditloop-server's proxy mode and request bodies: a body read whole before its request
is queued (a trickled one holds a connection, never a slot; a stalled or endless one is cut off),
and buffered bodies spilled to unlinked temporary files past the memory bound.

Usage: test_proxy_bodies.py --server PATH [unittest args]
"""
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, BOB, check_config, wait_for, Server  # noqa: E402
from proxy_harness import (  # noqa: E402
    Backend, proxy_config, Client, request, metric, rss_kib, unread_on, files_open_in)


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
            # The three past the memory bound went to a file; the small one did not.
            self.assertEqual(metric(server, "creditloop_server_request_bodies_spilled_total"), 3)
            self.assertEqual(
                metric(server, "creditloop_server_request_body_spill_failures_total"), 0)
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
            self.assertEqual(
                metric(server, "creditloop_server_request_body_spill_failures_total"), 1)
            self.assertEqual(metric(server, "creditloop_server_request_bodies_spilled_total"), 1)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_bound_or_a_directory_that_cannot_serve_is_refused_at_start(self):
        def refusal(config):
            status, stderr = check_config(config)
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
                r = subprocess.run([server_harness.SERVER, "-c", path], capture_output=True,
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
        self.assertEqual(check_config(config)[0], 0)


if __name__ == "__main__":
    server_harness.main()
