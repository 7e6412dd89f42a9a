#!/usr/bin/env python3
"""creditloop-server's admin listener: its key and formats, an admin key that no tenant may
share, the names it answers to, and failed authentications counted per listener.

Usage: test_admin.py --server PATH [unittest args]
"""
import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import (  # noqa: E402
    base_config, wait_for, Server, raw_exchange, raw_exchange_to, status_of, sha256_hex,
    check_config)


class AdminListener(unittest.TestCase):
    def test_admin_key_and_formats(self):
        config = base_config()
        config["admin"]["key"] = "admin-secret-1"
        server = Server(config)
        try:
            server.request("alice-key-0001", "/work?cpu_ms=1")
            res, _ = server.admin("/metrics")
            self.assertEqual(res.status, 401)
            res, _ = server.admin("/metrics", key="alice-key-0001")
            self.assertEqual(res.status, 401)  # a tenant's key never opens the admin endpoints
            res, body = server.admin("/metrics", key="admin-secret-1")
            self.assertEqual(res.status, 200)
            text = body.decode()
            self.assertIn('creditloop_tenant_requests_total{tenant="alice",class="P1"} 1', text)
            self.assertIn('creditloop_tenant_balance_credits{tenant="bob",class="P2"}', text)
            self.assertIn("creditloop_loop_turns_total", text)
            # The records for 4 slots were reserved up front: no growth, so none failed.
            self.assertIn("creditloop_loop_ticket_growth_failures_total 0", text)
            res, body = server.admin("/debug/participants", key="admin-secret-1")
            snapshot = json.loads(body)
            alice = [t for t in snapshot["tenants"] if t["name"] == "alice"][0]
            self.assertEqual(alice["plan"], "pro")
            self.assertIn("P1", alice["balance"])
            self.assertEqual(snapshot["loop"]["dispatched"], 1)
            self.assertNotIn("alice-key-0001", body.decode())
        finally:
            self.assertEqual(server.stop(), 0)


class AdminKeyDistinct(unittest.TestCase):
    def test_an_admin_key_equal_to_a_tenant_key_is_refused_at_start_and_at_reload(self):
        for admin, files, field in [({"key": "alice-key-0001"}, {}, "admin.key"),
                                    ({"key_file": "k"}, {"k": "bob-key-00001\n"}, "admin.key_file")]:
            with self.subTest(admin=admin):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0", **admin}),
                                           files)
                self.assertEqual(status, 3, err)
                self.assertIn(f"{field}: is the key of tenant ", err)
                self.assertNotIn("alice-key-0001", err)
                self.assertNotIn("bob-key-00001", err)

        config = base_config(admin={"listen": "127.0.0.1:0", "key": "admin-secret-1"})
        server = Server(config)
        try:
            config["admin"] = {"listen": "127.0.0.1:0", "key_sha256": sha256_hex("bob-key-00001")}
            server.write_config(config)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("refusal logged", lambda: "reload refused" in server.log())
            self.assertIn('admin.key_sha256: is the key of tenant "bob" too', server.log())
            res, _ = server.admin("/health", key="admin-secret-1")
            self.assertEqual(res.status, 200)  # the old admin key stays
            res, _ = server.admin("/health", key="bob-key-00001")
            self.assertEqual(res.status, 401)
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        self.assertNotIn("bob-key-00001", server.log())


