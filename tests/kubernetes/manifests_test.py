#!/usr/bin/env python3
"""Checks deploy/kubernetes/ without a cluster (tests/kubernetes/cluster runs
them on a real one).

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
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
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
    """The shipped objects: base/ (what `kubectl apply -k deploy/kubernetes`
    applies) and the examples; kustomization files are not objects."""
    files = sorted(glob.glob(os.path.join(K8S_DIR, "base", "*.yaml")) +
                   glob.glob(os.path.join(K8S_DIR, "examples", "*.yaml")))
    files = [f for f in files if os.path.basename(f) != "kustomization.yaml"]
    return [(os.path.relpath(f, K8S_DIR), d) for f in files for d in load(f)]


def find(docs, kind, name):
    for _, d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"no {kind} {name}")


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
    with open(os.path.join(PLUGIN_SOURCES, "base", "devices.cc")) as f:
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
            for c in spec["containers"] + spec.get("initContainers", []):
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
        ns_roles = {(d["metadata"]["namespace"], d["metadata"]["name"])
                    for _, d in self.docs if d["kind"] == "Role"}
        # Roles every cluster has (kube-apiserver's bootstrap policy).
        ns_roles.add(("kube-system", "extension-apiserver-authentication-reader"))
        accounts = {(d["metadata"]["namespace"], d["metadata"]["name"])
                    for _, d in self.docs if d["kind"] == "ServiceAccount"}
        for where, d in self.docs:
            if d["kind"] in ("ClusterRole", "Role"):
                for rule in d["rules"]:
                    for key in ("apiGroups", "resources", "verbs"):
                        self.assertTrue(rule.get(key) is not None, f"{where}: rule {key}")
            if d["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            ref = d["roleRef"]
            self.assertEqual(ref["apiGroup"], "rbac.authorization.k8s.io", where)
            if ref["kind"] == "Role":
                self.assertEqual(d["kind"], "RoleBinding", where)
                self.assertIn((d["metadata"]["namespace"], ref["name"]), ns_roles, where)
            elif not ref["name"].startswith("system:"):
                self.assertIn(ref["name"], roles, where)
            for s in d["subjects"]:
                self.assertIn((s["namespace"], s["name"]), accounts, where)

    def test_namespaced_objects_live_in_the_shipped_namespace(self):
        namespaces = {d["metadata"]["name"] for _, d in self.docs if d["kind"] == "Namespace"}
        for where, d in self.docs:
            if where.startswith("examples"):
                continue
            if d["kind"] in ("ServiceAccount", "ConfigMap", "DaemonSet", "Deployment", "Service",
                             "Role"):
                self.assertIn(d["metadata"].get("namespace"), namespaces, where)
            if d["kind"] == "RoleBinding":  # Ours, or kube-system's reader role.
                self.assertIn(d["metadata"].get("namespace"), namespaces | {"kube-system"}, where)


class OurParts(unittest.TestCase):
    def setUp(self):
        self.docs = manifests()

    def containers(self):
        for where, d in self.docs:
            spec = pod_spec(d)
            for c in (spec or {}).get("containers", []) + (spec or {}).get("initContainers", []):
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

    # What an admin reading the manifests trips over, each pinned.

    def daemon_conf(self):
        conf = find(self.docs, "ConfigMap", "gpusliced-config")["data"]["gpusliced.conf"]
        return dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", conf, re.M))

    def node_spec(self):
        return find(self.docs, "DaemonSet", "gpuslice-node")["spec"]["template"]["spec"]

    def test_the_second_scheduler_may_take_its_own_lease(self):
        """The built-in system:kube-scheduler role grants get/update only on
        the lease named kube-scheduler: a Role must grant the one the
        configuration names, in its namespace, to the scheduler's account."""
        election = self.scheduler_config()["leaderElection"]
        ns, name = election["resourceNamespace"], election["resourceName"]
        self.assertEqual(election.get("resourceLock", "leases"), "leases")
        account = find(self.docs, "Deployment", "gpuslice-scheduler")["spec"]["template"]["spec"][
            "serviceAccountName"]
        granted = set()
        for _, d in self.docs:
            if d["kind"] != "RoleBinding" or d["metadata"]["namespace"] != ns:
                continue
            if not any(s["kind"] == "ServiceAccount" and s["name"] == account
                       for s in d["subjects"]):
                continue
            role = find(self.docs, "Role", d["roleRef"]["name"])
            for rule in role["rules"]:
                if "coordination.k8s.io" in rule["apiGroups"] and "leases" in rule["resources"]:
                    for verb in rule["verbs"]:
                        names = rule.get("resourceNames")
                        if names is None or name in names:
                            granted.add(verb)
        self.assertLessEqual({"create", "get", "update"}, granted)

    def test_probes_reach_the_pod(self):
        """The kubelet runs probes from the node: a probe's host must not be
        loopback, and its port must be served on the pod's address."""
        for where, c in self.containers():
            probe = c.get("readinessProbe", {}).get("httpGet")
            if not probe:
                continue
            self.assertNotIn(probe.get("host", ""), ("127.0.0.1", "localhost", "::1"), where)
            listens = [a.split("=", 1)[1] for a in c.get("command", [])
                       if a.startswith(("--listen=", "--webhook-listen="))]
            if c["name"] == "gpusliced":
                listens = [self.daemon_conf()["metrics_listen"]]
            served = [hp for hp in listens if hp.rsplit(":", 1)[1] == str(probe["port"])]
            self.assertTrue(served, f"{where}: {c['name']} probes port {probe['port']}")
            self.assertTrue(all(not hp.startswith("127.") for hp in served), f"{where}: {served}")
            if any(a.startswith("--webhook-listen=") and a.endswith(f":{probe['port']}")
                   for a in c.get("command", [])):
                self.assertEqual(probe.get("scheme"), "HTTPS", where)

    def test_the_daemon_uses_the_hosts_driver_and_never_falls_back_to_the_simulator(self):
        conf = self.daemon_conf()
        self.assertEqual(conf.get("gpu_source"), "nvml")
        spec = self.node_spec()
        daemon = [c for c in spec["containers"] if c["name"] == "gpusliced"][0]
        mounts = {m["mountPath"]: m for m in daemon["volumeMounts"]}
        root = mounts.get(conf.get("driver_root"))
        self.assertIsNotNone(root, f"driver_root {conf.get('driver_root')} is not mounted")
        self.assertTrue(root.get("readOnly"), "the driver root is mounted read-only")
        volume = [v for v in spec["volumes"] if v["name"] == root["name"]][0]
        self.assertIn("hostPath", volume)

    def test_cdi_and_container_answers_name_the_shim_where_the_host_has_it(self):
        """The runtime resolves the paths of a CDI spec (and of the device
        plugin's --no-cdi answers) on the host: the daemon is told the shim's
        host path, mounted at the same path, where an init container copies
        it from the image."""
        shim = self.daemon_conf().get("shim", "")
        spec = self.node_spec()
        volumes = {v["name"]: v for v in spec["volumes"]}
        daemon = [c for c in spec["containers"] if c["name"] == "gpusliced"][0]
        folder = os.path.dirname(shim)
        mount = [m for m in daemon["volumeMounts"] if m["mountPath"] == folder]
        self.assertTrue(mount, f"shim folder {folder} not mounted into gpusliced")
        self.assertEqual(volumes[mount[0]["name"]]["hostPath"]["path"], folder)
        copiers = [c for c in spec.get("initContainers", [])
                   if any(m["mountPath"] == folder and not m.get("readOnly")
                          for m in c.get("volumeMounts", []))]
        self.assertTrue(copiers, "no init container writes the shim's host folder")
        self.assertIn(shim, " ".join(copiers[0]["command"]))

    def test_the_daemonset_tolerates_tainted_gpu_nodes(self):
        keys = {t.get("key") for t in self.node_spec().get("tolerations", [])
                if t.get("operator") == "Exists"}
        self.assertLessEqual({"nvidia.com/gpu", "gpuslice.dev/gpu"}, keys)

    def test_the_webhook_reaches_the_extenders_tls_listener(self):
        hook = find(self.docs, "MutatingWebhookConfiguration", "gpuslice-scheduler-name")
        w = hook["webhooks"][0]
        self.assertEqual(w["admissionReviewVersions"], ["v1"])
        self.assertEqual(w["sideEffects"], "None")
        self.assertEqual(w["failurePolicy"], "Ignore")  # Pod creation never waits on it.
        self.assertEqual(w["rules"][0]["resources"], ["pods"])
        ref = w["clientConfig"]["service"]
        self.assertEqual(ref["path"], "/mutate")
        svc = find(self.docs, "Service", ref["name"])
        self.assertEqual(svc["metadata"]["namespace"], ref["namespace"])
        port = [p for p in svc["spec"]["ports"] if p["port"] == ref.get("port", 443)][0]
        dep = find(self.docs, "Deployment", "gpuslice-scheduler")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v)
        ext = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"][0]
        listen = [a for a in ext["command"] if a.startswith("--webhook-listen=")][0]
        self.assertTrue(listen.endswith(f":{port['targetPort']}"), listen)
        secret = [v for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v][0]
        with open(os.path.join(K8S_DIR, "webhook-tls.sh")) as f:
            script = f.read()
        self.assertIn(f"secret={secret['secret']['secretName']}", script)
        self.assertIn(f"webhook={hook['metadata']['name']}", script)
        self.assertIn(f"service={ref['name']}", script)

    def test_the_simulated_overlay_changes_only_what_it_says(self):
        """overlays/simulated: images, the simulated GPU, --no-cdi, and the
        scheduler configuration's apiVersion; its configuration is the
        base's otherwise."""
        d = os.path.join(K8S_DIR, "overlays", "simulated")
        with open(os.path.join(d, "kustomization.yaml")) as f:
            k = yaml.safe_load(f)
        self.assertEqual(k["bases"], ["../../base"])
        self.assertEqual({i["name"] for i in k["images"]}, {"gpuslice", "registry.k8s.io/kube-scheduler"})
        patched = [x for p in k["patchesStrategicMerge"] for x in load(os.path.join(d, p))]
        overlay_cfg = yaml.safe_load(
            [x for x in patched if x["metadata"]["name"] == "gpuslice-scheduler-config"][0]
            ["data"]["config.yaml"])
        base_cfg = self.scheduler_config()
        self.assertEqual(overlay_cfg.pop("apiVersion"), "kubescheduler.config.k8s.io/v1beta1")
        base_cfg.pop("apiVersion")
        self.assertEqual(overlay_cfg, base_cfg)
        conf = [x for x in patched if x["metadata"]["name"] == "gpusliced-config"][0]
        sim = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", conf["data"]["gpusliced.conf"], re.M))
        self.assertEqual(sim.pop("gpu_source"), "simulated")
        sim.pop("sim_lib_dir")
        base = self.daemon_conf()
        for key in ("gpu_source", "driver_root"):
            base.pop(key)
        self.assertEqual(sim, base)
        ds = [x for x in patched if x["kind"] == "DaemonSet"][0]["spec"]["template"]["spec"]
        env = {e["name"]: e["value"] for c in ds["containers"] for e in c.get("env", [])}
        state_dir = os.path.dirname(env["GPUSLICE_SIM_STATE"])
        # The simulator's folder holds its state alone: never the daemon's.
        for key in ("state_dir", "socket", "cdi_dir"):
            self.assertFalse(base[key].startswith(state_dir), key)
        self.assertIn(state_dir, [v["hostPath"]["path"] for v in ds["volumes"]])

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
                 "--set", "metrics_listen=127.0.0.1:0", "--set", f"cdi_dir={tmp}/cdi",
                 "--set", "shim=" + os.path.join(os.path.dirname(os.environ["GPUSLICE_DAEMON"]),
                                                 "..", "lib", "libgpuslice.so")],
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
