#!/usr/bin/env python3
"""What a gpuslice slice adds to a pod's start, on a real Kubernetes 1.20
(tests/kubernetes/cluster: two nodes on this machine, deploy/kubernetes
through overlays/simulated).

    sudo bench/kubernetes/pod_start_bench.py BUILD_DIR [--runs 10]

Each run creates the same pod twice on the same node, one after the other:
once plain (the default scheduler), once asking for a slice
(gpuslice.dev/gpu-memory: 1, gpu-share: 10: the admission webhook, the
second scheduler with the extender's filter, prioritize and bind, the device
plugin's Allocate and gpusliced's external job). A pod's start is from just
before `kubectl create` to the first instruction of its container, which
prints the clock (the same clock: one machine). The order alternates from
run to run. Prints the median and p90 of each and the median difference;
exits 1 when that difference is over the target (300 ms).

Needs root and Kubernetes built by scripts/test-kubernetes.sh.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.realpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "kubernetes", "cluster"))
import cluster as kube  # noqa: E402

TARGET_MS = 300.0
NODE = "knode1"


def pod(name, slice_):
    limits = {"gpuslice.dev/gpu-memory": 1, "gpuslice.dev/gpu-share": 10} if slice_ else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"kubernetes.io/hostname": NODE},
                     "containers": [{"name": "main", "image": kube.GPUSLICE_IMAGE,
                                     "command": ["/bin/sh", "-c", "date +%s%N; exec sleep 3600"],
                                     "resources": {"limits": limits}}]}}


def start_ms(c, name, slice_):
    t0 = time.time_ns()
    r = c.kubectl("create", "-f", "-", input=json.dumps(pod(name, slice_)))
    if r.returncode != 0:
        raise RuntimeError(f"create {name}: {r.stderr.strip()}")
    deadline = time.monotonic() + 60
    while True:
        out = c.kubectl("logs", name).stdout.strip()
        if out.isdigit():
            return (int(out) - t0) / 1e6
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start: {c.kubectl('describe', 'pod', name).stdout[-1500:]}")
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    kube.require_prerequisites()
    workdir = tempfile.mkdtemp(prefix="gpuslice-pod-start-")
    os.chmod(workdir, 0o755)
    c = kube.KubeCluster(workdir, args.build_dir, repo_root=REPO).start()
    try:
        c.deploy_gpuslice(os.path.join(REPO, "deploy", "kubernetes", "overlays", "simulated"),
                          label_nodes=list(c.nodes))
        # One of each first, not counted: the first pull of the image's
        # layers into the page cache, the scheduler's first extender call.
        start_ms(c, "warm-plain", False)
        start_ms(c, "warm-slice", True)
        plain, sliced = [], []
        for i in range(args.runs):
            order = [(False, plain), (True, sliced)]
            if i % 2:
                order.reverse()
            for slice_, out in order:
                name = f"{'slice' if slice_ else 'plain'}-{i}"
                out.append(start_ms(c, name, slice_))
                c.kubectl("delete", "pod", name, "--wait=false", "--grace-period=0")
        c.kubectl("delete", "pod", "--all", "--wait=false", "--grace-period=0")

        def p90(xs):
            return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]
        diff = statistics.median(sliced) - statistics.median(plain)
        print(f"pod start, {args.runs} runs each on {NODE} (Kubernetes {kube.K8S_VERSION}, "
              f"containerd, simulated GPUs):")
        print(f"  plain pod:        median {statistics.median(plain):7.0f} ms  p90 {p90(plain):7.0f} ms"
              f"  ({', '.join(f'{x:.0f}' for x in plain)})")
        print(f"  pod with a slice: median {statistics.median(sliced):7.0f} ms  p90 {p90(sliced):7.0f} ms"
              f"  ({', '.join(f'{x:.0f}' for x in sliced)})")
        print(f"  a slice adds {diff:.0f} ms at the median (target <= {TARGET_MS:.0f} ms)")
        code = 0 if diff <= TARGET_MS else 1
    finally:
        c.stop()
    import shutil
    shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