class AdminHosts(unittest.TestCase):
    """The admin listener answers only to its own names: a page on another site that rebinds its
    name to 127.0.0.1 still sends its own name in Host."""

    def get(self, server, host, path="/health", key=None):
        headers = {} if host is None else {"Host": host}
        res, body = server.request(key, path, port=server.admin_port, headers=headers)
        return res.status, body

    def assert_misdirected(self, server, host, path="/metrics"):
        status, body = self.get(server, host, path)
        self.assertEqual(status, 421, (host, body[:80]))
        self.assertLess(len(body), 100)
        self.assertNotIn(b"creditloop_", body)

    def test_default_names_and_others_refused(self):
        server = Server(base_config())
        try:
            p = server.admin_port
            for host in ["localhost", f"localhost:{p}", "LocalHost:1", f"127.0.0.1:{p}",
                         "127.0.0.1", f"[::1]:{p}", "[::1]"]:
                self.assertEqual(self.get(server, host)[0], 200, host)
            for host in ["evil.example", f"evil.example:{p}", "localhost.evil.example",
                         "127.0.0.1.nip.io", "[::2]", f"127.0.0.2:{p}", ""]:
                self.assert_misdirected(server, host)
            self.assert_misdirected(server, "evil.example", "/ui/events")  # no stream either
            self.assert_misdirected(server, "evil.example", "/debug/participants")
            # HTTP/1.1 needs a Host; HTTP/1.0 may go without (no browser sends that).
            raw = raw_exchange(p, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
            raw = raw_exchange(p, b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
                                  b"Connection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
            raw = raw_exchange(p, b"GET /health HTTP/1.0\r\n\r\n")
            self.assertEqual(status_of(raw), 200, raw)
            # The tenants' listener does not care.
            res, _ = server.request("alice-key-0001", "/work", headers={"Host": "evil.example"})
            self.assertEqual(res.status, 200)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

        # The admin listen address's own host is one of the defaults.
        server = Server(base_config(admin={"listen": "127.0.0.2:0"}))
        try:
            raw = raw_exchange_to("127.0.0.2", server.admin_port,
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.2:%d\r\n"
                                  b"Connection: close\r\n\r\n" % server.admin_port)
            self.assertEqual(status_of(raw), 200, raw)
            raw = raw_exchange_to("127.0.0.2", server.admin_port,
                                  b"GET /health HTTP/1.1\r\nHost: 127.0.0.3\r\n"
                                  b"Connection: close\r\n\r\n")
            self.assertEqual(status_of(raw), 421, raw)
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_configured_names_replace_the_defaults_and_reload(self):
        config = base_config(admin={"listen": "127.0.0.1:0",
                                    "hosts": ["Admin.Example", "mon.example:9999", "::1"]})
        server = Server(config)
        try:
            for host in ["admin.example", "ADMIN.EXAMPLE:1234", "mon.example:9999", "[::1]:80"]:
                self.assertEqual(self.get(server, host)[0], 200, host)
            for host in ["mon.example", "mon.example:9998", "localhost", "127.0.0.1",
                         "admin.example.evil"]:
                self.assert_misdirected(server, host)
            config["admin"]["hosts"] = ["other.example"]
            server.write_config(config)
            server.proc.send_signal(signal.SIGHUP)
            wait_for("reload", lambda: "configuration reloaded" in server.log())
            self.assertEqual(self.get(server, "other.example")[0], 200)
            self.assert_misdirected(server, "admin.example")
        finally:
            self.assertEqual(server.stop(), 0, server.log())

    def test_bad_hosts_name_the_field(self):
        for hosts, message in [("localhost", "admin.hosts: must be a list of host names"),
                               ([], "admin.hosts: must name at least one host"),
                               (["ok", 7], "admin.hosts[1]: must be a string"),
                               (["a b"], 'admin.hosts[0]: must be a host name'),
                               (["h:99999"], "admin.hosts[0]: port must be from 1 to 65535"),
                               (["h:"], 'admin.hosts[0]: must be a host name'),
                               (["[::1"], 'admin.hosts[0]: must be a host name')]:
            with self.subTest(hosts=hosts):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0",
                                                              "hosts": hosts}))
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)


def metric(text, line_start):
    """The value of the one sample whose line starts with `line_start` (name and labels)."""
    values = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(line_start + " ")]
    assert len(values) == 1, (line_start, text)
    return values[0]


class Unauthorized(unittest.TestCase):
    def test_failed_authentications_are_counted_per_listener(self):
        server = Server(base_config(admin={"listen": "127.0.0.1:0", "key": "admin-secret-1"}))
        try:
            def counts():
                res, body = server.admin("/metrics", key="admin-secret-1")
                self.assertEqual(res.status, 200)
                text = body.decode()
                types = [l for l in text.splitlines()
                         if l.startswith("# TYPE creditloop_server_unauthorized_total ")]
                self.assertEqual(types, ["# TYPE creditloop_server_unauthorized_total counter"])
                return (metric(text, 'creditloop_server_unauthorized_total{listener="tenants"}'),
                        metric(text, 'creditloop_server_unauthorized_total{listener="admin"}'))

            self.assertEqual(counts(), (0, 0))
            self.assertEqual(server.request(None, "/work")[0].status, 401)
            self.assertEqual(server.request("alice-key-0002", "/work")[0].status, 401)
            self.assertEqual(server.request(None, "/work", headers={
                "Authorization": "Basic YWxpY2U6eA=="})[0].status, 401)
            self.assertEqual(server.request("alice-key-0001", "/work")[0].status, 200)
            self.assertEqual(server.admin("/metrics")[0].status, 401)
            self.assertEqual(server.admin("/ui/events", key="alice-key-0001")[0].status, 401)
            # A wrong name is not a failed authentication.
            res, _ = server.request("admin-secret-1", "/metrics", port=server.admin_port,
                                    headers={"Host": "evil.example"})
            self.assertEqual(res.status, 421)
            self.assertEqual(counts(), (3, 2))
        finally:
            self.assertEqual(server.stop(), 0, server.log())


if __name__ == "__main__":
    server_harness.main()
