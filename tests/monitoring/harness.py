"""Shared pieces of the monitoring end-to-end tests: a real gpusliced on the
simulated GPU with its metrics listener, a real Prometheus and Alertmanager
on free ports, each in the test's own temporary directory.

Paths come from the environment CTest sets (tests/monitoring/CMakeLists.txt);
nothing here knows where the build tree is.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests.


def need(path, package):
    """Exits with SKIP when an optional program is not installed."""
    if not path or not os.path.exists(path):
        print(f"SKIP: {path or 'program'} not found (Debian package '{package}')")
        sys.exit(SKIP)


def env_path(name):
    value = os.environ.get(name, "")
    if not value:
        sys.exit(f"{name} is not set (run this test through ctest)")
    return value


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout_s=30, interval_s=0.2):
    """Polls `predicate` until it returns something truthy; fails the test
    after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # Not up yet, connection refused, ...
            last_error = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


def http_get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


class Workspace:
    """A temporary directory and the processes started in it; everything is
    stopped and removed at exit, also when the test fails."""

    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        self.procs = []

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                             cwd=self.dir, start_new_session=True)
        self.procs.append((name, p))
        return p

    def log(self, name):
        try:
            with open(os.path.join(self.dir, name + ".log")) as f:
                return f.read()
        except OSError:
            return ""

    def close(self, keep_logs_on_failure=False):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
        if keep_logs_on_failure:
            for name, _ in self.procs:
                print(f"--- {name}.log ---\n{self.log(name)[-4000:]}")
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """gpusliced on the simulated GPU with --metrics-listen 127.0.0.1:0."""

    def __init__(self, ws, gpus="1xH100-80GB"):
        self.ws = ws
        self.state = os.path.join(ws.dir, "state")
        self.socket = os.path.join(ws.dir, "gpuslice.sock")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
        self.env.update({
            "GPUSLICE_SOCKET": self.socket,
            "GPUSLICE_SIM_STATE": os.path.join(ws.dir, "sim-state"),
            "GPUSLICE_SIM_GPUS": gpus,
        })
        argv = [env_path("GPUSLICE_DAEMON"), "--state-dir", self.state, "--socket", self.socket,
                "--shim", env_path("GPUSLICE_SHIM"), "--sim-lib-dir", env_path("GPUSLICE_SIM_DIR"),
                "--gpu-source", "simulated", "--metrics-listen", "127.0.0.1:0",
                "--set", "kill_grace=1s"]
        self.proc = ws.start("gpusliced", argv, self.env)
        addr_file = os.path.join(self.state, "metrics.addr")

        def address():
            if self.proc.poll() is not None:
                raise AssertionError("gpusliced exited: " + ws.log("gpusliced")[-2000:])
            with open(addr_file) as f:
                text = f.read()
            return text.strip() if text.endswith("\n") else None

        self.metrics_address = wait_until("the daemon's metrics.addr", address)

    def cli(self, *args, check=True):
        r = subprocess.run([env_path("GPUSLICE_CLI"), *args], env=self.env, capture_output=True,
                           text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"gpuslice {' '.join(args)} failed ({r.returncode}): "
                                 f"{r.stdout}{r.stderr}")
        return r

    def submit(self, *args):
        """Submits a job; returns its id."""
        r = self.cli("submit", "--json", *args)
        return json.loads(r.stdout)["id"]

    def metrics(self):
        status, ctype, body = http_get(f"http://{self.metrics_address}/metrics")
        assert status == 200, status
        return body


class Prometheus:
    """A real Prometheus scraping `target` every second."""

    def __init__(self, ws, target, rule_files=(), alertmanager=None, extra=""):
        need(os.environ.get("GPUSLICE_PROMETHEUS"), "prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = "".join(f"  - {r}\n" for r in rule_files)
        alerting = ""
        if alertmanager:
            alerting = ("alerting:\n  alertmanagers:\n    - static_configs:\n"
                        f"        - targets: ['{alertmanager}']\n")
        # The scrape job is the example's (deploy/prometheus/prometheus.yml),
        # relabelling included, pointed at this test's daemon.
        config = (
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + alerting
            + "scrape_configs:\n"
            "  - job_name: gpuslice\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
            "    metric_relabel_configs:\n"
            "      - source_labels: [model_name]\n        regex: (.+)\n"
            "        target_label: modelName\n"
            "      - regex: model_name\n        action: labeldrop\n" + extra)
        path = os.path.join(ws.dir, "prometheus.yml")
        with open(path, "w") as f:
            f.write(config)
        self.proc = ws.start("prometheus", [
            os.environ["GPUSLICE_PROMETHEUS"], f"--config.file={path}",
            f"--storage.tsdb.path={os.path.join(ws.dir, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{self.port}"])
        wait_until("Prometheus to be ready",
                   lambda: http_get(self.url + "/-/ready")[0] == 200)

    def query(self, expr):
        """The instant vector of `expr`: a list of (labels, float value)."""
        _, _, body = http_get(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        data = json.loads(body)
        assert data["status"] == "success", data
        return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]
