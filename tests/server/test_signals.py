#!/usr/bin/env python3
"""creditloop-server's signals: SIGHUP re-reads the configuration (adds, removes, re-plans,
refuses a bad file), SIGTERM answers the queue and finishes what is in flight, SIGUSR1 reopens the
access log after a rotation; and a bad file at start.

Usage: test_signals.py --server PATH [unittest args]
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, base_config, wait_for, Server, Async  # noqa: E402


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
        r = subprocess.run([server_harness.SERVER, "-c", path],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 3)
        self.assertIn("tenants[0].sharez: unknown field", r.stderr)
        r = subprocess.run([server_harness.SERVER, "-c", path, "--check"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 3)
        r = subprocess.run([server_harness.SERVER, "--bogus"],
                           capture_output=True, text=True, timeout=20)
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


class AccessLogRotation(unittest.TestCase):
    def test_sigusr1_reopens_the_access_log_after_a_rotation(self):
        d = tempfile.TemporaryDirectory()
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


if __name__ == "__main__":
    server_harness.main()
