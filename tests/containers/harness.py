"""Shared pieces of the docker-compose tests (tests/containers/CMakeLists.txt):
a throw-away directory, a real gpusliced on the simulated GPU in it, and
recording stand-ins for programs (a compose command that validates with the
real docker-compose instead of starting containers; a fake gpuslice).

Paths come from the environment CTest sets; nothing here knows where the
build tree is.
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests.

# The slices compose-up.sh asks for (its table; docker-compose.yml's comment).
GIB = 1 << 30
SLICES = {
    "inference": {"memory_bytes": 6 * GIB, "compute_milli": 300, "compute_mode": "hard",
                  "priority": "high"},
    "notebook": {"memory_bytes": 4 * GIB, "compute_milli": 200, "compute_mode": "hard",
                 "priority": "normal"},
    "trainer": {"memory_bytes": 10 * GIB, "compute_milli": 500,
                "compute_mode": "work-conserving", "priority": "low"},
}
IMAGE = "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"


def env_path(name):
    value = os.environ.get(name, "")
    if not value:
        sys.exit(f"{name} is not set (run this test through ctest)")
    return value


def compose_dir():
    return env_path("GPUSLICE_COMPOSE_DIR")


def docker_compose_or_skip():
    """The real docker-compose (Debian package docker-compose, 1.29), which
    validates and merges files without a Docker engine; SKIP without it."""
    path = os.environ.get("GPUSLICE_DOCKER_COMPOSE", "")
    if not path or not os.path.exists(path):
        print("SKIP: docker-compose not found (Debian package 'docker-compose')")
        sys.exit(SKIP)
    return path


def load_yaml(text):
    try:
        import yaml
    except ImportError:
        sys.exit(f"python3-yaml is needed ({sys.executable} cannot import yaml); "
                 "scripts/setup.sh installs it")
    return yaml.safe_load(text)


def write_program(path, source):
    """Writes an executable Python program run by this interpreter."""
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + source)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run(argv, env=None, check=True, timeout=120):
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


# A compose command for compose-up.sh that starts nothing: each call is
# appended to $RECORD (one JSON list a line); `... up -d ARGS` runs the real
# `docker-compose FILES config` instead, its output kept in $RECORD.config.
VALIDATING_COMPOSE = r'''
import json, os, subprocess, sys
args = sys.argv[1:]
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps(args) + "\n")
if "up" in args:
    files = args[:args.index("up")]
    r = subprocess.run([os.environ["REAL_COMPOSE"], *files, "config"], capture_output=True,
                       text=True)
    with open(os.environ["RECORD"] + ".config", "w") as f:
        f.write(r.stdout)
    sys.stderr.write(r.stderr)
    sys.exit(r.returncode)
'''


class Workspace:
    """A temporary directory, removed at exit."""

    def __init__(self, prefix):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """gpusliced on one simulated H100 in `ws`, without cgroups or CDI specs
    (this test needs neither, and must not leave cgroups or write
    /var/run/cdi)."""

    def __init__(self, ws):
        self.ws = ws
        self.socket = ws.path("gpuslice.sock")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("GPUSLICE_") and k != "LD_PRELOAD"}
        self.env.update({
            "GPUSLICE_SOCKET": self.socket,
            "GPUSLICE_SIM_STATE": ws.path("sim", "state"),
            "GPUSLICE_SIM_GPUS": "1xH100-80GB",
        })
        os.makedirs(ws.path("sim"))
        self.log = open(ws.path("gpusliced.log"), "w")
        self.proc = subprocess.Popen(
            [env_path("GPUSLICE_DAEMON"), "--state-dir", ws.path("state"), "--socket",
             self.socket, "--shim", env_path("GPUSLICE_SHIM"), "--sim-lib-dir",
             env_path("GPUSLICE_SIM_DIR"), "--gpu-source", "simulated", "--set", "cgroups=false",
             "--set", "cdi_dir=", "--set", "kill_grace=1s"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        deadline = time.monotonic() + 30
        while self.cli("status", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("gpusliced did not start:\n" + self.daemon_log())
            time.sleep(0.1)

    def cli(self, *args, check=True):
        return run([env_path("GPUSLICE_CLI"), *args], env=self.env, check=check, timeout=60)

    def job(self, job_id):
        return json.loads(self.cli("show", "--json", str(job_id)).stdout)

    def daemon_log(self):
        with open(self.ws.path("gpusliced.log")) as f:
            return f.read()[-4000:]

    def close(self):
        # The daemon leaves running jobs alone when it stops, by design: end
        # them first, and their process groups if cancelling failed.
        listing = self.cli("ps", "--json", check=False)
        try:
            jobs = json.loads(listing.stdout).get("jobs", [])
        except ValueError:
            jobs = []
        ids = [str(j["id"]) for j in jobs]
        if ids:
            self.cli("cancel", *ids, check=False)
        for j in jobs:
            if j.get("pid", 0) > 0:
                try:
                    os.killpg(j["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
