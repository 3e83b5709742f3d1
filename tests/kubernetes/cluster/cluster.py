"""A real Kubernetes 1.20 cluster on one machine, for the real-cluster tests
(tests/kubernetes/cluster/kubernetes_e2e.py) and the pod start benchmark.

    from cluster import KubeCluster, require_prerequisites
    require_prerequisites()              # exits 77 (CTest skip) if not possible
    c = KubeCluster(tempfile.mkdtemp(), "build").start()   # ~30 s
    c.kubectl("get", "nodes")            # CompletedProcess
    c.stop()                             # also runs at exit; idempotent

The components are Kubernetes 1.20.2 built from Debian 12's source package by
scripts/test-kubernetes.sh into /var/cache/gpuslice/kubernetes-1.20.2/bin;
the runtime is Debian's etcd, containerd, runc and CNI plugins.

Layout. etcd, kube-apiserver (authorization Node,RBAC), kube-controller-manager
and kube-scheduler run in the root namespaces, on the bridge's address and
ports picked free. Each node is a set of namespaces (network, UTS, mount,
cgroup) kept alive by a "holder" process, as in tests/slurm/cluster.py; its
containerd and kubelet are started into them with nsenter. In a node's mount
namespace:
  * /var/lib, /var/log, /run, /etc and /usr/local are overlays whose upper
    layer is the node's own folder: whatever the node writes there (the
    kubelet's /var/lib/kubelet/device-plugins, which kubelet 1.20 uses
    whatever its root directory, /var/log/pods, the manifests' hostPath
    folders, containerd's shim sockets in /run/containerd) stays the node's
    and vanishes with it; the host's folders are never written;
  * /var/lib/kubelet is a bind of the node's folder (a plain file system,
    which cAdvisor can measure);
  * the six kernel settings the kubelet insists on (vm.overcommit_memory,
    vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
    kernel.keys.root_max{keys,bytes}) read as the values it wants, through
    files bound over their /proc/sys entries: it finds nothing to change, so
    the host's settings are never touched;
  * /sys/fs/cgroup holds the cgroup hierarchies mounted afresh inside the
    node's cgroup namespace, rooted at a per-node cgroup (cgroupfs driver):
    the kubelet's kubepods tree and every container land below it.
The network is a bridge in the root namespace (the .1 address: the API
server) and a veth per node; pods get the CNI bridge plugin (cni0, ipMasq,
host-local addresses from the node's own /24) inside the node's network
namespace, so its iptables rules live and die there. There is no
kube-proxy: each node's network namespace gets one DNAT rule that sends the
`kubernetes` Service's address to the API server (what kube-proxy would do
for in-cluster clients), and the root namespace a route to each node's pod
subnet (the API server calls admission webhooks at their pods' addresses:
--enable-aggregator-routing).

Images come from no registry: images.py writes docker-archive tarballs from
the build, and each node's containerd imports them (`ctr images import`).

Every name (bridge, veths, cgroups) carries a random suffix and every file
lives in the caller's workdir, so concurrent runs do not collide; stop()
kills what it started (the nodes' processes by their cgroups), removes the
cgroups, the bridge and its routes, and the nodes' namespaces end with their
holders: the host is left as it was.

Python 3 standard library only.
"""

import atexit
import base64
import json
import os
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
import images  # noqa: E402
import netns_nodes  # noqa: E402
from netns_nodes import SKIP, ClusterError  # noqa: E402,F401
from netns_nodes import cgroup_hierarchies as _cgroup_hierarchies  # noqa: E402,F401
from netns_nodes import cgroup_pids as _cgroup_pids  # noqa: E402
from netns_nodes import free_port as _free_port  # noqa: E402,F401
from netns_nodes import remove_cgroup_tree as _remove_cgroup_tree  # noqa: E402
from netns_nodes import run as _run  # noqa: E402
from netns_nodes import skip as _skip  # noqa: E402
from netns_nodes import tail as _tail  # noqa: E402
from netns_nodes import which as _which  # noqa: E402
K8S_VERSION = "1.20.2"
K8S_BIN = f"/var/cache/gpuslice/kubernetes-{K8S_VERSION}/bin"
K8S_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
                "kubectl")
