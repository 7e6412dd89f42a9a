#!/usr/bin/env python3
"""creditloop-server with `"slots": "auto"`: the learned room serves and shows in the metrics,
and --fifo refuses it.

Usage: test_learned_room.py --server PATH [unittest args]
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import base_config, Server  # noqa: E402


class LearnedRoom(unittest.TestCase):
    def test_auto_slots_serve_and_show_the_room_and_fifo_refuses_them(self):
        d = tempfile.TemporaryDirectory()
        path = os.path.join(d.name, "c.json")
        with open(path, "w") as f:
            json.dump(base_config(slots={"auto": {"min": 2, "max": 16}}), f)
        r = subprocess.run([server_harness.SERVER, "-c", path, "--fifo"],
                           capture_output=True, text=True, timeout=20)
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


if __name__ == "__main__":
    server_harness.main()
