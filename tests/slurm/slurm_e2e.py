"""gpuslice under a real Slurm (docs/SLURM.md): Debian's slurmctld,
two slurmd nodes in their own namespaces (tests/slurm/cluster.py), each with
its own gpusliced on simulated GPUs, and the SPANK plugin in plugstack.conf.
Jobs run as two unprivileged users, with CUDA programs (tests/shim) under the
shim the plugin puts into their environment.

Usage: slurm_e2e.py BUILD_DIR [TEST ...]   (exit 77: Slurm or root missing)

Every check asserts on what Slurm, the daemons and the programs report; on a
failure the daemons' logs are printed. "No slice outlives its step by more
than 2 s" is measured in each test that ends a step: the slice's end time
(the daemon's clock) against the moment the step was seen gone.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as slurm_cluster  # noqa: E402

GIB = 1 << 30
GROUP = "gsslurm"  # gpusliced's socket group: the users' steps reach it.
USER_A, USER_B = slurm_cluster.TEST_USERS
MAX_SLICE_LAG_S = 2.0  # The bound: a slice outlives its step by at most this.


def ensure_group():
    """The socket group with both test users in it (idempotent, locked like
    the users themselves)."""
    slurm_cluster.ensure_test_users()
    import fcntl
    with open("/tmp/.gpuslice-slurm-users.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(["getent", "group", GROUP], capture_output=True).returncode != 0:
            retry_locked(["groupadd", "-r", GROUP])
        for u in (USER_A, USER_B):
            groups = subprocess.run(["id", "-nG", u], capture_output=True, text=True).stdout
            if GROUP not in groups.split():
                retry_locked(["usermod", "-a", "-G", GROUP, u])


def retry_locked(argv):
    """Runs a shadow-utils command, again while another program (the
    security suite's fixture) holds /etc/passwd's or /etc/group's lock."""
    for _ in range(50):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode == 0:
            return
        if "lock" not in r.stderr:
            break
        time.sleep(0.1)
    raise AssertionError(f"{' '.join(argv)}: {r.stderr.strip()}")


class Api:
    """GET/POST on a node's gpusliced as root, over its socket (the node's
    /run/gpuslice is a folder of the host)."""

    def __init__(self, node):
        self.path = os.path.join(node.run_dir, "gpuslice.sock")

    def call(self, method, target, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(self.path)
            s.sendall(f"{method} {target} HTTP/1.1\r\nHost: gpusliced\r\nConnection: close\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                      .encode() + data)
            raw = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
        head, _, payload = raw.partition(b"\r\n\r\n")
        if b"transfer-encoding: chunked" in head.lower():
            out, rest = b"", payload
            while rest:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line, 16)
                if size == 0:
                    break
                out, rest = out + rest[:size], rest[size + 2:]
            payload = out
        status = int(head.split(b" ")[1])
        return status, (json.loads(payload) if payload.strip() else {})

    def jobs(self):
        return self.call("GET", "/v1/jobs?all=1&limit=0")[1]["jobs"]

    def slices_of(self, slurm_job):
        return [j for j in self.jobs() if j.get("labels", {}).get("slurm_job") == str(slurm_job)]


class Suite:
    def __init__(self, build_dir):
        self.build = os.path.realpath(build_dir)
        self.bin = os.path.join(self.build, "bin")
        self.plugin = os.path.join(self.build, "lib", "libgpuslice_spank.so")
        self.probe = os.path.join(self.bin, "shim_probe")
        self.worker = os.path.join(self.bin, "compute_worker")
        for p in (self.plugin, self.probe, self.worker):
            if not os.path.exists(p):
                sys.exit(f"{p} is missing: build the project first (scripts/build.sh)")
        self.work = tempfile.mkdtemp(prefix="gpuslice-slurm-")
        os.chmod(self.work, 0o755)
        self.c = slurm_cluster.Cluster(
            self.work, self.build, nodes=2, gpus_per_node=2, shards_per_gpu=8,
            plugstack_lines=[f"required {self.plugin} shards_per_gpu=8"],
            gpusliced_args=["--set", f"socket_group={GROUP}", "--set", "slurm_only=true"])
        self.api = {}

    def start(self):
        self.c.start()
        self.api = {name: Api(n) for name, n in self.c.nodes.items()}

    def stop(self):
        self.c.stop()

    # --- helpers ---------------------------------------------------------

    def srun(self, *args, user=USER_A, timeout=60):
        return self.c.srun(*args, user=user, timeout=timeout)

    @staticmethod
    def kv(text):
        out = {}
        for line in text.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip()
        return out

    def wait_for(self, what, pred, timeout=20, interval=0.05):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(interval)

    def running_slice(self, node, slurm_job, timeout=20):
        return self.wait_for(
            f"a running slice for Slurm job {slurm_job} on {node}",
            lambda: next((j for j in self.api[node].slices_of(slurm_job)
                          if j["state"] == "running"), None), timeout)

    def slurm_job_of_bg(self, proc_user, name):
        """The id of the newest job named `name` of `proc_user` (squeue)."""
        def find():
            r = self.c.run_client(["squeue", "-h", "-u", proc_user, "-n", name, "-o", "%i"])
            ids = [int(x) for x in r.stdout.split()]
            return max(ids) if ids else None
        return self.wait_for(f"Slurm job {name}", find)

    def background_step(self, node, name, user, *args):
        """`srun -w NODE -J NAME ARGS` as `user` in the background, once its
        slice runs: (the srun Popen, its Slurm job id, its slice)."""
        p = self.c.srun_bg("-w", node, "-J", name, *args, user=user)
        job = self.slurm_job_of_bg(user, name)
        return p, job, self.running_slice(node, job)

    def slice_ended_within(self, node, slice_id, gone_at_s, what):
        """Waits for the slice to end; asserts it ended at most
        MAX_SLICE_LAG_S after `gone_at_s` (wall time the step was seen gone),
        by the daemon's own end time. Returns the lag."""
        def ended():
            _, j = self.api[node].call("GET", f"/v1/jobs/{slice_id}")
            return j if j.get("state") not in ("running", "queued") else None
        j = self.wait_for(f"slice {slice_id} to end ({what})", ended, timeout=10)
        lag = j["ended_ms"] / 1000.0 - gone_at_s
        assert lag <= MAX_SLICE_LAG_S, f"{what}: slice {slice_id} outlived its step by {lag:.2f} s"
        return lag

    # --- the tests -------------------------------------------------------

    def test_memory_cap(self):
        """srun --gres=gpu:1 --gpu-mem=4G: the program sees a 4 GiB GPU and
        is refused past it; the slice is the user's, labelled with the job,
        and gone when the step is."""
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=4G", "-J", "memcap",
                      self.probe, "info")
        assert r.returncode == 0, r.stdout + r.stderr
        info = self.kv(r.stdout)
        assert int(info["mem_total"]) == 4 * GIB, info
        assert info["uuid0"] in self.c.nodes["gsnode1"].uuids, info
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=4G", self.probe, "alloc",
                      "alloc", str(5 * GIB))
        assert self.kv(r.stdout).get("result") == "2", r.stdout + r.stderr  # OUT_OF_MEMORY
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=4G", self.probe, "alloc",
                      "alloc", str(3 * GIB))
        returned = time.time()
        assert self.kv(r.stdout).get("result") == "0", r.stdout + r.stderr
        mine = [j for j in self.api["gsnode1"].jobs() if j["name"].startswith("slurm-")]
        assert len(mine) == 3, mine
        for j in mine:
            assert j["user"] == USER_A, j
            assert j["mode"] == "external" and j["labels"]["slurm_step"] == "0", j
            assert j["allocation"]["memory_bytes_per_gpu"] == 4 * GIB, j
        # The last step's slice ended with its step.
        last = max(mine, key=lambda j: j["id"])
        lag = self.slice_ended_within("gsnode1", last["id"], returned, "step end")
        return f"{len(mine)} slices, each 4 GiB; released {lag:+.2f} s after srun returned"

    def test_second_gpu_by_device_node(self):
        """With one GPU busy, a gpu:1 step gets /dev/nvidia1; under
        ConstrainDevices its CUDA_VISIBLE_DEVICES says 0 (renumbered), yet its
        slice is on the second GPU: matched by device node, not by index."""
        p, job, first = self.background_step("gsnode1", "first", USER_B, "--gres=gpu:1",
                                             "sleep", "60")
        try:
            r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=2G", "sh", "-c",
                          f"echo STEP_GPUS=$SLURM_STEP_GPUS; {self.probe} info")
        finally:
            self.c.scancel(str(job))
            p.wait(timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        info = self.kv(r.stdout)
        uuids = self.c.nodes["gsnode1"].uuids
        assert first["allocation"]["gpu_uuids"] == [uuids[0]], first
        assert info["STEP_GPUS"] == "1", info
        assert info["uuid0"] == uuids[1] and int(info["mem_total"]) == 2 * GIB, info
        return f"SLURM_STEP_GPUS=1 -> {info['uuid0']} (cgroups: {self.c.use_cgroups})"

    def test_shares_30_70(self):
        """Two steps on one GPU at 30% and 70% get about that (launch counts
        of identical 1 ms kernels, tolerant bounds)."""
        results = {}

        def run(share):
            results[share] = self.srun(
                "-w", "gsnode2", "--gres=shard:4", f"--gpu-share={share}", "--gpu-mem=8G",
                "-J", f"share{share}", self.worker, "--seconds", "6", "--kernel-us", "1000",
                timeout=90)
        threads = [threading.Thread(target=run, args=(s,)) for s in (30, 70)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        launches = {}
        for share, r in results.items():
            assert r.returncode == 0, f"{share}%: {r.stdout}{r.stderr}"
            launches[share] = json.loads(r.stdout.strip().splitlines()[-1])["launches"]
        slices = [j for j in self.api["gsnode2"].jobs()
                  if j["name"].startswith("slurm-") and j["allocation"]["compute_milli"] in
                  (300, 700)]
        gpus = {j["allocation"]["gpu_uuids"][0] for j in slices[-2:]}
        assert len(gpus) == 1, f"Slurm put the two shard steps on different GPUs: {gpus}"
        ratio = launches[30] / float(launches[30] + launches[70])
        assert 0.2 <= ratio <= 0.4, f"30% step got {ratio:.3f} of the launches ({launches})"
        return f"30% step: {ratio:.3f} of the work ({launches})"

    def test_sbatch(self):
        """sbatch with the options: the batch step and a step inside it share
        the batch's slice (one slice, 4 GiB)."""
        out = os.path.join(self.c.shared_dir, "batch-%j.out")
        job = self.c.sbatch("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=4G", "-o", out,
                            "--wrap", f"{self.probe} info && srun {self.probe} info",
                            user=USER_A)
        state = self.c.wait_job(job, timeout=60)
        text = open(out.replace("%j", str(job))).read()
        assert state.get("JobState") == "COMPLETED", f"{state}\n{text}"
        totals = [line for line in text.splitlines() if line.startswith("mem_total=")]
        assert totals == [f"mem_total={4 * GIB}"] * 2, text
        slices = self.api["gsnode1"].slices_of(job)
        assert len(slices) == 1 and slices[0]["labels"]["slurm_step"] == "batch", slices
        assert slices[0]["state"] == "exited", slices
        return f"job {job}: batch step and its srun step on one 4 GiB slice"

    def test_two_nodes(self):
        """srun -N2: a slice on each node, on that node's GPU."""
        r = self.srun("-N2", "--gres=gpu:1", "--gpu-mem=2G", "-l", self.probe, "info")
        assert r.returncode == 0, r.stdout + r.stderr
        uuids = {line.split("uuid0=")[1] for line in r.stdout.splitlines() if "uuid0=" in line}
        totals = {line.split("mem_total=")[1] for line in r.stdout.splitlines()
                  if "mem_total=" in line}
        assert totals == {str(2 * GIB)}, r.stdout
        assert len(uuids) == 2 and all(
            any(u in n.uuids for n in self.c.nodes.values()) for u in uuids), uuids
        job = max(int(j["labels"]["slurm_job"]) for j in self.api["gsnode1"].jobs()
                  if "slurm_job" in j.get("labels", {}))
        for node in ("gsnode1", "gsnode2"):
            assert len(self.api[node].slices_of(job)) == 1, (node, self.api[node].slices_of(job))
        return f"job {job}: one slice on each node"

    def test_scancel(self):
        """scancel frees the slice within 2 s."""
        p, job, s = self.background_step(
            "gsnode2", "tocancel", USER_A, "--gres=gpu:1", "--gpu-mem=2G", "sleep", "100")
        self.c.scancel(str(job))
        p.wait(timeout=30)
        gone = time.time()
        lag = self.slice_ended_within("gsnode2", s["id"], gone, "scancel")
        return f"slice released {lag:+.2f} s after srun returned"

    def test_fence(self):
        """A gpu step on a GPU whose shards are in use is refused, with the
        reason on the user's terminal. (The other way round Slurm 22.05
        fences itself: shards avoid a GPU allocated whole, checked here too;
        the daemon refuses it as well: BoundJobTest.TheFenceSaysWhoHoldsTheGpu.)"""
        p, job, shard = self.background_step("gsnode1", "fence-shard", USER_B, "--gres=shard:2",
                                             "sleep", "60")
        # Slurm gives the gpu step the first GPU, the one the shards are on.
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "true")
        self.c.scancel(str(job))
        p.wait(timeout=30)
        gpu0 = shard["allocation"]["gpu_uuids"][0]
        assert r.returncode != 0, "a gpu step ran on a GPU holding shard slices"
        assert f"{gpu0} is shared by the slices of job {shard['id']} ({USER_B}, Slurm job " \
               f"{job}): a whole-GPU request cannot have it" in r.stderr, r.stderr
        refusal = next(line for line in r.stderr.splitlines() if line.startswith("gpuslice:"))
        # Nothing of the refused step is held.
        assert not [j for j in self.api["gsnode1"].jobs() if j["state"] == "running"]
        # Slurm's own half: a shard step goes to the other GPU.
        p, job, whole = self.background_step("gsnode1", "fence-gpu", USER_B, "--gres=gpu:1",
                                             "sleep", "60")
        r = self.srun("-w", "gsnode1", "--gres=shard:2", self.probe, "info")
        self.c.scancel(str(job))
        p.wait(timeout=30)
        assert r.returncode == 0, r.stderr
        assert self.kv(r.stdout)["uuid0"] != whole["allocation"]["gpu_uuids"][0], r.stdout
        return refusal[:200]

    def test_refusals(self):
        """Bad options stop srun before anything runs; a slice the GPU cannot
        give fails the step at once with the daemon's reason."""
        t0 = time.monotonic()
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-share=150", "true")
        assert r.returncode != 0 and "--gpu-share" in r.stderr, r.stderr
        r = self.srun("-w", "gsnode1", "--gpu-priority=urgent", "true")
        assert r.returncode != 0 and "--gpu-priority" in r.stderr, r.stderr
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=100G", "true")
        assert r.returncode != 0, r.stdout
        assert "gpuslice: gpusliced refused the slice" in r.stderr, r.stderr
        assert "can never fit" in r.stderr or "does not fit" in r.stderr, r.stderr
        r = self.srun("-w", "gsnode1", "--gpu-mem=4G", "true")
        assert r.returncode != 0 and "--gres=gpu" in r.stderr, r.stderr
        r = self.srun("-w", "gsnode1", "--gres=gpu:2", "--gpu-mem=4G", "true")
        assert r.returncode != 0 and "2 GPUs" in r.stderr, r.stderr
        # A quota holds for Slurm steps as for any job: refused at once.
        r = self.c.gpuslice("gsnode1", "quota", "set", "--user", USER_A, "--mem", "3GiB")
        assert r.returncode == 0, r.stderr
        try:
            r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=4G", "true")
            assert r.returncode != 0 and "over quota" in r.stderr, r.stderr
            r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=2G", "true")
            assert r.returncode == 0, r.stderr
        finally:
            self.c.gpuslice("gsnode1", "quota", "rm", "--user", USER_A)
        elapsed = time.monotonic() - t0
        # Nothing was left held.
        for j in self.api["gsnode1"].jobs():
            assert j["state"] != "running", j
        return f"6 refusals (one by quota) in {elapsed:.1f} s"

    def test_users_cannot_touch_each_other(self):
        """User B cannot see or change user A's slice."""
        p, job, s = self.background_step("gsnode2", "private", USER_A, "--gres=gpu:1",
                                         "--gpu-mem=2G", "sleep", "60")
        try:
            r = self.c.gpuslice("gsnode2", "cancel", str(s["id"]), user=USER_B)
            assert r.returncode != 0 and f"belongs to {USER_A}" in r.stderr, r
            r = self.c.gpuslice("gsnode2", "resize", str(s["id"]), "--mem", "70GiB", user=USER_B)
            assert r.returncode != 0, r
            # slurm_only: nobody gets a slice but through a Slurm step.
            r = self.c.gpuslice("gsnode2", "submit", "--mem", "1GiB", "--", "true", user=USER_B)
            assert r.returncode != 0 and "slurm_only" in r.stderr, r
            r = self.c.node_exec("gsnode2", ["cat", s["slice"]], user=USER_B)
            assert r.returncode != 0 and "Permission denied" in r.stderr, r
            r = self.c.gpuslice("gsnode2", "--json", "show", str(s["id"]), user=USER_B)
            assert r.returncode == 0 and '"env"' not in r.stdout, r.stdout
            # Its owner can.
            r = self.c.gpuslice("gsnode2", "--json", "show", str(s["id"]), user=USER_A)
            assert '"env"' in r.stdout, r.stdout
            _, now = self.api["gsnode2"].call("GET", f"/v1/jobs/{s['id']}")
            assert now["state"] == "running" and \
                now["allocation"]["memory_bytes_per_gpu"] == 2 * GIB, now
        finally:
            self.c.scancel(str(job))
            p.wait(timeout=30)
        return "cancel, resize, read, env and a slice outside Slurm refused to the other user"

    def test_restarts(self):
        """The slice survives restarts of slurmd and of gpusliced while its
        step runs; a slurmstepd killed outright (a crashed node) frees it."""
        p, job, s = self.background_step("gsnode1", "restarts", USER_A, "--gres=gpu:1",
                                         "--gpu-mem=2G", "sleep", "60")
        self.c.restart_slurmd("gsnode1")
        self.c.restart_gpusliced("gsnode1")
        self.api["gsnode1"] = Api(self.c.nodes["gsnode1"])
        _, j = self.api["gsnode1"].call("GET", f"/v1/jobs/{s['id']}")
        assert j["state"] == "running", j
        # slurmstepd dies without running its plugins' exit.
        holder = j["holder_pid"]
        os.kill(holder, 9)
        gone = time.time()
        lag = self.slice_ended_within("gsnode1", s["id"], gone, "slurmstepd killed")
        self.c.scancel(str(job))
        p.wait(timeout=30)
        return f"survived both restarts; released {lag:.2f} s after slurmstepd was killed"

    def test_step_exit_status(self):
        """A step's slice ends with the step's exit status, not "exit 0"
        whatever the step returned."""
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=1G", "-J", "exit3",
                      "sh", "-c", "exit 3")
        assert r.returncode == 3, (r.returncode, r.stdout + r.stderr)
        job = max((j for j in self.api["gsnode1"].jobs() if j["name"].startswith("slurm-")),
                  key=lambda j: j["id"])
        j = self.wait_for("the slice to end",
                          lambda: (lambda x: x if x.get("state") == "exited" else None)(
                              self.api["gsnode1"].call("GET", f"/v1/jobs/{job['id']}")[1]))
        assert j["exit_code"] == 3, j
        r = self.srun("-w", "gsnode1", "--gres=gpu:1", "--gpu-mem=1G", "true")
        assert r.returncode == 0, r.stdout + r.stderr
        ok = max((j for j in self.api["gsnode1"].jobs() if j["name"].startswith("slurm-")),
                 key=lambda j: j["id"])
        ok = self.wait_for("the slice to end",
                           lambda: (lambda x: x if x.get("state") == "exited" else None)(
                               self.api["gsnode1"].call("GET", f"/v1/jobs/{ok['id']}")[1]))
        assert ok["exit_code"] == 0, ok
        return f"slice {j['id']}: exit 3 as its step; slice {ok['id']}: exit 0"

    def test_accounting_and_doctor(self):
        """usage --by slurm-job has the jobs above; doctor checks the node's
        Slurm setup and finds it right."""
        r = self.c.gpuslice("gsnode1", "--json", "usage", "--by", "slurm-job")
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)["rows"]
        assert rows and all(row["key"].isdigit() and row["user"] for row in rows), rows
        r = self.c.gpuslice("gsnode1", "--json", "doctor")
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        for name in ("slurm_gres_types", "slurm_plugstack", "slurm_plugin_socket",
                     "slurm_gres_devices", "slurm_shards"):
            assert name in checks and checks[name]["ok"], (name, checks.get(name))
        # Judged as a user of the socket's group meets it, not as root.
        detail = checks["slurm_plugin_socket"]["detail"]
        assert f"a user of group {GROUP} (not root) connects" in detail, detail
        return f"{len(rows)} Slurm jobs in usage; 5 Slurm checks pass"


