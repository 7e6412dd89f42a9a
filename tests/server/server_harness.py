"""What the server's end-to-end tests share: the real creditloop-server on loopback with a
configuration of the test's own (Server), its base configuration, requests on their own threads
(Async), raw exchanges, `--check`, and main(), which takes --server PATH and runs the calling
script's tests.

Every wait is a poll with a deadline on something observable (a response, the participants
snapshot, the process's exit, a log line), never a fixed sleep.
"""
import argparse
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import ThreadingHTTPServer

SERVER = None  # the binary under test, set by main()
ALICE = "alice-key-0001"  # the keys of base_config's two tenants
BOB = "bob-key-00001"

PLANS = {
    "pro": {"P1": {"rate": 20, "burst": 4}, "P2": {"rate": 50, "burst": 10}},
    "lite": {"P2": {"rate": 50, "burst": 10}},
}


def base_config(**overrides):
    config = {
        "mode": "work",
        "listen": "127.0.0.1:0",
        "admin": {"listen": "127.0.0.1:0"},
        "io_threads": 2,
        "workers": 2,
        "slots": 4,
        "cost_unit_ms": 1,
        "classes": 2,
        "plans": PLANS,
        "tenants": [
            {"name": "alice", "key": "alice-key-0001", "plan": "pro", "shares": 2},
            {"name": "bob", "key": "bob-key-00001", "plan": "lite", "shares": 1},
        ],
        "work": {"max_cpu_ms": 50, "max_wait_ms": 5000},
        "limits": {"header_bytes": 4096, "body_bytes": 1024, "read_timeout_ms": 1000,
                   "idle_timeout_ms": 2000},
        "shutdown_deadline_ms": 5000,
    }
    config.update(overrides)
    return config


def wait_for(what, predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Server:
    """One creditloop-server process with a config of our own; ports are the kernel's choice."""

    def __init__(self, config, *args, env=None, files=None):
        self.dir = tempfile.TemporaryDirectory()
        self.config_path = os.path.join(self.dir.name, "config.json")
        for name, content in (files or {}).items():
            self.write_file(name, content)
        self.write_config(config)
        self.stderr_path = os.path.join(self.dir.name, "stderr.log")
        self.stderr = open(self.stderr_path, "w")
        self.final_log = None
        self.proc = subprocess.Popen([SERVER, "-c", self.config_path, *args],
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env=None if env is None else {**os.environ, **env})
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise AssertionError(f"server did not start: {line!r} {self.log()}")
        words = line.replace(",", " ").split()
        self.port = int(words[words.index("on") + 1].rsplit(":", 1)[1])
        self.admin_port = int(words[words.index("admin") + 1].rsplit(":", 1)[1])

    def write_config(self, config):
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(config, f)
        os.replace(tmp, self.config_path)

    def write_file(self, name, content):
        """A file next to the configuration (a key file), replaced atomically."""
        path = os.path.join(self.dir.name, name)
        with open(path + ".tmp", "w") as f:
            f.write(content)
        os.replace(path + ".tmp", path)
        return path

    def log(self):
        if self.final_log is not None:
            return self.final_log
        self.stderr.flush()
        with open(self.stderr_path) as f:
            return f.read()

    def request(self, key, path="/work", method="GET", timeout=30, port=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        conn.request(method, path, headers=h)
        res = conn.getresponse()
        body = res.read()
        conn.close()
        return res, body

    def admin(self, path="/debug/participants", key=None):
        return self.request(key, path, port=self.admin_port)

    def participants(self):
        res, body = self.admin()
        assert res.status == 200, (res.status, body)
        return json.loads(body)

    def tenant(self, name):
        for t in self.participants()["tenants"]:
            if t["name"] == name:
                return t
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.final_log is None:
            self.final_log = self.log()
            self.proc.stdout.close()
            self.stderr.close()
            self.dir.cleanup()
        return self.proc.returncode


class Async:
    """A request on its own thread, for requests that must wait their turn."""

    def __init__(self, server, key, path, port=None):
        self.result = None
        self.error = None

        def run():
            try:
                res, body = server.request(key, path, port=port)
                self.result = (res.status, dict(res.getheaders()), body)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def get(self, timeout=30):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError("request did not finish")
        if self.error:
            raise self.error
        return self.result


def raw_exchange(port, payload, timeout=5.0):
    """Sends bytes, returns whatever the server answers before closing."""
    return raw_exchange_to("127.0.0.1", port, payload, timeout)


def raw_exchange_to(address, port, payload, timeout=5.0):
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def open_gate(gate):
    """Lets a dispatcher held by CREDITLOOP_SERVER_TEST_DISPATCH_GATE go on: the server is the
    FIFO's reader."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x")
        os.close(fd)
    except OSError:
        pass


def status_of(raw):
    first = raw.split(b"\r\n", 1)[0].split()
    return int(first[1]) if len(first) >= 2 else None


def sha256_hex(key):
    return hashlib.sha256(key.encode()).hexdigest()


def check_config(config, files=None, env=None):
    """`--check` on a configuration written with `files` beside it: (exit status, stderr)."""
    with tempfile.TemporaryDirectory() as d:
        for name, content in (files or {}).items():
            with open(os.path.join(d, name), "w") as f:
                f.write(content)
        path = os.path.join(d, "c.json")
        with open(path, "w") as f:
            json.dump(config, f)
        r = subprocess.run([SERVER, "-c", path, "--check"], capture_output=True, text=True,
                           timeout=20, env={**os.environ, **(env or {})})
        return r.returncode, r.stderr


def start_http(handler):
    """A threading HTTP server for `handler` on a loopback port of the kernel's choice, serving
    on a thread of its own."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    """Runs the calling script's tests against the binary named by --server."""
    global SERVER
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args, rest = parser.parse_known_args()
    SERVER = os.path.abspath(args.server)
    unittest.main(module="__main__", argv=[sys.argv[0], *rest], verbosity=2)
