"""A real two-node Slurm cluster on one machine, for the Slurm end-to-end tests.

    from cluster import Cluster, require_prerequisites
    require_prerequisites()                    # exits 77 (CTest skip) if not possible
    c = Cluster(tempfile.mkdtemp(), "build", plugstack_lines=["required /x/spank.so"])
    c.start()                                  # ~3 s; raises ClusterError with logs
    c.srun("-N2", "hostname")                  # CompletedProcess
    c.gpuslice("gsnode1", "ps", "--json")
    c.stop()                                   # also runs at exit; idempotent

Layout. munged and slurmctld run in the root namespaces. Each node is a set of
namespaces (network, UTS, mount, cgroup) kept alive by a small "holder"
process; its slurmd and gpusliced are started into those namespaces with
nsenter. In a node's mount namespace:
  * /run/gpuslice is the node's own directory (so gpusliced's socket is at the
    production default path on every node, where the SPANK plugin looks);
  * /dev is a tmpfs copy of the host's /dev plus fake GPU device nodes
    /dev/nvidia0..N-1 (char 195:N) and /dev/nvidiactl: Slurm only accepts
    character devices in gres.conf, and the host's /dev stays untouched;
  * /sys/fs/cgroup holds the cgroup hierarchies mounted afresh inside the
    node's cgroup namespace, rooted at a per-node cgroup: both slurmds believe
    they own /sys/fs/cgroup/<controller>/slurm, and a two-node job's
    job_N/step_M cgroups do not collide (they would without this: one stepd
    would wait for, and signal, the other node's tasks).
The network is a bridge in the root namespace (which gets the .1 address:
slurmctld and srun are reached there) and one veth per node. slurmstepd
connects back to srun at the address srun's launch request came from, so no
host names need to resolve and /etc/hosts is never touched.

Every name (bridge, veths, cgroups, cluster) carries a random suffix and every
file lives in the caller's workdir, so concurrent runs do not collide.

Python 3 standard library only.
"""

import atexit
import json
import os
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import netns_nodes  # noqa: E402
from netns_nodes import SKIP, ClusterError  # noqa: E402,F401
from netns_nodes import cgroup_hierarchies as _cgroup_hierarchies  # noqa: E402
from netns_nodes import cgroup_pids as _cgroup_pids  # noqa: E402
from netns_nodes import free_port as _free_port  # noqa: E402,F401
from netns_nodes import remove_cgroup_tree as _remove_cgroup_tree  # noqa: E402
from netns_nodes import skip as _skip  # noqa: E402
from netns_nodes import tail as _tail  # noqa: E402
from netns_nodes import which as _which  # noqa: E402

GPUSLICE_SOCKET = "/run/gpuslice/gpuslice.sock"  # gpusliced's and the CLI's default.
NVIDIA_MAJOR = 195
TEST_USERS = ("gsslurm_a", "gsslurm_b")
_USERS_LOCK = "/tmp/.gpuslice-slurm-users.lock"


def require_prerequisites():
    """Exits with 77 (skip) when this machine cannot run the cluster at all:
    not root, or Slurm / munge / iproute2 / util-linux are not installed.
    Anything that fails later is an error, not a skip."""
    if os.geteuid() != 0:
        _skip("the Slurm tests need root (namespaces, mknod, daemons as root)")
    missing = [p for p in ("slurmctld", "slurmd", "srun", "sbatch", "scontrol", "scancel",
                           "munged", "ip", "nsenter", "unshare", "mount", "runuser",
                           "useradd")
               if shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
               is None]
    if missing:
        _skip("missing programs: " + ", ".join(missing) +
              " (Debian packages slurm-wlm, munge, iproute2, util-linux, passwd)")


