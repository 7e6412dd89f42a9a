#!/usr/bin/env python3
"""creditloop-server's pool of backend connections: one the backend closed while idle is
neither reused nor kept open.

Usage: test_proxy_pool.py --server PATH [unittest args]
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import ALICE, wait_for, Server  # noqa: E402
from proxy_harness import Backend, proxy_config, Client, request, socket_inodes  # noqa: E402


class ProxyPool(unittest.TestCase):
    def test_a_connection_the_backend_closed_while_idle_is_not_reused(self):
        backend = Backend(idle_close_s=0.2)
        server = Server(proxy_config(backend))
        try:
            res, _ = server.request(ALICE, "/first")
            self.assertEqual(res.status, 200)
            wait_for("the backend to close its idle connection",
                     lambda: backend.recorder.closed >= 1)
            # Not idempotent: no retry would save it. The pool must not hand out the dead one.
            res, body = server.request(ALICE, "/after-gap", method="POST")
            self.assertEqual(res.status, 200, body)
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()

    def test_a_connection_the_backend_closed_while_idle_is_closed_at_once(self):
        backend = Backend(idle_close_s=1.0)
        config = proxy_config(backend)
        config["proxy"]["idle_timeout_ms"] = 60000  # the pool's own reaping plays no part
        config["limits"]["idle_timeout_ms"] = 60000  # nor the client's idle timeout
        server = Server(config)

        def to_backend():
            """The server's descriptors that are TCP sockets to the backend's port. Counted by
            socket, not by descriptor: other descriptors (a thread's, the sanitizers') come and
            go."""
            inodes = socket_inodes(server.proc.pid)
            count = 0
            with open(f"/proc/{server.proc.pid}/net/tcp") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if int(fields[2].split(":")[1], 16) == backend.port and fields[9] in inodes:
                        count += 1
            return count

        try:
            c = Client(server.port)  # kept open: the client's side holds its descriptor still
            c.send(request("GET", "/first"))
            self.assertEqual(c.response()[0], 200)
            pooled = to_backend()
            # Pooled and idle, unless the backend's idle close came first (a slow build can
            # take a second to pass the response on): counted before the close, it is there.
            if backend.recorder.closed == 0:
                self.assertEqual(pooled, 1)
            wait_for("the backend to close its idle connection",
                     lambda: backend.recorder.closed >= 1)
            # No CLOSE_WAIT until the next lease: nginx watches idle pooled connections too.
            wait_for("the pooled connection closed", lambda: to_backend() == 0)
            c.send(request("POST", "/after-gap", body=b"x"))
            self.assertEqual(c.response()[0], 200)
            c.close()
        finally:
            self.assertEqual(server.stop(), 0, server.log())
            backend.close()


if __name__ == "__main__":
    server_harness.main()
