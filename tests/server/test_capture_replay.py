#!/usr/bin/env python3
"""A server's traffic, captured under wrk and replayed by the simulator.

Usage: test_capture_replay.py --server PATH --sim PATH [unittest args]

creditloop-server runs with a capture while wrk floods it as two tenants; creditloop-sim
--replay then re-runs the capture through the core on a virtual clock. A real run cannot be
replayed request for request (docs/replay.md lists why: arrival order within a turn, when
completions were applied), so under the same plans the test checks what must carry over: every
request, each tenant's class mix and waits close to the recorded ones. Under a plan that gives one
tenant eight times the shares it checks what the rules say must follow: that tenant goes out in
the metered classes more often and waits less; the other one waits no less.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402  (the Server wrapper and the base configuration)

SIM = None
PLANS = server_harness.PLANS


def replay(capture, *args):
    out = subprocess.run([SIM, "--replay", capture, "--json", *args], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"creditloop-sim exited {out.returncode}: {out.stderr}")
    report = json.loads(out.stdout)
    return report, {p["name"]: p for p in report["participants"]}


class CaptureReplay(unittest.TestCase):
    def setUp(self):
        if shutil.which("wrk") is None:
            self.fail("wrk is not installed (tools/install-deps installs it)")
        self.dir = tempfile.TemporaryDirectory()
        self.capture = os.path.join(self.dir.name, "capture.jsonl")

    def tearDown(self):
        self.dir.cleanup()

    def run_load(self):
        # Each request holds its slot 5 ms and is charged 5 credits: two tenants with six
        # connections each keep the four slots full, so every decision is a real choice.
        config = server_harness.base_config(capture={"path": self.capture, "max_bytes": 1 << 28})
        server = server_harness.Server(config)
        loads = []
        try:
            for key in ["alice-key-0001", "bob-key-00001"]:
                loads.append(subprocess.Popen(
                    ["wrk", "-t1", "-c6", "-d4s", "-H", f"Authorization: Bearer {key}",
                     f"http://127.0.0.1:{server.port}/work?wait_ms=5"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outputs = [p.communicate(timeout=60)[0] for p in loads]
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        for out in outputs:
            self.assertIn("Requests/sec", out, out)
            self.assertNotIn("Non-2xx", out, out)

    def test_a_replay_under_the_same_plans_keeps_every_request_and_its_tenants_mix(self):
        self.run_load()
        report, runs = replay(self.capture)
        self.assertEqual(report["dropped"], 0, "the capture lost records under a light load")
        self.assertEqual(sorted(runs), ["alice", "bob"])
        for name, p in runs.items():
            captured, replayed = p["captured"], p["replayed"]
            with self.subTest(tenant=name):
                self.assertGreater(captured["requests"], 200, captured)
                self.assertEqual(replayed["requests"], captured["requests"])
                self.assertEqual(replayed["dispatched"], captured["dispatched"])
                for cls in report["classes"]:
                    self.assertAlmostEqual(replayed["mix"][cls], captured["mix"][cls], delta=0.05,
                                           msg=f"{name} {cls}: {captured} vs {replayed}")
                ratio = replayed["wait"]["mean"] / captured["wait"]["mean"]
                self.assertTrue(0.5 < ratio < 2.0, f"{name} mean wait ratio {ratio:.3f}")
        # bob's plan holds no P1 bucket: neither run sends him out in P1.
        self.assertEqual(runs["bob"]["captured"]["classes"]["P1"], 0)
        self.assertEqual(runs["bob"]["replayed"]["classes"]["P1"], 0)

        # Eight times alice's shares: eight times her refill in P1 and P2.
        plans = os.path.join(self.dir.name, "more_shares.json")
        with open(plans, "w") as f:
            json.dump({"plans": PLANS, "participants": [{"name": "alice", "shares": 16}]}, f)
        _, more = replay(self.capture, "--plans", plans)
        same, bigger = runs["alice"]["replayed"], more["alice"]["replayed"]
        self.assertEqual(bigger["shares"], 16)
        metered = lambda run: run["classes"]["P1"] + run["classes"]["P2"]  # noqa: E731
        self.assertGreater(metered(bigger), 2 * metered(same), (same, bigger))
        self.assertLess(bigger["wait"]["mean"], same["wait"]["mean"], (same, bigger))
        self.assertGreaterEqual(more["bob"]["replayed"]["wait"]["mean"],
                                runs["bob"]["replayed"]["wait"]["mean"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--sim", required=True)
    args, rest = parser.parse_known_args()
    server_harness.SERVER = args.server
    SIM = args.sim
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
