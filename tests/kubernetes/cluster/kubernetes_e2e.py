"""gpuslice on a real Kubernetes (docs/KUBERNETES.md): Kubernetes
1.20.2 with two nodes on this machine (cluster.py), deploy/kubernetes applied
as shipped through its documented overlay for simulated GPUs
(overlays/simulated: images and simulated-GPU settings) and the webhook's
documented TLS step (webhook-tls.sh), then used through kubectl as a user
would. Each node runs gpusliced on two simulated A100 40GB; the second node
is tainted as GPU nodes often are.

Usage: kubernetes_e2e.py BUILD_DIR [TEST ...]   (exit 77: root or the
Kubernetes components missing; scripts/test-kubernetes.sh builds them)

Every check asserts on what Kubernetes, the daemons and the programs in the
pods report; on a failure the cluster's logs are printed.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as kube  # noqa: E402

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
NODE_A, NODE_B = "knode1", "knode2"
GPU_TAINT = "gpuslice.dev/gpu=present:NoSchedule"
TOLERATION = {"key": "gpuslice.dev/gpu", "operator": "Exists", "effect": "NoSchedule"}
GIB = 1 << 30
METRICS_PORT = 9400  # deploy/kubernetes/base/gpuslice-node.yaml: metrics_listen.


class Suite:
    def __init__(self, build_dir):
        self.build_dir = os.path.realpath(build_dir)
        self.workdir = tempfile.mkdtemp(prefix="gpuslice-k8s-e2e-")
        os.chmod(self.workdir, 0o755)
        self.c = kube.KubeCluster(self.workdir, self.build_dir, repo_root=REPO)
        self.host_before = None

    # --- bring-up ----------------------------------------------------------

    def start(self):
        self.host_before = host_state(self.c)
        self.c.start()
        t = time.monotonic()
        self.c.deploy_gpuslice(os.path.join(REPO, "deploy", "kubernetes", "overlays", "simulated"),
                               label_nodes=list(self.c.nodes), taint={NODE_B: GPU_TAINT})
        self.deploy_seconds = time.monotonic() - t

    def stop(self):
        self.c.stop()

    # --- helpers -------------------------------------------------------------

    def kubectl(self, *args, **kw):
        return self.c.kubectl(*args, **kw)

    def create_pod(self, name, command, limits=None, node=None, annotations=None,
                   scheduler=None, dry_run=False):
        spec = {"restartPolicy": "Never", "tolerations": [TOLERATION],
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": kube.GPUSLICE_IMAGE,
                                "command": ["/bin/sh", "-c", command],
                                "resources": {"limits": limits or {}}}]}
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        if scheduler:
            spec["schedulerName"] = scheduler
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec}
        args = ["create", "-f", "-", "-o", "json"] + (["--dry-run=server"] if dry_run else [])
        r = self.kubectl(*args, input=json.dumps(pod))
        if r.returncode != 0:
            raise AssertionError(f"kubectl create pod {name}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def pod(self, name):
        return self.c.kubectl_json("get", "pod", name)

    def wait_pod(self, name, phases, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            p = self.pod(name)
            if p["status"].get("phase") in phases:
                return p
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name} is {p['status'].get('phase')} after {timeout} s, "
                                     f"not {phases}: {json.dumps(p['status'])[:1500]}\n"
                                     f"{self.events(name)}")
            time.sleep(0.3)

    def wait_log(self, name, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            out = self.logs(name)
            if re.search(pattern, out):
                return out
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name}: no /{pattern}/ in its log after {timeout} s:\n"
                                     f"{out}\n{self.events(name)}")
            time.sleep(0.5)

    def logs(self, name):
        return self.kubectl("logs", name).stdout

    def events(self, name):
        r = self.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                         "-o", "json")
        if r.returncode != 0:
            return r.stderr
        return "\n".join(f"{e.get('reason')}: {e.get('message')}"
                         for e in json.loads(r.stdout)["items"])

    def delete(self, *names, wait=False):
        self.kubectl("delete", "pod", "--ignore-not-found", f"--wait={str(wait).lower()}",
                     "--grace-period=1", *names, timeout=120)

    def daemon(self, node, path):
        """GET `path` of the node's gpusliced through its unix socket (the
        production path, /run/gpuslice/gpuslice.sock in the node), as root."""
        script = ("import http.client, socket, sys\n"
                  "class C(http.client.HTTPConnection):\n"
                  "    def connect(self):\n"
                  "        self.sock = socket.socket(socket.AF_UNIX)\n"
                  "        self.sock.connect('/run/gpuslice/gpuslice.sock')\n"
                  "c = C('localhost'); c.request('GET', sys.argv[1]); r = c.getresponse()\n"
                  "sys.stdout.write(r.read().decode())\n")
        r = self.c.node_exec(node, [sys.executable, "-c", script, path])
        if r.returncode != 0:
            raise AssertionError(f"gpusliced on {node}, GET {path}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def jobs_of_pod(self, node, pod):
        jobs = self.daemon(node, "/v1/jobs?all=1")
        jobs = jobs.get("jobs", jobs) if isinstance(jobs, dict) else jobs
        return [j for j in jobs if j.get("labels", {}).get("pod") == pod]

    def wait_jobs_of_pod(self, node, pod, timeout=30, states=("running",)):
        deadline = time.monotonic() + timeout
        while True:
            jobs = [j for j in self.jobs_of_pod(node, pod) if j["state"] in states]
            if jobs:
                return jobs
            if time.monotonic() > deadline:
                raise AssertionError(f"no {states} job labelled pod={pod} on {node} after "
                                     f"{timeout} s: {self.daemon(node, '/v1/jobs?all=1')}")
            time.sleep(0.5)

    def node_ip(self, node):
        return self.c.nodes[node].ip

    def http_get(self, node, path):
        with urllib.request.urlopen(f"http://{self.node_ip(node)}:{METRICS_PORT}{path}",
                                    timeout=10) as r:
            return r.read().decode()

    # --- the tests -------------------------------------------------------------

    def test_the_manifests_run_as_shipped(self):
        """The DaemonSet runs on both nodes (the tainted one too), the second
        scheduler is Ready (its probe reaches the pod) and leads (its own
        lease), gpusliced reads the simulated GPUs named explicitly, the
        shim is on each node's host folder, and every node advertises the
        gpuslice resources."""
        ds = self.c.kubectl_json("-n", "gpuslice-system", "get", "daemonset", "gpuslice-node")
        self.expect(ds["status"].get("numberReady") == 2, f"DaemonSet ready: {ds['status']}")
        dep = self.c.kubectl_json("-n", "gpuslice-system", "get", "deployment",
                                  "gpuslice-scheduler")
        self.expect(dep["status"].get("readyReplicas") == 1, f"scheduler: {dep['status']}")
        lease = self.c.kubectl_json("-n", "gpuslice-system", "get", "lease", "gpuslice-scheduler")
        self.expect(lease["spec"].get("holderIdentity", "").startswith("gpuslice-scheduler-"),
                    f"lease holder: {lease['spec']}")
        for node in (NODE_A, NODE_B):
            alloc = self.c.kubectl_json("get", "node", node)["status"]["allocatable"]
            self.expect(alloc.get("gpuslice.dev/gpu") == "2", f"{node}: {alloc}")
            self.expect(alloc.get("gpuslice.dev/gpu-memory") == "80", f"{node}: {alloc}")
            self.expect(alloc.get("gpuslice.dev/gpu-share") == "200", f"{node}: {alloc}")
            status = self.daemon(node, "/v1/status")
            self.expect(status.get("gpu_source") == "simulated", f"{node}: {status}")
            n = self.c.nodes[node]
            for f in ("/usr/local/gpuslice/libgpuslice.so", "/usr/local/gpuslice/sim/libcuda.so.1"):
                self.expect(os.path.isfile(n.upper(f)), f"{node}: {f} not on the host")
            self.expect(sorted(os.listdir(n.upper("/var/lib/gpuslice-sim"))) == ["state"],
                        f"{node}: the simulator's folder holds "
                        f"{os.listdir(n.upper('/var/lib/gpuslice-sim'))}")
        return "2 nodes, DaemonSet 2/2, scheduler Ready and leading, 80 GiB / 200% / 2 GPUs each"

    def test_the_webhook_names_gpuslices_scheduler(self):
        """Through the real API server (server-side dry run runs admission):
        a pod asking for a slice gets schedulerName gpuslice-scheduler, other
        pods and pods naming another scheduler keep theirs."""
        asks = self.create_pod("ask", "true", {"gpuslice.dev/gpu-memory": 4}, dry_run=True)
        self.expect(asks["spec"]["schedulerName"] == "gpuslice-scheduler", asks["spec"])
        plain = self.create_pod("plain", "true", dry_run=True)
        self.expect(plain["spec"]["schedulerName"] == "default-scheduler", plain["spec"])
        own = self.create_pod("own", "true", {"gpuslice.dev/gpu-memory": 4},
                              scheduler="my-scheduler", dry_run=True)
        self.expect(own["spec"]["schedulerName"] == "my-scheduler", own["spec"])
        return "mutated when asking, left alone otherwise"

    def test_a_4gib_pod_gets_4gib_and_is_refused_past_it(self):
        """A pod asking gpuslice.dev/gpu-memory: 4 sees a 4 GiB GPU, allocates
        3 GiB, and gets CUDA_ERROR_OUT_OF_MEMORY for 5 GiB; its slice in the
        node's daemon is 4 GiB, labelled with the pod."""
        self.create_pod(
            "mem4", "gpuslice-smi; "
            "gpuslice-demo-worker --name fits --mem 3GiB --seconds 0.2; echo fits=$?; "
            "gpuslice-demo-worker --name over --mem 5GiB --seconds 0.2; echo over=$?",
            {"gpuslice.dev/gpu-memory": 4}, node=NODE_A)
        self.wait_pod("mem4", ("Succeeded", "Failed"))
        out = self.logs("mem4")
        self.expect(re.search(r"/ 4(\.0)? GiB", out), f"smi does not show 4 GiB:\n{out}")
        self.expect("fits=0" in out, f"3 GiB refused:\n{out}")
        self.expect("CUDA_ERROR_OUT_OF_MEMORY" in out and "over=3" in out,
                    f"5 GiB not refused with CUDA_ERROR_OUT_OF_MEMORY:\n{out}")
        jobs = self.jobs_of_pod(NODE_A, "mem4")
        self.expect(jobs and jobs[0]["request"]["memory_bytes"] == 4 * GIB, f"jobs: {jobs}")
        self.delete("mem4")
        return "smi 4 GiB, 3 GiB allocated, 5 GiB CUDA_ERROR_OUT_OF_MEMORY"

    def test_a_pods_priority_annotation_and_labels_reach_its_slice(self):
        """gpuslice.dev/priority: high on a pod: its slice runs at priority
        high, labelled namespace/pod/container, and the node's metrics carry
        those labels. The pod keeps running for the restart tests."""
        self.create_pod("keeper", "gpuslice-demo-worker --name keeper --mem 1GiB --seconds 0.2 "
                        "--duty 10%; exec sleep 3600",
                        {"gpuslice.dev/gpu-memory": 2, "gpuslice.dev/gpu-share": 10},
                        node=NODE_A, annotations={"gpuslice.dev/priority": "high"})
        self.wait_pod("keeper", ("Running",))
        deadline = time.monotonic() + 20
        while True:
            jobs = self.wait_jobs_of_pod(NODE_A, "keeper")
            job = jobs[0]
            if (job["request"].get("priority") == "high" and
                    job["request"].get("compute_milli") == 100 and "paused" not in job.get("flags", [])):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"keeper's slice: {job}")
            time.sleep(0.5)
        self.expect(job["labels"].get("namespace") == "default" and
                    job["labels"].get("container") == "main", f"labels: {job['labels']}")
        self.keeper_job = job["id"]
        metrics = self.http_get(NODE_A, "/metrics")
        lines = [line for line in metrics.splitlines()
                 if line.startswith("gpuslice_job_") and 'pod="keeper"' in line]
        self.expect(lines and all('namespace="default"' in line and 'container="main"' in line
                                  for line in lines), f"metrics with pod=keeper: {lines[:5]}")
        return f"job {job['id']}: priority high, 2 GiB + 10%, {len(lines)} series with pod labels"

    def _keeper_intact(self, what):
        p = self.pod("keeper")
        self.expect(p["status"]["phase"] == "Running", f"after {what}: keeper {p['status']}")
        jobs = [j for j in self.jobs_of_pod(NODE_A, "keeper") if j["state"] == "running"]
        self.expect([j["id"] for j in jobs] == [self.keeper_job],
                    f"after {what}: keeper's running slices {jobs}")

    def _wait_advertised(self, node, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            alloc = self.c.kubectl_json("get", "node", node)["status"]["allocatable"]
            if alloc.get("gpuslice.dev/gpu-memory") == "80":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{node} advertises {alloc} {timeout} s on")
            time.sleep(0.5)

    def test_a_kubelet_restart_keeps_running_pods_slices(self):
        self.c.restart_kubelet(NODE_A)
        self.c.wait_nodes_ready(60)
        # The plugin notices the new kubelet.sock and registers again; the
        # kubelet lists the resources anew.
        t = time.monotonic()
        self._wait_advertised(NODE_A)
        # A reconciler pass at least (2 s) with the kubelet's PodResources
        # back: nothing released.
        time.sleep(4)
        self._keeper_intact("a kubelet restart")
        return f"re-advertised {time.monotonic() - t:.1f} s after the restart; slice kept"

    def test_a_plugin_restart_keeps_running_pods_slices(self):
        pids = self.c.node_processes(NODE_A, "gpuslice-device-plugin")
        self.expect(len(pids) == 1, f"device plugin processes on {NODE_A}: {pids}")
        os.kill(pids[0], 15)
        deadline = time.monotonic() + 60
        while True:
            now = self.c.node_processes(NODE_A, "gpuslice-device-plugin")
            if now and now != pids:
                break
            if time.monotonic() > deadline:
                raise AssertionError("the device plugin's container was not restarted")
            time.sleep(0.5)
        self._wait_advertised(NODE_A)
        time.sleep(4)
        self._keeper_intact("a plugin restart")
        return "restarted by the kubelet, slice kept"

    def test_deleting_a_pod_frees_its_slice(self):
        before = self._allocated(NODE_A)
        self.delete("keeper")
        t = time.monotonic()
        deadline = t + 60
        while True:
            jobs = self.jobs_of_pod(NODE_A, "keeper")
            if all(j["state"] != "running" for j in jobs):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"keeper's slice still running: {jobs}")
            time.sleep(0.5)
        freed = time.monotonic() - t
        after = self._allocated(NODE_A)
        self.expect(before - after == 2 * GIB, f"allocated before {before}, after {after}")
        return f"slice released {freed:.1f} s after the delete; 2 GiB back on the node"

    def _allocated(self, node):
        state = json.loads(self.http_get(node, "/v1/node"))
        return sum(g["memory_allocated"] for g in state["gpus"])

    def test_two_pods_at_30_and_70_percent_split_the_gpu(self):
        """A whole-GPU pod takes one of node A's GPUs, so two pods at 30% and
        70% share the other; their workers, started together, each measure the
        GPU time they got."""
        self.create_pod("whole", "exec sleep 3600", {"gpuslice.dev/gpu": 1}, node=NODE_A)
        self.wait_pod("whole", ("Running",))
        start_at = int(time.time()) + 12
        worker = ("while [ $(date +%s) -lt {t} ]; do sleep 0.05; done; "
                  "gpuslice-demo-worker --name {n} --mem 1GiB --duty 100% --seconds 6; "
                  "echo done; exec sleep 3600")
        for name, share in (("share-30", 30), ("share-70", 70)):
            self.create_pod(name, worker.format(t=start_at, n=name),
                            {"gpuslice.dev/gpu-memory": 4, "gpuslice.dev/gpu-share": share},
                            node=NODE_A)
        got = {}
        for name in ("share-30", "share-70"):
            out = self.wait_log(name, r"\ndone", timeout=60)
            m = re.search(r"GPU time (\d+) ms of (\d+) ms \((\d+)%\)", out)
            self.expect(m, f"{name}: {out}")
            got[name] = 100.0 * int(m.group(1)) / int(m.group(2))
        gpus = {tuple(self.wait_jobs_of_pod(NODE_A, n)[0]["allocation"]["gpu_uuids"])
                for n in ("share-30", "share-70")}
        self.expect(len(gpus) == 1, f"the two slices are on different GPUs: {gpus}")
        a, b = got["share-30"], got["share-70"]
        # Tolerant bounds (a loaded machine slows the simulated GPU's
        # processes unevenly): each near its share, the 70% slice clearly
        # ahead.
        self.expect(15 <= a <= 45 and 45 <= b <= 85 and b >= 1.5 * a,
                    f"30%/70% slices got {a:.0f}% / {b:.0f}%")
        return f"30% slice got {a:.0f}%, 70% slice {b:.0f}% of the GPU"

    def test_the_extender_places_a_pod_where_it_fits_and_explains_where_none(self):
        """Node A's GPUs are taken (one whole, the other's compute all given),
        so a 20 GiB + 10% pod fits only on node B and lands there, by the
        second scheduler with the extender. A 45 GiB pod fits no GPU (40 GiB
        each) although both nodes' totals would hold it: it stays Pending
        with the extender's reason in its events."""
        p = self.create_pod("frag", "exec sleep 3600",
                            {"gpuslice.dev/gpu-memory": 20, "gpuslice.dev/gpu-share": 10})
        self.expect(p["spec"]["schedulerName"] == "gpuslice-scheduler", p["spec"])
        p = self.wait_pod("frag", ("Running",))
        self.expect(p["spec"]["nodeName"] == NODE_B, f"frag on {p['spec'].get('nodeName')}")
        ann = p["metadata"].get("annotations", {})
        self.expect(ann.get("gpuslice.dev/assigned-node") == NODE_B, f"annotations: {ann}")
        self.create_pod("toobig", "exec sleep 3600", {"gpuslice.dev/gpu-memory": 45})
        deadline = time.monotonic() + 60
        while True:
            events = self.events("toobig")
            if "gpuslice: container 'main' needs 45 GiB" in events:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"toobig's events: {events}")
            time.sleep(0.5)
        self.expect(self.pod("toobig")["status"]["phase"] == "Pending", "toobig left Pending")
        reason = [line for line in events.splitlines() if "gpuslice:" in line][0]
        return f"frag on {NODE_B}; toobig Pending: {reason[:160]}"

    def cleanup(self):
        self.delete("whole", "share-30", "share-70", "frag", "toobig")

    @staticmethod
    def expect(cond, message):
        if not cond:
            raise AssertionError(message)


