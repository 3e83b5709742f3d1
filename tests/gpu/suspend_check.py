#!/usr/bin/env python3
"""Suspend and resume on a real NVIDIA GPU (docs/SUSPEND.md).

A PyTorch process (libgpuslice.so preloaded, a standalone slice) holds
--gib GiB of tensors (20 by default) and trains a small model. This script
suspends it through the driver's process checkpoint API, as gpusliced does
(cuCheckpointProcessLock + Checkpoint: its device memory to host memory),
checks that NVML no longer lists the process, restores and unlocks it, and
has the process verify every tensor (checksums taken before) and go on
training. In the same run the process copies the same bytes device -> host
-> device (pageable host memory, as the checkpoint's), the figure the
project's target compares against: suspend + resume <= 1.5 x that copy.

Writes $OUT/gpu_suspend_check.json and exits 0 when every check passed, 1
otherwise. Without a GPU, torch, or a driver with the checkpoint API (CUDA
12.8 / driver 570 and later) it writes {"skipped": true, "reason": ...} and
exits 0. Not part of CTest (CI has no GPU). See tests/gpu/README.md.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.environ.get("GPUSLICE_SHIM", os.path.join(ROOT, "build", "lib", "libgpuslice.so"))
OUT = os.environ.get("OUT", os.path.join(os.getcwd(), "gpu-check-out"))

# The process being suspended. Commands on stdin, one JSON line per answer.
WORKER = r"""
import json, sys, time, torch
gib = int(sys.argv[1])
torch.manual_seed(1234)
dev = "cuda"
# gib - 1 tensors of 1 GiB of data, plus a model and its optimizer state.
chunks = [torch.randn((1 << 28,), device=dev) for _ in range(gib - 1)]
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 4096)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(256, 4096, device=dev)
y = torch.randn(256, 4096, device=dev)
def sums():
    torch.cuda.synchronize()
    return [float(c.double().sum()) for c in chunks] + \
           [float(p.double().sum()) for p in model.parameters()]
def train(steps):
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return float(loss)
def copy_round_trip():
    # The same bytes device -> pageable host -> device, timed.
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    host = [c.to("cpu") for c in chunks]
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    for c, h in zip(chunks, host):
        c.copy_(h)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1
train(5)
print(json.dumps({"ready": True, "held_bytes": torch.cuda.memory_allocated()}), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "sums":
        print(json.dumps({"sums": sums()}), flush=True)
    elif cmd == "train":
        print(json.dumps({"loss": train(20)}), flush=True)
    elif cmd == "copy":
        d2h, h2d = copy_round_trip()
        print(json.dumps({"d2h_s": d2h, "h2d_s": h2d}), flush=True)
    elif cmd == "exit":
        break
"""


def skip(reason):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "gpu_suspend_check.json"), "w") as f:
        json.dump({"skipped": True, "reason": reason}, f, indent=2)
    print("suspend_check: skipped: " + reason, file=sys.stderr)
    return 0


class Driver:
    """The checkpoint calls of libcuda.so.1, called on another process."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint",
                     "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
                     "cuCheckpointProcessGetState"):
            if not hasattr(self.lib, name):
                raise OSError("the driver has no " + name + " (needs CUDA 12.8 / driver 570+)")
        rc = self.lib.cuInit(0)
        if rc != 0:
            raise OSError("cuInit failed: %d" % rc)

    def call(self, name, pid, *args):
        rc = getattr(self.lib, name)(ctypes.c_int(pid), *args)
        if rc != 0:
            raise RuntimeError("%s(%d) returned CUresult %d" % (name, pid, rc))

    def state(self, pid):
        st = ctypes.c_int(-1)
        self.call("cuCheckpointProcessGetState", pid, ctypes.byref(st))
        return st.value  # 0 running, 1 locked, 2 checkpointed, 3 failed


def nvml_lists(pid):
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True,
                       timeout=30)
    for line in q.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if parts and parts[0] == str(pid):
            return int(parts[1]) << 20
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        if not torch.cuda.is_available():
            return skip("no CUDA GPU visible to torch")
    except ImportError:
        return skip("torch is not installed")
    try:
        drv = Driver()
    except OSError as e:
        return skip(str(e))

    env = dict(os.environ)
    tmp = tempfile.mkdtemp(prefix="gpuslice-suspend-check-")
    env.update({"LD_PRELOAD": SHIM, "GPUSLICE_MEMORY_LIMIT": "%dGiB" % (args.gib + 8),
                "XDG_RUNTIME_DIR": tmp})
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(args.gib)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(cmd):
        proc.stdin.write(cmd + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    result = {"gib": args.gib, "reps": args.reps, "checks": {}}
    ok = True
    try:
        ready = json.loads(proc.stdout.readline())
        result["held_bytes"] = ready["held_bytes"]
        before = ask("sums")["sums"]
        copies = [ask("copy") for _ in range(args.reps)]
        result["copy_d2h_s"] = sorted(c["d2h_s"] for c in copies)[len(copies) // 2]
        result["copy_h2d_s"] = sorted(c["h2d_s"] for c in copies)[len(copies) // 2]
        after_copy = ask("sums")["sums"]
        suspends, resumes, freed = [], [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            drv.call("cuCheckpointProcessLock", proc.pid, None)
            drv.call("cuCheckpointProcessCheckpoint", proc.pid, None)
            suspends.append(time.perf_counter() - t0)
            freed.append(drv.state(proc.pid) == 2 and nvml_lists(proc.pid) is None)
            t0 = time.perf_counter()
            drv.call("cuCheckpointProcessRestore", proc.pid, None)
            drv.call("cuCheckpointProcessUnlock", proc.pid, None)
            resumes.append(time.perf_counter() - t0)
        after = ask("sums")["sums"]
        loss = ask("train")["loss"]
        gib = result["held_bytes"] / GIB
        result["suspend_s"] = sorted(suspends)[len(suspends) // 2]
        result["resume_s"] = sorted(resumes)[len(resumes) // 2]
        result["suspend_s_per_gib"] = result["suspend_s"] / gib
        result["resume_s_per_gib"] = result["resume_s"] / gib
        copy = result["copy_d2h_s"] + result["copy_h2d_s"]
        result["copy_gib_per_s"] = 2 * (args.gib - 1) / copy
        result["ratio"] = (result["suspend_s"] + result["resume_s"]) / copy
        result["checks"] = {
            "nvml_shows_memory_free": all(freed),
            "checksums_equal": after == before and after_copy == before,
            "training_continues": loss == loss and loss < 1e6,
            "ratio_at_most_1_5": result["ratio"] <= 1.5,
        }
        result["loss_after"] = loss
        ok = all(result["checks"].values())
    except Exception as e:  # A failed call is a failed check, with its reason.
        result["error"] = type(e).__name__ + ": " + str(e)
        ok = False
    finally:
        try:
            ask("exit")
        except Exception:
            pass
        proc.kill()
        proc.wait()
    result["passed"] = ok
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "gpu_suspend_check.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