def ensure_test_users():
    """Creates gsslurm_a and gsslurm_b once per machine. Serialised with a lock
    file: useradd fails (rather than waits) when another test holds
    /etc/passwd's lock."""
    import fcntl
    import pwd
    with open(_USERS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in TEST_USERS:
            try:
                pwd.getpwnam(name)
                continue
            except KeyError:
                pass
            # useradd fails at once when another program (the security
            # suite's fixture) holds /etc/passwd's lock: try again a while.
            for _ in range(50):
                r = subprocess.run([_which("useradd"), "-M", "-r", "-s", "/bin/sh",
                                    "-d", "/nonexistent", name], capture_output=True, text=True)
                if r.returncode == 0 or "lock" not in r.stderr:
                    break
                time.sleep(0.1)
            if r.returncode != 0:
                raise ClusterError(f"useradd {name}: {r.stderr.strip()}")


def _open_to_others(path):
    """Gives `path` and its ancestors others' search bit, as scripts/test.sh
    does: jobs run as the test users and must reach the build tree and the
    workdir (a mkdtemp folder is 0700)."""
    d = os.path.realpath(path)
    while d != "/":
        mode = os.stat(d).st_mode
        if not mode & 0o001:
            os.chmod(d, (mode & 0o7777) | 0o001)
        d = os.path.dirname(d)


# --- cgroups ---------------------------------------------------------------

def _cgroup_v1_usable():
    """proctrack/cgroup and task/cgroup (ConstrainDevices) need cgroup v1's
    freezer and devices hierarchies (Slurm 22.05's cgroup/v2 plugin wants
    systemd, which CI does not run)."""
    names = {os.path.basename(m) for m, t, _, _ in _cgroup_hierarchies() if t == "cgroup"}
    return {"freezer", "devices"} <= names


# --- the holder: runs in a node's fresh namespaces --------------------------

# Runs as `unshare --net --uts --mount --cgroup --propagation private python3 -c
# HOLDER ARGS_JSON` after the parent moved it into the node's cgroups; sets the
# node up, says "ready", and waits until its stdin closes (the parent's pipe:
# so it also ends when the test process dies).
_HOLDER = netns_nodes.HOLDER_START + r'''
# /run/gpuslice: this node's own directory.
sh("mount", "--bind", a["run_dir"], "/run/gpuslice")
# /dev: a tmpfs with everything of the host's /dev (device nodes copied,
# directories and mounts such as pts/shm bound) and the fake GPUs.
stash = a["stash"]
sh("mount", "--rbind", "/dev", stash)
sh("mount", "-t", "tmpfs", "-o", "mode=755,size=1m", "gsdev", "/dev")
for e in os.scandir(stash):
    src, dst = os.path.join(stash, e.name), os.path.join("/dev", e.name)
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        os.mknod(dst, st.st_mode, st.st_rdev)
        os.chown(dst, st.st_uid, st.st_gid)
    elif stat.S_ISDIR(st.st_mode):
        os.mkdir(dst, stat.S_IMODE(st.st_mode))
        sh("mount", "--rbind", src, dst)
    else:
        open(dst, "w").close()
        sh("mount", "--bind", src, dst)
sh("umount", "-l", stash)
# 0666 like the driver's nodes (mknod's mode is cut by the umask).
for name, minor in [("nvidia%d" % i, i) for i in range(a["gpus"])] + [("nvidiactl", 255)]:
    os.mknod("/dev/" + name, stat.S_IFCHR | 0o666, os.makedev(195, minor))
    os.chmod("/dev/" + name, 0o666)
''' + netns_nodes.HOLDER_END


class Node:
    def __init__(self, cluster, index):
        self.name = f"gsnode{index}"
        self.index = index
        self.dir = os.path.join(cluster.workdir, "nodes", self.name)
        self.run_dir = os.path.join(self.dir, "run")  # /run/gpuslice in the node
        self.ip = f"{cluster.subnet}.{10 + index}"
        self.veth_host = f"gsv{index}{cluster.suffix}"
        self.veth_node = f"gsp{index}{cluster.suffix}"
        self.holder = None
        self.netns_ino = None
        self.cgroups = []  # host paths of this node's cgroups, one per hierarchy
        self.slurmd = None
        self.gpusliced = None
        self.slurmd_log = os.path.join(self.dir, "slurmd.log")
        self.gpusliced_log = os.path.join(self.dir, "gpusliced.log")
        self.holder_log = os.path.join(self.dir, "holder.log")
        self.sim_state = os.path.join(self.dir, "sim", "state")
        self.sim_config = os.path.join(self.dir, "sim", "config.json")
        self.gpuslice_state = os.path.join(self.dir, "gpuslice-state")
        self.uuids = []


class Cluster:
    def __init__(self, workdir, build_dir, nodes=2, gpus_per_node=2, gpu_model="H100-80GB",
                 shards_per_gpu=8, plugstack_lines=(), cpus_per_node=4, real_memory_mb=4000,
                 use_cgroups=None, gpusliced_args=(), slurm_conf_extra=(), start_gpusliced=True):
        """use_cgroups: None picks proctrack/cgroup + task/cgroup
        (ConstrainDevices=yes) when cgroup v1 is there, else proctrack/linuxproc
        + task/none; see `self.use_cgroups` after construction."""
        self.workdir = os.path.realpath(workdir)
        self.build_dir = os.path.realpath(build_dir)
        self.gpus_per_node = gpus_per_node
        self.gpu_model = gpu_model
        self.shards_per_gpu = shards_per_gpu
        self.plugstack_lines = list(plugstack_lines)
        self.cpus_per_node = cpus_per_node
        self.real_memory_mb = real_memory_mb
        self.use_cgroups = _cgroup_v1_usable() if use_cgroups is None else use_cgroups
        self.gpusliced_args = list(gpusliced_args)
        self.slurm_conf_extra = list(slurm_conf_extra)
        self.start_gpusliced = start_gpusliced
        self.suffix = "".join(random.choice(string.ascii_lowercase + string.digits)
                              for _ in range(5))
        self.cluster_name = "gs" + self.suffix
        self.subnet = self._pick_subnet()
        self.bridge = "gsb" + self.suffix
        self.bridge_ip = self.subnet + ".1"
        self.etc = os.path.join(self.workdir, "etc")
        self.slurm_conf = os.path.join(self.etc, "slurm.conf")
        self.munge_dir = os.path.join(self.workdir, "munge")
        self.munge_socket = os.path.join(self.munge_dir, "munge.sock")
        self.ctld_dir = os.path.join(self.workdir, "ctld")
        self.shared_dir = os.path.join(self.workdir, "shared")
        self.ctld_log = os.path.join(self.ctld_dir, "slurmctld.log")
        self.munged_log = os.path.join(self.munge_dir, "munged.log")
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        self.nodes = {}
        for i in range(1, nodes + 1):
            n = Node(self, i)
            self.nodes[n.name] = n
        self.node_list = f"gsnode[1-{nodes}]" if nodes > 1 else "gsnode1"
        self.daemon = os.path.join(self.build_dir, "bin", "gpusliced")
        self.cli = os.path.join(self.build_dir, "bin", "gpuslice")
        self.shim = os.path.join(self.build_dir, "lib", "libgpuslice.so")
        self.sim_lib_dir = os.path.join(self.build_dir, "lib", "sim")
        self.munged = None
        self.slurmctld = None
        self._bridge_made = False
        self._children = []  # background clients (srun_bg ...)
        self._stopped = False
        self._started = False
        self.startup_seconds = None
        atexit.register(self.stop)

    # --- bring-up ------------------------------------------------------

    @staticmethod
    def _pick_subnet():
        """A /24 in 10.0.0.0/8 that no route on the host covers (a collision
        with the host's network would make the cluster unreachable)."""
        routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"],
                                capture_output=True, text=True).stdout
        for _ in range(100):
            subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 255)}"
            if subnet + "." not in routes:
                return subnet
        raise ClusterError("no free 10.x.y.0/24 subnet")

    def start(self):
        t0 = time.monotonic()
        self._started = True
        try:
            ensure_test_users()
            for path in (self.daemon, self.cli, self.shim,
                         os.path.join(self.sim_lib_dir, "libcuda.so.1")):
                if self.start_gpusliced and not os.path.exists(path):
                    raise ClusterError(f"{path} is missing (build the project first)")
            os.makedirs(self.workdir, exist_ok=True)
            os.chmod(self.workdir, 0o755)
            _open_to_others(self.workdir)
            _open_to_others(self.build_dir)
            os.makedirs("/run/gpuslice", exist_ok=True)  # mount point; left in place
            # Where jobs of any user may write (sbatch --output, scratch files).
            os.makedirs(self.shared_dir, exist_ok=True)
            os.chmod(self.shared_dir, 0o1777)
            self._write_configs()
            self._start_munged()
            self._make_network()
            for n in self.nodes.values():
                self._make_node(n)
            self._start_slurmctld()
            for n in self.nodes.values():
                if self.start_gpusliced:
                    self._start_gpusliced(n)
                self._start_slurmd(n)
            self.wait_nodes_idle(30)
        except BaseException:
            logs = self.logs()
            self.stop()
            if sys.exc_info()[0] in (ClusterError, subprocess.TimeoutExpired):
                raise ClusterError(f"{sys.exc_info()[1]}\n{logs}") from None
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _write_configs(self):
        for d in (self.etc, self.munge_dir, self.ctld_dir, os.path.join(self.ctld_dir, "state")):
            os.makedirs(d, mode=0o755, exist_ok=True)
        for n in self.nodes.values():
            for d in (n.dir, n.run_dir, os.path.join(n.dir, "spool"), os.path.dirname(n.sim_state),
                      os.path.join(n.dir, "devstash")):
                os.makedirs(d, mode=0o755, exist_ok=True)
                os.chmod(d, 0o755)
            # Distinct UUIDs per node (the simulator derives them from model and
            # index only, so both nodes would otherwise show the same ones);
            # fixed, so tests may name them: GPU-5106000<node>-000<gpu>-....
            devices = []
            for g in range(self.gpus_per_node):
                uuid = f"GPU-5106{n.index:04x}-{g:04x}-4000-8000-{n.index:04x}{g:08x}"
                n.uuids.append(uuid)
                devices.append({"model": self.gpu_model, "uuid": uuid})
            with open(n.sim_config, "w") as f:
                json.dump({"devices": devices}, f)
        g = self.gpus_per_node
        files = f"/dev/nvidia[0-{g - 1}]" if g > 1 else "/dev/nvidia0"
        shards = g * self.shards_per_gpu
        node_lines = "\n".join(
            f"NodeName={n.name} NodeAddr={n.ip} NodeHostname={n.name} CPUs={self.cpus_per_node} "
            f"RealMemory={self.real_memory_mb} Gres=gpu:{g},shard:{shards} State=UNKNOWN"
            for n in self.nodes.values())
        if self.use_cgroups:
            plugins = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
        else:
            plugins = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none"
        conf = "\n".join([
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}({self.bridge_ip})",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.ctld_dir}/state",
            f"SlurmctldPidFile={self.ctld_dir}/slurmctld.pid",
            f"SlurmctldLogFile={self.ctld_log}",
            "SlurmctldDebug=info",
            f"SlurmdSpoolDir={self.workdir}/nodes/%n/spool",
            f"SlurmdPidFile={self.workdir}/nodes/%n/slurmd.pid",
            f"SlurmdLogFile={self.workdir}/nodes/%n/slurmd.log",
            "SlurmdDebug=debug",
            plugins,
            "GresTypes=gpu,shard",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            f"PlugStackConfig={self.etc}/plugstack.conf",
            "MessageTimeout=10",
            "SlurmdTimeout=60",
            "SlurmctldTimeout=30",
            "KillWait=1",
            "OverTimeLimit=0",
            "UnkillableStepTimeout=20",
            "MinJobAge=120",
            "InactiveLimit=0",
            "TreeWidth=50",
            node_lines,
            f"PartitionName=gs Nodes={self.node_list} Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n"
        conf += "".join(line + "\n" for line in self.slurm_conf_extra)
        with open(self.slurm_conf, "w") as f:
            f.write(conf)
        # One shard line per GPU: which GPU a shard belongs to is then explicit.
        gres = [f"NodeName={self.node_list} Name=gpu File={files}"]
        for i in range(g):
            gres.append(f"NodeName={self.node_list} Name=shard Count={self.shards_per_gpu} "
                        f"File=/dev/nvidia{i}")
        with open(os.path.join(self.etc, "gres.conf"), "w") as f:
            f.write("\n".join(gres) + "\n")
        with open(os.path.join(self.etc, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                    "ConstrainDevices=yes\nConstrainCores=no\nConstrainRAMSpace=no\n")
        with open(os.path.join(self.etc, "plugstack.conf"), "w") as f:
            f.write("".join(line + "\n" for line in self.plugstack_lines))
        for name in os.listdir(self.etc):
            os.chmod(os.path.join(self.etc, name), 0o644)

    def _start_munged(self):
        key = os.path.join(self.munge_dir, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        self.munged = subprocess.Popen(
            [_which("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
             f"--key-file={key}", f"--pid-file={self.munge_dir}/munged.pid",
             f"--log-file={self.munged_log}", f"--seed-file={self.munge_dir}/munged.seed",
             "--num-threads=4"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.munged_log + ".stderr", "w"), start_new_session=True)
        self._wait(lambda: os.path.exists(self.munge_socket), 10, "munged", self.munged)

    def _make_network(self):
        netns_nodes.make_bridge(self.bridge, self.bridge_ip)
        self._bridge_made = True

    def _ip(self, *args, node=None):
        netns_nodes.ip(*args, holder_pid=None if node is None else node.holder.pid)

    def _make_node_cgroups(self, n):
        if not self.use_cgroups:
            return []
        n.cgroups, hierarchies = netns_nodes.make_node_cgroups(
            f"gpuslice-{self.cluster_name}-{n.name}")
        return hierarchies

    def _enter_node_cgroups(self, n):
        """preexec_fn: puts the child into the node's cgroups before it execs
        nsenter, so that in the node's cgroup namespace it is at "/", as the
        processes started there by slurmd will be."""
        return netns_nodes.enter_cgroups(n.cgroups)

    def _make_node(self, n):
        hier = self._make_node_cgroups(n)
        args = {"node": n.name, "run_dir": n.run_dir, "stash": os.path.join(n.dir, "devstash"),
                "gpus": self.gpus_per_node, "cgroups": hier}
        ns = ["--net", "--uts", "--mount", "--propagation", "private"]
        if hier:
            ns.append("--cgroup")
        n.holder = subprocess.Popen(
            [_which("unshare"), *ns, sys.executable, "-c", _HOLDER, json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(n.holder_log, "w"),
            preexec_fn=self._enter_node_cgroups(n), start_new_session=True, text=True)
        line = n.holder.stdout.readline()
        if line.strip() != "ready":
            n.holder.wait(5)
            raise ClusterError(f"setting up {n.name} failed: {_tail(n.holder_log)}")
        n.netns_ino = os.stat(f"/proc/{n.holder.pid}/ns/net").st_ino
        netns_nodes.attach_node(n.holder.pid, n.veth_host, n.veth_node, self.bridge, n.ip,
                                self.bridge_ip)

    def _nsenter(self, n):
        ns = ["-n", "-u", "-m"] + (["-C"] if n.cgroups else [])
        return [_which("nsenter"), "-t", str(n.holder.pid), *ns, "--"]

    def _start_slurmctld(self):
        self.slurmctld = subprocess.Popen(
            [_which("slurmctld"), "-D", "-i", "-f", self.slurm_conf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.ctld_log + ".stderr", "w"), start_new_session=True,
            env=self.client_env())
        self._wait(lambda: self._scontrol_ping(), 20, "slurmctld", self.slurmctld)

    def _scontrol_ping(self):
        r = subprocess.run([_which("scontrol"), "ping"], env=self.client_env(),
                           capture_output=True, text=True, timeout=20)
        return "UP" in r.stdout

    def _start_slurmd(self, n):
        # -N: the node name (the UTS hostname is the same; this makes it certain).
        n.slurmd = subprocess.Popen(
            self._nsenter(n) + [_which("slurmd"), "-D", "-N", n.name, "-f", self.slurm_conf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(n.slurmd_log + ".stderr", "a"), start_new_session=True,
            preexec_fn=self._enter_node_cgroups(n), env=self.client_env())

    def node_env(self, n):
        """The environment of gpusliced and of the CLI in node n: its simulated
        GPUs and its socket. Jobs that use the simulator need
        GPUSLICE_SIM_STATE too (the default state file is per uid)."""
        n = self._node(n)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUSLICE_", "SLURM_")) and k != "LD_PRELOAD"}
        env.update({"GPUSLICE_SOCKET": GPUSLICE_SOCKET, "GPUSLICE_SIM_STATE": n.sim_state,
                    "GPUSLICE_SIM_CONFIG": n.sim_config, "GPUSLICE_SIM_STATE_MODE": "0666",
                    "SLURM_CONF": self.slurm_conf})
        return env

    def _start_gpusliced(self, n):
        os.makedirs(n.gpuslice_state, exist_ok=True)
        n.gpusliced = subprocess.Popen(
            self._nsenter(n) + [
                self.daemon, "--state-dir", n.gpuslice_state, "--socket", GPUSLICE_SOCKET,
                "--shim", self.shim, "--sim-lib-dir", self.sim_lib_dir,
                "--gpu-source", "simulated", "--set", "cgroups=false", "--set", "cdi_dir=",
                "--set", "kill_grace=1s", *self.gpusliced_args],
            stdin=subprocess.DEVNULL, stdout=open(n.gpusliced_log, "a"),
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._enter_node_cgroups(n), env=self.node_env(n))
        # The socket is reachable from here too: the node's /run/gpuslice is
        # n.run_dir. Asking it directly spares a CLI process per poll.
        self._wait(lambda: _http_ok(os.path.join(n.run_dir, "gpuslice.sock"), "/v1/status"),
                   30, f"gpusliced on {n.name}", n.gpusliced)

    def _wait(self, ready, timeout, what, proc=None):
        deadline = time.monotonic() + timeout
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise ClusterError(f"{what} exited with status {proc.returncode}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{what} not ready after {timeout} s")
            time.sleep(0.1)

    # --- clients ---------------------------------------------------------

    def client_env(self, extra=None):
        """Environment for Slurm clients run in the root namespace: our
        slurm.conf, and none of an outer Slurm job's SLURM_* variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = self.slurm_conf
        if extra:
            env.update(extra)
        return env

    def _client_argv(self, argv, user):
        # runuser keeps the environment (SLURM_CONF) and needs no PAM session.
        return ([_which("runuser"), "-u", user, "--"] if user else []) + argv

    def run_client(self, argv, user=None, timeout=60, check=False, env=None, input=None):
        """Runs a Slurm client (srun, sbatch, scontrol ...) from the root
        namespace, as `user` if given. cwd is the workdir: readable by the test
        users, and where srun's tasks start."""
        return subprocess.run(self._client_argv(argv, user), env=self.client_env(env),
                              cwd=self.workdir, capture_output=True, text=True, timeout=timeout,
                              check=check, input=input)

    def srun(self, *args, user=None, timeout=60, check=False, env=None):
        return self.run_client([_which("srun"), *args], user, timeout, check, env)

    def srun_bg(self, *args, user=None, env=None, stdout=subprocess.PIPE):
        """srun in the background (a Popen); stop() kills it if still running."""
        p = subprocess.Popen(self._client_argv([_which("srun"), *args], user),
                             env=self.client_env(env), cwd=self.workdir, stdout=stdout,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._children.append(p)
        return p

    def sbatch(self, *args, user=None, timeout=30, env=None):
        """Submits with --parsable; returns the job id (int)."""
        r = self.run_client([_which("sbatch"), "--parsable", *args], user, timeout, False, env)
        if r.returncode != 0:
            raise ClusterError(f"sbatch {' '.join(args)}: {r.stderr.strip()}")
        return int(r.stdout.strip().split(";")[0])

    def scancel(self, *args, timeout=30):
        return self.run_client([_which("scancel"), *map(str, args)], timeout=timeout)

    def scontrol(self, *args, timeout=30, check=True):
        return self.run_client([_which("scontrol"), *map(str, args)], timeout=timeout, check=check)

    def job(self, job_id):
        """scontrol show job -o as a dict (JobState, NodeList, ExitCode,
        StdOut ...); {} once the job is forgotten (MinJobAge after its end)."""
        r = self.scontrol("show", "job", "-o", str(job_id), check=False)
        if r.returncode != 0:
            return {}
        return _parse_kv(r.stdout)

    def wait_job(self, job_id, timeout=60,
                 states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                         "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")):
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            if time.monotonic() > deadline:
                raise ClusterError(f"job {job_id} still {info.get('JobState')} after {timeout} s")
            time.sleep(0.2)

    def node_state(self):
        r = self.scontrol("show", "node", "-o", check=False)
        out = {}
        for line in r.stdout.splitlines():
            kv = _parse_kv(line)
            if "NodeName" in kv:
                out[kv["NodeName"]] = kv
        return out

    def wait_nodes_idle(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            states = {k: v.get("State", "") for k, v in self.node_state().items()}
            if states and all(s == "IDLE" for s in states.values()):
                return
            for n in self.nodes.values():
                if n.slurmd is not None and n.slurmd.poll() is not None:
                    raise ClusterError(f"slurmd on {n.name} exited ({n.slurmd.returncode})")
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes not idle after {timeout} s: {states}")
            time.sleep(0.2)

    # --- inside a node ------------------------------------------------------

    def _node(self, n):
        return n if isinstance(n, Node) else self.nodes[n]

    def node_exec(self, node, argv, user=None, env=None, timeout=60, check=False, input=None):
        """Runs argv in node's namespaces (network, UTS, mount, cgroup), with
        node_env(node) (its gpusliced socket and simulator) plus env."""
        n = self._node(node)
        full_env = self.node_env(n)
        full_env.update(env or {})
        argv = self._nsenter(n) + self._client_argv(list(argv), user)
        return subprocess.run(argv, env=full_env, capture_output=True, text=True, check=check,
                              timeout=timeout, input=input, cwd=self.workdir,
                              preexec_fn=self._enter_node_cgroups(n))

    def gpuslice(self, node, *args, user=None, timeout=60, check=False):
        return self.node_exec(node, [self.cli, *map(str, args)], user=user, timeout=timeout,
                              check=check)

    def restart_slurmd(self, node, timeout=30):
        n = self._node(node)
        _terminate(n.slurmd)
        self._start_slurmd(n)
        deadline = time.monotonic() + timeout
        while True:  # "responding" again: the node's state loses its '*'.
            state = self.node_state().get(n.name, {}).get("State", "")
            if state and "*" not in state and "DOWN" not in state and n.slurmd.poll() is None:
                # slurmctld may show the old registration for a moment.
                time.sleep(0.5)
                return
            if n.slurmd.poll() is not None:
                raise ClusterError(f"slurmd on {n.name} exited:\n{_tail(n.slurmd_log)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{n.name} not back after {timeout} s: {state}")
            time.sleep(0.2)

    def restart_gpusliced(self, node):
        n = self._node(node)
        _terminate(n.gpusliced)
        self._start_gpusliced(n)

    def node_pids(self, node):
        """Every process in the node's network namespace (slurmd, stepds,
        tasks, gpusliced ...)."""
        n = self._node(node)
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                if os.stat(f"/proc/{p}/ns/net").st_ino == n.netns_ino:
                    pids.append(int(p))
            except OSError:
                pass
        return pids

    # --- logs and teardown ----------------------------------------------------

    def log_paths(self):
        paths = {"munged": self.munged_log, "slurmctld": self.ctld_log}
        for n in self.nodes.values():
            paths[f"slurmd@{n.name}"] = n.slurmd_log
            paths[f"gpusliced@{n.name}"] = n.gpusliced_log
            paths[f"holder@{n.name}"] = n.holder_log
        for key, path in list(paths.items()):
            if os.path.exists(path + ".stderr"):
                paths[key + ".stderr"] = path + ".stderr"
        return paths

    def logs(self, limit=4000):
        """The tail of every daemon log, for a failing test to print."""
        out = []
        for name, path in self.log_paths().items():
            if os.path.exists(path) and os.path.getsize(path):
                out.append(f"===== {name} ({path}) =====\n{_tail(path, limit)}")
        return "\n".join(out)

    def stop(self):
        """Ends every process started here (and everything in the nodes'
        namespaces), removes the bridge and the nodes' cgroups. Namespaces and
        the mounts in them go with their last process. Leaves the workdir (its
        logs) to the caller. Safe to call again and after a failed start."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        for p in self._children:
            _kill_group(p)
        for n in self.nodes.values():
            _terminate(n.slurmd, 2)
            _terminate(n.gpusliced, 2)
        for n in self.nodes.values():
            if n.netns_ino is None:
                continue
            # The stepds and the jobs' processes: whatever is still in the node.
            for _ in range(50):
                pids = [p for p in self.node_pids(n) if p != os.getpid()]
                pids += self._cgroup_pids(n)
                if not pids:
                    break
                for p in set(pids):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.05)
        for n in self.nodes.values():
            if n.holder is not None:
                try:
                    n.holder.stdin.close()
                except OSError:
                    pass
                _terminate(n.holder, 2)
        _terminate(self.slurmctld, 5)
        _terminate(self.munged, 5)
        for n in self.nodes.values():
            subprocess.run(["ip", "link", "del", n.veth_host], capture_output=True)
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for n in self.nodes.values():
            for cg in n.cgroups:
                _remove_cgroup_tree(cg)

    def _cgroup_pids(self, n):
        return _cgroup_pids(n.cgroups)


def _http_ok(unix_socket, path):
    """GET path over the daemon's Unix socket answers 200."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(unix_socket)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: gpusliced\r\nConnection: close\r\n\r\n"
                      .encode())
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def _parse_kv(line):
    """scontrol -o output: space-separated Key=Value (values may hold '=')."""
    out = {}
    for token in line.split():
        k, sep, v = token.partition("=")
        if sep:
            out[k] = v
    return out


def _terminate(proc, grace=5):
    if proc is None:
        return
    if proc.poll() is None:
        try:
            proc.terminate()
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _kill_group(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
