#!/usr/bin/env python3
"""creditloop-server's connections: those beyond the limit refused until room comes back, a
lingering close drained through a small buffer, and an accept loop that pauses when descriptors
run out.

Usage: test_connections.py --server PATH [unittest args]
"""
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, base_config, free_port, wait_for, Server  # noqa: E402
from proxy_harness import Client, request, metric, unread_on  # noqa: E402


def refused_mid_body(port):
    """A client whose request is refused (no key) before the body it announced: answered 401,
    the connection then lingers for the rest of the body."""
    c = Client(port)
    c.send(request("POST", "/work", key=None, headers=[("Content-Length", "1000")]))
    assert c.response()[0] == 401
    return c


def read_text(path):
    try:
        with open(path) as f:
            return f.read().replace(" ", "")
    except FileNotFoundError:
        return ""


def held(server):
    """The connections the server still holds on its tenants' port (a lingering one shows here
    until the server closes it; the client sees the end of the answer at once either way)."""
    return unread_on(server.proc.pid, server.port)[0]


class Connections(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

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

    def test_lingering_follows_nginx_lingering_time_and_timeout(self):
        """A connection answered before the body it announced is read drains what still comes as
        nginx does: each pause at most limits.lingering_timeout_ms, all of it at most
        limits.lingering_time_ms (the fixed 2 s before them cut a slow sender off mid-body). Its
        access line is written when it is answered, and a shutdown does not wait for it."""
        log_path = os.path.join(self.tmp.name, "access.log")
        config = base_config(access_log={"path": log_path}, shutdown_deadline_ms=1000)
        config["limits"].update(lingering_timeout_ms=1000, lingering_time_ms=60000)
        server = Server(config)
        try:
            slow = refused_mid_body(server.port)
            # Its access line, while it lingers.
            wait_for("the access line", lambda: '"status":401' in read_text(log_path))
            # A byte every 0.2 s for 3 s: each pause is well within the timeout.
            for _ in range(15):
                slow.send(b"x")
                time.sleep(0.2)  # the client's pace, not a wait for the server
            self.assertEqual(held(server), 1, "closed while the client still sent")
            # Silent: closed after one lingering timeout.
            wait_for("closed after a pause", lambda: held(server) == 0)
            slow.close()

            # Lingering from here on: a shutdown ends it instead of waiting for it (the
            # deadline passing would make the exit status 1).
            silent = refused_mid_body(server.port)
            silent.send(b"x")
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        silent.close()

        config["limits"].update(lingering_timeout_ms=5000, lingering_time_ms=500)
        server = Server(config)
        try:
            steady = refused_mid_body(server.port)
            sent = 0
            while held(server) == 1 and sent < 50:
                steady.send(b"x")
                sent += 1
                time.sleep(0.1)  # the client's pace
            # Cut at the lingering time (about 5 bytes in), not at the 2 s of old (20), and not
            # at once either.
            self.assertGreaterEqual(sent, 2, "closed at once instead of lingering")
            self.assertLess(sent, 15, "not closed at the lingering time")
            steady.close()
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_a_close_with_nothing_unread_does_not_linger(self):
        """A connection that ends with its request read whole (here the client's own
        `Connection: close`) is closed at once, as nginx closes it: lingering is for bytes that
        may still come, and a client that keeps its end open would otherwise hold the connection
        for a whole lingering timeout. A request pipelined behind it still makes it linger."""
        config = base_config()
        config["limits"].update(lingering_timeout_ms=60000, lingering_time_ms=60000)
        server = Server(config)
        try:
            whole = Client(server.port)
            whole.send(request("GET", "/work", headers=[("Connection", "close")]))
            self.assertEqual(whole.response()[0], 200)
            with self.assertRaises(EOFError):
                whole.line()  # the answer's end
            # The client keeps its end open; the server's end is gone well before the timeout.
            wait_for("the connection closed", lambda: held(server) == 0)
            whole.close()

            pipelined = Client(server.port)
            pipelined.send(request("GET", "/work", headers=[("Connection", "close")]) +
                           request("GET", "/work"))
            self.assertEqual(pipelined.response()[0], 200)
            with self.assertRaises(EOFError):
                pipelined.line()
            self.assertEqual(held(server), 1, "a close with a request unread did not linger")
            pipelined.close()
            wait_for("the lingering connection closed", lambda: held(server) == 0)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_an_unrelayed_body_answered_early_lingers(self):
        """Proxy mode without request buffering: a request answered before its body was relayed
        (here 502, the backend unreachable) ends its connection lingering, as nginx's does, so
        that the rest of the body is drained instead of resetting the connection."""
        config = base_config(mode="proxy", slots=2,
                             proxy={"backend": f"127.0.0.1:{free_port()}", "timeout_ms": 500,
                                    "request_buffering": False})
        config["limits"].update(lingering_timeout_ms=60000, lingering_time_ms=60000)
        server = Server(config)
        try:
            c = Client(server.port)
            c.send(request("POST", "/work", headers=[("Content-Length", str(1 << 20))]))
            self.assertEqual(c.response()[0], 502)
            with self.assertRaises(EOFError):
                c.line()
            c.send(b"x" * 60000)  # more of the body: drained, not answered with a reset
            wait_for("the rest drained while lingering",
                     lambda: unread_on(server.proc.pid, server.port) == (1, 0))
            c.close()
        finally:
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


if __name__ == "__main__":
    server_harness.main()
