#!/usr/bin/env python3
"""Checks deploy/kubernetes/ without a cluster (none can run here).

Every manifest is read with PyYAML and checked against the shape the API
server requires of its kind (the fields a real `kubectl apply` would refuse
without), and against our own parts: every flag a container passes to one
of our binaries is one that binary's --help lists; the scheduler
configuration's extender verbs, port and managed resources are the ones
the extender serves and the device plugin registers; the examples ask only
for resources that exist and name the scheduler that is deployed.

Environment: GPUSLICE_K8S_DIR (deploy/kubernetes), GPUSLICE_DAEMON,
GPUSLICE_DEVICE_PLUGIN, GPUSLICE_EXTENDER (the binaries),
GPUSLICE_PLUGIN_SOURCES (src/kubernetes/device_plugin).
"""

import glob
import os
import re
import subprocess
import sys
import unittest

import yaml

K8S_DIR = os.environ["GPUSLICE_K8S_DIR"]
BINARIES = {
    "/usr/local/bin/gpusliced": os.environ["GPUSLICE_DAEMON"],
    "/usr/local/bin/gpuslice-device-plugin": os.environ["GPUSLICE_DEVICE_PLUGIN"],
    "/usr/local/bin/gpuslice-scheduler-extender": os.environ["GPUSLICE_EXTENDER"],
}
PLUGIN_SOURCES = os.environ["GPUSLICE_PLUGIN_SOURCES"]

# apiVersion of each kind we ship, as the API server serves it.
KINDS = {
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "ConfigMap": "v1",
    "Pod": "v1",
    "Service": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "DaemonSet": "apps/v1",
    "Deployment": "apps/v1",
    "Job": "batch/v1",
}
NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
RESOURCE_NAME = re.compile(r"^gpuslice\.dev/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifests():
    files = sorted(glob.glob(os.path.join(K8S_DIR, "*.yaml")) +
                   glob.glob(os.path.join(K8S_DIR, "examples", "*.yaml")))
    return [(os.path.relpath(f, K8S_DIR), d) for f in files for d in load(f)]


def pod_spec(doc):
    kind = doc["kind"]
    if kind == "Pod":
        return doc["spec"]
    if kind in ("Deployment", "DaemonSet", "Job"):
        return doc["spec"]["template"]["spec"]
    return None


def plugin_resources():
    """The resource names the device plugin accepts (ParseResource in its
    devices.cc: what it registers with the kubelet), MIG profiles aside."""
    with open(os.path.join(PLUGIN_SOURCES, "devices.cc")) as f:
        text = f.read()
    names = {"gpuslice.dev/" + s for s in re.findall(r'if \(s == "([a-z-]+)"\) return Resource', text)}
    if 'kMigPrefix = "mig-"' in text:
        names.add("gpuslice.dev/mig-")
    return names


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out.stdout + out.stderr))


