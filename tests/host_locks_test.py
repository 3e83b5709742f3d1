#!/usr/bin/env python3
"""Tests that change the host, and tests that check the host is left as it
was, never run side by side (ctest -j): each pair shares a RESOURCE_LOCK.

The Slurm clusters make /run/gpuslice on the host (their nodes' mount point,
tests/slurm/cluster.py); the Kubernetes cluster test fails when a folder it
watches changes while it runs. Read from ctest's own list of the tests, so
that a renamed test or a dropped lock fails here, not by chance in CI.

  python3 tests/host_locks_test.py BUILD_DIR
"""

import json
import subprocess
import sys

# (test that checks the host, tests that change what it checks)
PAIRS = [
    ("kubernetes_cluster_e2e", ["slurm_cluster_selfcheck", "slurm_e2e"]),
]


def locks_by_test(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    locks = {}
    for test in json.loads(out)["tests"]:
        held = set()
        for prop in test.get("properties", []):
            if prop["name"] == "RESOURCE_LOCK":
                held.update(prop["value"])
        locks[test["name"]] = held
    return locks


def main():
    locks = locks_by_test(sys.argv[1])
    problems = []
    for checker, changers in PAIRS:
        if checker not in locks:
            continue  # Not built here (no Kubernetes): nothing runs beside it.
        for changer in changers:
            if changer in locks and not locks[checker] & locks[changer]:
                problems.append(f"{checker} and {changer} share no RESOURCE_LOCK: ctest may run "
                                f"them side by side, and {changer} changes the host {checker} "
                                f"checks")
    for p in problems:
        print(p)
    print("the host's tests take turns" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
