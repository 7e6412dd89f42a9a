#!/usr/bin/env python3
# One file: one fuzzing harness; its generators, fake backend and oracle serve its one loop.
"""creditloop-server under hostile HTTP, in work mode and in proxy mode, on loopback.

Usage: test_http_fuzz.py --server PATH [--seconds N] [--seed S] [--threads N] [--no-isolate]
                         [--mode work|proxy|both] [--skip WORD ...]

Each mode in turn: several client threads throw random requests at the tenants' listener (random,
lowercase and garbage methods, TRACE and CONNECT, with and without bodies; random, duplicated and
oversized headers; every body framing, malformed chunked bodies, huge chunk extensions, endless
trailers, Content-Length with Transfer-Encoding; Expect: 100-continue; truncations, pipelining,
random bytes, mutations of valid requests; slow clients, clients that vanish mid-request or never
read), with and without a valid key. In proxy mode the server sits in front of a fake backend
(raw sockets) that answers each forwarded request at random: 1xx storms before the final answer,
101, invalid status lines, random and duplicated headers, every framing (Content-Length right,
too short, too long, duplicated, conflicting; chunked with extensions and trailers, bad chunks;
close-delimited; both Content-Length and Transfer-Encoding), huge headers, early closes, random
bytes, slow trickles, or no answer at all.

Meanwhile a well-behaved tenant sends paced requests, below its P1 refill; each must be answered
200 under P1 (its own answer: in proxy mode the backend echoes a token) with a queueing delay
within the bound its plan gives (see `bound_ms`). P2 is allowed only while the charges the server
reported for its earlier requests leave it no P1 credit (`P1Estimate`), and a 504 only when the
fake backend read the request after the proxy's timeout, a few times at most (`MOST_STARVED`).
At the end of each mode the server must still be running, answer /health, exit 0 on SIGTERM,
and its standard error must hold no sanitizer report.
Also checked on the way: no tenant's key is echoed to a client, logged, or forwarded to the
backend; the backend never sees a forged X-Creditloop-Tenant; every forwarded request has one
unambiguous framing.

The seed is printed first; --seed replays it: each client thread's requests and the backend's
answer to each forwarded request follow from it (their interleaving does not). When the server
dies or reports, the requests thrown in the moments before are replayed one at a time against a
fresh server, to name the one that does it alone (--no-isolate skips this). --skip WORD throws
no request whose description has WORD (TRACE, cl_te, te_odd, pipelined, mutated, ...), to look
past a known bug; --mode runs one mode only.

--seconds is the whole run (default 20: about 7 s of work mode, 10 s of proxy mode, and their
starts and stops). Exit status: 0 passed, 1 a check failed, 2 a bad command line, 3 the server
could not be started.
"""
import argparse
import json
import os
import random
import re
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402  (the Server wrapper, base_config and wait_for)
from server_harness import base_config, wait_for  # noqa: E402

GOOD_KEY = "good-key-00001"
NOISE_KEY = "noise-key-0001"
CAPPED_KEY = "capped-key-001"
TENANT_KEYS = [GOOD_KEY, NOISE_KEY, CAPPED_KEY]
TENANT_NAMES = ["good", "noise", "capped"]
WRONG_KEY = "wrong-key-0001"
SANITIZER_MARKS = ["ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                   "WARNING: ThreadSanitizer"]
CRASH_MARKS = SANITIZER_MARKS + ["terminate called", "Assertion `", "Segmentation fault"]

SLOTS, WORKERS = 4, 2
MAX_CPU_MS, MAX_WAIT_MS = 10, 100  # the most a noise request may hold a work-mode slot for
PROXY_TIMEOUT_MS = 300
MOST_STARVED = 3  # good requests the fake backend may read only after the proxy's timeout
GOOD_PACE_S = 0.06
MARGIN_MS = 250  # I/O threads' turns on a shared 2-core machine, sanitizer builds included


def config_for(mode, backend_port=None):
    config = base_config(slots=SLOTS, workers=WORKERS)
    config["tenants"] = [
        {"name": "good", "key": GOOD_KEY, "plan": "pro", "shares": 2},
        {"name": "noise", "key": NOISE_KEY, "plan": "lite", "shares": 1},
        {"name": "capped", "key": CAPPED_KEY, "plan": "lite", "shares": 1, "queue_limit": 2},
    ]
    config["work"] = {"max_cpu_ms": MAX_CPU_MS, "max_wait_ms": MAX_WAIT_MS}
    # A client that stops reading holds its connection (and, proxied, its slot) this long: short,
    # so that what is in flight at SIGTERM ends within the shutdown deadline.
    config["limits"]["send_timeout_ms"] = 1000
    if mode == "proxy":
        config["mode"] = "proxy"
        config["proxy"] = {"backend": f"127.0.0.1:{backend_port}", "cost_header": "X-Cost",
                           "timeout_ms": PROXY_TIMEOUT_MS}
    return config


def good_p1(config):
    """The good tenant's P1 bucket: (refill in credits/s, capacity in credits)."""
    good = [t for t in config["tenants"] if t["name"] == "good"][0]
    p1 = config["plans"][good["plan"]]["P1"]
    return p1["rate"] * good["shares"], p1["burst"] * good["shares"]


def bound_ms(config):
    """The good tenant's queueing delay, at most: one credit's refill of its P1 bucket (it asks
    less than the refill, so at most one credit is ever missing) plus one turn (the longest a
    slot can stay held by a request already in flight), plus the margin."""
    rate, _ = good_p1(config)
    refill = 1000.0 / rate
    if config["mode"] == "work":
        # A noise request's CPU may queue behind the other slots' on the workers, then it waits.
        turn = -(-config["slots"] // config["workers"]) * config["work"]["max_cpu_ms"] + \
            config["work"]["max_wait_ms"]
    else:
        # The backend's timeout, twice: an idempotent request is sent again once, on a fresh
        # connection, when a pooled one fails before any answer.
        turn = 2 * config["proxy"]["timeout_ms"]
    return refill + turn + MARGIN_MS


# ---- reading HTTP on a raw socket ----------------------------------------------------------

class Reader:
    """Buffered reads from a socket against a deadline."""

    def __init__(self, sock, deadline, limit=1 << 22):
        self.sock, self.deadline, self.limit = sock, deadline, limit
        self.buf = b""
        self.eof = False

    def fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
            raise EOFError("closed")
        self.buf += data
        if len(self.buf) > self.limit:
            raise ValueError("too much")

    def until(self, mark):
        while True:
            i = self.buf.find(mark)
            if i >= 0:
                out, self.buf = self.buf[:i + len(mark)], self.buf[i + len(mark):]
                return out
            self.fill()

    def exact(self, n):
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def rest(self):
        try:
            while True:
                self.fill()
        except EOFError:
            pass
        out, self.buf = self.buf, b""
        return out


def parse_head(head):
    lines = head.split(b"\r\n")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower().decode("latin-1"), value.strip().decode("latin-1")))
    return lines[0], headers


def header(headers, name):
    values = [v for n, v in headers if n == name]
    return values[0] if values else None


