"""Nodes of a test cluster on one machine: what the Slurm and the Kubernetes
cluster tests share (tests/slurm/cluster.py, tests/kubernetes/cluster/cluster.py).

A node is a set of namespaces (network, UTS, mount, and cgroup where the host's
cgroups allow) kept alive by a holder process that each cluster writes for its
engine; its daemons are started into them with nsenter. What is the same for
every engine lives here:
  * programs looked up on PATH and the sbin folders, errors as ClusterError;
  * a per-node cgroup in each hierarchy this process belongs to (entered
    before the holder execs, so that in the node's cgroup namespace it is
    at "/"), the pids in it, and its removal;
  * the network: a bridge in the root namespace holding the .1 address, and
    one veth per node, its node end renamed eth0 with a default route via the
    bridge.

Python 3 standard library only.
"""

import os
import shutil
import socket
import subprocess
import sys
import time

SKIP = 77  # CTest's SKIP_RETURN_CODE.


class ClusterError(RuntimeError):
    pass


def skip(why):
    print("SKIP: " + why, flush=True)
    sys.exit(SKIP)


def which(name):
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if path is None:
        raise ClusterError(f"{name} not found")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def tail(path, limit=6000):
    """The last `limit` bytes of a log, for a failure's report."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError as e:
        return f"({e})"


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise ClusterError(" ".join(map(str, argv)) + ": " + (r.stderr or r.stdout).strip())
    return r


# --- cgroups ---------------------------------------------------------------

def cgroup_hierarchies():
    """[(mountpoint, fstype, mount options, our cgroup path)] for every cgroup
    hierarchy mounted on the host that this process belongs to."""
    mine = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            mine[ctrls] = path
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fstype, opts = line.split()[:4]
            if fstype == "cgroup2" and "" in mine:
                out.append((mnt, fstype, opts, mine[""]))
            elif fstype == "cgroup":
                optset = set(opts.split(","))
                for ctrls, path in mine.items():
                    if ctrls and set(ctrls.split(",")) <= optset:
                        out.append((mnt, fstype, opts, path))
                        break
    return out


def make_node_cgroups(name):
    """Makes cgroup `name` beside this process's own in every hierarchy.
    Returns (the cgroups' host paths, [(mountpoint, fstype, options)] for the
    holder to mount the hierarchies again inside the node's cgroup namespace)."""
    cgroups, hierarchies = [], []
    for mnt, fstype, opts, path in cgroup_hierarchies():
        cg = os.path.join(mnt + path, name)
        os.makedirs(cg, exist_ok=True)
        cgroups.append(cg)
        # cpuset v1: a new cgroup has no CPUs or memory nodes until given.
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if os.path.exists(os.path.join(cg, knob)):
                with open(os.path.join(os.path.dirname(cg), knob)) as f:
                    value = f.read().strip()
                with open(os.path.join(cg, knob), "w") as f:
                    f.write(value)
        hierarchies.append((mnt, fstype, opts))
    return cgroups, hierarchies


def enter_cgroups(cgroups):
    """A preexec_fn that puts the child into `cgroups` before it execs, so
    that in the node's cgroup namespace it is at "/"."""
    cgroups = list(cgroups)

    def enter():
        for cg in cgroups:
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    return enter


def cgroup_pids(cgroups):
    """The pids in `cgroups` and every cgroup below them."""
    pids = []
    for cg in cgroups:
        for root, _, _ in os.walk(cg):
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    pids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    return pids


def remove_cgroup_tree(cg):
    """Removes `cg` and the cgroups below it, waiting a little for the last
    processes to leave them."""
    for _ in range(50):
        if not os.path.isdir(cg):
            return
        for root, _, _ in os.walk(cg, topdown=False):
            try:
                os.rmdir(root)
            except OSError:
                pass
        if not os.path.isdir(cg):
            return
        time.sleep(0.1)


# --- the holder's start and end ------------------------------------------

# The first lines of every cluster's holder script: its arguments (`a`, from
# JSON), `sh` that exits with the failing command's error, the node's host
# name and its loopback.
HOLDER_START = r'''
import json, os, socket, stat, subprocess, sys
a = json.loads(sys.argv[1])
def sh(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        sys.exit(" ".join(argv) + ": " + r.stderr.strip())
socket.sethostname(a["node"])
sh("ip", "link", "set", "lo", "up")
'''

# The last lines of every cluster's holder script (python, run by `unshare`
# in the node's new namespaces, its arguments in `a`): the cgroup hierarchies
# mounted again inside the node's cgroup namespace, so that their root is the
# node's cgroup; then "ready", and a wait until its stdin closes (the parent's
# pipe: so it also ends when the test process dies).
HOLDER_END = r'''
if a["cgroups"]:
    sh("mount", "-t", "tmpfs", "-o", "mode=755", "cgroup-" + a["node"], "/sys/fs/cgroup")
    for mnt, fstype, opts in a["cgroups"]:
        os.makedirs(mnt, exist_ok=True)
        sh("mount", "-t", fstype, "-o", opts, fstype, mnt)
print("ready", flush=True)
sys.stdin.read()
'''


# --- the network -----------------------------------------------------------

def ip(*args, holder_pid=None):
    """Runs `ip ARGS`, in the network namespace of `holder_pid` if given."""
    argv = ["ip", *args]
    if holder_pid is not None:
        argv = [which("nsenter"), "-t", str(holder_pid), "-n", "--", *argv]
    run(argv)


def make_bridge(bridge, address):
    """The bridge the nodes' veths join, `address` (no prefix) on it, /24."""
    ip("link", "add", bridge, "type", "bridge")
    ip("addr", "add", f"{address}/24", "dev", bridge)
    ip("link", "set", bridge, "up")


def attach_node(holder_pid, veth_host, veth_node, bridge, address, gateway):
    """Joins the node of `holder_pid` to `bridge`: a veth pair, its node end
    eth0 with `address`/24 and a default route via `gateway`."""
    ip("link", "add", veth_host, "type", "veth", "peer", "name", veth_node)
    ip("link", "set", veth_node, "netns", str(holder_pid))
    ip("link", "set", veth_host, "master", bridge)
    ip("link", "set", veth_host, "up")
    ip("link", "set", veth_node, "name", "eth0", holder_pid=holder_pid)
    ip("addr", "add", f"{address}/24", "dev", "eth0", holder_pid=holder_pid)
    ip("link", "set", "eth0", "up", holder_pid=holder_pid)
    ip("route", "add", "default", "via", gateway, holder_pid=holder_pid)
