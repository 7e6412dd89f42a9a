#!/usr/bin/env python3
"""ngx_http_creditloop_module's configuration under `nginx -t`: a good one passes, and each bad
one is refused naming the directive and the line.

Usage: test_nginx_configuration.py --module PATH/ngx_http_creditloop_module.so [--nginx PATH]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nginx_harness  # noqa: E402 - nginx with the module on loopback, and main()
from nginx_harness import plans_json, TENANTS, nginx_conf, RefusedConfiguration  # noqa: E402


class BadConfiguration(RefusedConfiguration, unittest.TestCase):
    """`nginx -t` names the directive and the line."""

    def test_good_configuration_passes(self):
        d = tempfile.mkdtemp(prefix="cl-ngx-good-")
        try:
            with open(f"{d}/plans.json", "w") as f:
                f.write(plans_json(TENANTS))
            conf = nginx_conf(d, nginx_harness.ARGS.module, 1, 2, 3).replace(
                "listen 127.0.0.1:2 ssl http2;", "")
            conf = conf.replace(f"ssl_certificate {d}/cert.pem;", "").replace(
                f"ssl_certificate_key {d}/key.pem;", "")
            with open(f"{d}/nginx.conf", "w") as f:
                f.write(conf)
            r = subprocess.run([nginx_harness.ARGS.nginx, "-t", "-p", d, "-e", f"{d}/error.log",
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


if __name__ == "__main__":
    nginx_harness.main()