def read_chunked(r):
    body = b""
    while True:
        line = r.until(b"\r\n")
        size = int(line.split(b";")[0].strip() or b"x", 16)
        if size == 0:
            while r.until(b"\r\n") != b"\r\n":  # trailers, up to the empty line
                pass
            return body
        body += r.exact(size)
        r.exact(2)


def read_response(r, request_method=b"GET"):
    """One response: (status, status_line, headers, body). Raises on what does not parse."""
    head = r.until(b"\r\n\r\n")
    line, headers = parse_head(head)
    words = line.split(b" ", 2)
    if len(words) < 2 or not words[0].startswith(b"HTTP/") or not words[1].isdigit():
        raise ValueError(f"bad status line {line[:80]!r}")
    status = int(words[1])
    if request_method == b"HEAD" or 100 <= status < 200 or status in (204, 304):
        return status, line, headers, b""
    te = header(headers, "transfer-encoding")
    cl = header(headers, "content-length")
    if te and "chunked" in te.lower():
        body = read_chunked(r)
    elif cl is not None:
        body = r.exact(int(cl))
    else:
        body = r.rest()
    return status, line, headers, body


# ---- the well-behaved tenant ---------------------------------------------------------------

class P1Estimate:
    """The good tenant's P1 balance, from below, as the client can know it: the bucket refills
    from its send times and is charged 1 + the cost the server reports (docs/contract.md, §2).
    The server dispatches after the client sends and charges before it answers, so its balance
    is at least this one; a request is owed P1 when this one has a credit. The good tenant asks
    less than the refill, so only a charge it did not cause (a machine stall measured as cost, a
    backend that timed out) ever takes it below."""

    SLACK = 0.01  # the reported cost is rounded to 6 decimals

    def __init__(self, config):
        self.rate, self.capacity = good_p1(config)
        self.balance = self.capacity
        self.at = None

    def has_credit(self, now):
        if self.at is not None:
            self.balance = min(self.capacity, self.balance + self.rate * (now - self.at))
        self.at = now
        return self.balance >= 1 + self.SLACK

    def charge(self, cost):
        try:
            self.balance -= 1 + float(cost or 0)
        except ValueError:
            pass  # an unreadable cost is another check's failure


class GoodTenant:
    """Paced requests, each checked: 200, P1, its own answer, a wait within the bound."""

    def __init__(self, server, mode, bound, config, backend=None):
        self.server, self.mode, self.bound, self.backend = server, mode, bound, backend
        self.p1 = P1Estimate(config)
        self.sent = self.answered = 0
        self.excused = 0  # P2 answers that the charges the server reported account for
        self.late = []  # (i, token, sent at, detail): 504s the backend may have read too late
        self.starved = 0
        self.waits = []
        self.round_trips = []
        self.failures = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()

    def join(self):
        self.stop.set()
        self.thread.join(30)

    def fail(self, i, kind, detail, token=None):
        if self.server.proc.poll() is not None:
            return  # a dead server is reported as such, not request by request
        self.failures.append((i, kind, detail, token if self.mode == "proxy" else None))

    def report(self, most=8):
        """The first failures in full, then how many of each kind."""
        lines = []
        # A 504 is the server's fault unless the backend did read the request, only after the
        # proxy's timeout had passed: a starved fake backend (its threads share one interpreter
        # lock with the noise's), not a lost request. Asked now, when its threads have had time.
        for i, token, began, detail in self.late:
            seen = self.backend.seen_at(token) if self.backend else None
            if seen is not None and (seen - began) * 1000 >= PROXY_TIMEOUT_MS:
                self.starved += 1
            else:
                self.failures.append((i, "status 504", detail, token))
        if self.starved > MOST_STARVED:
            lines.append(f"good tenant: the backend read {self.starved} requests only after the "
                         f"proxy's timeout (at most {MOST_STARVED}): this machine is too loaded "
                         "for the fuzz to show anything")
        for i, kind, detail, token in self.failures[:most]:
            note = self.backend.note_for(token) if token and self.backend else ""
            lines.append(f"good request {i}: {kind}: {detail}{note}")
        if self.failures:
            tally = {}
            for _, kind, _, _ in self.failures:
                kind = re.sub(r"waited [\d.]+ ms", "waited too long", kind)
                tally[kind] = tally.get(kind, 0) + 1
            lines.append(f"good tenant: {len(self.failures)} of {self.sent} requests failed: " +
                         ", ".join(f"{k} x{n}" for k, n in sorted(tally.items(), key=lambda kv: -kv[1])))
        return lines

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            token = f"g{i}x{random.getrandbits(32):08x}"
            if self.mode == "work":
                target = "/work?cpu_ms=1"
            else:
                target = f"/good/{i}?t={token}"
            request = (f"GET {target} HTTP/1.1\r\nHost: creditloop\r\n"
                       f"Authorization: Bearer {GOOD_KEY}\r\nConnection: close\r\n\r\n").encode()
            timeout = max(5.0, 4 * self.bound / 1000)
            began = time.monotonic()
            owed_p1 = self.p1.has_credit(began)
            self.sent += 1
            try:
                with socket.create_connection(("127.0.0.1", self.server.port), timeout=timeout) as s:
                    s.sendall(request)
                    status, line, headers, body = read_response(Reader(s, began + timeout))
            except (OSError, EOFError, ValueError) as e:
                self.fail(i, "no answer", f"{type(e).__name__}: {e} after "
                          f"{(time.monotonic() - began) * 1000:.0f} ms", token)
                time.sleep(GOOD_PACE_S)
                continue
            took = (time.monotonic() - began) * 1000
            self.round_trips.append(took)
            shown = f"{line[:60]!r} {dict(headers)} body {body[:120]!r}"
            klass = header(headers, "x-creditloop-class")
            wait = header(headers, "x-creditloop-wait-ms")
            if klass == "P1":
                self.p1.charge(header(headers, "x-creditloop-cost"))
            if status == 504 and self.mode == "proxy":
                self.late.append((i, token, began, shown))
            elif status != 200:
                self.fail(i, f"status {status}", shown, token)
            elif klass != "P1" and owed_p1:
                self.fail(i, f"class {klass!r}, not P1", shown, token)
            elif wait is None:
                self.fail(i, "no X-Creditloop-Wait-Ms", shown, token)
            elif self.mode == "proxy" and body != f"good {i} {token}\n".encode():
                self.fail(i, "not its own answer", shown, token)
            elif self.mode == "work" and not self.work_body_ok(body):
                self.fail(i, "work answer is not good's", shown)
            else:
                self.answered += 1
                self.excused += klass != "P1"
                self.waits.append(float(wait))
                if float(wait) > self.bound:
                    self.fail(i, f"waited {float(wait):.1f} ms, bound {self.bound:.0f} ms",
                              shown, token)
            time.sleep(GOOD_PACE_S)  # pacing the client below its refill, not synchronisation

    @staticmethod
    def work_body_ok(body):
        try:
            reply = json.loads(body)
        except ValueError:
            return False
        return reply.get("tenant") == "good" and reply.get("class") == "P1"


# ---- the noise -----------------------------------------------------------------------------

TCHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VCHARS = bytes(range(0x21, 0x7f))
STD_METHODS = [b"GET", b"POST", b"PUT", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH", b"TRACE",
               b"TRACE", b"CONNECT"]
ODD_METHODS = [b"get", b"post", b"trace", b"connect", b"Get", b"PROPFIND", b"M-SEARCH", b"PURGE",
               b"BREW", b"LINK", b"X" * 300, b"G\x00T", b"GE T", b"", b"\xd0\x9f\xd0\x9e",
               b"GET\t", b"@#!", b"1234", b"PRI"]
HEADER_NAMES = [b"Accept", b"Accept-Encoding", b"Cookie", b"User-Agent", b"Referer", b"X-Forwarded-For",
                b"Via", b"Forwarded", b"Range", b"If-None-Match", b"Content-Type", b"Content-Encoding",
                b"TE", b"Trailer", b"Upgrade", b"Keep-Alive", b"Proxy-Connection", b"X-Cost",
                b"X-Creditloop-Tenant", b"X-Creditloop-Class", b"Max-Forwards", b"Origin", b"Date"]
KEY_HEADERS = [
    lambda: b"Authorization: Bearer " + NOISE_KEY.encode(),
    lambda: b"Authorization: Bearer " + NOISE_KEY.encode(),
    lambda: b"Authorization: bearer   " + NOISE_KEY.encode() + b"   ",
    lambda: b"authorization: BEARER " + NOISE_KEY.encode(),
    lambda: b"Authorization: Bearer " + CAPPED_KEY.encode(),
    lambda: b"Authorization: Bearer " + WRONG_KEY.encode(),
    lambda: b"Authorization: Bearer noise-key-000",
    lambda: b"Authorization: Bearer",
    lambda: b"Authorization: Bearer ",
    lambda: b"Authorization: Basic Zm9vOmJhcg==",
    lambda: b"Authorization: Bearer " + b"k" * 3000,
    lambda: b"Authorization: Bearer noise\x00key",
    lambda: b"Authorization: Bearer\t" + NOISE_KEY.encode(),
    lambda: b"Authorization: Bearer " + NOISE_KEY.encode() + b"\r\nAuthorization: Bearer " +
    WRONG_KEY.encode(),
    lambda: b"Authorization: Bearer " + WRONG_KEY.encode() + b"\r\nAuthorization: Bearer " +
    NOISE_KEY.encode(),
    lambda: None,
    lambda: None,
]