CNI_BIN = "/usr/lib/cni"
PAUSE_IMAGE = "gpuslice.test/pause:1"
# What the test overlay (deploy/kubernetes/overlays/simulated) names.
GPUSLICE_IMAGE = "gpuslice:simulated-test"
SCHEDULER_IMAGE = f"registry.k8s.io/kube-scheduler:v{K8S_VERSION}"

# The kubelet's wanted kernel settings (pkg/kubelet/cm/container_manager_linux.go).
KUBELET_SYSCTLS = {"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
                   "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
                   "kernel/keys/root_maxbytes": 25000000}
NODE_OVERLAYS = ("/var/lib", "/var/log", "/run", "/etc", "/usr/local")


def require_prerequisites():
    """Exits with 77 (skip) when this machine cannot run the cluster at all:
    not root, the Kubernetes components not built (scripts/test-kubernetes.sh),
    or the runtime's Debian packages missing. Anything that fails later is an
    error, not a skip."""
    if os.geteuid() != 0:
        _skip("the Kubernetes cluster tests need root (namespaces, containerd, kubelet)")
    failed = os.path.dirname(K8S_BIN) + ".failed"
    if os.path.exists(failed):
        with open(failed) as f:
            sys.exit(f"scripts/test-kubernetes.sh failed to build Kubernetes: {f.read().strip()}")
    missing = [p for p in K8S_PROGRAMS if not os.access(os.path.join(K8S_BIN, p), os.X_OK)]
    if missing:
        _skip(f"{', '.join(missing)} not built in {K8S_BIN}: run scripts/test-kubernetes.sh "
              "(scripts/test.sh does)")
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [p for p in ("etcd", "containerd", "containerd-shim-runc-v2", "ctr", "runc",
                           "iptables", "openssl", "ip", "nsenter", "unshare", "mount", "ldd",
                           "gcc")
               if shutil.which(p, path=path) is None]
    missing += [f"{CNI_BIN}/{p}" for p in ("bridge", "host-local", "loopback", "portmap")
                if not os.access(os.path.join(CNI_BIN, p), os.X_OK)]
    if missing:
        _skip("missing programs: " + ", ".join(missing) + " (Debian packages etcd-server, "
              "containerd, runc, containernetworking-plugins, iptables, openssl, iproute2, "
              "util-linux, gcc; scripts/setup.sh installs them)")


def _terminate(proc, timeout=10):
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


# --- the holder: runs in a node's fresh namespaces --------------------------

# Runs as `unshare --net --uts --mount --cgroup --propagation private python3
# -c HOLDER ARGS_JSON` after the parent moved it into the node's cgroups; sets
# the node up, says "ready", and waits until its stdin closes (the parent's
# pipe: so it also ends when the test process dies).
_HOLDER = netns_nodes.HOLDER_START + r'''
for target, upper, work in a["overlays"]:
    sh("mount", "-t", "overlay", "-o",
       "lowerdir=%s,upperdir=%s,workdir=%s" % (target, upper, work), "gsk-" + a["node"], target)
os.makedirs("/var/lib/kubelet", exist_ok=True)
sh("mount", "--bind", a["kubelet_dir"], "/var/lib/kubelet")
for path, value_file in a["sysctls"]:
    sh("mount", "--bind", value_file, path)
''' + netns_nodes.HOLDER_END


