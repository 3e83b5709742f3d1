#!/usr/bin/env python3
"""The shim on a real NVIDIA GPU with PyTorch, in under 3 minutes.

Checks, each in a fresh Python process with libgpuslice.so preloaded and
GPUSLICE_MEMORY_LIMIT=10GiB (standalone slice):
  - the default caching allocator, expandable_segments:True and the
    cudaMallocAsync backend each raise torch's normal OutOfMemoryError past
    the limit, having held no more than the limit (NVML, per process);
  - torch.cuda.mem_get_info() reports the limit as the total;
  - the added cost per launch on a loop of tiny kernels, with and without
    the shim;
  - compute shares (compute_check.py): two processes of bf16 matrix
    products at 30/70 and 10/90, one CUDA-graph run, 50% alone; achieved
    shares from each process's throughput.
Writes $OUT/gpu_check.json (OUT defaults to ./gpu-check-out) and exits 0 when
every check passed, 1 otherwise. Without a GPU or without torch it writes
{"skipped": true, "reason": ...}, says so on stderr and exits 0.
See tests/gpu/README.md.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compute_check  # noqa: E402

GIB = 1 << 30
LIMIT_GIB = 10
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.environ.get("GPUSLICE_SHIM", os.path.join(ROOT, "build", "lib", "libgpuslice.so"))
OUT = os.environ.get("OUT", os.path.join(os.getcwd(), "gpu-check-out"))
CHILD_TIMEOUT_S = 45

# Runs in the child: fill the GPU through torch until it refuses.
FILL = r"""
import json, os, subprocess, sys, torch
assert torch.cuda.is_available()
torch.cuda.init()
held, step, error = [], 512 << 20, None
try:
    while len(held) < 4096:
        held.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:
    error = "OutOfMemoryError"
except Exception as e:  # Anything else is a failure of the check.
    error = type(e).__name__ + ": " + str(e)[:200]
torch.cuda.synchronize()
used = None
try:
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    for line in q.stdout.splitlines():
        pid, mib = [x.strip() for x in line.split(",")]
        if int(pid) == os.getpid():
            used = int(mib) << 20
except Exception:
    pass
print(json.dumps({"error": error, "allocated": len(held) * step,
                  "reserved": torch.cuda.memory_reserved(), "nvml_used": used}))
"""

MEMINFO = r"""
import json, torch
free, total = torch.cuda.mem_get_info()
print(json.dumps({"free": free, "total": total}))
"""

LAUNCH = r"""
import json, time, torch
x = torch.zeros(1, device="cuda")
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
n = 20000
best = None
for _ in range(5):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
    per = (time.perf_counter_ns() - t0) / n
    best = per if best is None else min(best, per)
print(json.dumps({"ns_per_launch": best}))
"""


def write(result):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "gpu_check.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote " + path, file=sys.stderr)


def skip(reason):
    print("gpu check skipped: " + reason, file=sys.stderr)
    write({"skipped": True, "reason": reason})
    sys.exit(0)


def run_child(code, shim, extra_env=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("GPUSLICE_SLICE", None)
    env.pop("GPUSLICE_MEMORY_LIMIT", None)
    if shim:
        env["LD_PRELOAD"] = SHIM
        env["GPUSLICE_MEMORY_LIMIT"] = "%dGiB" % LIMIT_GIB
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="gpuslice-gpu-check-")
        os.chmod(env["XDG_RUNTIME_DIR"], 0o700)
    env.update(extra_env or {})
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": "timed out after %ds" % CHILD_TIMEOUT_S}
    finally:
        if shim:
            shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)
    out = {"seconds": round(time.time() - t0, 2), "exit_code": p.returncode,
           "stderr_tail": p.stderr[-600:]}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        out.update(ok=False, why="child failed")
        return out
    out.update(json.loads(lines[-1]))
    out["ok"] = True
    return out


def check_fill(name, alloc_conf):
    r = run_child(FILL, True, {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf} if alloc_conf else None)
    r["check"] = name
    if r.get("ok"):
        limit = LIMIT_GIB * GIB
        held_ok = r["reserved"] <= limit and (r["nvml_used"] is None or r["nvml_used"] <= limit)
        r["ok"] = r["error"] == "OutOfMemoryError" and held_ok and r["allocated"] >= limit // 2
        if not r["ok"]:
            r["why"] = "expected OutOfMemoryError with at most %d GiB held" % LIMIT_GIB
    return r


def main():
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError or a broken install.
        skip("PyTorch is not importable (%s)" % e)
    import torch
    if not torch.cuda.is_available():
        skip("no NVIDIA GPU visible to PyTorch")
    if not os.path.exists(SHIM):
        skip("%s does not exist: build first (scripts/build.sh) or set GPUSLICE_SHIM" % SHIM)
    props = torch.cuda.get_device_properties(0)
    if props.total_memory < (LIMIT_GIB + 2) * GIB:
        skip("GPU 0 has %.1f GiB, the check needs more than %d GiB" %
             (props.total_memory / GIB, LIMIT_GIB + 2))

    started = time.time()
    checks = [
        check_fill("caching_allocator_oom", None),
        check_fill("expandable_segments_oom", "expandable_segments:True"),
        check_fill("cuda_malloc_async_oom", "backend:cudaMallocAsync"),
    ]
    info = run_child(MEMINFO, True)
    info["check"] = "mem_get_info_reports_limit"
    if info.get("ok"):
        info["ok"] = info["total"] == LIMIT_GIB * GIB and info["free"] <= LIMIT_GIB * GIB
    checks.append(info)

    bare = run_child(LAUNCH, False)
    shimmed = run_child(LAUNCH, True)
    launch = {"check": "launch_cost", "ok": bool(bare.get("ok") and shimmed.get("ok"))}
    if launch["ok"]:
        launch["ns_per_launch_without_shim"] = round(bare["ns_per_launch"], 1)
        launch["ns_per_launch_with_shim"] = round(shimmed["ns_per_launch"], 1)
        launch["ns_added_per_launch"] = round(shimmed["ns_per_launch"] - bare["ns_per_launch"], 1)
    else:
        launch["details"] = {"without": bare, "with": shimmed}
    checks.append(launch)
    checks.extend(compute_check.run_compute_checks(SHIM, extended="--extended" in sys.argv[1:]))

    result = {
        "skipped": False,
        "gpu": props.name,
        "gpu_total_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "limit_bytes": LIMIT_GIB * GIB,
        "shim": SHIM,
        "seconds": round(time.time() - started, 1),
        "checks": checks,
        "passed": all(c.get("ok") for c in checks),
    }
    write(result)
    for c in checks:
        print("%-32s %s" % (c["check"], "ok" if c.get("ok") else "FAILED " + c.get("why", "")),
              file=sys.stderr)
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
