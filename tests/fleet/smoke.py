#!/usr/bin/env python3
"""fleet_sim.smoke: creditloop-fleet-sim on a small fleet (10 servers, 100 tenants), checking the
properties docs/fleet.md states: each saturating tenant gets its plan fleet-wide in steady state,
moved tenants converge within a few epochs, an outage over-grants no more than one burst per
window, a seed gives the same output byte for byte, and the configuration the output reports
reads back as the same run."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

EPOCH_MS = 250
CONFIG = {
    "servers": 10, "tenants": 100, "epoch_ms": EPOCH_MS, "duration_s": 12, "warmup_s": 2,
    "plans": [{"name": "p200", "rate": 200, "burst": 100, "weight": 1}],
    "spread": [0.5, 0.3, 0.2], "saturating_load": 2, "saturating_fraction": 0.8,
    "change": "shift", "change_at_s": 6, "shift_fraction": 0.2,
}
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(binary, config_path, *extra):
    out = subprocess.run([binary, "-c", config_path, *extra], check=True, capture_output=True,
                         text=True, timeout=120)
    return out.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, "smoke.json")
        with open(config_path, "w") as f:
            json.dump(CONFIG, f)
        first = run(args.sim, config_path)
        second = run(args.sim, config_path)
        check(first == second, "the same seed gives the same output")
        other = run(args.sim, config_path, "--seed", "2")
        check(first != other, "another seed gives another run")
        r = json.loads(first)

        # Every field the output reports is one a configuration file may set: the reported
        # configuration, read back, is the same run.
        echoed_path = os.path.join(tmp, "echoed.json")
        with open(echoed_path, "w") as f:
            json.dump(r["config"], f)
        echoed = subprocess.run([args.sim, "-c", echoed_path], capture_output=True, text=True,
                                timeout=120)
        same = echoed.returncode == 0 and echoed.stdout == first
        check(same, "the reported configuration reads back as the same run" +
              ("" if same else f" ({echoed.stderr.strip()})"))

        share = r["steady"]["saturating_share"]
        check(share["count"] >= 40, f"{share['count']} saturating tenants measured in steady state")
        check(0.9 <= share["min"] and share["max"] <= 1.1,
              f"steady state: every saturating tenant's fleet-wide P1 rate within 10 % of plan "
              f"(min {share['min']:.3f}, max {share['max']:.3f})")
        # Without apportioning a tenant on m servers would get up to m plans.
        check(r["steady"]["over_grant"]["excess_beyond_burst"] == 0,
              "steady state: no window above plan by more than one burst")

        change = r["change"]
        check(change["moved_saturating"] >= 5, f"{change['moved_saturating']} saturating tenants moved")
        check(change["converged"] == change["in_band_before"] == change["moved_saturating"],
              f"every moved tenant converged again ({change['converged']} of "
              f"{change['moved_saturating']})")
        limit = 4 * EPOCH_MS / 1000
        check(change["convergence_s"]["max"] <= limit,
              f"convergence after the shift within 4 epochs "
              f"(max {change['convergence_s']['max']} s, limit {limit} s)")

        outage = json.loads(run(args.sim, config_path, "--change", "none", "--outage-at", "4",
                                "--outage", "3"))
        check(outage["failed_calls"] > 0 and outage["fallbacks"] == CONFIG["servers"],
              "a 3 s outage (grace 2 s): every server fell back to 1/n")
        g = outage["outage"]["over_grant"]
        check(g["excess_beyond_burst"] <= 0.001 * g["planned"],
              f"outage: over-grant beyond one burst per window at most 0.1 % of plan "
              f"({g['excess_beyond_burst']} of {g['planned']})")
        check(g["excess_fraction"] <= 0.02,
              f"outage: over-grant above plan at most 2 % of plan ({g['excess_fraction']:.4f})")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