class Node:
    def __init__(self, cluster, index):
        self.index = index
        self.name = f"knode{index}"
        self.dir = os.path.join(cluster.workdir, "nodes", self.name)
        self.ip = f"{cluster.node_subnet}.{10 + index}"
        self.pod_subnet = cluster.pod_subnets[index - 1]
        self.veth_host = f"gkv{index}{cluster.suffix}"
        self.veth_node = f"gkp{index}{cluster.suffix}"
        self.holder = None
        self.cgroups = []
        self.containerd = None
        self.kubelet = None
        self.containerd_sock = os.path.join(self.dir, "containerd", "containerd.sock")
        self.kubelet_dir = os.path.join(self.dir, "kubelet")
        self.containerd_log = os.path.join(self.dir, "containerd.log")
        self.kubelet_log = os.path.join(self.dir, "kubelet.log")
        self.holder_log = os.path.join(self.dir, "holder.log")

    def upper(self, path):
        """Where a file the node wrote at `path` (under one of its overlays)
        is seen from the host."""
        for target in NODE_OVERLAYS:
            if path == target or path.startswith(target + "/"):
                return os.path.join(self.dir, "overlay", target.strip("/").replace("/", "_"),
                                    "upper", path[len(target):].lstrip("/"))
        raise ValueError(f"{path} is not under a node overlay")


