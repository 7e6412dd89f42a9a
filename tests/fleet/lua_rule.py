#!/usr/bin/env python3
"""fleet_sim.lua_rule: the Redis function (tools/server/fleet.lua) and the simulator's rule
(fleet/apportion.hpp, through creditloop-fleet-sim --apportion) give the same answer
and leave the same entries, on random stored states: demands of zero, small and above the clip,
entries on both sides of the TTL and exactly at it, stamped ahead of Redis's clock on both sides of
the allowance and exactly at it, stored demands above the clip (not written by a server), the
reporting server new or already there.

Starts its own redis-server on a free loopback port. Exits 77 (skipped) when there is no
redis-server or no fleet.lua, so that a build without the server's fleet mode does not fail."""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

SKIP = 77
TTL_MS = 750
MAX_AHEAD_MS = 1000


class Redis:
    """A minimal RESP client: enough for this test, standard library only."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True)
    parser.add_argument("--lua", required=True)
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    server = shutil.which("redis-server")
    if server is None or not os.path.exists(args.lua):
        print(f"skipped: needs redis-server ({server}) and {args.lua}")
        return SKIP
    with open(args.lua) as f:
        library = f.read()

    port = free_port()
    redis = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                r = Redis(port)
                r.call("PING")
                break
            except OSError:
                if time.monotonic() > deadline:
                    print("redis-server did not answer within 20 s", file=sys.stderr)
                    return 1
                time.sleep(0.05)  # polling a process that is starting, with a deadline
        r.call("FUNCTION", "LOAD", "REPLACE", library)

        rng = random.Random(args.seed)
        cases, answers = [], []
        key = "creditloop:{t}:demand"
        for i in range(args.cases):
            secs, micros = r.call("TIME")
            now0 = int(secs) * 1000 + int(micros) // 1000
            others = rng.randint(0, 6)
            names = rng.sample([f"s{k}" for k in range(10)], others + 1)
            me = names[0] if rng.random() < 0.8 else names[rng.randint(0, others)]
            entries = []
            for name in names[1:]:
                demand = rng.choice([0, 0, rng.randint(1, 20), rng.randint(1, 10**6),
                                     rng.randint(1, 10**9), rng.randint(10**9 + 1, 2**64 - 1)])
                age = rng.choice([0, rng.randint(0, 2 * TTL_MS), TTL_MS - 1, TTL_MS, TTL_MS + 1,
                                  -rng.randint(1, 2 * MAX_AHEAD_MS), -MAX_AHEAD_MS + 1,
                                  -MAX_AHEAD_MS, -MAX_AHEAD_MS - 1, -3_600_000])
                entries.append({"server": name, "demand": demand, "ms": now0 - age})
            demand = rng.choice([0, rng.randint(1, 20), rng.randint(1, 10**6), 10**9 + 5,
                                 2**40])
            r.call("DEL", key)
            if entries:
                flat = []
                for e in entries:
                    flat += [e["server"], f"{e['demand']} {e['ms']}"]
                r.call("HSET", key, *flat)
            lua = r.call("FCALL", "creditloop_report", 1, key, me, demand, TTL_MS)
            left = r.call("HGETALL", key)
            stored = {left[k]: tuple(int(x) for x in left[k + 1].split()) for k in range(0, len(left), 2)}
            now1 = stored[me][1]  # the function's own clock, read back from its write
            cases.append({"entries": entries, "server": me, "demand": demand, "now_ms": now1,
                          "ttl_ms": TTL_MS})
            answers.append((lua, stored))
        out = subprocess.run([args.sim, "--apportion"], input=json.dumps(cases), check=True,
                             capture_output=True, text=True, timeout=60)
        mine = json.loads(out.stdout)
        bad = 0
        for case, (lua, stored), m in zip(cases, answers, mine):
            m_stored = {e["server"]: (e["demand"], e["ms"]) for e in m["entries"]}
            if [m["millionths"], m["live"], m["total"]] != lua or m_stored != stored:
                bad += 1
                if bad <= 5:
                    print(f"FAIL case {json.dumps(case)}\n  lua {lua} {stored}\n  sim "
                          f"{[m['millionths'], m['live'], m['total']]} {m_stored}")
        zero = sum(1 for lua, _ in answers if lua[2] == 0)
        clipped = sum(1 for c in cases if c["demand"] > 10**9)
        print(f"{len(cases) - bad} of {len(cases)} cases agree ({zero} with zero total demand, "
              f"{clipped} with a demand above the clip)")
        return 1 if bad else 0
    finally:
        redis.terminate()
        redis.wait(timeout=20)


if __name__ == "__main__":
    sys.exit(main())
