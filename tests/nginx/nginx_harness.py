"""What the nginx module's tests share: Debian's nginx on loopback with the module loaded and a
configuration of the test's own (Nginx, nginx_conf), a backend that records and gates what it
serves, the tenants' plans, `nginx -t` on a configuration it must refuse, and main(), which takes
--module PATH [--nginx PATH] [--top PATH] and runs the calling script's tests.

Every wait is a poll with a deadline on something observable (a metric, a response, the
backend's record) or a gate the test opens; never a fixed sleep.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None  # the command line, set by main()


def wait_for(what, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # a poll interval, not a synchronisation


class Backend:
    """An HTTP/1.1 backend: /fast answers at once with X-Cost, /gate/NAME waits for the test to
    open gate NAME, /sse streams three events."""

    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0  # /busy/ requests in the backend now, and the most at once
        self.most_active = 0
        self.gates = {}
        self.seen = []
        # /capacity/: 3 served at once, 20 ms each, the rest waiting in the backend's own queue
        self.servers = threading.Semaphore(3)
        self.waiting = 0
        self.most_waiting = 0
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The head and the body go out in two writes: without this, Nagle's algorithm and
            # the client's delayed ACK hold every response ~40 ms.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                with backend.lock:
                    backend.seen.append(self.path)
                body = b"got %d" % len(data)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                with backend.lock:
                    backend.seen.append(self.path)
                if self.path.startswith("/gate/"):
                    backend.gate(self.path[6:]).wait(30)
                if self.path.startswith("/slow/"):
                    time.sleep(0.02)  # the backend's work, which the cost measures
                if self.path.startswith("/capacity/"):
                    with backend.lock:
                        backend.waiting += 1
                        backend.most_waiting = max(backend.most_waiting, backend.waiting)
                    with backend.servers:
                        with backend.lock:
                            backend.waiting -= 1
                        time.sleep(0.02)  # the work; the semaphore is the backend's capacity
                if self.path.startswith("/busy/"):
                    with backend.lock:
                        backend.active += 1
                        backend.most_active = max(backend.most_active, backend.active)
                    time.sleep(0.01)  # work, so that requests overlap when the room lets them
                    with backend.lock:
                        backend.active -= 1
                if "/big/" in self.path:
                    body = b"x" * BIG_BODY
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if self.path == "/sse":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(3):
                        data = f"data: event {i}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return
                body = b"ok " + self.path.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "max-age=60")
                if not self.path.startswith("/slow/"):
                    self.send_header("X-Cost", "0" if self.path == "/free" else "2")
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A client gone mid-response (the tests make them leave) is no error of the backend's.
        self.server.handle_error = lambda request, address: None
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def gate(self, name):
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def saw(self, path):
        with self.lock:
            return path in self.seen

    def stop(self):
        for g in list(self.gates.values()):
            g.set()
        self.server.shutdown()


# A response that a client reading slowly takes seconds to read, and nginx buffers whole.


BIG_BODY = 16 * 1024 * 1024


def plans_json(tenants):
    return json.dumps({
        "mode": "proxy", "slots": 1, "classes": 2,
        "plans": {"pro": {"P1": {"rate": 100, "burst": 100}, "P2": {"rate": 100, "burst": 100}},
                  "lite": {"P2": {"rate": 100, "burst": 100}}},
        "tenants": tenants})


TENANTS = [{"name": "alice", "key": "key-ka-secret", "plan": "pro"},
           {"name": "bob", "key": "key-kb-secret", "plan": "lite"},
           {"name": "carol", "key": "key-kc-secret", "plan": "lite", "queue_timeout_ms": 300}]


def nginx_conf(d, module, port, tls_port, backend, workers=1, extra_http="", extra_server="",
               slots=1):
    return f"""load_module {module};
worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    proxy_cache_path {d}/cache keys_zone=cache:1m;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    creditloop_config {d}/plans.json;
    creditloop_slots {slots};
    {extra_http}
    upstream backend {{ server 127.0.0.1:{backend}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        # At server level: every location below inherits it, the metrics' included, which must
        # not be queued.
        creditloop_tenant $http_x_tenant;
        {extra_server}
        location / {{
            add_header X-Creditloop-Class $creditloop_class always;
            add_header X-Creditloop-Result $creditloop_result always;
            add_header X-Creditloop-Tenant $creditloop_tenant always;
            add_header X-Creditloop-Wait-Ms $creditloop_wait_ms always;
            # Which worker answered: the multi-worker metrics test spreads requests by it.
            add_header X-Worker-Pid $pid always;
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
        # An internal redirect after the preaccess phase (try_files to a named location).
        location /redirected {{
            creditloop_tenant $http_x_tenant;
            add_header X-Creditloop-Class $creditloop_class always;
            try_files /nothing-here @backend;
        }}
        location @backend {{
            creditloop_tenant $http_x_tenant;
            add_header X-Creditloop-Class $creditloop_class always;
            proxy_pass http://backend;
        }}
        # The room is held only while the upstream works: a client reading this slowly does not
        # hold it.
        location /buffered/ {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
        # The cost variable in a header: not known when the header goes out, never fixed then.
        location /slow/ {{
            add_header X-Cost $creditloop_cost always;
            proxy_pass http://backend;
        }}
        # Authentication before the queue: a wrong password never takes bob's place.
        location /private/ {{
            auth_basic "creditloop";
            auth_basic_user_file {d}/htpasswd;
            creditloop_tenant $remote_user;
            proxy_pass http://backend;
        }}
        # The tenant looked up by the key the client presents, as creditloop-server does.
        location /keyed/ {{
            creditloop_key $http_x_api_key;
            add_header X-Creditloop-Tenant $creditloop_tenant always;
            proxy_pass http://backend;
        }}
        # Decided and logged, never delayed.
        location /dry/ {{
            creditloop_dry_run on;
            add_header X-Creditloop-Result $creditloop_result always;
            proxy_pass http://backend;
        }}
        location /unbuffered-body/ {{
            proxy_request_buffering off;
            proxy_http_version 1.1;
            proxy_pass http://backend;
        }}
        location /cached/ {{
            proxy_cache cache;
            proxy_cache_valid 200 1m;
            add_header X-Cache $upstream_cache_status always;
            proxy_pass http://backend;
        }}
        location = /metrics {{ creditloop_metrics; }}
        location = /debug/participants {{ creditloop_participants; }}
    }}
}}
"""


# mallory passes auth_basic and is no tenant.


PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "mallory": "mallory-secret"}


def write_htpasswd(d):
    lines = []
    for user, password in PASSWORDS.items():
        r = subprocess.run(["openssl", "passwd", "-apr1", password], check=True,
                           capture_output=True, text=True)
        lines.append(f"{user}:{r.stdout.strip()}\n")
    with open(os.path.join(d, "htpasswd"), "w") as f:
        f.writelines(lines)


class Nginx:
    """Debian's nginx with its own prefix, on sockets bound here and inherited (nginx's NGINX
    environment protocol), so there is no race for the ports."""

    def __init__(self, tenants=TENANTS, workers=1, extra_http="", extra_server="", plans=None,
                 slots=1):
        self.dir = tempfile.mkdtemp(prefix="cl-ngx-mod-")
        os.chmod(self.dir, 0o755)
        self.backend = Backend()
        self.plain = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.tls = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port, self.tls_port = self.plain.getsockname()[1], self.tls.getsockname()[1]
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", f"{self.dir}/key.pem",
                        "-out", f"{self.dir}/cert.pem"], check=True, capture_output=True)
        self.write_plans(tenants)
        if plans is not None:
            with open(os.path.join(self.dir, "plans.json"), "w") as f:
                f.write(plans)
        write_htpasswd(self.dir)
        os.makedirs(os.path.join(self.dir, "html"))
        with open(os.path.join(self.dir, "html", "busy.html"), "w") as f:
            f.write("busy, try later\n")
        self.conf = os.path.join(self.dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(nginx_conf(self.dir, ARGS.module, self.port, self.tls_port, self.backend.port,
                               workers, extra_http, extra_server.replace("@DIR@", self.dir),
                               slots))
        fds = (self.plain.fileno(), self.tls.fileno())
        for sock in (self.plain, self.tls):
            os.set_inheritable(sock.fileno(), True)
            # nginx takes an inherited socket as it is: a blocking one leaves every worker but
            # the one that wins a connection blocked in accept(), its timers stopped.
            sock.setblocking(False)
        self.proc = subprocess.Popen(
            [ARGS.nginx, "-p", self.dir, "-e", f"{self.dir}/error.log", "-c", self.conf,
             "-g", "daemon off;"], pass_fds=fds, env=dict(os.environ, NGINX=f"{fds[0]};{fds[1]};"),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for("nginx to answer", lambda: self.metrics_or_none() is not None)

    def write_plans(self, tenants):
        with open(os.path.join(self.dir, "plans.json"), "w") as f:
            f.write(plans_json(tenants))

    def request(self, path, tenant=None, timeout=10, headers=None, method="GET", body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = dict(headers or {})
        if tenant:
            headers["X-Tenant"] = tenant
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, dict(r.getheaders()), body

    def metrics_or_none(self):
        try:
            status, _, body = self.request("/metrics", timeout=2)
        except OSError:
            return None
        return body.decode() if status == 200 else None

    def metric(self, name, **labels):
        text = self.metrics_or_none() or ""
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        pattern = re.escape(name + ("{" + want + "}" if want else "")) + r" (\S+)"
        m = re.search("^" + pattern + "$", text, re.M)
        return float(m.group(1)) if m else None

    def start_in_thread(self, path, tenant, **kwargs):
        out = {}

        def run():
            try:
                out["response"] = self.request(path, tenant, timeout=30, **kwargs)
            except Exception as e:  # noqa: BLE001 - reported by the test that reads it
                out["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, out

    def hold_slot(self, gate):
        """A request of alice's that holds the one slot until `gate` opens."""
        held = self.start_in_thread(f"/gate/{gate}", "alice")
        wait_for("the backend to hold the slot", lambda: self.backend.saw(f"/gate/{gate}"))
        return held

    def workers(self):
        """Worker processes running now, of every generation (not the cache manager and
        loader)."""
        r = subprocess.run(["pgrep", "-P", str(self.proc.pid), "-f", "worker process"],
                           capture_output=True, text=True)
        return len(r.stdout.split())

    def log(self):
        with open(os.path.join(self.dir, "error.log")) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.backend.stop()
        if os.environ.get("KEEP_LOG"):
            print(self.log(), file=sys.stderr)
        self.plain.close()
        self.tls.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class RefusedConfiguration:
    """For a unittest.TestCase: `nginx -t` refuses a configuration, naming the directive and
    the line."""

    def check(self, extra_http, plans, expect, workers=1, at_line_of=None):
        d = tempfile.mkdtemp(prefix="cl-ngx-bad-")
        try:
            if plans is None:
                os.mkdir(f"{d}/plans.json")
            else:
                with open(f"{d}/plans.json", "w") as f:
                    f.write(plans)
            conf = nginx_conf(d, ARGS.module, 1, 2, 3, workers=workers, extra_http=extra_http)
            if "creditloop_slots" in extra_http:
                conf = conf.replace("creditloop_slots 1;", "")
            conf = conf.replace("listen 127.0.0.1:2 ssl http2;", "").replace(
                f"ssl_certificate {d}/cert.pem;", "").replace(f"ssl_certificate_key {d}/key.pem;", "")
            with open(f"{d}/nginx.conf", "w") as f:
                f.write(conf)
            r = subprocess.run([ARGS.nginx, "-t", "-p", d, "-e", f"{d}/error.log",
                                "-c", f"{d}/nginx.conf"], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, expect)
            self.assertRegex(r.stderr, r"nginx\.conf:\d+")
            if at_line_of is not None:
                line = next(i for i, text in enumerate(conf.splitlines(), 1) if at_line_of in text)
                self.assertRegex(r.stderr, rf"nginx\.conf:{line}\b")
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main():
    """Runs the calling script's tests against the module named by --module."""
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", required=True)
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--top", help="creditloop-top, to read the module's participants")
    ARGS, rest = parser.parse_known_args()
    ARGS.module = os.path.abspath(ARGS.module)
    unittest.main(module="__main__", argv=[sys.argv[0]] + rest, verbosity=2)