class Gen:
    """Random requests; `mode` picks the targets, `tid` names the tokens the backend sees."""

    def __init__(self, rng, mode, tid, sent=None):
        self.rng, self.mode, self.tid = rng, mode, tid
        self.n = 0
        self.sent = sent if sent is not None else {}  # token -> (words, the request's head)

    def chance(self, p):
        return self.rng.random() < p

    tables = {}

    def text(self, n, alphabet=VCHARS):
        table = self.tables.get(alphabet)
        if table is None:
            table = self.tables[alphabet] = bytes(alphabet[i % len(alphabet)] for i in range(256))
        return self.rng.randbytes(n).translate(table)

    def size(self):
        r = self.rng.random()
        if r < 0.6:
            return self.rng.randrange(0, 200)
        if r < 0.85:
            return self.rng.randrange(900, 1100)  # about the body limit
        return self.rng.randrange(1100, 6000)

    def method(self):
        r = self.rng.random()
        if r < 0.75:
            return self.rng.choice(STD_METHODS)
        if r < 0.9:
            return self.rng.choice(ODD_METHODS)
        return self.text(self.rng.randrange(1, 12), TCHARS if self.chance(0.5) else bytes(range(256)))

    def target(self, token):
        rng = self.rng
        r = rng.random()
        tag = b"fz=" + token.encode() if self.mode == "proxy" else b""  # for the backend's reports
        if r < 0.08:
            odd = rng.choice([b"*", b"example.com:443", b"http://example.com/work?cpu_ms=1",
                              b"", b"/%00%ff", b"//work", b"/work/../work", b"/work#frag",
                              b"/\xff\xfe" + self.text(20, bytes(range(0x80, 0x100)))])
            if tag and odd.startswith((b"/", b"http")):
                odd += (b"&" if b"?" in odd else b"?") + tag
            return odd
        if r < 0.12:
            return b"/" + self.text(rng.choice([100, 3000, 4090, 5000, 20000]), TCHARS) + \
                (b"?" + tag if tag else b"")
        if self.mode == "work":
            q = rng.choice([
                b"cpu_ms=%d" % rng.randrange(0, MAX_CPU_MS + 1),
                b"wait_ms=%d" % rng.randrange(0, MAX_WAIT_MS + 1),
                b"cpu_ms=%d&wait_ms=%d" % (rng.randrange(0, 4), rng.randrange(0, MAX_WAIT_MS + 1)),
                b"", b"cpu_ms=%d" % (MAX_CPU_MS + 1), b"cpu_ms=1e3", b"cpu_ms=nan",
                b"cpu_ms=inf", b"cpu_ms=-0", b"cpu_ms=0x10", b"wait_ms=4.9e-324", b"=", b"&&",
                b"cpu_ms", b"cpu_ms=1&cpu_ms=2", b"cpu_ms=" + b"9" * 400, b"sleep=3",
                b"cpu_ms=%FF", b"cpu_ms=1;wait_ms=2"])
            path = b"/work" if self.chance(0.9) else rng.choice([b"/", b"/worker", b"/WORK"])
            return path + (b"?" + q if q or self.chance(0.5) else b"")
        path = b"/" + self.text(rng.randrange(0, 30), TCHARS.replace(b"%", b""))
        return path + b"?fz=" + token.encode() + (b"&" + self.text(10, TCHARS) if self.chance(0.3)
                                                   else b"")

    def version(self):
        if self.chance(0.85):
            return b"HTTP/1.1"
        return self.rng.choice([b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.2", b"HTTP/11",
                                b"http/1.1", b"HTTP/1.1 ", b"", b"HTTP/1.1\x00", b"HTTP/9.9"])

    def random_header(self):
        rng = self.rng
        r = rng.random()
        name = rng.choice(HEADER_NAMES) if self.chance(0.6) else self.text(rng.randrange(1, 20), TCHARS)
        value = self.text(rng.randrange(0, 60), VCHARS + b" \t")
        if r < 0.75:
            return name + b": " + value
        return rng.choice([
            name + b": " + self.text(rng.randrange(1000, 9000)),  # oversized
            name + b": " + value + b"\r\n " + self.text(10),  # obs-fold
            name + b" : " + value,  # space before the colon
            name + value,  # no colon
            b": " + value,  # no name
            name + b": " + bytes([rng.randrange(0x80, 0x100)]) * 5,
            name + b": a\x00b", name + b": a\rb", name + b":" + b"\t" * 3,
            b"X-Creditloop-Tenant: good", b"X-Cost: 1e9",
            b"Connection: " + rng.choice([b"close", b"keep-alive", b"Upgrade", b"close, close",
                                          b"TE", b"keep-alive, Upgrade", b"\x00"]),
            b"Upgrade: " + rng.choice([b"websocket", b"h2c", b"TLS/1.0"]),
            b"Host: a\r\nHost: b",
        ])

    def chunked(self, data):
        rng = self.rng
        kind = rng.choice(["ok", "ok", "ext", "trailers", "huge_ext", "endless_trailers",
                           "bad_hex", "overflow", "no_crlf", "short_data", "long_data",
                           "no_final", "lf_only", "space_size", "neg", "final_ext_huge",
                           "bad_ext", "many_tiny"])
        out = []
        pos = 0
        while pos < len(data):
            n = rng.randrange(1, max(2, len(data) - pos + 1))
            if kind == "many_tiny":
                n = 1
            ext = b""
            if kind == "ext" or (kind == "huge_ext" and pos == 0):
                ext = b";" + self.text(rng.randrange(1, 10), TCHARS)
                if kind == "huge_ext":
                    ext += b"=" + self.text(rng.choice([5000, 70000, 300000]), TCHARS)
                elif self.chance(0.5):
                    ext += b'="' + self.text(8, TCHARS) + b'"'
            size = b"%x" % n
            if kind == "bad_hex" and self.chance(0.5):
                size = b"zz"
            elif kind == "overflow":
                size = b"1" + b"0" * 20
            elif kind == "space_size":
                size = size + b" "
            elif kind == "neg":
                size = b"-" + size
            elif kind == "bad_ext":
                ext = b";=" if self.chance(0.5) else b"; a b"
            chunk = data[pos:pos + n]
            if kind == "short_data":
                chunk = chunk[:-1] or b""
            elif kind == "long_data":
                chunk += b"xx"
            eol = b"\n" if kind == "lf_only" else b"\r\n"
            out.append(size + ext + eol + chunk + (b"" if kind == "no_crlf" else eol))
            pos += n
        if kind != "no_final":
            final_ext = b""
            if kind == "final_ext_huge":
                final_ext = b";e=" + self.text(rng.choice([5000, 70000]), TCHARS)
            out.append(b"0" + final_ext + b"\r\n")
            if kind == "trailers":
                for _ in range(rng.randrange(1, 5)):
                    out.append(self.random_header() + b"\r\n")
            elif kind == "endless_trailers":
                out.append(b"".join(b"X-T%d: %s\r\n" % (k, self.text(30, TCHARS))
                                    for k in range(rng.choice([200, 3000, 10000]))))
                if self.chance(0.5):
                    return b"".join(out)  # never ends
            out.append(b"\r\n")
        return b"".join(out)

    def request(self):
        """One request from a request line, headers and a framing: (head, body, words)."""
        rng = self.rng
        self.n += 1
        token = f"{self.tid}-{self.n}"
        method = self.method()
        eol = b"\r\n" if self.chance(0.92) else rng.choice([b"\n", b"\r"])
        sep = b" " if self.chance(0.95) else rng.choice([b"  ", b"\t", b""])
        line = method + sep + self.target(token)
        version = self.version()
        if version:
            line += b" " + version
        lines = [line]
        if self.chance(0.9):
            lines.append(b"Host: creditloop")
        key = rng.choice(KEY_HEADERS)()
        if key is not None:
            lines.append(key)
        for _ in range(rng.choice([0, 0, 1, 2, 3, 8, 30])):
            lines.append(self.random_header())
        if self.chance(0.05):
            lines.extend(b"X-Many-%d: %s" % (k, self.text(40, TCHARS)) for k in range(150))
        words = [method.decode("latin-1")[:12]]
        framing = rng.choice(["none", "none", "cl", "cl", "cl_short", "cl_long", "cl_dup",
                              "cl_conflict", "cl_bad", "cl_list", "chunked", "chunked", "chunked",
                              "te_odd", "cl_te", "te_cl", "te_dup", "te_fold"])
        words.append(framing)
        data = self.text(self.size(), bytes(range(256)) if self.chance(0.3) else VCHARS)
        body = b""
        if framing == "cl":
            lines.append(b"Content-Length: %d" % len(data))
            body = data
        elif framing == "cl_short":
            lines.append(b"Content-Length: %d" % max(0, len(data) - rng.randrange(1, 20)))
            body = data
        elif framing == "cl_long":
            lines.append(b"Content-Length: %d" % (len(data) + rng.randrange(1, 50)))
            body = data
        elif framing == "cl_dup":
            lines += [b"Content-Length: %d" % len(data)] * 2
            body = data
        elif framing == "cl_conflict":
            lines += [b"Content-Length: %d" % len(data), b"Content-Length: %d" % (len(data) + 1)]
            body = data
        elif framing == "cl_bad":
            lines.append(b"Content-Length: " + rng.choice(
                [b"-1", b"abc", b"1e3", b" 5", b"5 ", b"0x10", b"99999999999999999999999", b"+5",
                 b"18446744073709551615", b"18446744073709551616", b"", b"5\x00"]))
            body = data
        elif framing == "cl_list":
            n = len(data)
            lines.append(rng.choice([b"Content-Length: %d, %d" % (n, n),
                                     b"Content-Length: %d,%d" % (n, n + 1),
                                     b"Content-Length: %d,," % n]))
            body = data
        elif framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
            body = self.chunked(data)
        elif framing == "te_odd":
            lines.append(b"Transfer-Encoding: " + rng.choice(
                [b"Chunked", b"gzip, chunked", b"chunked, gzip", b"identity", b"chunked, chunked",
                 b" chunked", b"chunked;q=1", b"x", b"gzip"]))
            body = self.chunked(data) if self.chance(0.5) else data
        elif framing == "cl_te":
            lines += [b"Content-Length: %d" % len(data), b"Transfer-Encoding: chunked"]
            body = self.chunked(data)
        elif framing == "te_cl":
            lines += [b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(data)]
            body = self.chunked(data)
        elif framing == "te_dup":
            lines += [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"]
            body = self.chunked(data)
        elif framing == "te_fold":
            lines += [b"Transfer-Encoding:\r\n chunked"]
            body = self.chunked(data)
        expect = self.chance(0.08)
        if expect:
            lines.append(rng.choice([b"Expect: 100-continue", b"Expect: 100-Continue",
                                     b"Expect: something-else"]))
            words.append("expect")
        head = eol.join(lines) + eol + eol
        self.sent[token] = (" ".join(words), head[:400])
        return head, body, words, token

    def mutate(self, data):
        rng = self.rng
        data = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            if not data:
                data += self.rng.randbytes(10)
            op = rng.randrange(6)
            i = rng.randrange(len(data))
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                data[i:i] = rng.randbytes(rng.randrange(1, 20))
            elif op == 2:
                del data[i:i + rng.randrange(1, 20)]
            elif op == 3:
                j = rng.randrange(i, min(len(data), i + 200) + 1)
                data[i:i] = data[i:j] * rng.randrange(1, 4)
            else:
                data[i:i] = rng.choice([b"\r\n", b"\n", b"\r", b"\x00", b" ", b":", b"\r\n\r\n",
                                        b"0\r\n\r\n", b"Content-Length: 0\r\n",
                                        b"Transfer-Encoding: chunked\r\n", b";", b"\t"])
        return bytes(data)

    def case(self, slow):
        """One connection's worth: what to send, and how."""
        rng = self.rng
        r = rng.random()
        tokens = []
        if r < 0.05:
            payload, what = rng.randbytes(rng.randrange(1, 3000)), "random bytes"
            segments = [payload]
        elif r < 0.09:
            head, _, _, token = self.request()
            payload = head.split(b"\r\n", 1)[0] + b"\r\n" + rng.randbytes(rng.randrange(1, 2000))
            segments, what, tokens = [payload], "request line, then random bytes", [token]
        elif r < 0.22:
            parts, descs = [], []
            for _ in range(rng.randrange(2, 7)):
                head, body, words, token = self.request()
                parts.append(head + body)
                descs.append(" ".join(words))
                tokens.append(token)
            segments, what = [b"".join(parts)], "pipelined: " + " | ".join(descs)
        else:
            head, body, words, token = self.request()
            tokens = [token]
            what = " ".join(words)
            if self.chance(0.15):
                segments, what = [self.mutate(head + body)], what + " mutated"
                self.sent[token] = (what, segments[0][:400])
            elif "expect" in words and body:
                segments = [head, body]
            else:
                segments = [head + body]
        if slow:
            style = rng.choice(["trickle", "trickle", "trickle_vanish", "trickle_stall"])
        else:
            style = rng.choice(["halfclose", "halfclose", "halfclose", "read", "read", "noread",
                                "rst", "truncate_close", "truncate_rst", "park", "split"])
        return {"segments": segments, "what": what, "style": style, "tokens": tokens}


def linger_rst(s):
    """Makes close() send a reset: a client that vanishes."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def drain(s, until):
    got = []
    try:
        while time.monotonic() < until:
            s.settimeout(max(0.001, until - time.monotonic()))
            data = s.recv(65536)
            if not data:
                break
            got.append(data)
    except OSError:
        pass
    return b"".join(got)


def throw(port, case, rng, parked):
    """Sends one case the way its style says; returns what came back (for the leak check)."""
    style = case["style"]
    payload = b"".join(case["segments"])
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        return None  # nothing was thrown: the server is not there
    got = b""
    try:
        if style in ("truncate_close", "truncate_rst"):
            s.sendall(payload[:rng.randrange(0, max(1, len(payload)))])
            if style == "truncate_rst":
                linger_rst(s)
            elif rng.random() < 0.5:
                got = drain(s, time.monotonic() + 0.05)
        elif style == "split":
            pos = 0
            while pos < len(payload):
                n = rng.randrange(1, max(2, len(payload) // 3 + 2))
                s.sendall(payload[pos:pos + n])
                pos += n
                time.sleep(rng.random() * 0.01)
            got = drain(s, time.monotonic() + 0.3)
        elif style.startswith("trickle"):
            stop_at = time.monotonic() + rng.uniform(0.2, 1.6)  # the read timeout is 1 s
            pos = 0
            step = rng.choice([1, 1, 2, 7, 64])
            while pos < len(payload) and time.monotonic() < stop_at:
                s.sendall(payload[pos:pos + step])
                pos += step
                time.sleep(rng.uniform(0.001, 0.05))
            if style == "trickle_vanish":
                linger_rst(s)
            elif style == "trickle_stall":
                got = drain(s, time.monotonic() + 1.2)
            else:
                s.sendall(payload[pos:])
                got = drain(s, time.monotonic() + 1.0)
        else:
            if len(case["segments"]) == 2:  # Expect: 100-continue: wait a little for the 100
                s.sendall(case["segments"][0])
                got = drain(s, time.monotonic() + 0.15)
                s.sendall(case["segments"][1])
            else:
                s.sendall(payload)
            if style == "halfclose":
                s.shutdown(socket.SHUT_WR)
                got += drain(s, time.monotonic() + 1.0)
            elif style == "read":
                got += drain(s, time.monotonic() + rng.uniform(0.02, 0.5))
            elif style == "rst":
                linger_rst(s)
            elif style == "park":
                parked.append((time.monotonic() + rng.uniform(0.2, 3.0), s))
                s = None
    except OSError:
        pass
    finally:
        if s is not None:
            try:
                s.close()
            except OSError:
                pass
    return got


class Noise:
    """Client threads throwing cases; keeps the recent ones for isolating a crash."""

    def __init__(self, server, mode, seed, threads, skip=()):
        self.server, self.mode, self.seed, self.skip = server, mode, seed, skip
        self.stop = threading.Event()
        self.cases = 0
        self.requests = 0
        self.recent = []  # (began, ended, case, seed_of_case)
        self.leaks = []
        self.sent = {}  # token -> (what, head): for the backend's reports
        self.lock = threading.Lock()
        slow = max(1, threads // 3)
        self.threads = [threading.Thread(target=self.run, args=(t, t < slow), daemon=True)
                        for t in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def run(self, tid, slow):
        rng = random.Random(f"{self.seed}/{self.mode}/client{tid}")
        gen = Gen(rng, self.mode, tid, self.sent)
        parked = []
        while not self.stop.is_set():
            case = gen.case(slow)
            if any(word in case["what"] for word in self.skip):
                continue
            began = time.monotonic()
            got = throw(self.server.port, case, rng, parked)
            ended = time.monotonic()
            if got is None:
                time.sleep(0.01)
                continue
            for key in TENANT_KEYS + [WRONG_KEY]:
                if key.encode() in got:
                    self.leaks.append(f"a key was echoed to a client ({case['what']}): "
                                      f"{got[:200]!r}")
            with self.lock:
                self.cases += 1
                self.requests += max(1, len(case["tokens"]))
                self.recent.append((began, ended, case))
                if len(self.recent) > 2000:
                    del self.recent[:1000]
            now = time.monotonic()
            for item in [p for p in parked if p[0] <= now or len(parked) > 100]:
                parked.remove(item)
                item[1].close()
        for _, s in parked:
            s.close()

    def around(self, t, before=3.0):
        with self.lock:
            picked = [(b, c) for (b, e, c) in self.recent if b <= t and e >= t - before]
        picked.sort(key=lambda bc: -bc[0])  # the latest first: a crash follows its cause closely
        return [c for _, c in picked]


# ---- the fake backend ----------------------------------------------------------------------

class FakeBackend:
    """A backend on raw sockets whose answer to each forwarded request is drawn at random (by
    the request's token, so that it follows from the seed); the good tenant's requests are always
    answered correctly, with their token echoed."""

    BEHAVIOURS = ["ok_cl", "ok_cl", "ok_cl", "ok_chunked", "ok_close", "info_storm", "switching",
                  "bad_status", "dup_headers", "cl_short", "cl_long", "cl_dup_same", "cl_conflict",
                  "cl_invalid", "chunk_bad", "chunk_huge_ext", "chunk_endless_trailers",
                  "cl_and_te", "huge_headers", "early_close", "random_bytes", "trickle",
                  "no_answer", "no_body_status", "cost_weird"]

    def __init__(self, seed):
        self.seed = seed
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = {}
        self.seen = 0
        self.violations = []
        self.good_notes = {}  # token -> what this connection answered before
        self.good_seen_at = {}  # token -> when its request was read
        self.behaviour_of = {}  # token -> behaviour
        self.counter = 0
        self.sent = {}  # the noise's: token -> (what, head)
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self):
        self.stop.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def note_for(self, token):
        with self.lock:
            note = self.good_notes.get(token)
        if note is None:
            return " (the backend never saw it)"
        return f" (the backend answered it correctly; its connection's previous answers: {note})"

    def seen_at(self, token):
        with self.lock:
            return self.good_seen_at.get(token)

    def violation(self, kind, what, token=None):
        sent = self.sent.get(token) if token else None
        if sent is not None:
            what += f"; the client sent ({sent[0]}): {sent[1][:300]!r}"
        with self.lock:
            self.violations.append((kind, what))

    def accept_loop(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def read_request(self, r):
        head = r.until(b"\r\n\r\n")
        if len(head) > 65536:
            raise ValueError("huge head")
        line, headers = parse_head(head)
        m = re.search(rb"[?&]fz=(\d+-\d+)", line)
        token = m.group(1).decode() if m else None
        sent = self.sent.get(token) if token else None
        # A mutation can move a key into another header's value: the client sent it there.
        mutated = sent is not None and "mutated" in sent[0]
        if any(n == "authorization" for n, _ in headers):
            self.violation("key forwarded", f"an Authorization header reached the backend: "
                           f"{line[:100]!r}", token)
        elif token is not None and not mutated:
            for key in TENANT_KEYS:
                if key.encode() in head:
                    carriers = [n for n, v in headers if key in v] or "the request line"
                    self.violation("key forwarded", f"a tenant's key reached the backend (in "
                                   f"{carriers}): {line[:100]!r}", token)
        names = [v for n, v in headers if n == "x-creditloop-tenant"]
        if len(names) != 1 or names[0] not in TENANT_NAMES:
            self.violation("tenant header", f"X-Creditloop-Tenant {names!r} on {line[:100]!r}",
                           token)
        elif token is not None and names[0] == "good":
            self.violation("tenant forged", "a noise request reached the backend as the good "
                           f"tenant: {line[:100]!r}", token)
        cls = [v for n, v in headers if n == "content-length"]
        tes = [v for n, v in headers if n == "transfer-encoding"]
        shape = ("both Content-Length and Transfer-Encoding" if cls and tes else
                 "Content-Length twice" if len(cls) > 1 else
                 "a Transfer-Encoding not ending in chunked"
                 if tes and not tes[-1].lower().endswith("chunked") else None)
        if shape:
            self.violation(f"ambiguous framing: {shape}", f"forwarded with Content-Length "
                           f"{cls!r} and Transfer-Encoding {tes!r}: {line[:100]!r}", token)
        if tes and tes[-1].lower().endswith("chunked"):
            read_chunked(r)
        elif cls:
            r.exact(int(cls[0]))
        return line, headers, token, names[0] if names else None

    def serve(self, conn):
        history = []
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self.stop.is_set():
                r = Reader(conn, time.monotonic() + 30)
                try:
                    line, headers, token, tenant = self.read_request(r)
                except (EOFError, socket.timeout, OSError):
                    return
                except ValueError as e:
                    self.violation("unreadable", f"a forwarded request the backend cannot read: "
                                   f"{e}")
                    return
                with self.lock:
                    self.seen += 1
                    self.counter += 1
                    n = self.counter
                if tenant == "good":
                    m = re.search(rb"^GET /good/(\d+)\?t=(\S+) ", line)
                    body = b"good %s %s\n" % (m.group(1), m.group(2)) if m else b"?\n"
                    if m:
                        with self.lock:
                            self.good_notes[m.group(2).decode()] = ", ".join(history[-3:]) or \
                                "none, a fresh connection"
                            self.good_seen_at[m.group(2).decode()] = time.monotonic()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Cost: 1\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    history.append("good")
                    continue
                key = token if token is not None else f"n{n}"
                rng = random.Random(f"{self.seed}/backend/{key}")
                behaviour = rng.choice(self.BEHAVIOURS)
                with self.lock:
                    self.counts[behaviour] = self.counts.get(behaviour, 0) + 1
                    if token is not None:
                        self.behaviour_of[token] = behaviour
                history.append(behaviour)
                head_only = line.startswith(b"HEAD ")
                if not self.answer(conn, rng, behaviour, head_only):
                    return
        except OSError:
            return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    @staticmethod
    def text(rng, n):
        return bytes(rng.choice(VCHARS) for _ in range(min(n, 64))) * (n // 64 + 1)

    def answer(self, conn, rng, b, head_only):
        """Writes one answer; False when the connection is to be closed."""
        def body_of(n):
            return rng.randbytes(n) if rng.random() < 0.3 else self.text(rng, n)[:n]

        n = rng.choice([0, 5, 100, 2000, 100000]) if rng.random() < 0.9 else rng.randrange(1 << 21)
        body = body_of(n)
        extra = b""
        for _ in range(rng.choice([0, 1, 3])):
            extra += rng.choice(HEADER_NAMES) + b": " + self.text(rng, rng.randrange(1, 40)) + b"\r\n"
        close = rng.random() < 0.2
        conn_header = b"Connection: close\r\n" if close else b""
        status = b"HTTP/1.1 %d %s\r\n" % rng.choice(
            [(200, b"OK"), (201, b"Created"), (404, b"Not Found"), (500, b"Oops"), (503, b"Busy")])
        cost = b"X-Cost: %d\r\n" % rng.randrange(0, 20) if rng.random() < 0.7 else b""
        send = conn.sendall
        if b == "ok_cl":
            send(status + cost + extra + conn_header + b"Content-Length: %d\r\n\r\n" % n +
                 (b"" if head_only else body))
            return not close
        if b == "ok_chunked":
            send(status + cost + extra + b"Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n" +
                 self.chunks(rng, body, ext=True) + b"0;last=1\r\nX-T: done\r\n\r\n")
            return True
        if b == "ok_close":
            send(status + cost + extra + b"\r\n" + body)
            return False
        if b == "info_storm":
            out = b""
            for _ in range(rng.choice([1, 2, 10, 50, 500])):
                code = rng.choice([100, 102, 103, 199])
                out += b"HTTP/1.1 %d Info\r\n" % code
                if code == 103:
                    out += b"Link: </x.css>; rel=preload\r\n"
                out += b"\r\n"
            send(out + status + cost + b"Content-Length: %d\r\n\r\n" % n + body)
            return True
        if b == "switching":
            send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" +
                 rng.randbytes(rng.randrange(0, 500)))
            time.sleep(rng.random() * 0.2)
            return False
        if b == "bad_status":
            send(rng.choice([b"HTTP/1.1 99999 X\r\n", b"HTTP/1.1 abc OK\r\n", b"HTTP/9.9 200 OK\r\n",
                             b"ICY 200 OK\r\n", b"HTTP/1.1 200\r\n", b"HTTP/1.1 000 Zero\r\n",
                             b"HTTP/1.1  200 OK\r\n", b"HTTP/1.1 -200 OK\r\n", b"\r\n",
                             b"HTTP/1.1 200 OK\n", b"HTTP/1.1 2000 OK\r\n", b"HTTP/1.1 200 O\x00K\r\n"])
                 + b"Content-Length: %d\r\n\r\n" % n + body)
            return rng.random() < 0.5
        if b == "dup_headers":
            dup = b""
            for _ in range(rng.randrange(2, 30)):
                dup += rng.choice([b"Set-Cookie: a=%d\r\n" % rng.randrange(100), b"X-Cost: %d\r\n" %
                                   rng.randrange(-5, 50), b"X-Creditloop-Class: P9\r\n",
                                   b"X-Creditloop-Wait-Ms: -1\r\n", b"Content-Type: a/b\r\n",
                                   b"Server: fake\r\n", b"Connection: keep-alive\r\n", b"Date: x\r\n",
                                   b"Vary: *\r\n", b"X-Creditloop-Cost: 1e9\r\n"])
            send(status + dup + b"Content-Length: %d\r\n\r\n" % n + body)
            return True
        if b == "cl_short":
            send(status + cost + b"Content-Length: %d\r\n\r\n" % max(0, n - rng.randrange(1, 50)) +
                 body + rng.choice([b"", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]))
            return True
        if b == "cl_long":
            send(status + cost + b"Content-Length: %d\r\n\r\n" % (n + rng.randrange(1, 5000)) + body)
            # Past the proxy's timeout while it waits for the rest. Not after a HEAD's answer: that
            # one is whole and well framed, so the proxy rightly pools the connection, and a
            # backend that then stops reading it times out whichever request comes next.
            if rng.random() < 0.5 and not head_only:
                time.sleep((PROXY_TIMEOUT_MS + 100) / 1000)
            return False
        if b == "cl_dup_same":
            send(status + cost + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (n, n) + body)
            return True
        if b == "cl_conflict":
            send(status + cost + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (n, n + 3) +
                 body)
            return False
        if b == "cl_invalid":
            send(status + b"Content-Length: " + rng.choice(
                [b"-1", b"abc", b"99999999999999999999999", b"18446744073709551615", b"1,2", b""]) +
                 b"\r\n\r\n" + body)
            return False
        if b == "chunk_bad":
            send(status + b"Transfer-Encoding: chunked\r\n\r\n" + rng.choice(
                [b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\nabc\r\n0\r\n\r\n", b"3\r\nabcdef\r\n0\r\n\r\n",
                 b"ffffffffffffffffffff\r\n", b"3\r\nabc0\r\n\r\n", b"-3\r\nabc\r\n0\r\n\r\n",
                 b"3\nabc\n0\n\n", b"3 ;x\r\nabc\r\n0\r\n\r\n", b"3;\r\nabc\r\n0\r\n\r\n"]))
            return False
        if b == "chunk_huge_ext":
            send(status + b"Transfer-Encoding: chunked\r\n\r\n" + b"5;ext=" +
                 self.text(rng, rng.choice([10000, 100000, 1000000])) + b"\r\nhello\r\n0\r\n\r\n")
            return True
        if b == "chunk_endless_trailers":
            send(status + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n")
            stop = time.monotonic() + (PROXY_TIMEOUT_MS + 200) / 1000
            k = 0
            while time.monotonic() < stop and k < 20000:
                send(b"".join(b"X-T%d: %s\r\n" % (k + j, b"v" * 40) for j in range(100)))
                k += 100
            return False
        if b == "cl_and_te":
            send(status + cost + rng.choice([b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n",
                                              b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"])
                 + b"\r\n" + self.chunks(rng, body, ext=False) + b"0\r\n\r\n")
            return rng.random() < 0.5
        if b == "huge_headers":
            big = rng.choice([b"X-Big: " + self.text(rng, rng.choice([9000, 100000, 1000000])) + b"\r\n",
                              b"".join(b"X-H%d: %s\r\n" % (k, b"h" * 30) for k in range(3000))])
            send(status + big + b"Content-Length: %d\r\n\r\n" % n + body)
            return False
        if b == "early_close":
            whole = status + cost + b"Content-Length: %d\r\n\r\n" % n + body
            send(whole[:rng.randrange(0, len(whole))])
            if rng.random() < 0.5:
                linger_rst(conn)
            return False
        if b == "random_bytes":
            send(rng.randbytes(rng.randrange(1, 5000)))
            return False
        if b == "trickle":
            whole = status + cost + b"Content-Length: %d\r\n\r\n" % min(n, 200) + body[:200]
            stop = time.monotonic() + rng.choice([0.1, 0.25, 1.0])
            for k in range(len(whole)):
                if time.monotonic() > stop:
                    return False
                send(whole[k:k + 1])
                time.sleep(rng.uniform(0.0005, 0.01))
            return True
        if b == "no_answer":
            conn.settimeout(2.0)
            try:
                conn.recv(1)  # the proxy's timeout closes it first
            except OSError:
                pass
            return False
        if b == "no_body_status":
            code = rng.choice([b"204 No Content", b"304 Not Modified", b"100 Continue"])
            send(b"HTTP/1.1 " + code + b"\r\nContent-Length: %d\r\n\r\n" % max(n, 1) + body_of(max(n, 1)))
            return True
        if b == "cost_weird":
            send(status + b"X-Cost: " + rng.choice([b"nan", b"inf", b"-1", b"1e999", b"", b" 5",
                                                  b"5x", b"9" * 400, b"0x10", b"1e-400", b"-0"]) +
                 b"\r\nContent-Length: %d\r\n\r\n" % n + body)
            return True
        raise AssertionError(b)

    @staticmethod
    def chunks(rng, body, ext):
        out, pos = [], 0
        while pos < len(body):
            k = rng.randrange(1, max(2, len(body) - pos + 1))
            e = b";x=%d" % k if ext and rng.random() < 0.5 else b""
            out.append(b"%x%s\r\n%s\r\n" % (k, e, body[pos:pos + k]))
            pos += k
        return b"".join(out)


# ---- one mode ------------------------------------------------------------------------------

def sanitizer_reports(log):
    return [line for line in log.splitlines() if any(m in line for m in SANITIZER_MARKS)]


def crash_lines(log):
    return [line for line in log.splitlines() if any(m in line for m in CRASH_MARKS)]


def health(server):
    try:
        res, body = server.request(None, "/health", port=server.admin_port, timeout=5)
        return res.status, body
    except OSError as e:
        return None, repr(e).encode()


class Phase:
    def __init__(self, mode, seed, seconds, threads, isolate, skip=()):
        self.mode, self.seed, self.seconds, self.threads, self.isolate = \
            mode, seed, seconds, threads, isolate
        self.skip = skip
        self.failures = []
        self.summary = ""

    def run(self):
        backend = FakeBackend(self.seed) if self.mode == "proxy" else None
        config = config_for(self.mode, backend.port if backend else None)
        bound = bound_ms(config)
        server = server_harness.Server(config)
        good = GoodTenant(server, self.mode, bound, config, backend)
        noise = Noise(server, self.mode, self.seed, self.threads, self.skip)
        if backend:
            backend.sent = noise.sent
        good.start()
        noise.start()
        died_at = None
        reported_at = None
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                died_at = time.monotonic()
                break
            if reported_at is None and crash_lines(server.log()):
                reported_at = time.monotonic()
            time.sleep(0.02)
        noise.join()
        good.join()
        if died_at is None and server.proc.poll() is not None:
            died_at = time.monotonic()
        alive = died_at is None
        if alive:
            status, body = health(server)
            if status != 200 or body.strip() != b"ok":
                self.failures.append(f"/health answered {status} {body[:100]!r}")
        rc = server.stop()
        log = server.log()
        if os.environ.get("FUZZ_SERVER_LOG"):  # keeps the server's standard error, for a failure
            with open(os.environ["FUZZ_SERVER_LOG"], "a") as f:
                f.write(log)
        if not alive:
            self.failures.append(f"the server died (status {rc}) after "
                                 f"{self.seconds - (deadline - died_at):.1f} s")
        elif rc != 0:
            self.failures.append(f"SIGTERM: exit status {rc}, not 0")
        reports = sanitizer_reports(log)
        if reports:
            self.failures.append("sanitizer report: " + " | ".join(reports[:5]))
        others = [line for line in crash_lines(log) if line not in reports]
        if others:
            self.failures.append("standard error says: " + " | ".join(others[:5]))
        if any(key in log for key in TENANT_KEYS):
            self.failures.append("a tenant's key is in the server's log")
        self.failures += good.report()
        if alive and good.answered == 0:
            self.failures.append("the good tenant was never answered")
        self.failures += noise.leaks[:5]
        if backend:
            backend.close()
            by_kind = {}
            for kind, what in backend.violations:
                by_kind.setdefault(kind, []).append(what)
            for kind, whats in by_kind.items():
                self.failures += [f"backend: {w}" for w in whats[:2]]
                if len(whats) > 2:
                    self.failures.append(f"backend: ... {len(whats)} such ({kind}) in all")
        max_wait = max(good.waits) if good.waits else float("nan")
        max_rtt = max(good.round_trips) if good.round_trips else float("nan")
        self.summary = (f"{self.mode}: {noise.requests} requests thrown on {noise.cases} "
                        f"connections, good {good.answered}/{good.sent} answered, max good wait "
                        f"{max_wait:.1f} ms (bound {bound:.0f}), max good round trip {max_rtt:.0f} ms"
                        f", {good.excused} under P2 after charges it did not cause, {good.starved} "
                        "read late by the backend")
        if backend:
            self.summary += f", backend saw {backend.seen}"
        when = died_at or reported_at
        if self.isolate and when is not None:
            self.find_culprit(noise.around(when), log)
        return self.failures

    def find_culprit(self, candidates, log):
        """Replays the cases thrown just before the crash, one at a time, each on a fresh
        server (and backend), until one does it alone."""
        print(f"  {self.mode}: the server's last words: " + " | ".join(crash_lines(log)[:3] or
                                                                      log.splitlines()[-3:]))
        print(f"  {self.mode}: replaying the {min(len(candidates), 80)} latest of "
              f"{len(candidates)} connections in the 3 s before, one at a time ...", flush=True)
        give_up = time.monotonic() + 60
        for case in candidates[:80]:
            if time.monotonic() > give_up:
                break
            backend = FakeBackend(self.seed) if self.mode == "proxy" else None
            cfg = config_for(self.mode, backend.port if backend else None)
            server = server_harness.Server(cfg)
            try:
                s = socket.create_connection(("127.0.0.1", server.port), timeout=2)
                try:
                    for seg in case["segments"]:
                        s.sendall(seg)
                        time.sleep(0.05)
                    s.shutdown(socket.SHUT_WR)
                    drain(s, time.monotonic() + 1.0)
                except OSError:
                    pass
                finally:
                    s.close()
                try:
                    wait_for("a crash", lambda: server.proc.poll() is not None or
                             crash_lines(server.log()), timeout=0.5)
                except AssertionError:
                    pass
                crashed = server.proc.poll() is not None or crash_lines(server.log())
            finally:
                server.stop()
                why = crash_lines(server.log())
                if backend:
                    backend.close()
            if crashed:
                behaviours = [backend.behaviour_of.get(t, "not forwarded")
                              for t in case["tokens"]] if backend else []
                payload = b"".join(case["segments"])
                shown = repr(payload[:300]) + (f" ... ({len(payload)} bytes)" if len(payload) > 300
                                               else "")
                message = (f"isolated: this request alone kills the server "
                           f"({case['what']}" + (f"; backend answer {behaviours}" if backend else "")
                           + f"): {shown}; it says: {' | '.join(why[:2])}")
                print(f"  {self.mode}: {message}", flush=True)
                self.failures.append(message)
                return
        print(f"  {self.mode}: no single request reproduces it (a sequence or a race)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help="the whole run (default 20)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--threads", type=int, default=6, help="client threads throwing noise")
    parser.add_argument("--no-isolate", action="store_true",
                        help="do not replay requests to find the one that crashed the server")
    parser.add_argument("--mode", choices=["work", "proxy", "both"], default="both")
    parser.add_argument("--skip", action="append", default=[], metavar="WORD",
                        help="throw no request whose description has WORD (a method, a framing "
                             "such as cl_te, 'pipelined', 'mutated'): to go on past a known bug")
    args = parser.parse_args()
    # The fake backend, the noise and the good tenant share one interpreter lock: hand it over
    # every millisecond, not every 5, so that no backend thread waits for it past the proxy's
    # timeout behind a few hundred busy ones.
    sys.setswitchinterval(0.001)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    server_harness.SERVER = os.path.abspath(args.server)
    extra = "".join(f" --skip {w}" for w in args.skip) + \
        (f" --mode {args.mode}" if args.mode != "both" else "")
    print(f"seed {seed} (replay: {sys.argv[0]} --server {args.server} --seconds {args.seconds:g} "
          f"--seed {seed}{extra})", flush=True)
    if not os.access(server_harness.SERVER, os.X_OK):
        print(f"{args.server}: not an executable", file=sys.stderr)
        return 3
    modes = ["work", "proxy"] if args.mode == "both" else [args.mode]
    # Each mode's start, drain and stop take about 1.5 s; the rest is split 2:3 (proxy mode has
    # the backend's answers to get through too).
    budget = max(2.0, args.seconds - 1.5 * len(modes))
    share = {"work": 0.4, "proxy": 0.6} if len(modes) == 2 else {modes[0]: 1.0}
    failures, summaries = [], []
    for mode in modes:
        phase = Phase(mode, seed, budget * share[mode], args.threads, not args.no_isolate,
                      args.skip)
        try:
            found = phase.run()
        except AssertionError as e:  # the server did not start
            print(f"{mode}: {e}", file=sys.stderr)
            return 3
        summaries.append(phase.summary)
        failures += [f"{mode}: {f}" for f in found]
    print("summary: " + "; ".join(summaries), flush=True)
    if failures:
        print(f"FAILED (seed {seed}):")
        for f in failures:
            print("  " + f)
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
