#!/usr/bin/env python3
"""ngx_http_creditloop_module inside Debian's nginx, on loopback: HTTP/1.1, HTTP/2 over TLS, a
streamed (SSE) upstream, 401 for an unknown tenant, clients that leave (while queued, at once,
by HTTP/2 RST_STREAM), the queue timeout's 503, authentication before the queue, the room given
back when the upstream is done (slow readers, cache hits), the cost variable in a header,
error pages, POST bodies, reload with changed tenants, quit with requests queued, a thousand
tenants with 64 workers, the cache manager, the .so's exported symbols, and configurations
`nginx -t` refuses naming the directive and the line.

Usage: test_nginx_module.py --module PATH/ngx_http_creditloop_module.so [--nginx /usr/sbin/nginx]

Every wait is a poll with a deadline on something observable (a metric, a response, the
backend's record) or a gate the test opens; never a fixed sleep.
"""
import argparse
import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None


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


class Module(unittest.TestCase):
    def setUp(self):
        self.nginx = Nginx()

    def tearDown(self):
        self.nginx.stop()

    def test_http1_each_answer_names_its_class(self):
        status, headers, body = self.nginx.request("/fast", "alice")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P1"))
        self.assertEqual(body, b"ok /fast")
        status, headers, _ = self.nginx.request("/fast", "bob")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P2"))
        status, _, _ = self.nginx.request("/fast", "mallory")
        self.assertEqual(status, 401)
        status, _, _ = self.nginx.request("/fast")
        self.assertEqual(status, 401)
        self.assertEqual(self.nginx.metric("creditloop_server_unauthorized_total",
                                           listener="tenants"), 2)
        # The backend's X-Cost (2 credits) is what alice was charged.
        self.assertEqual(self.nginx.metric("creditloop_tenant_cost_charged_credits_total",
                                           tenant="alice"), 2)
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "alice", "class": "P1"}), 1)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=self.nginx.metrics_or_none(),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_internal_redirect_keeps_one_place(self):
        status, headers, body = self.nginx.request("/redirected", "alice")
        self.assertEqual((status, headers.get("X-Creditloop-Class"), body),
                         (200, "P1", b"ok /redirected"))
        dispatched = sum(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "alice", "class": c}) for c in
                         ("P1", "P2", "P3"))
        self.assertEqual(dispatched, 1)
        self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)

    def test_http2_over_tls(self):
        r = subprocess.run(["curl", "-sk", "--http2", "-D", "-", "-o", "/dev/null",
                            "-H", "X-Tenant: alice",
                            f"https://127.0.0.1:{self.nginx.tls_port}/fast"],
                           capture_output=True, text=True, timeout=20)
        head = r.stdout.lower()
        self.assertTrue(head.startswith("http/2 200"), r.stdout + r.stderr)
        self.assertIn("x-creditloop-class: p1", head)

    def test_streamed_sse(self):
        c = http.client.HTTPConnection("127.0.0.1", self.nginx.port, timeout=10)
        c.request("GET", "/sse", headers={"X-Tenant": "bob"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("X-Creditloop-Class"), "P2")
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        self.assertEqual(r.read().decode().count("data: event"), 3)
        c.close()

    def test_client_leaving_while_queued_withdraws(self):
        held, out = self.nginx.hold_slot("disconnect")
        s = socket.create_connection(("127.0.0.1", self.nginx.port))
        s.sendall(b"GET /never HTTP/1.1\r\nHost: x\r\nX-Tenant: bob\r\n\r\n")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        s.close()
        wait_for("the withdrawal", lambda: self.nginx.metric(
            "creditloop_server_requests_withdrawn_total") == 1)
        self.assertEqual(self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob"), 0)
        self.nginx.backend.gate("disconnect").set()
        held.join(10)
        self.assertEqual(out["response"][0], 200)
        # The slot is free again, and the withdrawn request never reached the backend.
        self.assertEqual(self.nginx.request("/after", "bob")[0], 200)
        self.assertFalse(self.nginx.backend.saw("/never"))
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_queue_timeout_answers_503_with_retry_after(self):
        held, out = self.nginx.hold_slot("timeout")
        status, headers, _ = self.nginx.request("/late", "carol")  # carol: queue_timeout_ms 300
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("Retry-After"), "1")
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="carol",
                                           reason="queue_timeout"), 1)
        self.nginx.backend.gate("timeout").set()
        held.join(10)
        self.assertFalse(self.nginx.backend.saw("/late"))

    def test_reload_with_changed_tenants_keeps_queued_requests(self):
        self.assertEqual(self.nginx.request("/fast", "dave")[0], 401)
        held, out = self.nginx.hold_slot("reload")
        queued, queued_out = self.nginx.start_in_thread("/queued", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        self.nginx.write_plans(TENANTS + [{"name": "dave", "key": "key-kd-secret", "plan": "pro"}])
        self.nginx.proc.send_signal(signal.SIGHUP)
        # The new workers know dave; the old one keeps what it queued.
        wait_for("dave to be known", lambda: self.nginx.request("/fast", "dave")[0] == 200)
        self.nginx.backend.gate("reload").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(out["response"][0], 200)
        self.assertEqual(queued_out["response"][0], 200)
        self.assertEqual(queued_out["response"][1].get("X-Creditloop-Class"), "P2")

    def test_reload_keeps_each_generations_counters_apart(self):
        # The same tenants with one plan changed: the zone, sized by the tenant count, is kept
        # across the reload, and the old worker dispatches after the new one has started.
        held, out = self.nginx.hold_slot("generations")
        queued, queued_out = self.nginx.start_in_thread("/old-generation", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        self.nginx.write_plans([dict(t, shares=2) if t["name"] == "bob" else t for t in TENANTS])
        self.nginx.proc.send_signal(signal.SIGHUP)
        # The new generation's metrics: it has dispatched nothing yet.
        wait_for("the new workers", lambda: self.nginx.metric(
            "creditloop_tenant_requests_total", **{"tenant": "alice", "class": "P1"}) == 0)
        self.nginx.backend.gate("generations").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        # Once the old worker has answered its last request and exited, every request reaches
        # the new one.
        wait_for("the old worker to exit", lambda: self.nginx.workers() == 1)
        # bob's request went out in the old worker: none of it is the new generation's.
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 0)
        self.assertEqual(self.nginx.request("/fast", "bob")[0], 200)
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_two_reloads_while_long_requests_are_open(self):
        # Three configurations at once: the first's worker holds a long request, the second's
        # another, the third serves; each old worker exits once it has answered.
        first = self.nginx.start_in_thread("/gate/long1", "alice")
        wait_for("the first long request", lambda: self.nginx.backend.saw("/gate/long1"))
        # An old worker accepts until the master's signal reaches it: wait for that too.
        stopping = lambda n: self.nginx.log().count("gracefully shutting down") == n
        self.nginx.proc.send_signal(signal.SIGHUP)
        wait_for("the second configuration", lambda: self.nginx.workers() == 2 and stopping(1))
        second = self.nginx.start_in_thread("/gate/long2", "bob")
        wait_for("the second long request", lambda: self.nginx.backend.saw("/gate/long2"))
        self.nginx.proc.send_signal(signal.SIGHUP)
        wait_for("the third configuration", lambda: self.nginx.workers() == 3 and stopping(2))
        self.assertEqual(self.nginx.request("/fast", "alice")[0], 200)
        for name, (t, out) in (("long1", first), ("long2", second)):
            self.nginx.backend.gate(name).set()
            t.join(10)
            self.assertEqual(out["response"][0], 200)
        wait_for("the old workers to exit", lambda: self.nginx.workers() == 1)
        self.assertEqual(self.nginx.request("/fast", "bob")[0], 200)

    def test_quit_answers_what_is_queued(self):
        held, out = self.nginx.hold_slot("quit")
        waiting = [self.nginx.start_in_thread(f"/q{i}", "bob") for i in range(3)]
        wait_for("three queued",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 3)
        self.nginx.proc.send_signal(signal.SIGQUIT)
        self.nginx.backend.gate("quit").set()
        for t, o in [(held, out)] + waiting:
            t.join(10)
            self.assertEqual(o.get("response", (o.get("error"),))[0], 200)
        self.assertEqual(self.nginx.proc.wait(timeout=10), 0)


class Options(unittest.TestCase):
    """A default tenant instead of 401, and the queue limit."""

    def setUp(self):
        self.nginx = Nginx(extra_http="creditloop_unknown_tenant bob; creditloop_queue_limit 1; "
                                      "creditloop_queue_timeout 0;")

    def tearDown(self):
        self.nginx.stop()

    def test_unknown_tenant_gets_the_default_tenants_queue(self):
        status, headers, _ = self.nginx.request("/fast", "mallory")
        self.assertEqual((status, headers.get("X-Creditloop-Class")), (200, "P2"))
        self.assertEqual(self.nginx.metric("creditloop_tenant_requests_total",
                                           **{"tenant": "bob", "class": "P2"}), 1)

    def test_queue_timeout_zero_is_none(self):
        answer = json.loads(self.nginx.request("/debug/participants", timeout=5)[2])
        timeouts = {t["name"]: t["queue_timeout_ms"] for t in answer["tenants"]}
        self.assertEqual(timeouts, {"alice": 0, "bob": 0, "carol": 300})

    def test_queue_limit_answers_503_with_retry_after(self):
        held, out = self.nginx.hold_slot("limit")
        queued, queued_out = self.nginx.start_in_thread("/first", "bob")
        wait_for("bob's request to queue",
                 lambda: self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob") == 1)
        status, headers, _ = self.nginx.request("/second", "bob")
        self.assertEqual((status, headers.get("Retry-After")), (503, "1"))
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="bob",
                                           reason="queue_limit"), 1)
        self.nginx.backend.gate("limit").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        self.assertFalse(self.nginx.backend.saw("/second"))


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


