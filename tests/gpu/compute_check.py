"""Compute shares on a real GPU (issue 4), part of check.py; also runs alone.

Two PyTorch processes run loops of bf16 matrix products (8192 x 8192) at
once, each in its own standalone slice with a compute share
(GPUSLICE_COMPUTE_SHARE, hard cap), coordinated through one directory
(GPUSLICE_COORD_DIR). The share each achieved is its throughput (products per
second over the same window) divided by the throughput of one process alone
on the GPU without the shim. Scenarios: 30/70, 10/90, 30/70 replaying a CUDA
graph of the products, and 50% alone (a hard cap holds alone too).

A check passes when every tenant is within TOLERANCE_PP of its share. Alone,
the throughput per busy second is not the baseline's: a GPU busy half the
time runs cooler and at higher clocks than one saturated by matrix products,
so a tenant alone is judged by the GPU's busy time instead (NVML's
utilisation averaged over the window, through pynvml when it is installed),
and its throughput-based figure and the mean SM clock are reported beside it.

    python3 tests/gpu/compute_check.py      # writes $OUT/gpu_compute_check.json
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

TOLERANCE_PP = 5.0
MEASURE_S = 8.0
CHILD_TIMEOUT_S = 60

# Runs in each tenant: products in batches of 8, synchronising every 4
# batches (a training step), timed over MEASURE_S from a common start.
MATMUL = r"""
import json, os, sys, time, torch
n, seconds = 8192, float(os.environ["GC_SECONDS"])
ready, go = os.environ["GC_READY"], os.environ["GC_GO"]
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
per_batch = 8
def batch():
    for _ in range(per_batch):
        torch.matmul(a, b, out=c)
run = batch
if os.environ.get("GC_GRAPH") == "1":
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        batch()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        batch()
    run = g.replay
for _ in range(3):
    run()
torch.cuda.synchronize()
open(ready, "w").close()
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.002)
t0 = time.perf_counter()
done, k = 0, 0
while time.perf_counter() - t0 < seconds:
    run()
    done += per_batch
    k += 1
    if k % 4 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0