class ManifestShapes(unittest.TestCase):
    def setUp(self):
        self.docs = manifests()
        self.assertGreater(len(self.docs), 10)

    def test_every_document_has_a_known_kind_version_and_a_valid_name(self):
        for where, d in self.docs:
            kind = d.get("kind")
            self.assertIn(kind, KINDS, where)
            self.assertEqual(d.get("apiVersion"), KINDS[kind], f"{where}: {kind}")
            name = d.get("metadata", {}).get("name", "")
            self.assertRegex(name, NAME, f"{where}: {kind} name")
            self.assertLessEqual(len(name), 63 if kind in ("Pod", "Namespace") else 253)

    def test_workloads_select_their_own_pods_and_mount_declared_volumes(self):
        for where, d in self.docs:
            spec = pod_spec(d)
            if spec is None:
                continue
            if d["kind"] in ("Deployment", "DaemonSet"):
                selector = d["spec"]["selector"]["matchLabels"]
                labels = d["spec"]["template"]["metadata"]["labels"]
                for k, v in selector.items():
                    self.assertEqual(labels.get(k), v, f"{where}: selector {k}")
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for v in volumes.values():
                kinds = [k for k in ("hostPath", "configMap", "emptyDir", "secret") if k in v]
                self.assertEqual(len(kinds), 1, f"{where}: volume {v['name']}")
                if "hostPath" in v:
                    self.assertTrue(v["hostPath"]["path"].startswith("/"), where)
            names = set()
            for c in spec["containers"]:
                self.assertRegex(c["name"], NAME, where)
                self.assertNotIn(c["name"], names, f"{where}: duplicate container")
                names.add(c["name"])
                self.assertTrue(c.get("image"), f"{where}: {c['name']} has no image")
                for m in c.get("volumeMounts", []):
                    self.assertIn(m["name"], volumes, f"{where}: {c['name']} mounts {m['name']}")
                    self.assertTrue(m["mountPath"].startswith("/"), where)
                for p in c.get("ports", []):
                    self.assertTrue(1 <= p["containerPort"] <= 65535, where)
            if "serviceAccountName" in spec:
                accounts = {x["metadata"]["name"] for _, x in self.docs
                            if x["kind"] == "ServiceAccount"}
                self.assertIn(spec["serviceAccountName"], accounts, where)

    def test_role_bindings_name_roles_and_accounts_that_exist(self):
        roles = {d["metadata"]["name"] for _, d in self.docs if d["kind"] == "ClusterRole"}
        accounts = {(d["metadata"]["namespace"], d["metadata"]["name"])
                    for _, d in self.docs if d["kind"] == "ServiceAccount"}
        for where, d in self.docs:
            if d["kind"] == "ClusterRole":
                for rule in d["rules"]:
                    for key in ("apiGroups", "resources", "verbs"):
                        self.assertTrue(rule.get(key) is not None, f"{where}: rule {key}")
            if d["kind"] != "ClusterRoleBinding":
                continue
            ref = d["roleRef"]
            self.assertEqual(ref["apiGroup"], "rbac.authorization.k8s.io", where)
            if not ref["name"].startswith("system:"):
                self.assertIn(ref["name"], roles, where)
            for s in d["subjects"]:
                self.assertIn((s["namespace"], s["name"]), accounts, where)

    def test_namespaced_objects_live_in_the_shipped_namespace(self):
        namespaces = {d["metadata"]["name"] for _, d in self.docs if d["kind"] == "Namespace"}
        for where, d in self.docs:
            if where.startswith("examples"):
                continue
            if d["kind"] in ("ServiceAccount", "ConfigMap", "DaemonSet", "Deployment", "Service"):
                self.assertIn(d["metadata"].get("namespace"), namespaces, where)