def basic_auth(user, password):
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class H2Client:
    """One HTTP/2 connection over TLS, kept open, whose streams the test opens and resets."""

    def __init__(self, port):
        try:
            import h2.config
            import h2.connection
        except ImportError:
            # Debian's python3-h2, for an interpreter outside Debian's.
            sys.path.append("/usr/lib/python3/dist-packages")
            import h2.config
            import h2.connection
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        self.sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                        server_hostname="localhost")
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def get(self, path, tenant):
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", "GET"), (":path", path), (":scheme", "https"),
                                        (":authority", "localhost"), ("x-tenant", tenant)],
                               end_stream=True)
        self.flush()
        return stream

    def reset(self, stream):
        self.conn.reset_stream(stream, error_code=8)  # CANCEL, as a browser that navigates away
        self.flush()

    def close(self):
        self.sock.close()


class Production(unittest.TestCase):
    """What ordinary nginx configurations do around the module: authentication, headers that
    name the cost, slow readers, clients that leave at once or by RST_STREAM, request bodies,
    the cache."""

    def setUp(self):
        self.nginx = Nginx(extra_server="""
            location /limited/ { error_page 503 /busy.html; proxy_pass http://backend; }
            location = /busy.html { root @DIR@/html; }""",
                           extra_http="creditloop_queue_limit 1;")

    def tearDown(self):
        self.nginx.stop()

    def queued(self, tenant, count):
        wait_for(f"{count} of {tenant}'s requests to queue", lambda: self.nginx.metric(
            "creditloop_tenant_queue_depth", tenant=tenant) == count)

    def test_the_cost_variable_in_a_header_never_fixes_the_cost_early(self):
        for i in range(5):
            status, headers, _ = self.nginx.request(f"/slow/{i}", "bob")
            self.assertEqual(status, 200)
            # Unknown when the head goes out: the header is left out, not filled with a guess.
            self.assertIn(headers.get("X-Cost"), (None, ""))
        cost = self.nginx.metric("creditloop_tenant_cost_charged_credits_total", tenant="bob")
        # Five upstream times of at least 20 ms, at 1 ms a credit, and nothing like the
        # 1,000,000 credits a request an unfinished response time gave.
        self.assertGreaterEqual(cost, 5 * 20)
        self.assertLess(cost, 5 * 1000)

    def test_authentication_comes_before_the_queue(self):
        held, out = self.nginx.hold_slot("auth")
        # A wrong password is answered at once, the room still full, and takes no place.
        status, headers, _ = self.nginx.request("/private/wrong", headers=basic_auth("bob", "guess"),
                                                timeout=5)
        self.assertEqual(status, 401)
        self.assertIn("Basic", headers.get("WWW-Authenticate", ""))
        self.assertEqual(self.nginx.metric("creditloop_tenant_queue_depth", tenant="bob"), 0)
        right, right_out = self.nginx.start_in_thread(
            "/private/right", None, headers=basic_auth("bob", PASSWORDS["bob"]))
        self.queued("bob", 1)
        self.nginx.backend.gate("auth").set()
        held.join(10)
        right.join(10)
        self.assertEqual(right_out["response"][0], 200)
        self.assertFalse(self.nginx.backend.saw("/private/wrong"))

    def test_a_client_that_closes_at_once_is_withdrawn(self):
        held, out = self.nginx.hold_slot("gone")
        for i in range(5):
            # The request and the close in one go: nginx reads both in one read event, and no
            # other event comes for that connection.
            s = socket.create_connection(("127.0.0.1", self.nginx.port))
            s.sendall(f"GET /gone/{i} HTTP/1.1\r\nHost: x\r\nX-Tenant: bob\r\n\r\n".encode())
            s.close()
        wait_for("five withdrawals", lambda: self.nginx.metric(
            "creditloop_server_requests_withdrawn_total") == 5)
        self.nginx.backend.gate("gone").set()
        held.join(10)
        self.assertEqual(self.nginx.request("/after-gone", "bob")[0], 200)
        self.assertFalse(any(self.nginx.backend.saw(f"/gone/{i}") for i in range(5)))

    def test_a_slow_reader_does_not_hold_the_room(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", self.nginx.port))
        try:
            s.sendall(b"GET /buffered/big/1 HTTP/1.1\r\nHost: x\r\nX-Tenant: alice\r\n\r\n")
            self.assertTrue(s.recv(1024).startswith(b"HTTP/1.1 200"))
            # nginx has the response whole (in its buffers and a temporary file) while the
            # client reads nothing more: the one slot is free for bob.
            status, _, _ = self.nginx.request("/after-big", "bob", timeout=5)
            self.assertEqual(status, 200)
            self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)
        finally:
            s.close()

    def test_the_tenant_by_its_key(self):
        status, headers, _ = self.nginx.request("/keyed/a", headers={"X-Api-Key": "key-ka-secret"})
        self.assertEqual((status, headers.get("X-Creditloop-Tenant")), (200, "alice"))
        status, headers, _ = self.nginx.request("/keyed/b", headers={"X-Api-Key": "key-kb-secret"})
        self.assertEqual((status, headers.get("X-Creditloop-Tenant")), (200, "bob"))
        # A name is no key, and no header is no tenant: both 401, logged with the reason and
        # never the value.
        self.assertEqual(self.nginx.request("/keyed/c", headers={"X-Api-Key": "alice"})[0], 401)
        self.assertEqual(self.nginx.request("/keyed/d")[0], 401)
        log = self.nginx.log()
        self.assertIn("the key is no tenant's", log)
        self.assertNotIn("key-ka-secret", log)

    def test_a_user_who_is_no_tenant_is_asked_for_credentials(self):
        status, headers, _ = self.nginx.request(
            "/private/m", headers=basic_auth("mallory", PASSWORDS["mallory"]), timeout=5)
        self.assertEqual(status, 401)
        self.assertIn("Basic", headers.get("WWW-Authenticate", ""))

    def test_an_error_page_for_a_refusal_is_not_queued_again(self):
        held, out = self.nginx.hold_slot("errorpage")
        queued, queued_out = self.nginx.start_in_thread("/limited/first", "bob")
        self.queued("bob", 1)
        status, _, body = self.nginx.request("/limited/second", "bob", timeout=5)
        self.assertEqual((status, body), (503, b"busy, try later\n"))
        self.assertEqual(self.nginx.metric("creditloop_nginx_refused_total", tenant="bob",
                                           reason="queue_limit"), 1)
        self.nginx.backend.gate("errorpage").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)

    def test_the_result_and_the_tenant_as_variables(self):
        _, headers, _ = self.nginx.request("/fast", "alice")
        self.assertEqual((headers.get("X-Creditloop-Result"), headers.get("X-Creditloop-Tenant")),
                         ("dispatched", "alice"))
        status, headers, _ = self.nginx.request("/fast", "mallory-secret")
        self.assertEqual((status, headers.get("X-Creditloop-Result")), (401, "refused"))
        self.assertIsNone(headers.get("X-Creditloop-Tenant"))

    def test_refusals_are_logged_with_their_reason_never_the_value(self):
        self.assertEqual(self.nginx.request("/fast", "mallory-secret")[0], 401)
        self.assertEqual(self.nginx.request("/fast")[0], 401)
        wait_for("the refusals in error.log", lambda: "the tenant value is empty" in self.nginx.log())
        log = self.nginx.log()
        self.assertIn("creditloop: refused: the tenant value names no tenant", log)
        self.assertNotIn("mallory-secret", log)

    def test_dry_run_decides_and_never_delays(self):
        held, out = self.nginx.hold_slot("dry")
        status, headers, _ = self.nginx.request("/dry/now", "bob", timeout=5)
        self.assertEqual((status, headers.get("X-Creditloop-Result")), (200, "dry-run"))
        self.assertEqual(self.nginx.request("/dry/stranger", "mallory", timeout=5)[0], 200)
        self.assertIn('creditloop: dry run, would refuse: the tenant value names no tenant',
                      self.nginx.log())
        self.nginx.backend.gate("dry").set()
        held.join(10)

    def test_the_participants_for_creditloop_top(self):
        self.assertEqual(self.nginx.request("/fast", "alice")[0], 200)
        held, out = self.nginx.hold_slot("top")
        queued, queued_out = self.nginx.start_in_thread("/behind-top", "bob")
        self.queued("bob", 1)
        status, headers, body = self.nginx.request("/debug/participants", timeout=5)
        self.assertEqual((status, headers.get("Content-Type")), (200, "application/json"))
        answer = json.loads(body)
        self.assertEqual(answer["class_names"], ["P1", "P2", "P3"])
        self.assertEqual((answer["loop"]["waiting"], answer["loop"]["in_flight"],
                          answer["loop"]["dispatched"]), (1, 1, 1))
        tenants = {t["name"]: t for t in answer["tenants"]}
        self.assertEqual(sorted(tenants), ["alice", "bob", "carol"])
        self.assertEqual((tenants["alice"]["served"], tenants["alice"]["cost_charged"]),
                         ([1, 0, 0], 2.0))
        self.assertEqual((tenants["bob"]["queued"], tenants["bob"]["plan"]), (1, "lite"))
        # Without creditloop_queue_timeout a queued request still has a timer, nginx's 60 s;
        # the JSON's own timeout comes first.
        self.assertEqual((tenants["alice"]["queue_timeout_ms"], tenants["carol"]["queue_timeout_ms"]),
                         (60000, 300))
        self.assertGreaterEqual(tenants["bob"]["oldest_queued_age_s"], 0)
        self.assertIn("P2", tenants["bob"]["balance"])
        if ARGS.top:
            r = subprocess.run([ARGS.top, "--once", "--no-color",
                                f"http://127.0.0.1:{self.nginx.port}"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("bob", r.stdout)
        self.nginx.backend.gate("top").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        # bob's wait, from queued to the slot's release, is in his histogram and its quantiles.
        answer = json.loads(self.nginx.request("/debug/participants", timeout=5)[2])
        waits = {t["name"]: t["wait_s"] for t in answer["tenants"]}
        self.assertEqual((waits["bob"]["count"], waits["alice"]["count"]), (1, 2))
        self.assertGreater(waits["bob"]["p99"], 0)
        self.assertLessEqual(waits["bob"]["p50"], waits["bob"]["p99"])

    def test_the_wait_histogram(self):
        held, out = self.nginx.hold_slot("histogram")
        queued, queued_out = self.nginx.start_in_thread("/behind-histogram", "bob")
        self.queued("bob", 1)
        self.nginx.backend.gate("histogram").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)
        m = self.nginx.metric
        name = "creditloop_tenant_queue_wait_seconds"
        self.assertEqual(m(name + "_count", tenant="bob"), 1)
        self.assertEqual(m(name + "_count", tenant="alice"), 1)
        self.assertEqual(m(name + "_bucket", tenant="bob", le="+Inf"), 1)
        # Queued for at least the metrics' poll that saw it queued: above the first bound.
        self.assertEqual(m(name + "_bucket", tenant="bob", le="0.000050"), 0)
        self.assertGreater(m(name + "_sum", tenant="bob"), 0.00005)
        self.assertLess(m(name + "_sum", tenant="bob"), 10)
        self.assertEqual(m(name + "_bucket", tenant="alice", le="104.857600"), 1)
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=self.nginx.metrics_or_none(),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_metrics_are_never_queued(self):
        # creditloop_tenant is set at server level, and the metrics' location inherits it.
        held, out = self.nginx.hold_slot("metrics")
        queued, queued_out = self.nginx.start_in_thread("/behind", "bob")
        self.queued("bob", 1)
        self.assertEqual(self.nginx.request("/metrics", timeout=5)[0], 200)
        self.nginx.backend.gate("metrics").set()
        held.join(10)
        queued.join(10)
        self.assertEqual(queued_out["response"][0], 200)

    def test_request_bodies_buffered_and_not(self):
        body = b"x" * 100000
        for path in ("/posted/1", "/unbuffered-body/1"):
            status, _, answer = self.nginx.request(path, "bob", method="POST", body=body)
            self.assertEqual((status, answer), (200, b"got 100000"))
        # A body waits in the socket while its request is queued.
        held, out = self.nginx.hold_slot("bodies")
        queued = [self.nginx.start_in_thread(p, "bob", method="POST", body=body)
                  for p in ("/unbuffered-body/q",)]
        self.queued("bob", 1)
        self.nginx.backend.gate("bodies").set()
        held.join(10)
        for t, o in queued:
            t.join(10)
            self.assertEqual(o["response"][0], 200)
            self.assertEqual(o["response"][2], b"got 100000")

    def test_a_cache_hit_gives_the_room_back(self):
        _, first, _ = self.nginx.request("/cached/a", "bob")
        _, second, _ = self.nginx.request("/cached/a", "bob")
        self.assertEqual((first.get("X-Cache"), second.get("X-Cache")), ("MISS", "HIT"))
        self.assertEqual(self.nginx.metric("creditloop_loop_in_flight"), 0)
        self.assertEqual(self.nginx.request("/after-cache", "bob", timeout=5)[0], 200)

    def test_http2_reset_while_queued_is_withdrawn(self):
        held, out = self.nginx.hold_slot("h2queued")
        client = H2Client(self.nginx.tls_port)
        try:
            stream = client.get("/h2/queued", "bob")
            self.queued("bob", 1)
            client.reset(stream)
            wait_for("the withdrawal", lambda: self.nginx.metric(
                "creditloop_server_requests_withdrawn_total") == 1)
            self.nginx.backend.gate("h2queued").set()
            held.join(10)
            self.assertEqual(self.nginx.request("/after-h2", "bob")[0], 200)
            self.assertFalse(self.nginx.backend.saw("/h2/queued"))
        finally:
            client.close()

    def test_http2_reset_after_dispatch_gives_the_room_back(self):
        client = H2Client(self.nginx.tls_port)
        try:
            stream = client.get("/gate/h2dispatched", "bob")
            wait_for("the backend to hold it", lambda: self.nginx.backend.saw("/gate/h2dispatched"))
            client.reset(stream)
            # The upstream still holds its request; the room is free all the same.
            wait_for("nothing in flight", lambda: self.nginx.metric("creditloop_loop_in_flight") == 0)
            self.assertEqual(self.nginx.request("/after-h2", "alice", timeout=5)[0], 200)
        finally:
            self.nginx.backend.gate("h2dispatched").set()
            client.close()


class Scale(unittest.TestCase):
    def test_a_thousand_tenants_and_64_workers(self):
        tenants = [{"name": f"t{i:04}", "key": f"key-{i:04}-secret", "plan": "lite"} for i in range(1000)]
        nginx = Nginx(tenants=tenants + TENANTS, workers=64)
        try:
            self.assertEqual(nginx.request("/fast", "t0999")[0], 200)
            self.assertEqual(nginx.metric("creditloop_tenant_queue_depth", tenant="t0999"), 0)
            wait_for("64 workers", lambda: nginx.workers() == 64)
        finally:
            nginx.stop()


class Build(unittest.TestCase):
    def test_the_module_exports_only_nginx_names(self):
        r = subprocess.run(["nm", "-D", "--defined-only", ARGS.module], capture_output=True,
                           text=True, check=True)
        names = [line.split()[-1] for line in r.stdout.splitlines() if line.strip()]
        self.assertIn("ngx_http_creditloop_module", names)
        self.assertEqual([n for n in names if not n.startswith("ngx_")], [])


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


class LearnedRoom(unittest.TestCase):
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
        check = BadConfiguration.check
        case = BadConfiguration()
        check(case, "creditloop_slots auto min=9 max=3;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid value: min is above max')
        check(case, "creditloop_slots auto min=0;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid min')
        check(case, "creditloop_slots 8 max=9;", plans_json(TENANTS),
              r'"creditloop_slots" directive invalid parameter')
        check(case, "creditloop_room r slots=auto size=3;", plans_json(TENANTS),
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


class BadConfiguration(unittest.TestCase):
    """`nginx -t` names the directive and the line."""

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
            conf = conf.replace(f"listen 127.0.0.1:2 ssl http2;", "").replace(
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

    def test_good_configuration_passes(self):
        d = tempfile.mkdtemp(prefix="cl-ngx-good-")
        try:
            with open(f"{d}/plans.json", "w") as f:
                f.write(plans_json(TENANTS))
            conf = nginx_conf(d, ARGS.module, 1, 2, 3).replace("listen 127.0.0.1:2 ssl http2;", "")
            conf = conf.replace(f"ssl_certificate {d}/cert.pem;", "").replace(
                f"ssl_certificate_key {d}/key.pem;", "")
            with open(f"{d}/nginx.conf", "w") as f:
                f.write(conf)
            r = subprocess.run([ARGS.nginx, "-t", "-p", d, "-e", f"{d}/error.log",
                                "-c", f"{d}/nginx.conf"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_bad_slots(self):
        self.check("creditloop_slots many;", plans_json(TENANTS), r'"creditloop_slots"')

    def test_bad_cost_unit(self):
        self.check("creditloop_cost_unit 3 parsecs;", plans_json(TENANTS),
                   r'"creditloop_cost_unit"')

    def test_unknown_plan_in_json(self):
        self.check("", plans_json([{"name": "x", "key": "key-x-secret", "plan": "gold"}]),
                   r'creditloop_config .*tenants\[0\]\.plan: unknown plan "gold"')

    def test_bad_rate_in_json(self):
        self.check("", json.dumps({"plans": {"p": {"P1": {"rate": -1, "burst": 1}}},
                                   "tenants": [{"name": "x", "key": "key-x-secret",
                                                "plan": "p"}]}),
                   r"creditloop_config .*plans\.p\.P1\.rate")

    def test_default_tenant_must_exist(self):
        self.check("creditloop_unknown_tenant nobody;", plans_json(TENANTS),
                   r'"creditloop_unknown_tenant": "nobody" is not a tenant',
                   at_line_of="creditloop_unknown_tenant")

    def test_slots_out_of_range_at_the_directives_line(self):
        self.check("creditloop_slots 0;", plans_json(TENANTS),
                   r'"creditloop_slots" directive invalid value: from 1 to 1000000',
                   at_line_of="creditloop_slots 0")

    def test_epoch_zero_is_refused(self):
        # It would run the epoch without end, every worker at 100 % of a CPU.
        self.check("creditloop_epoch 0;", plans_json(TENANTS),
                   r'"creditloop_epoch" directive invalid value: from 10ms to 60000ms',
                   at_line_of="creditloop_epoch 0")

    def test_a_directory_for_the_json(self):
        self.check("", None, r'creditloop_config: ".*plans.json" is not a regular file',
                   at_line_of="creditloop_config")

    def test_more_workers_than_supported(self):
        self.check("", plans_json(TENANTS),
                   r"worker_processes 1025 is more than the 1024 the module supports",
                   workers=1025)

    def test_the_json_is_checked_as_the_server_checks_it(self):
        self.check("", plans_json([{"name": "x", "key": "key-x-secret", "plan": "pro",
                                    "sharez": 2}]),
                   r'creditloop_config .*tenants\[0\]\.sharez')
        self.check("", plans_json([{"name": "x", "plan": "pro"}]),
                   r'creditloop_config .*tenants\[0\]\.key: is required')

    def test_a_room_used_before_it_is_defined(self):
        self.check("creditloop_room_use nope;", plans_json(TENANTS),
                   r'"creditloop_room_use": no room "nope"', at_line_of="creditloop_room_use")

    def test_bad_rooms(self):
        self.check("creditloop_room wide slots=0;", plans_json(TENANTS),
                   r'"creditloop_room" directive invalid value: from 1 to 1000000',
                   at_line_of="creditloop_room wide")
        self.check("creditloop_room wide 3;", plans_json(TENANTS),
                   r'"creditloop_room" directive invalid parameter: "slots=N" expected')
        self.check("creditloop_room w.x slots=3;", plans_json(TENANTS),
                   r'"creditloop_room" directive invalid name')
        self.check("creditloop_room w slots=3; creditloop_room w slots=4;", plans_json(TENANTS),
                   r'"creditloop_room" directive is duplicate')

    def test_refusal_status_out_of_range(self):
        self.check("creditloop_status 200;", plans_json(TENANTS),
                   r'"creditloop_status" directive invalid value: a status code from 400 to 599',
                   at_line_of="creditloop_status 200")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", required=True)
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--top", help="creditloop-top, to read the module's participants")
    ARGS, rest = parser.parse_known_args()
    ARGS.module = os.path.abspath(ARGS.module)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
