"""What the SPANK plugin adds to a step's start (target: <= 50 ms,
median of 20). One real two-node Slurm (tests/slurm/cluster.py), one run:
`srun -w gsnode1 --gres=gpu:1 true` timed 20 times with the plugin in
plugstack.conf and 20 times without, interleaved (srun and each new
slurmstepd read plugstack.conf afresh), so both see the same machine load.

Usage: python3 bench/slurm/srun_overhead.py BUILD_DIR [--runs N] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "slurm"))
import cluster as slurm_cluster  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    slurm_cluster.require_prerequisites()
    build = os.path.realpath(a.build_dir)
    plugin = os.path.join(build, "lib", "libgpuslice_spank.so")
    line = f"required {plugin} shards_per_gpu=8\n"
    work = tempfile.mkdtemp(prefix="gpuslice-slurm-bench-")
    os.chmod(work, 0o755)
    c = slurm_cluster.Cluster(work, build, nodes=1, gpus_per_node=2, plugstack_lines=[line])
    plugstack = os.path.join(c.etc, "plugstack.conf")
    times = {"with": [], "without": []}
    try:
        c.start()
        # Warm-up: the first srun of each kind loads what it needs once.
        for mode in ("with", "without", "with", "without"):
            with open(plugstack, "w") as f:
                f.write(line if mode == "with" else "")
            c.srun("-w", "gsnode1", "--gres=gpu:1", "true", check=True)
        for i in range(2 * a.runs):
            mode = "with" if i % 2 == 0 else "without"
            with open(plugstack, "w") as f:
                f.write(line if mode == "with" else "")
            t0 = time.monotonic()
            r = c.srun("-w", "gsnode1", "--gres=gpu:1", "true")
            times[mode].append((time.monotonic() - t0) * 1000)
            if r.returncode != 0:
                sys.exit(f"srun ({mode} the plugin) failed: {r.stderr}")
        # The plugin really made a slice for each step it ran in.
        slices = [j for j in json.loads(c.gpuslice("gsnode1", "--json", "ps", "-a", "-u").stdout)
                  .get("jobs", []) if j["name"].startswith("slurm-")]
    finally:
        c.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "runs": a.runs,
        "median_ms_with": round(med["with"], 1),
        "median_ms_without": round(med["without"], 1),
        "added_ms": round(med["with"] - med["without"], 1),
        "p90_ms_with": round(sorted(times["with"])[int(0.9 * a.runs) - 1], 1),
        "p90_ms_without": round(sorted(times["without"])[int(0.9 * a.runs) - 1], 1),
        "slices_made": len(slices),
        "load_avg_1m": os.getloadavg()[0],
    }
    print(json.dumps(out, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
