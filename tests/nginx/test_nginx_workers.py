#!/usr/bin/env python3
"""ngx_http_creditloop_module with several nginx workers sharing one zone: each tenant's rate
holds across 1, 2 and 4 workers, and every worker's counts and gauges are summed, never
written by the cache manager.

Usage: test_nginx_workers.py --module PATH/ngx_http_creditloop_module.so [--nginx PATH]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_harness  # noqa: E402 - nginx with the module on loopback, and main()
from nginx_harness import wait_for, Nginx  # noqa: E402


# Several workers: P1 plans small enough that the flood's P1 share is credit-bound. A worker's
# bucket holds burst x shares x its fraction, which must stay at least one credit at 1/4 of the
# plan, or that worker's P1 never refills (the core's scale rule); the window starts once the
# floods have drained the buckets, so the burst does not count in it. /free costs nothing, so
# that a P1 request takes exactly one credit.
WORKER_TENANTS = [{"name": "alice", "key": "key-ka-secret", "plan": "pro"},
                  {"name": "bob", "key": "key-kb-secret", "plan": "pro", "shares": 2}]
WORKER_PLANS = {"pro": {"P1": {"rate": 20, "burst": 16}, "P2": {"rate": 20, "burst": 16}}}
# The rule's over- and under-grant (fractions computed at different instants of an epoch, from
# demands an epoch old) and the window's edges; each worker enforcing the whole plan would be off
# by up to +100 % (2 workers) or +300 % (4). docs/nginx.md gives the measured figures.
RATE_TOLERANCE = 0.15


class Workers(unittest.TestCase):
    """With 2 and 4 workers, each tenant's P1 throughput is its plan (rate x shares), whatever
    worker its connections land on: the plans are shared by demand through the zone. Each
    worker enforcing the whole plan would give up to n times it."""

    def run_with(self, workers):
        nginx = Nginx(tenants=WORKER_TENANTS, workers=workers,
                      extra_http="creditloop_epoch 100ms;", slots=8)
        try:
            with open(os.path.join(nginx.dir, "plans.json"), "w") as f:
                f.write(json.dumps({"classes": 2, "plans": WORKER_PLANS,
                                    "tenants": WORKER_TENANTS}))
            nginx.proc.send_signal(signal.SIGHUP)
            wait_for("the reloaded plans", lambda: nginx.metric(
                "creditloop_tenant_balance_credits", **{"tenant": "alice", "class": "P2"})
                is not None and "P2" in (nginx.metrics_or_none() or "")
                and nginx.request("/fast", "alice")[0] == 200)
            loads = []
            started = time.monotonic()
            for tenant in ("alice", "bob"):
                loads.append(subprocess.Popen(
                    # Many connections per tenant, so that its queue stays full even when the
                    # machine's other work holds wrk back.
                    ["wrk", "-t", "1", "-c", "16", "-d", "10s", "-H",
                     f"X-Tenant: {tenant}", f"http://127.0.0.1:{nginx.port}/free"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            p1 = lambda t: nginx.metric("creditloop_tenant_requests_total",
                                        **{"tenant": t, "class": "P1"}) or 0
            # The measured window is seconds 3 to 8 of the floods: past the first epochs and
            # the buckets' first bursts, and before wrk stops. (The clock bounds a measurement
            # here; nothing waits on it for another process's progress.)
            wait_for("the floods' third second", lambda: time.monotonic() > started + 3)
            self.assertTrue(p1("alice") > 0 and p1("bob") > 0, "no P1 dispatch under the floods")
            t0, a0, b0 = time.monotonic(), p1("alice"), p1("bob")
            wait_for("the floods' eighth second", lambda: time.monotonic() > started + 8)
            t1, a1, b1 = time.monotonic(), p1("alice"), p1("bob")
            for load in loads:
                load.wait(timeout=30)
            window = t1 - t0
            print(f"window {window:.2f} s: alice {a0}..{a1}, bob {b0}..{b1}", file=sys.stderr)
            for name, got, plan in (("alice", (a1 - a0) / window, 20.0),
                                    ("bob", (b1 - b0) / window, 40.0)):
                print(f"{workers} workers: {name} P1 {got:.2f}/s, plan {plan}/s", file=sys.stderr)
                self.assertLess(abs(got - plan) / plan, RATE_TOLERANCE,
                                f"{name}: {got:.2f} P1 requests/s against a plan of {plan}")
        finally:
            nginx.stop()

    def test_one_worker(self):
        self.run_with(1)

    def test_two_workers(self):
        self.run_with(2)

    def test_four_workers(self):
        self.run_with(4)


class WorkersTogether(unittest.TestCase):
    """With 2 workers, a scrape answers for the whole nginx, whichever worker serves it: counts
    and gauges of the other worker appear in it."""

    def setUp(self):
        self.nginx = Nginx(workers=2)

    def tearDown(self):
        self.nginx.stop()

    def concurrently(self, count, path, tenant):
        started = [self.nginx.start_in_thread(path, tenant) for _ in range(count)]
        return started

    def until_both_workers_answered(self, tenant, status):
        """Requests in concurrent batches until both workers have answered some (a busy worker
        leaves the next connection to the other); returns how many were sent."""
        pids, sent = set(), 0
        for _ in range(50):
            for t, out in self.concurrently(8, "/fast", tenant):
                t.join(10)
                self.assertEqual(out["response"][0], status)
                pids.add(out["response"][1]["X-Worker-Pid"])
                sent += 1
            if len(pids) == 2:
                return sent
        self.fail("every request went to one worker")

    def test_counts_of_every_worker_are_summed(self):
        sent = self.until_both_workers_answered("mallory", 401)
        self.assertEqual(self.nginx.metric("creditloop_server_unauthorized_total",
                                           listener="tenants"), sent)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=self.nginx.metrics_or_none(),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_cache_manager_never_writes_a_workers_entry(self):
        # proxy_cache_path starts a cache manager, which runs the module's init_process as
        # worker 0 would: at each epoch it would publish its own costs (none) as worker 0's.
        sent = self.until_both_workers_answered("alice", 200)
        cost = lambda: self.nginx.metric("creditloop_tenant_cost_charged_credits_total",
                                         tenant="alice")
        # The other worker's costs come with its next epoch; from then on every scrape over
        # several epochs has them all. (The clock bounds the observation; nothing waits on it.)
        wait_for("every worker's costs", lambda: cost() == 2 * sent)
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            self.assertEqual(cost(), 2 * sent)

    def test_gauges_of_every_worker_are_summed(self):
        # Each worker has room for one request (creditloop_slots 1): of four held requests,
        # wherever they land, the whole nginx has them all in flight or queued.
        held = self.concurrently(4, "/gate/together", "alice")
        wait_for("four requests in flight or queued, over both workers", lambda: (
            (self.nginx.metric("creditloop_loop_in_flight") or 0) +
            (self.nginx.metric("creditloop_tenant_queue_depth", tenant="alice") or 0)) == 4)
        self.nginx.backend.gate("together").set()
        for t, out in held:
            t.join(30)
            self.assertEqual(out["response"][0], 200)
        wait_for("nothing in flight", lambda: self.nginx.metric("creditloop_loop_in_flight") == 0)
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "alice", "class": "P1"}), 4)


if __name__ == "__main__":
    nginx_harness.main()
