#!/usr/bin/env python3
"""ngx_http_creditloop_module's rooms: one room shared by four workers, a learned room
(`creditloop_slots auto`) that finds the backend's capacity, and named rooms beside the default
one, each holding back only its own locations' requests.

Usage: test_nginx_rooms.py --module PATH/ngx_http_creditloop_module.so [--nginx PATH]
"""
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_harness  # noqa: E402 - nginx with the module on loopback, and main()
from nginx_harness import wait_for, plans_json, TENANTS, Nginx, RefusedConfiguration  # noqa: E402


class SharedRoom(unittest.TestCase):
    """With more workers than slots, the backend never has more than creditloop_slots requests at
    once, and every worker's requests are served: a worker takes its slots from the room they all
    share, and a worker below its share is owed before others borrow."""

    def test_four_workers_two_slots(self):
        nginx = Nginx(workers=4, extra_http="creditloop_epoch 50ms;", slots=2)
        try:
            pids, results = set(), []
            lock = threading.Lock()

            def client(i):
                for j in range(6):
                    status, headers, _ = nginx.request(f"/busy/{i}/{j}",
                                                       ("alice", "bob")[i % 2], timeout=30)
                    with lock:
                        results.append(status)
                        pids.add(headers.get("X-Worker-Pid"))

            threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(results, [200] * 96)
            self.assertGreater(len(pids), 1, "every request went to one worker")
            self.assertLessEqual(nginx.backend.most_active, 2)
            self.assertEqual(nginx.backend.most_active, 2, "the room was never full")
            wait_for("nothing in flight", lambda: nginx.metric("creditloop_loop_in_flight") == 0)
        finally:
            nginx.stop()


class LearnedRoom(RefusedConfiguration, unittest.TestCase):
    """`creditloop_slots auto` in front of a backend that serves 3 at once and was not told: the
    room learns about 3 from the latencies alone, so that the queue forms in creditloop and the
    backend's own queue stays short."""

    def test_the_room_learns_the_backends_capacity(self):
        self.learns_with(workers=1)

    def test_two_workers_learn_one_room(self):
        self.learns_with(workers=2)

    def learns_with(self, workers):
        nginx = Nginx(slots="auto min=1 max=32", workers=workers)
        try:
            self.assertEqual(nginx.metric("creditloop_loop_room_slots"), 1)
            self.assertEqual(nginx.metric("creditloop_loop_room_latency_seconds"), 0)
            settle, end = time.monotonic() + 4, time.monotonic() + 7
            statuses = []

            def client(i):
                while time.monotonic() < end:
                    statuses.append(nginx.request(f"/capacity/{i}", ("alice", "bob")[i % 2],
                                                  timeout=30)[0])

            threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
            for t in threads:
                t.start()
            wait_for("the room to settle", lambda: time.monotonic() >= settle, timeout=10)
            with nginx.backend.lock:
                nginx.backend.most_waiting = 0  # from here on: the learned room's
            for t in threads:
                t.join(30)
            self.assertEqual(set(statuses), {200})
            slots = nginx.metric("creditloop_loop_room_slots")
            latency = nginx.metric("creditloop_loop_room_latency_seconds")
            self.assertGreaterEqual(slots, 2, nginx.metrics_or_none())
            self.assertLessEqual(slots, 5)
            self.assertGreater(latency, 0.015)
            self.assertLess(latency, 0.08)
            # Twelve clients and a room of 64 would keep 9 in the backend's queue.
            self.assertLessEqual(nginx.backend.most_waiting, 3)
        finally:
            nginx.stop()

    def test_bad_learned_rooms(self):
        self.check("creditloop_slots auto min=9 max=3;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid value: min is above max')
        self.check("creditloop_slots auto min=0;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid min')
        self.check("creditloop_slots 8 max=9;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid parameter')
        self.check("creditloop_room r slots=auto size=3;", plans_json(TENANTS),
              r'"creditloop_room" directive invalid parameter')


class Rooms(unittest.TestCase):
    """Two upstreams of different capacity, each with a room of its own: a full room holds back
    only its own locations' requests, and neither room ever has more in flight than its slots,
    whichever of the two workers a request comes to."""

    def test_a_named_room_beside_the_default_one(self):
        nginx = Nginx(workers=2, slots=1, extra_http="creditloop_room wide slots=3;",
                      extra_server="location /wide/ { creditloop_room_use wide; "
                                   "proxy_pass http://backend/; }")
        try:
            self.assertEqual(nginx.metric("creditloop_loop_room_slots"), 1)
            self.assertEqual(nginx.metric("creditloop_loop_room_slots", room="wide"), 3)
            held = nginx.hold_slot("a")  # the default room's one slot
            wide = [nginx.start_in_thread(f"/wide/gate/w{i}", "bob") for i in range(4)]
            wait_for("three of the wide room's requests at the backend",
                     lambda: sum(nginx.backend.saw(f"/gate/w{i}") for i in range(4)) == 3)
            wait_for("the fourth queued in the wide room", lambda: nginx.metric(
                "creditloop_tenant_queue_depth", room="wide", tenant="bob") == 1)
            self.assertEqual(nginx.metric("creditloop_loop_in_flight", room="wide"), 3)
            carol = nginx.start_in_thread("/fast", "carol")
            wait_for("carol queued in the default room",
                     lambda: nginx.metric("creditloop_tenant_queue_depth", tenant="carol") == 1)
            seen = [i for i in range(4) if nginx.backend.saw(f"/gate/w{i}")]
            nginx.backend.gate(f"w{seen[0]}").set()
            wait_for("the fourth at the backend once the wide room has a slot free",
                     lambda: all(nginx.backend.saw(f"/gate/w{i}") for i in range(4)))
            self.assertEqual(nginx.metric("creditloop_tenant_queue_depth", tenant="carol"), 1,
                             "the wide room's slot went to the default room's queue")
            for i in range(4):
                nginx.backend.gate(f"w{i}").set()
            nginx.backend.gate("a").set()
            for t, out in [held, carol] + wide:
                t.join(30)
                self.assertEqual(out["response"][0], 200, out)
            wait_for("nothing in flight in either room",
                     lambda: nginx.metric("creditloop_loop_in_flight") == 0
                     and nginx.metric("creditloop_loop_in_flight", room="wide") == 0)
            text = nginx.metrics_or_none()
            self.assertIn('creditloop_tenant_requests_total{room="wide",tenant="bob",class="P2"} 4',
                          text)
            self.assertIn('creditloop_tenant_requests_total{tenant="carol",class="P2"} 1', text)
            if shutil.which("promtool"):
                r = subprocess.run(["promtool", "check", "metrics"], input=text,
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        finally:
            nginx.stop()


if __name__ == "__main__":
    nginx_harness.main()