class KubeCluster:
    def __init__(self, workdir, build_dir, nodes=2, repo_root=None):
        self.workdir = os.path.realpath(workdir)
        self.build_dir = os.path.realpath(build_dir)
        self.repo_root = os.path.realpath(
            repo_root or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
        self.suffix = "".join(random.choice(string.ascii_lowercase + string.digits)
                              for _ in range(5))
        subnets = self._pick_subnets(2 + nodes)
        self.node_subnet = subnets[0]
        self.service_subnet = subnets[1]
        self.pod_subnets = subnets[2:]
        self.bridge = "gkb" + self.suffix
        self.bridge_ip = self.node_subnet + ".1"
        self.service_ip = self.service_subnet + ".1"  # The `kubernetes` Service.
        self.pki = os.path.join(self.workdir, "pki")
        self.logs_dir = os.path.join(self.workdir, "logs")
        self.etcd_port = _free_port()
        self.etcd_peer_port = _free_port()
        self.api_port = _free_port()
        self.api_url = f"https://{self.bridge_ip}:{self.api_port}"
        self.admin_kubeconfig = os.path.join(self.workdir, "admin.kubeconfig")
        self.nodes = {}
        for i in range(1, nodes + 1):
            n = Node(self, i)
            self.nodes[n.name] = n
        self.procs = {}  # name -> Popen, control plane
        self._bridge_made = False
        self._stopped = False
        self.startup_seconds = None
        self.timings = {}
        atexit.register(self.stop)

    def bin(self, name):
        return os.path.join(K8S_BIN, name)

    @staticmethod
    def _pick_subnets(count):
        """`count` /24s in 10.0.0.0/8 that no route on the host covers."""
        routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"],
                                capture_output=True, text=True).stdout
        out = []
        for _ in range(1000):
            subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
            if subnet + "." not in routes and subnet not in out:
                out.append(subnet)
                if len(out) == count:
                    return out
        raise ClusterError("no free 10.x.y.0/24 subnets")

    # --- bring-up --------------------------------------------------------------

    def start(self):
        t0 = time.monotonic()
        try:
            for d in (self.workdir, self.pki, self.logs_dir):
                os.makedirs(d, exist_ok=True)
            self._step("pki", self._make_pki)
            self._step("images", self._build_images)
            self._step("network", self._make_network)
            self._step("etcd", self._start_etcd)
            self._step("apiserver", self._start_apiserver)
            self._step("controllers", self._start_controllers)
            threads = [threading.Thread(target=self._bring_up_node, args=(n,))
                       for n in self.nodes.values()]
            self._node_errors = []
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if self._node_errors:
                raise self._node_errors[0]
            self._step("nodes ready", lambda: self.wait_nodes_ready(120))
            self._step("service accounts", self._wait_default_service_account)
        except BaseException:
            logs = self.logs()
            self.stop()
            if sys.exc_info()[0] in (ClusterError, subprocess.TimeoutExpired):
                raise ClusterError(f"{sys.exc_info()[1]}\n{logs}") from None
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _step(self, name, fn):
        t = time.monotonic()
        fn()
        self.timings[name] = time.monotonic() - t

    def _bring_up_node(self, n):
        try:
            self._make_node(n)
            self._start_containerd(n)
            self._import_images(n)
            self._start_kubelet(n)
        except BaseException as e:  # Reported by start().
            self._node_errors.append(e)

    # PKI: one CA for everything; EC keys (fast to make).
    def _openssl(self, *args):
        _run(["openssl", *args], cwd=self.pki)

    def _cert(self, name, subject, usage, sans=None):
        self._openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key")
        self._openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        ext = f"extendedKeyUsage={usage}\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        if sans:
            ext += "subjectAltName=" + ",".join(sans) + "\n"
        with open(os.path.join(self.pki, f"{name}.ext"), "w") as f:
            f.write(ext)
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext",
                      "-out", f"{name}.crt")

    def _make_pki(self):
        self._openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
        self._openssl("req", "-x509", "-new", "-key", "ca.key", "-subj",
                      f"/CN=gpuslice-test-ca-{self.suffix}", "-days", "2", "-sha256",
                      "-out", "ca.crt")
        sans = [f"IP:{self.bridge_ip}", f"IP:{self.service_ip}", "IP:127.0.0.1",
                "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local"]
        self._cert("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        self._cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
                   "clientAuth")
        self._cert("admin", "/O=system:masters/CN=admin", "clientAuth")
        self._cert("controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
        self._cert("scheduler", "/CN=system:kube-scheduler", "clientAuth")
        for n in self.nodes.values():
            self._cert(n.name, f"/O=system:nodes/CN=system:node:{n.name}", "clientAuth")
        self._openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key")
        self._openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        self._kubeconfig(self.admin_kubeconfig, "admin")
        self._kubeconfig(os.path.join(self.workdir, "controller-manager.kubeconfig"),
                         "controller-manager")
        self._kubeconfig(os.path.join(self.workdir, "scheduler.kubeconfig"), "scheduler")
        for n in self.nodes.values():
            self._kubeconfig(os.path.join(self.workdir, f"{n.name}.kubeconfig"), n.name)

    def _kubeconfig(self, path, cert):
        def b64(name):
            with open(os.path.join(self.pki, name), "rb") as f:
                return base64.b64encode(f.read()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.api_url, "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": cert, "user": {"client-certificate-data": b64(f"{cert}.crt"),
                                              "client-key-data": b64(f"{cert}.key")}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": cert}}],
        }
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump(config, f)

    def _build_images(self):
        d = os.path.join(self.workdir, "images")
        os.makedirs(d, exist_ok=True)
        pause_bin = os.path.join(self.build_dir, "bin", "gpuslice-test-pause")
        if not os.access(pause_bin, os.X_OK):
            raise ClusterError(f"{pause_bin} is missing (build the target gpuslice-test-pause)")
        self.image_tars = [
            images.pause_image(os.path.join(d, "pause.tar"), PAUSE_IMAGE, pause_bin),
            images.binary_image(os.path.join(d, "kube-scheduler.tar"), SCHEDULER_IMAGE,
                                self.bin("kube-scheduler"), "/usr/local/bin/kube-scheduler"),
            images.gpuslice_image(os.path.join(d, "gpuslice.tar"), GPUSLICE_IMAGE,
                                  self.repo_root, self.build_dir),
        ]

    def _spawn(self, name, argv, log, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=open(log, "ab"),
                             stderr=subprocess.STDOUT, start_new_session=True, **kw)
        return p

    def _start_etcd(self):
        data = os.path.join(self.workdir, "etcd")
        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.procs["etcd"] = self._spawn("etcd", [
            _which("etcd"), "--name", "gsk", "--data-dir", data,
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"gsk={peer}", "--log-level", "warn"],
            os.path.join(self.logs_dir, "etcd.log"))
        self._wait(lambda: self._http_ok(f"{url}/health"), 30, "etcd", self.procs["etcd"])

    @staticmethod
    def _http_ok(url):
        import urllib.request
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _start_apiserver(self):
        p = lambda name: os.path.join(self.pki, name)  # noqa: E731
        self.procs["kube-apiserver"] = self._spawn("kube-apiserver", [
            self.bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.bridge_ip}", f"--advertise-address={self.bridge_ip}",
            f"--secure-port={self.api_port}", "--insecure-port=0",
            f"--tls-cert-file={p('apiserver.crt')}", f"--tls-private-key-file={p('apiserver.key')}",
            f"--client-ca-file={p('ca.crt')}",
            f"--kubelet-client-certificate={p('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={p('apiserver-kubelet-client.key')}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={self.service_subnet}.0/24",
            f"--service-account-key-file={p('sa.pub')}",
            f"--service-account-signing-key-file={p('sa.key')}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--allow-privileged=true", "--enable-aggregator-routing=true",
            "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={os.path.join(self.workdir, 'apiserver-certs')}",
            "--profiling=false", "--v=1"],
            os.path.join(self.logs_dir, "kube-apiserver.log"))
        self._wait(lambda: self.kubectl("get", "--raw", "/readyz", timeout=10).returncode == 0,
                   90, "kube-apiserver", self.procs["kube-apiserver"])

    def _start_controllers(self):
        self.procs["kube-controller-manager"] = self._spawn("kube-controller-manager", [
            self.bin("kube-controller-manager"),
            f"--kubeconfig={os.path.join(self.workdir, 'controller-manager.kubeconfig')}",
            f"--service-account-private-key-file={os.path.join(self.pki, 'sa.key')}",
            f"--root-ca-file={os.path.join(self.pki, 'ca.crt')}",
            "--use-service-account-credentials=true", "--leader-elect=false",
            "--port=0", "--secure-port=0", "--v=1"],
            os.path.join(self.logs_dir, "kube-controller-manager.log"))
        self.procs["kube-scheduler"] = self._spawn("kube-scheduler", [
            self.bin("kube-scheduler"),
            f"--kubeconfig={os.path.join(self.workdir, 'scheduler.kubeconfig')}",
            "--leader-elect=false", "--port=0", "--secure-port=0", "--v=1"],
            os.path.join(self.logs_dir, "kube-scheduler.log"))
        time.sleep(0.5)
        for name in ("kube-controller-manager", "kube-scheduler"):
            if self.procs[name].poll() is not None:
                raise ClusterError(f"{name} exited with status {self.procs[name].returncode}")

    def _ip(self, *args, node=None):
        netns_nodes.ip(*args, holder_pid=None if node is None else node.holder.pid)

    def _make_network(self):
        netns_nodes.make_bridge(self.bridge, self.bridge_ip)
        self._bridge_made = True

    def _make_node_cgroups(self, n):
        n.cgroups, hierarchies = netns_nodes.make_node_cgroups(
            f"gpuslice-k8s-{self.suffix}-{n.name}")
        return hierarchies

    def _enter_node_cgroups(self, n):
        """preexec_fn: puts the child into the node's cgroups before it execs
        nsenter, so that in the node's cgroup namespace it is at "/"."""
        return netns_nodes.enter_cgroups(n.cgroups)

    def _make_node(self, n):
        os.makedirs(n.dir, exist_ok=True)
        overlays = []
        for target in NODE_OVERLAYS:
            base = os.path.join(n.dir, "overlay", target.strip("/").replace("/", "_"))
            for sub in ("upper", "work"):
                os.makedirs(os.path.join(base, sub), exist_ok=True)
            overlays.append((target, os.path.join(base, "upper"), os.path.join(base, "work")))
        os.makedirs(n.kubelet_dir, exist_ok=True)
        sysctls = []
        sysdir = os.path.join(n.dir, "sysctl")
        os.makedirs(sysdir, exist_ok=True)
        for key, value in KUBELET_SYSCTLS.items():
            f = os.path.join(sysdir, key.replace("/", "."))
            with open(f, "w") as out:
                out.write(f"{value}\n")
            sysctls.append((f"/proc/sys/{key}", f))
        hier = self._make_node_cgroups(n)
        args = {"node": n.name, "overlays": overlays, "kubelet_dir": n.kubelet_dir,
                "sysctls": sysctls, "cgroups": hier}
        ns = ["--net", "--uts", "--mount", "--propagation", "private", "--cgroup"]
        n.holder = subprocess.Popen(
            [_which("unshare"), *ns, sys.executable, "-c", _HOLDER, json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(n.holder_log, "w"),
            preexec_fn=self._enter_node_cgroups(n), start_new_session=True, text=True)
        line = n.holder.stdout.readline()
        if line.strip() != "ready":
            n.holder.wait(5)
            raise ClusterError(f"setting up {n.name} failed: {_tail(n.holder_log)}")
        netns_nodes.attach_node(n.holder.pid, n.veth_host, n.veth_node, self.bridge, n.ip,
                                self.bridge_ip)
        # The API server reaches admission webhooks at their pods' addresses.
        self._ip("route", "add", f"{n.pod_subnet}.0/24", "via", n.ip, "dev", self.bridge)
        # kube-proxy's one job here: the `kubernetes` Service for in-cluster
        # clients (hostNetwork ones: OUTPUT; pods: PREROUTING).
        for chain in ("OUTPUT", "PREROUTING"):
            _run(self._nsenter(n, mount=False) + [
                _which("iptables"), "-t", "nat", "-A", chain, "-d", f"{self.service_ip}/32",
                "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination",
                f"{self.bridge_ip}:{self.api_port}"])

    def _nsenter(self, n, mount=True):
        ns = ["-n", "-u"] + (["-m", "-C"] if mount else [])
        return [_which("nsenter"), "-t", str(n.holder.pid), *ns, "--"]

    def _start_containerd(self, n):
        root = os.path.join(n.dir, "containerd")
        cni_conf = os.path.join(n.dir, "cni", "net.d")
        for d in (root, cni_conf):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(cni_conf, "10-gsk.conflist"), "w") as f:
            json.dump({"cniVersion": "0.4.0", "name": "gsk", "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": f"{n.pod_subnet}.0/24"}]],
                          "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": os.path.join(n.dir, "cni", "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"}]}, f)
        config = os.path.join(root, "config.toml")
        with open(config, "w") as f:
            f.write(f'''version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{n.containerd_sock}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here lacks CAP_SYS_RESOURCE: runc could not set the CRI's -998.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{_which("runc")}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{cni_conf}"
''')
        n.containerd = subprocess.Popen(
            self._nsenter(n) + [_which("containerd"), "--config", config, "--log-level", "warn"],
            stdin=subprocess.DEVNULL, stdout=open(n.containerd_log, "ab"),
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._enter_node_cgroups(n))
        self._wait(lambda: self.ctr(n, "version").returncode == 0, 30,
                   f"containerd on {n.name}", n.containerd)

    def ctr(self, node, *args, timeout=120):
        n = self._node(node)
        return subprocess.run([_which("ctr"), "--address", n.containerd_sock, "-n", "k8s.io",
                               *args], capture_output=True, text=True, timeout=timeout)

    def _import_images(self, n):
        for tar in self.image_tars:
            r = self.ctr(n, "images", "import", tar)
            if r.returncode != 0:
                raise ClusterError(f"ctr images import {tar} on {n.name}: {r.stderr.strip()}")

    def _start_kubelet(self, n):
        config = os.path.join(n.dir, "kubelet.yaml")
        with open(config, "w") as f:
            json.dump({
                "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                   "x509": {"clientCAFile": os.path.join(self.pki, "ca.crt")}},
                "authorization": {"mode": "Webhook"},
                "cgroupDriver": "cgroupfs", "failSwapOn": False,
                "address": n.ip, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
                "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
                # The host's disk is shared with other work: neither evict
                # nor collect images on its account.
                "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%",
                                 "imagefs.available": "1%"},
                "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
                "serializeImagePulls": False, "nodeStatusUpdateFrequency": "4s",
                "runtimeRequestTimeout": "2m",
            }, f)
        n.kubelet = subprocess.Popen(
            self._nsenter(n) + [
                self.bin("kubelet"), f"--config={config}",
                f"--kubeconfig={os.path.join(self.workdir, n.name + '.kubeconfig')}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{n.containerd_sock}",
                f"--hostname-override={n.name}", f"--node-ip={n.ip}",
                "--root-dir=/var/lib/kubelet", f"--cert-dir={os.path.join(n.dir, 'kubelet-pki')}",
                "--v=2"],
            stdin=subprocess.DEVNULL, stdout=open(n.kubelet_log, "ab"),
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._enter_node_cgroups(n))

    def restart_kubelet(self, node):
        n = self._node(node)
        _terminate(n.kubelet)
        self._start_kubelet(n)

    def _wait(self, ready, timeout, what, proc=None):
        def ask():
            try:
                return ready()
            except subprocess.TimeoutExpired:  # A slow answer is not an answer yet.
                return False
        deadline = time.monotonic() + timeout
        while not ask():
            if proc is not None and proc.poll() is not None:
                raise ClusterError(f"{what} exited with status {proc.returncode}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} not ready after {timeout} s")
            time.sleep(0.2)

    def wait_nodes_ready(self, timeout=120):
        def ready():
            r = self.kubectl("get", "nodes", "-o", "json", timeout=20)
            if r.returncode != 0:
                return False
            states = {}
            for item in json.loads(r.stdout)["items"]:
                cond = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
                states[item["metadata"]["name"]] = cond.get("Ready")
            return all(states.get(n) == "True" for n in self.nodes)
        for n in self.nodes.values():
            if n.kubelet.poll() is not None:
                raise ClusterError(f"kubelet on {n.name} exited ({n.kubelet.returncode})")
        self._wait(ready, timeout, "nodes Ready")

    def _wait_default_service_account(self):
        self._wait(lambda: self.kubectl("get", "serviceaccount", "default", "-o",
                                        "jsonpath={.secrets[0].name}").stdout.strip() != "",
                   60, "the default service account's token")

    # --- gpuslice ----------------------------------------------------------------

    def deploy_gpuslice(self, kustomization, label_nodes=(), taint=None, timeout=180):
        """What docs/KUBERNETES.md tells an admin to type: label the GPU
        nodes (and here taint some), `kubectl apply -k`, then the webhook's
        TLS step (deploy/kubernetes/webhook-tls.sh); then waits until the
        DaemonSet runs on every labelled node, the scheduler is Ready and
        the nodes advertise gpuslice's resources."""
        for node in label_nodes:
            self.kubectl("label", "node", node, "gpuslice.dev/node=true", "--overwrite", check=True)
        for node, t in (taint or {}).items():
            self.kubectl("taint", "node", node, t, "--overwrite", check=True)
        r = self.kubectl("apply", "-k", kustomization, timeout=120)
        if r.returncode != 0:
            raise ClusterError(f"kubectl apply -k {kustomization}: {r.stderr.strip()}")
        env = dict(os.environ, PATH=K8S_BIN + ":" + os.environ.get("PATH", ""))
        r = subprocess.run([os.path.join(self.repo_root, "deploy", "kubernetes", "webhook-tls.sh"),
                            f"--kubeconfig={self.admin_kubeconfig}"],
                           capture_output=True, text=True, env=env, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"webhook-tls.sh: {r.stderr.strip()}")

        def ready():
            ds = self.kubectl_json("-n", "gpuslice-system", "get", "daemonset", "gpuslice-node")
            dep = self.kubectl_json("-n", "gpuslice-system", "get", "deployment",
                                    "gpuslice-scheduler")
            if (ds["status"].get("numberReady", 0) < len(label_nodes) or
                    dep["status"].get("readyReplicas", 0) < 1):
                return False
            for node in label_nodes:
                alloc = self.kubectl_json("get", "node", node)["status"].get("allocatable", {})
                if "gpuslice.dev/gpu-memory" not in alloc:
                    return False
            return True
        try:
            self._wait(ready, timeout, "gpuslice deployed")
        except ClusterError as e:
            pods = self.kubectl("-n", "gpuslice-system", "get", "pods", "-o", "wide").stdout
            desc = self.kubectl("-n", "gpuslice-system", "describe", "pods").stdout[-6000:]
            logs = ""
            for pod in self.kubectl("-n", "gpuslice-system", "get", "pods", "-o",
                                    "name").stdout.split():
                logs += f"--- {pod} ---\n" + self.kubectl(
                    "-n", "gpuslice-system", "logs", pod, "--all-containers", "--tail=40").stdout
            raise ClusterError(f"{e}\n{pods}\n{desc}\n{logs}") from None

    # --- clients ---------------------------------------------------------------

    def kubectl(self, *args, timeout=60, check=False, input=None):
        return subprocess.run([self.bin("kubectl"), f"--kubeconfig={self.admin_kubeconfig}",
                               *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, check=check, input=input)

    def kubectl_json(self, *args, timeout=60):
        r = self.kubectl(*args, "-o", "json", timeout=timeout)
        if r.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(map(str, args))}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def _node(self, n):
        return n if isinstance(n, Node) else self.nodes[n]

    def node_exec(self, node, argv, timeout=60, env=None):
        """Runs argv in node's namespaces (its /run/gpuslice, its network)."""
        n = self._node(node)
        return subprocess.run(self._nsenter(n) + list(argv), capture_output=True, text=True,
                              timeout=timeout, env=env, preexec_fn=self._enter_node_cgroups(n))

    def node_processes(self, node, exe_name):
        """Host pids of the node's processes whose program is `exe_name`."""
        n = self._node(node)
        pids = set()
        for cg in n.cgroups:
            for dirpath, _, files in os.walk(cg):
                if "cgroup.procs" in files:
                    try:
                        with open(os.path.join(dirpath, "cgroup.procs")) as f:
                            pids.update(int(p) for p in f.read().split())
                    except OSError:
                        pass
            break  # One hierarchy holds every process.
        out = []
        for pid in sorted(pids):
            try:
                if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == exe_name:
                    out.append(pid)
            except OSError:
                pass
        return out

    # --- teardown --------------------------------------------------------------

    def logs(self):
        parts = []
        for name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "etcd"):
            parts.append(f"--- {name} ---\n{_tail(os.path.join(self.logs_dir, name + '.log'), 3000)}")
        for n in self.nodes.values():
            parts.append(f"--- {n.name} holder ---\n{_tail(n.holder_log, 1000)}")
            parts.append(f"--- {n.name} containerd ---\n{_tail(n.containerd_log, 3000)}")
            parts.append(f"--- {n.name} kubelet ---\n{_tail(n.kubelet_log, 5000)}")
        return "\n".join(parts)

    def _kill_cgroup_tree(self, n):
        """SIGKILLs every process in the node's cgroups (containerd, its shims,
        the containers, the holder), until none is left."""
        for _ in range(100):
            pids = set(_cgroup_pids(n.cgroups))
            pids.discard(os.getpid())
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def stop(self):
        if self._stopped:
            return
        self._stopped = True
        for n in self.nodes.values():
            _terminate(n.kubelet)
        for n in self.nodes.values():
            _terminate(n.containerd)
            self._kill_cgroup_tree(n)
            if n.holder is not None and n.holder.poll() is None:
                try:
                    n.holder.stdin.close()
                except OSError:
                    pass
                try:
                    n.holder.wait(10)
                except subprocess.TimeoutExpired:
                    n.holder.kill()
                    n.holder.wait(10)
            for cg in n.cgroups:
                _remove_cgroup_tree(cg)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            _terminate(self.procs.get(name))
        if self._bridge_made:
            # Its routes (to the pod subnets) and the veths go with it.
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            for n in self.nodes.values():
                subprocess.run(["ip", "link", "del", n.veth_host], capture_output=True)
        # The nodes' containerd roots and overlays: large, and all the
        # namespaces that mounted them are gone. The pods' logs stay (in
        # the node's folder, pod-logs/), for a failure's report.
        for n in self.nodes.values():
            logs = os.path.join(n.dir, "overlay", "var_log", "upper", "pods")
            if os.path.isdir(logs):
                shutil.copytree(logs, os.path.join(n.dir, "pod-logs"), symlinks=False,
                                ignore_dangling_symlinks=True, dirs_exist_ok=True)
            for d in ("containerd", "overlay", "kubelet"):
                shutil.rmtree(os.path.join(n.dir, d), ignore_errors=True)
