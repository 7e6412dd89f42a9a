#!/usr/bin/env python3
"""creditloop-server's capture: a line for every answered request, an unwritable capture
logged while requests are still served, and a bad capture field named.

Usage: test_capture.py --server PATH [unittest args]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import PLANS, base_config, wait_for, Server  # noqa: E402


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
            r = subprocess.run([server_harness.SERVER, "-c", path, "--check"],
                               capture_output=True, text=True, timeout=20)
            self.assertEqual(r.returncode, 3)
            self.assertIn(message, r.stderr)
            d.cleanup()


if __name__ == "__main__":
    server_harness.main()