def host_state(c):
    """What a run must leave as it found: the kubelet's kernel settings, the
    folders the nodes write (kept in their overlays), iptables rules, links,
    routes, mounts and cgroups of this run (by its suffix and workdir)."""
    state = {}
    for key in kube.KUBELET_SYSCTLS:
        with open(f"/proc/sys/{key}") as f:
            state["sysctl " + key] = f.read().strip()
    for path in ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/gpuslice",
                 "/var/lib/gpuslice-sim", "/run/gpuslice", "/run/containerd",
                 "/usr/local/gpuslice", "/var/lib/cni", "/etc/cni/net.d"):
        state["exists " + path] = os.path.lexists(path) and sorted(os.listdir(path)) if \
            os.path.isdir(path) else os.path.lexists(path)
    # The host's CDI folder is shared with the tests of the daemon's container
    # jobs, which may run beside this one and add or remove specs: only
    # whether it exists (the nodes' daemons write theirs in /run's overlay).
    state["exists /var/run/cdi"] = os.path.isdir("/var/run/cdi")
    ours = [c.node_subnet, c.service_subnet, *c.pod_subnets]
    state["iptables"] = [line for line in subprocess.run(["iptables-save"], capture_output=True,
                                                         text=True).stdout.splitlines()
                         if any(s + "." in line for s in ours)]
    state["links"] = [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                      text=True).stdout.splitlines()
                      if c.suffix in line]
    state["routes"] = [line for line in subprocess.run(["ip", "-4", "route"], capture_output=True,
                                                       text=True).stdout.splitlines()
                       if c.bridge in line or any(s + "." in line for s in ours)]
    with open("/proc/self/mountinfo") as f:
        state["mounts"] = [line for line in f if c.workdir in line or c.suffix in line]
    cgroups = []
    for mnt, _, _, path in kube._cgroup_hierarchies():
        root = mnt + path
        cgroups += [d for d in os.listdir(root) if c.suffix in d]
    state["cgroups"] = cgroups
    return state


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: kubernetes_e2e.py BUILD_DIR [TEST ...]")
    kube.require_prerequisites()
    suite = Suite(sys.argv[1])
    wanted = sys.argv[2:]
    order = ["test_the_manifests_run_as_shipped", "test_the_webhook_names_gpuslices_scheduler",
             "test_a_4gib_pod_gets_4gib_and_is_refused_past_it",
             "test_a_pods_priority_annotation_and_labels_reach_its_slice",
             "test_a_kubelet_restart_keeps_running_pods_slices",
             "test_a_plugin_restart_keeps_running_pods_slices",
             "test_deleting_a_pod_frees_its_slice",
             "test_two_pods_at_30_and_70_percent_split_the_gpu",
             "test_the_extender_places_a_pod_where_it_fits_and_explains_where_none"]
    names = [n for n in dir(Suite) if n.startswith("test_")]
    assert sorted(order) == sorted(names), "every test_ method must be in the order list"
    selected = [n for n in order if not wanted or n in wanted]
    failures = 0
    t_all = time.monotonic()
    try:
        suite.start()
        print(f"cluster up in {suite.c.startup_seconds:.1f} s ({', '.join(f'{k} {v:.1f}' for k, v in suite.c.timings.items())}); "
              f"gpuslice deployed in {suite.deploy_seconds:.1f} s", flush=True)
        for name in selected:
            t0 = time.monotonic()
            try:
                note = getattr(suite, name)()
                print(f"PASS {name} ({time.monotonic() - t0:.1f} s): {note}", flush=True)
            except Exception as e:  # noqa: BLE001 - report every failure, go on
                failures += 1
                print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}",
                      flush=True)
        suite.cleanup()
        if failures:
            print("---- logs ----\n" + suite.c.logs(), flush=True)
    except Exception as e:  # noqa: BLE001
        failures += 1
        print(f"FAIL bring-up: {type(e).__name__}: {e}", flush=True)
    finally:
        suite.stop()
    after = host_state(suite.c)
    changed = {k: (suite.host_before.get(k), v) for k, v in after.items()
               if suite.host_before is not None and suite.host_before.get(k) != v}
    if changed:
        failures += 1
        print(f"FAIL the host is left as it was: changed {changed}", flush=True)
    else:
        print("PASS the host is left as it was (kernel settings, folders, iptables, links, "
              "routes, mounts, cgroups)", flush=True)
    import shutil
    if not failures:
        shutil.rmtree(suite.workdir, ignore_errors=True)
    else:
        print(f"workdir kept: {suite.workdir}", flush=True)
    print(f"total {time.monotonic() - t_all:.1f} s", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
