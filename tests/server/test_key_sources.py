#!/usr/bin/env python3
"""creditloop-server's keys from their sources: in the file, as a SHA-256 digest, in a file
beside it, or in an environment variable; bad sources named by their field, and SIGHUP rereading
key files.

Usage: test_key_sources.py --server PATH [unittest args]
"""
import json
import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness  # noqa: E402 - the Server wrapper, the base configuration, main()
from server_harness import base_config, wait_for, Server, sha256_hex, check_config  # noqa: E402


class KeySources(unittest.TestCase):
    """A tenant's or the admin's key: in the file, as its SHA-256, in a file, or in a variable."""

    def test_keys_from_a_digest_a_file_and_the_environment(self):
        config = base_config()
        config["tenants"] = [
            {"name": "alice", "key_sha256": sha256_hex("alice-key-0001").upper(), "plan": "pro"},
            {"name": "bob", "key_file": "bob.key", "plan": "lite"},  # beside the config file
            {"name": "carol", "key_env": "CREDITLOOP_TEST_CAROL_KEY", "plan": "pro"},
            {"name": "dave", "key": "dave-key-0001", "plan": "lite"},
        ]
        admins = [({"key_sha256": sha256_hex("admin-secret-1")}, {}, {}),
                  ({"key_file": "admin.key"}, {"admin.key": "admin-secret-1"}, {}),  # no newline
                  ({"key_env": "CREDITLOOP_TEST_ADMIN_KEY"}, {},
                   {"CREDITLOOP_TEST_ADMIN_KEY": "admin-secret-1"})]
        for admin, files, env in admins:
            with self.subTest(admin=admin):
                config["admin"] = {"listen": "127.0.0.1:0", **admin}
                server = Server(config, files={"bob.key": "bob-key-00001\n", **files},
                                env={"CREDITLOOP_TEST_CAROL_KEY": "carol-key-001", **env})
                try:
                    for key, name in [("alice-key-0001", "alice"), ("bob-key-00001", "bob"),
                                      ("carol-key-001", "carol"), ("dave-key-0001", "dave")]:
                        res, body = server.request(key, "/work")
                        self.assertEqual(res.status, 200, (name, body))
                        self.assertEqual(json.loads(body)["tenant"], name)
                    res, _ = server.request(sha256_hex("alice-key-0001"), "/work")
                    self.assertEqual(res.status, 401)  # the digest is not a key
                    res, _ = server.admin("/metrics")
                    self.assertEqual(res.status, 401)
                    res, _ = server.admin("/metrics", key="admin-secret-1")
                    self.assertEqual(res.status, 200)
                finally:
                    self.assertEqual(server.stop(), 0, server.log())
                for secret in ["alice-key-0001", "bob-key-00001", "carol-key-001", "admin-secret-1"]:
                    self.assertNotIn(secret, server.log())

    def test_bad_key_sources_name_the_field(self):
        alice = {"name": "alice", "plan": "pro"}
        unset = "CREDITLOOP_TEST_UNSET_VARIABLE"
        os.environ.pop(unset, None)
        cases = [
            ({"key": "alice-key-0001", "key_file": "a.key"}, None,
             "tenants[0].key_file: give one of key, key_sha256, key_file, key_env, not two"),
            ({"key_sha256": sha256_hex("x"), "key_env": "X"}, None,
             "tenants[0].key_env: give one of key, key_sha256, key_file, key_env, not two"),
            ({}, None, "tenants[0].key: is required (or key_sha256, key_file, key_env)"),
            ({"key_sha256": "abc123"}, None, "tenants[0].key_sha256: must be 64 hex digits"),
            ({"key_sha256": "g" * 64}, None, "tenants[0].key_sha256: must be 64 hex digits"),
            ({"key_sha256": 5}, None, "tenants[0].key_sha256: must be a string"),
            ({"key_file": "missing.key"}, None, "tenants[0].key_file: cannot read "),
            ({"key_file": "a.key"}, "", "tenants[0].key_file: the key is empty"),
            ({"key_file": "a.key"}, "\n", "tenants[0].key_file: the key is empty"),
            ({"key_file": "a.key"}, "short\n", "tenants[0].key_file: the key must be at least 8"),
            ({"key_file": "a.key"}, "alice-key-0001\n\n",
             "tenants[0].key_file: the key must not contain white space"),
            ({"key_file": ""}, None, "tenants[0].key_file: must name a file"),
            ({"key_env": unset}, None, f"tenants[0].key_env: {unset} is not set"),
            ({"key_env": "CREDITLOOP_TEST_EMPTY"}, None,
             "tenants[0].key_env: CREDITLOOP_TEST_EMPTY is empty"),
            ({"key_env": ""}, None, "tenants[0].key_env: must name an environment variable"),
            ({"key": ""}, None, "tenants[0].key: the key is empty"),
        ]
        for fields, file_content, message in cases:
            with self.subTest(fields=fields, file=file_content):
                config = base_config()
                config["tenants"][0] = {**alice, **fields}
                files = {} if file_content is None else {"a.key": file_content}
                status, err = check_config(config, files, {"CREDITLOOP_TEST_EMPTY": ""})
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)
                self.assertNotIn("alice-key-0001", err)

        # Two tenants with one key, however each gives it.
        config = base_config()
        config["tenants"][1]["key_sha256"] = sha256_hex("alice-key-0001")
        del config["tenants"][1]["key"]
        status, err = check_config(config)
        self.assertEqual(status, 3, err)
        self.assertIn('tenants[1].key_sha256: is the key of tenant "alice" too', err)

        for admin, message in [
                ({"key": "admin-secret-1", "key_env": "X"},
                 "admin.key_env: give one of key, key_sha256, key_file, key_env, not two"),
                ({"key_sha256": "00"}, "admin.key_sha256: must be 64 hex digits"),
                ({"key_file": "nowhere/admin.key"}, "admin.key_file: cannot read "),
                ({"key_env": unset}, f"admin.key_env: {unset} is not set"),
                ({"key": ""}, "admin.key: the key is empty")]:
            with self.subTest(admin=admin):
                status, err = check_config(base_config(admin={"listen": "127.0.0.1:0", **admin}))
                self.assertEqual(status, 3, err)
                self.assertIn(message, err)

    def test_sighup_rereads_key_files_and_keeps_the_old_keys_when_one_is_bad(self):
        config = base_config()
        config["tenants"][1] = {"name": "bob", "key_file": "bob.key", "plan": "lite"}
        server = Server(config, files={"bob.key": "bob-key-00001\n"})
        try:
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 200)
            server.write_file("bob.key", "bob-key-00002\n")
            server.proc.send_signal(signal.SIGHUP)
            wait_for("reload", lambda: "configuration reloaded" in server.log())
            res, _ = server.request("bob-key-00002", "/work")
            self.assertEqual(res.status, 200)
            res, _ = server.request("bob-key-00001", "/work")
            self.assertEqual(res.status, 401)

            os.remove(os.path.join(server.dir.name, "bob.key"))
            server.proc.send_signal(signal.SIGHUP)
            wait_for("refusal logged", lambda: "reload refused" in server.log())
            self.assertIn("tenants[1].key_file: cannot read ", server.log())
            res, _ = server.request("bob-key-00002", "/work")
            self.assertEqual(res.status, 200)  # the old configuration stays
        finally:
            self.assertEqual(server.stop(), 0, server.log())
        self.assertNotIn("bob-key-0000", server.log())


if __name__ == "__main__":
    server_harness.main()
