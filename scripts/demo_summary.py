"""The demo's last table: for each job, the share of the GPU it was guaranteed,
the part of the GPU's time its requests asked for (demand), what it got, and
its requests' latency, from what this run measured. Nothing is assumed: a
figure the run did not produce is printed as "-".

    python3 scripts/demo_summary.py DIR

DIR (scripts/demo.sh's temporary directory) holds jobs.json (`gpuslice ps
--all --json`), log-<id> (each job's output, `gpuslice logs`) and top.jsonl
(`gpuslice top --json` snapshots taken while the jobs ran, one a line).
"""

import json
import os
import re
import sys

# The demo worker's two report lines (gpuslice-demo-worker --help).
WORK = re.compile(r"\] held .*?, ran (\d+) kernels, GPU time (\d+) ms of (\d+) ms")
REQUESTS = re.compile(
    r"\] requests: demand ([\d.]+)% \((\d+) us every ([\d.]+) ms\), offered (\d+), "
    r"served (\d+), delivered ([\d.]+)% of the offered GPU time; "
    r"latency p50 ([\d.]+) ms, p99 ([\d.]+) ms")


def worker_report(text):
    """The worker's figures from its output, or {} when it printed none."""
    out = {}
    m = WORK.search(text)
    if m and int(m.group(3)) > 0:
        out["got_pct"] = 100.0 * int(m.group(2)) / int(m.group(3))
    m = REQUESTS.search(text)
    if m:
        out.update(demand_pct=float(m.group(1)), offered=int(m.group(4)),
                   served=int(m.group(5)), delivered_pct=float(m.group(6)),
                   p50_ms=float(m.group(7)), p99_ms=float(m.group(8)))
    return out


def nvml_use(lines):
    """Job id -> mean of NVML's per-process GPU use (percent) over the
    snapshots in which the daemon had a figure for it."""
    samples = {}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            snap = json.loads(line)
        except ValueError:
            continue  # A snapshot cut short when the sampler was stopped.
        for gpu in snap.get("gpus", []):
            for s in gpu.get("slices", []):
                pct = s.get("achieved_util_pct")
                if pct is not None:
                    samples.setdefault(s.get("job"), []).append(float(pct))
    return {job: sum(v) / len(v) for job, v in samples.items()}


def pct(x):
    return "-" if x is None else "%.1f%%" % x


def ms(x):
    return "-" if x is None else "%.1f ms" % x


def rows(jobs, logs, nvml):
    """The table's rows (lists of cells) and the notes below it."""
    table = [["job", "share", "demand", "got (own)", "got (NVML)", "delivered", "p50", "p99"]]
    notes = []
    for job in sorted(jobs, key=lambda j: j.get("id", 0)):
        r = worker_report(logs.get(job.get("id"), ""))
        share_milli = job.get("request", {}).get("compute_milli") or 0
        share = share_milli / 10.0 if share_milli else None
        name = job.get("name") or str(job.get("id"))
        table.append([name, pct(share), pct(r.get("demand_pct")), pct(r.get("got_pct")),
                      pct(nvml.get(job.get("id"))), pct(r.get("delivered_pct")),
                      ms(r.get("p50_ms")), ms(r.get("p99_ms"))])
        if "demand_pct" not in r:
            notes.append("%s: no requests ran (%s, exit %s)" %
                         (name, job.get("state", "?"), job.get("exit_code", "?")))
        elif share is not None and "got_pct" in r:
            owed = min(share, r["demand_pct"])
            notes.append("%s: owed %.0f%% of the GPU (its share or its demand, the smaller), "
                         "got %.1f%%: %.0f%% of what it was owed" %
                         (name, owed, r["got_pct"], 100.0 * r["got_pct"] / owed))
    return table, notes


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = argv[1]
    with open(os.path.join(d, "jobs.json")) as f:
        jobs = json.load(f).get("jobs", [])
    logs = {}
    for job in jobs:
        path = os.path.join(d, "log-%s" % job.get("id"))
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                logs[job.get("id")] = f.read()
    top = os.path.join(d, "top.jsonl")
    nvml = {}
    if os.path.exists(top):
        with open(top, errors="replace") as f:
            nvml = nvml_use(f)
    table, notes = rows(jobs, logs, nvml)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("   " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print()
    print("   share: the part of the GPU's time the job is guaranteed (--compute); demand: what its")
    print("   requests ask for; got: the part of the run's time its kernels ran, by its own count")
    print("   and by NVML (the mean of the daemon's once-a-second per-process samples, which lag a")
    print("   short job); delivered: requests completed of those offered; p50/p99: from a request's")
    print("   arrival to its completion.")
    for n in notes:
        print("   " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