print(json.dumps({"products": done, "seconds": elapsed, "rate": done / elapsed}))
"""


def run_tenants(shim, tenants, graph=False):
    """Runs one child per tenant (share in percent, or None: no shim) at once.

    Returns a list of result dicts (rate = products per second), or raises
    RuntimeError with the reason.
    """
    work = tempfile.mkdtemp(prefix="gpuslice-compute-check-")
    os.chmod(work, 0o700)
    procs = []
    try:
        for i, share in enumerate(tenants):
            env = dict(os.environ)
            for k in ("LD_PRELOAD", "GPUSLICE_SLICE", "GPUSLICE_MEMORY_LIMIT",
                      "GPUSLICE_COMPUTE_SHARE", "GPUSLICE_COMPUTE_MODE", "GPUSLICE_PRIORITY"):
                env.pop(k, None)
            env.update(GC_SECONDS=str(MEASURE_S), GC_READY=os.path.join(work, "ready%d" % i),
                       GC_GO=os.path.join(work, "go"), GC_GRAPH="1" if graph else "0")
            if share is not None:
                env.update(LD_PRELOAD=shim, XDG_RUNTIME_DIR=work, GPUSLICE_COORD_DIR=work,
                           GPUSLICE_SLICE=os.path.join(work, "t%d.region" % i),
                           GPUSLICE_COMPUTE_SHARE=str(share), GPUSLICE_COMPUTE_MODE="hard")
            procs.append(subprocess.Popen([sys.executable, "-c", MATMUL], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        # Start the timed loops together, once every tenant is warm.
        deadline = time.time() + CHILD_TIMEOUT_S
        while not all(os.path.exists(os.path.join(work, "ready%d" % i))
                      for i in range(len(tenants))):
            if time.time() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("a tenant did not get ready: " + tail(procs))
            time.sleep(0.01)
        open(os.path.join(work, "go"), "w").close()
        sampler = GpuSampler()
        sampler.start()
        results = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=CHILD_TIMEOUT_S)
                lines = [l for l in out.splitlines() if l.startswith("{")]
                if p.returncode != 0 or not lines:
                    raise RuntimeError("tenant failed (exit %s): %s" % (p.returncode, err[-600:]))
                results.append(json.loads(lines[-1]))
        finally:
            sampler.stop()
        for r in results:
            r["gpu"] = sampler.summary()
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


class GpuSampler(threading.Thread):
    """GPU 0's utilisation and SM clock every 100 ms (pynvml), over the
    measurement window (its first 0.5 s and last 0.3 s left out)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = []
        self.done = threading.Event()
        self.t0 = time.time()

    def run(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            return
        while not self.done.wait(0.1):
            t = time.time() - self.t0
            if 0.5 <= t <= MEASURE_S - 0.3:
                try:
                    util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                    clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                    self.samples.append((util, clock))
                except Exception:
                    return

    def stop(self):
        self.done.set()
        self.join(timeout=5)

    def summary(self):
        if not self.samples:
            return None
        n = len(self.samples)
        return {"busy_pct": round(sum(u for u, _ in self.samples) / n, 1),
                "sm_clock_mhz": round(sum(c for _, c in self.samples) / n), "samples": n}


def tail(procs):
    for p in procs:
        if p.poll() is not None and p.returncode != 0:
            return p.stderr.read()[-600:]
    return "timed out"


def scenario(shim, name, shares, alone_rate, graph=False):
    started = time.time()
    out = {"check": "compute_" + name, "targets_pct": shares}
    try:
        results = run_tenants(shim, shares, graph)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        out.update(ok=False, why=str(e))
        return out
    achieved = [round(100.0 * r["rate"] / alone_rate, 1) for r in results]
    gpu = results[0].get("gpu")
    out["gpu"] = gpu
    judged = achieved
    if len(shares) == 1:
        out["throughput_pct"] = achieved
        if gpu is None:
            out.update(ok=False, why="alone, the busy time is needed and pynvml is not available")
            return out
        judged = [gpu["busy_pct"]]
    errors = [abs(a - s) for a, s in zip(judged, shares)]
    out.update(achieved_pct=judged, rates=[round(r["rate"], 1) for r in results],
               mae_pp=round(sum(errors) / len(errors), 2), max_error_pp=round(max(errors), 2),
               aggregate_pct=round(sum(achieved), 1), seconds=round(time.time() - started, 1))
    out["ok"] = max(errors) <= TOLERANCE_PP
    if not out["ok"]:
        out["why"] = "a tenant is more than %.0f pp from its share" % TOLERANCE_PP
    return out


def run_compute_checks(shim):
    """The compute-share checks, as check.py's list entries."""
    started = time.time()
    try:
        alone = run_tenants(shim, [None])[0]
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return [{"check": "compute_baseline", "ok": False, "why": str(e)}]
    checks = [{"check": "compute_baseline", "ok": True, "rate": round(alone["rate"], 1),
               "tflops": round(alone["rate"] * 2 * 8192 ** 3 / 1e12, 1), "gpu": alone.get("gpu")}]
    rate = alone["rate"]
    checks.append(scenario(shim, "30_70_hard", [30, 70], rate))
    checks.append(scenario(shim, "10_90_hard", [10, 90], rate))
    checks.append(scenario(shim, "30_70_hard_cuda_graph", [30, 70], rate, graph=True))
    checks.append(scenario(shim, "50_alone_hard", [50], rate))
    checks[0]["seconds_all"] = round(time.time() - started, 1)
    return checks


def main():
    try:
        import torch
    except Exception as e:  # ImportError or a broken install.
        print("compute check skipped: PyTorch is not importable (%s)" % e, file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("compute check skipped: no NVIDIA GPU visible to PyTorch", file=sys.stderr)
        return 0
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shim = os.environ.get("GPUSLICE_SHIM", os.path.join(root, "build", "lib", "libgpuslice.so"))
    if not os.path.exists(shim):
        print("compute check skipped: %s does not exist" % shim, file=sys.stderr)
        return 0
    checks = run_compute_checks(shim)
    out = os.environ.get("OUT", os.path.join(os.getcwd(), "gpu-check-out"))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gpu_compute_check.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "shim": shim, "checks": checks,
                   "passed": all(c.get("ok") for c in checks)}, f, indent=2)
    for c in checks:
        print("%-32s %s %s" % (c["check"], "ok" if c.get("ok") else "FAILED " + c.get("why", ""),
                               c.get("achieved_pct", "")), file=sys.stderr)
    return 0 if all(c.get("ok") for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