class TimeLimit:
    """A step killed at its time limit frees its slice within 2 s. Slurm
    checks limits every 30 s and rounds --time up to a minute, so this runs
    beside the other tests, started first and checked last."""

    def __init__(self, suite):
        self.s = suite
        self.proc, self.job, self.slice = suite.background_step(
            "gsnode2", "timelimit", USER_B, "--gres=gpu:1", "--gpu-mem=1G", "--time=1", "sleep",
            "600")

    def check(self):
        self.proc.wait(timeout=150)
        gone = time.time()
        state = self.s.c.wait_job(self.job, timeout=30)
        assert state.get("JobState") == "TIMEOUT", state
        lag = self.s.slice_ended_within("gsnode2", self.slice["id"], gone, "time limit")
        return f"job {self.job} TIMEOUT; slice released {lag:+.2f} s after srun returned"


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: slurm_e2e.py BUILD_DIR [TEST ...]")
    slurm_cluster.require_prerequisites()
    ensure_group()
    suite = Suite(sys.argv[1])
    wanted = sys.argv[2:]
    names = [n for n in dir(Suite) if n.startswith("test_")]
    order = ["test_memory_cap", "test_second_gpu_by_device_node", "test_shares_30_70", "test_sbatch", "test_two_nodes",
             "test_scancel", "test_fence", "test_refusals", "test_users_cannot_touch_each_other",
             "test_restarts", "test_step_exit_status", "test_accounting_and_doctor"]
    assert sorted(order) == sorted(names), "every test_ method must be in the order list"
    selected = [n for n in order if not wanted or n in wanted]
    failures = 0
    try:
        suite.start()
        print(f"cluster up in {suite.c.startup_seconds:.1f} s "
              f"(cgroups: {suite.c.use_cgroups})", flush=True)
        limit = TimeLimit(suite) if not wanted or "time_limit" in wanted else None
        for name in selected:
            t0 = time.monotonic()
            try:
                note = getattr(suite, name)()
                print(f"PASS {name} ({time.monotonic() - t0:.1f} s): {note}", flush=True)
            except Exception as e:  # noqa: BLE001 - report every failure, go on
                failures += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        if limit is not None:
            try:
                print(f"PASS time_limit: {limit.check()}", flush=True)
            except Exception as e:  # noqa: BLE001
                failures += 1
                print(f"FAIL time_limit: {type(e).__name__}: {e}", flush=True)
        if failures:
            print("---- logs ----\n" + suite.c.logs(), flush=True)
    finally:
        suite.stop()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