class OurParts(unittest.TestCase):
    def setUp(self):
        self.docs = manifests()

    def containers(self):
        for where, d in self.docs:
            spec = pod_spec(d)
            for c in (spec or {}).get("containers", []):
                yield where, c

    def test_every_flag_given_to_our_binaries_is_one_they_know(self):
        known = {path: help_flags(binary) for path, binary in BINARIES.items()}
        used = 0
        for where, c in self.containers():
            argv = c.get("command", []) + c.get("args", [])
            if not argv or argv[0] not in BINARIES:
                continue
            for arg in argv[1:]:
                if arg.startswith("--"):
                    flag = arg.split("=", 1)[0]
                    self.assertIn(flag, known[argv[0]], f"{where}: {argv[0]} {flag}")
                    used += 1
        self.assertGreater(used, 5)

    def scheduler_config(self):
        for _, d in self.docs:
            if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {}):
                return yaml.safe_load(d["data"]["config.yaml"])
        self.fail("no KubeSchedulerConfiguration")

    def test_the_scheduler_configuration_matches_the_extender_and_the_plugin(self):
        cfg = self.scheduler_config()
        self.assertEqual(cfg["apiVersion"], "kubescheduler.config.k8s.io/v1")
        self.assertEqual(cfg["kind"], "KubeSchedulerConfiguration")
        ext = cfg["extenders"][0]
        # The verbs are the extender's routes (POST /filter, /prioritize, /bind).
        self.assertEqual((ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]),
                         ("filter", "prioritize", "bind"))
        self.assertTrue(0 < ext["weight"] <= 100)
        port = re.match(r"^http://127\.0\.0\.1:(\d+)$", ext["urlPrefix"]).group(1)
        listens = [a for _, c in self.containers()
                   for a in c.get("command", []) if a.startswith("--listen=")]
        self.assertEqual(listens, [f"--listen=127.0.0.1:{port}"])
        registered = plugin_resources()
        self.assertIn("gpuslice.dev/gpu-memory", registered)
        for r in ext["managedResources"]:
            self.assertIn(r["name"], registered)
        # The profile's name is what the examples ask for.
        names = {p["schedulerName"] for p in cfg["profiles"]}
        for where, d in self.docs:
            spec = pod_spec(d)
            if spec and "schedulerName" in spec:
                self.assertIn(spec["schedulerName"], names, where)

    def test_examples_ask_for_resources_that_exist_with_valid_counts_and_priorities(self):
        registered = plugin_resources()
        seen = 0
        for where, d in self.docs:
            if not where.startswith("examples"):
                continue
            meta = d["metadata"] if d["kind"] == "Pod" else d["spec"]["template"].get(
                "metadata", {})
            prio = meta.get("annotations", {}).get("gpuslice.dev/priority")
            if prio is not None:
                self.assertIn(prio, ("low", "normal", "high"), where)
            for c in pod_spec(d)["containers"]:
                limits = c.get("resources", {}).get("limits", {})
                ours = {k: v for k, v in limits.items() if k.startswith("gpuslice.dev/")}
                for k, v in ours.items():
                    self.assertRegex(k, RESOURCE_NAME, where)
                    self.assertTrue(k in registered or (k.startswith("gpuslice.dev/mig-") and
                                                        "gpuslice.dev/mig-" in registered), where)
                    self.assertIsInstance(v, int, f"{where}: {k} must be a whole count")
                    self.assertGreater(v, 0, where)
                if "gpuslice.dev/gpu-share" in ours:
                    self.assertIn("gpuslice.dev/gpu-memory", ours, f"{where}: share needs memory")
                    self.assertLessEqual(ours["gpuslice.dev/gpu-share"], 100, where)
                seen += bool(ours)
        self.assertGreaterEqual(seen, 3)

    def test_the_daemon_serves_the_extender_where_the_manifests_say(self):
        conf = None
        for _, d in self.docs:
            if d["kind"] == "ConfigMap" and "gpusliced.conf" in d.get("data", {}):
                conf = d["data"]["gpusliced.conf"]
        self.assertIsNotNone(conf)
        port = re.search(r"^metrics_listen\s*=\s*[0-9.]+:(\d+)$", conf, re.M).group(1)
        args = [a for _, c in self.containers() for a in c.get("command", [])]
        self.assertIn(f"--daemon-port={port}", args)
        # The daemon starts with the file (it stops at once, naming FILE:LINE,
        # on an unknown key or a bad value), with its paths moved into a
        # temporary directory.
        self.start_daemon_with(conf)

    def start_daemon_with(self, conf):
        import tempfile
        import time
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gpusliced.conf")
            with open(path, "w") as f:
                f.write(conf)
            sock = os.path.join(tmp, "gpuslice.sock")
            env = dict(os.environ, GPUSLICE_SIM_STATE=os.path.join(tmp, "sim-state"))
            proc = subprocess.Popen(
                [os.environ["GPUSLICE_DAEMON"], "--config", path, "--gpu-source", "simulated",
                 "--set", f"socket={sock}", "--set", f"state_dir={tmp}/state",
                 "--set", "metrics_listen=127.0.0.1:0", "--set", f"cdi_dir={tmp}/cdi"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            try:
                deadline = time.monotonic() + 60
                while not os.path.exists(sock) and proc.poll() is None:
                    self.assertLess(time.monotonic(), deadline, "gpusliced did not start")
                    time.sleep(0.1)
                if proc.poll() is not None:
                    self.fail(f"gpusliced refused the file: {proc.stdout.read()}")
            finally:
                proc.terminate()
                proc.wait(timeout=30)

if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False).result.wasSuccessful() else 1)
