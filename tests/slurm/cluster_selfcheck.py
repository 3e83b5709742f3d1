"""Self-check of cluster.py: brings the two-node cluster up, exercises what the
Slurm end-to-end tests rely on, prints what it saw (GPU environment of steps,
devices cgroups, kill latencies), and tears the cluster down.

    python3 tests/slurm/cluster_selfcheck.py BUILD_DIR [--no-cgroups] [--keep] [--skip-timelimit]

The time-limit check alone takes 60-90 s: Slurm rounds --time up to a minute
and slurmctld looks at limits every 30 s.

Exit status: 0 all checks passed, 1 a check failed, 77 prerequisites absent.
"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, ClusterError, require_prerequisites  # noqa: E402

GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES",
            "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_SHARDS_ON_NODE",
            "SLURM_STEP_GRES", "SLURM_JOB_GRES", "SLURM_GRES", "SLURM_TRES_PER_TASK",
            "SLURM_GPUS", "SLURM_TRES_PER_NODE", "SLURMD_NODENAME", "SLURM_JOB_ID",
            "SLURM_STEP_ID")

# What a step prints: its GPU variables, its devices cgroup, and which fake
# GPUs it may open. (devices.list says nothing here: a cgroup v1 whose default
# is "allow" lists only "a *:* rwm", not the denied exceptions Slurm adds.)
PROBE = ("env | grep -E '^(" + "|".join(GPU_VARS) + ")=' | sort; "
         "echo CGROUP=$(grep devices /proc/self/cgroup); "
         # Opening a fake GPU fails either way: ENXIO ("No such device or
         # address", no driver) when the cgroup allows it, EPERM when not.
         "for f in /dev/nvidia*; do echo \"OPEN $f: $( (: < $f) 2>&1 | sed 's/.*: //')\"; done")

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def show(title, text):
    print(f"--- {title}")
    for line in text.strip().splitlines():
        print("    " + line)


def step_vars(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def wait_gone(c, node, needle, timeout=120):
    """Seconds until no process of `node` has `needle` in its command line."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        alive = False
        for pid in c.node_pids(node):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read():
                        alive = True
                        break
            except OSError:
                pass
        if not alive:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def wait_present(c, node, needle, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in c.node_pids(node):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read():
                        return True
            except OSError:
                pass
        time.sleep(0.1)
    return False


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build_dir = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..", "build")
    require_prerequisites()
    workdir = tempfile.mkdtemp(prefix="gs-slurm-")
    c = Cluster(workdir, build_dir,
                use_cgroups=False if "--no-cgroups" in sys.argv else None,
                start_gpusliced=all(os.path.exists(os.path.join(build_dir, p)) for p in
                                    ("bin/gpusliced", "bin/gpuslice", "lib/libgpuslice.so",
                                     "lib/sim/libcuda.so.1", "lib/sim/libnvidia-ml.so.1")))
    print(f"workdir {workdir}; cgroups: {c.use_cgroups}; gpusliced: {c.start_gpusliced}")
    try:
        c.start()
        print(f"cluster up in {c.startup_seconds:.2f} s")
        run_checks(c)
    except Exception as e:  # noqa: BLE001 (report, then still stop the cluster)
        failures.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        print(f"ERROR {e}")
    finally:
        if failures:
            print(c.logs())
        t0 = time.monotonic()
        c.stop()
        print(f"stopped in {time.monotonic() - t0:.2f} s")
        if "--keep" not in sys.argv and not failures:
            shutil.rmtree(workdir, ignore_errors=True)
    print("FAILURES:\n  " + "\n  ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


def run_checks(c):
    r = c.srun("-N2", "hostname")
    check(sorted(r.stdout.split()) == ["gsnode1", "gsnode2"],
          f"srun -N2 hostname: {r.stdout.split()} {r.stderr.strip()}")

    if c.start_gpusliced:
        for name, n in c.nodes.items():
            r = c.gpuslice(name, "gpus", "--json")
            check(r.returncode == 0, f"gpuslice gpus on {name}")
            show(f"gpuslice gpus --json on {name} (configured UUIDs {n.uuids})", r.stdout[:1500])

    for gres in ("gpu:1", "gpu:2", "shard:2", "shard:8"):
        r = c.srun("-w", "gsnode1", f"--gres={gres}", "sh", "-c", PROBE)
        check(r.returncode == 0, f"srun --gres={gres}: rc {r.returncode} {r.stderr.strip()}")
        show(f"--gres={gres}", r.stdout)

    # More shards than one GPU has (8 each): can Slurm 22.05 spread them?
    r = c.srun("-w", "gsnode1", "--immediate=5", "--gres=shard:9", "sh", "-c", PROBE)
    show("--gres=shard:9 (more than one GPU's shards)", f"rc {r.returncode}\n{r.stdout}{r.stderr}")

    # Two single-GPU steps at once: the second must get the other GPU.
    a = c.srun_bg("-w", "gsnode1", "--gres=gpu:1", "sh", "-c", PROBE + "; sleep 3")
    time.sleep(0.5)
    b = c.srun_bg("-w", "gsnode1", "--gres=gpu:1", "sh", "-c", PROBE + "; sleep 3")
    out_a, err_a = a.communicate(timeout=60)
    out_b, err_b = b.communicate(timeout=60)
    show("concurrent --gres=gpu:1 (first)", out_a + err_a)
    show("concurrent --gres=gpu:1 (second)", out_b + err_b)
    va, vb = step_vars(out_a), step_vars(out_b)
    check(a.returncode == 0 and b.returncode == 0 and
          va.get("SLURM_STEP_GPUS") != vb.get("SLURM_STEP_GPUS"),
          "concurrent gpu:1 steps get different GPUs")
    if c.use_cgroups:
        second = vb.get("SLURM_STEP_GPUS", "?")
        other = "0" if second == "1" else "1"
        check(f"OPEN /dev/nvidia{other}: Operation not permitted" in out_b and
              f"OPEN /dev/nvidia{second}: No such device or address" in out_b,
              f"ConstrainDevices: the second step may open nvidia{second} only")

    # Users.
    r = c.srun("--uid=gsslurm_a", "id", "-un")
    show("srun --uid=gsslurm_a id -un (as root)", f"rc {r.returncode}: {r.stdout}{r.stderr}")
    r = c.srun("id", "-un", user="gsslurm_a")
    check(r.returncode == 0 and r.stdout.strip() == "gsslurm_a",
          f"srun as gsslurm_a (runuser): {r.stdout.strip()} {r.stderr.strip()}")
    r = c.srun("--gres=gpu:1", "sh", "-c", PROBE, user="gsslurm_b")
    check(r.returncode == 0, f"srun --gres=gpu:1 as gsslurm_b {r.stderr.strip()}")
    show("--gres=gpu:1 as gsslurm_b", r.stdout)

    out = os.path.join(c.shared_dir, "batch-%j.out")
    t0 = time.monotonic()
    job = c.sbatch("--output", out, "--gres=gpu:1", "--wrap", "id -un; " + PROBE, user="gsslurm_a")
    info = c.wait_job(job, timeout=60)
    path = out.replace("%j", str(job))
    text = open(path).read() if os.path.exists(path) else "(no output file)"
    check(info.get("JobState") == "COMPLETED" and text.startswith("gsslurm_a"),
          f"sbatch --wrap as gsslurm_a: {info.get('JobState')} in {time.monotonic() - t0:.1f} s")
    show(f"batch job {job} output (batch step env)", text)

    # scancel of a running step.
    p = c.srun_bg("-w", "gsnode2", "--job-name=gs-cancel", "sleep", "100")
    check(wait_present(c, "gsnode2", b"sleep\x00100"), "srun sleep 100 running")
    t0 = time.monotonic()
    c.scancel("-n", "gs-cancel")
    gone = wait_gone(c, "gsnode2", b"sleep\x00100")
    gone = gone and time.monotonic() - t0
    p.wait(60)
    check(gone is not None, f"scancel: step processes gone after {gone and round(gone, 2)} s, "
                            f"srun exited after {time.monotonic() - t0:.2f} s (rc {p.returncode})")

    if "--skip-timelimit" not in sys.argv:
        # Time limit: --time=0:05 is rounded up to a whole minute, and slurmctld
        # checks limits on its own period (not configurable in 22.05).
        t0 = time.monotonic()
        p = c.srun_bg("-w", "gsnode2", "--time=0:05", "--job-name=gs-limit", "sleep", "300")
        check(wait_present(c, "gsnode2", b"sleep\x00300"), "srun --time=0:05 sleep 300 running")
        gone = wait_gone(c, "gsnode2", b"sleep\x00300", timeout=200)
        try:
            p.wait(60)
        except Exception:
            pass
        check(gone is not None, f"time limit: processes gone {gone and round(gone, 1)} s after "
                                f"start (srun rc {p.returncode}: {p.stderr.read().strip()[:200]})")

    t0 = time.monotonic()
    c.wait_nodes_idle(30)  # raises ClusterError (a failure) if not
    check(True, f"nodes idle again {time.monotonic() - t0:.2f} s after the last job")

if __name__ == "__main__":
    sys.exit(main())
