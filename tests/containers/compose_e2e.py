"""deploy/containers end to end, short of starting containers (no Docker
engine runs on the test machines): a real gpusliced on the simulated GPU,
the real CLI, deploy/containers/compose-up.sh, and the real docker-compose
(Debian's 1.29, which validates and merges without an engine).

`compose-up.sh up` submits the three holder jobs, waits until they run and
writes the overrides with `gpuslice container-args --compose`; its compose
command here runs `docker-compose -f docker-compose.yml -f <overrides> config`
instead of `up -d`. The merged document must be valid and have the three
services, each its own image and command unchanged plus its slice's devices,
volumes and environment (and cgroup_parent when the daemon gives one), and
each slice's job the caps of compose-up.sh's table. `down` must call compose
down, then cancel the three jobs.
"""

import json
import os
import sys
import time

import harness


def main():
    real_compose = harness.docker_compose_or_skip()
    ws = harness.Workspace("gpuslice-compose-e2e-")
    daemon = None
    ok = False
    try:
        daemon = harness.Daemon(ws)
        record = ws.path("compose.calls")
        harness.write_program(ws.path("compose"), harness.VALIDATING_COMPOSE)
        env = dict(daemon.env,
                   PATH=os.path.dirname(harness.env_path("GPUSLICE_CLI")) + ":" +
                   os.environ["PATH"],
                   GPUSLICE_COMPOSE=ws.path("compose"), RECORD=record, REAL_COMPOSE=real_compose,
                   GPUSLICE_COMPOSE_TIMEOUT="60")
        script = os.path.join(harness.compose_dir(), "compose-up.sh")
        state = ws.path("state-compose")

        up = harness.run([script, "--state-dir", state, "up"], env=env)
        print(up.stdout, end="")
        with open(os.path.join(state, "jobs")) as f:
            jobs = dict(line.split() for line in f)
        assert set(jobs) == set(harness.SLICES), jobs

        # Each holder job runs with the caps of its service.
        for service, want in harness.SLICES.items():
            job = daemon.job(jobs[service])
            assert job["state"] == "running", job
            assert job["name"] == "compose-" + service, job
            got = {k: job["request"].get(k) for k in want}
            got["priority"] = job["request"]["priority"]
            assert got == want, f"{service}: {got} != {want}"

        # The merged document, as the real docker-compose made it.
        with open(record) as f:
            calls = [json.loads(line) for line in f]
        files = ["-f", os.path.join(harness.compose_dir(), "docker-compose.yml")]
        for service in harness.SLICES:
            files += ["-f", os.path.join(state, service + ".yml")]
        assert calls == [files + ["up", "-d"]], calls
        with open(record + ".config") as f:
            merged = harness.load_yaml(f.read())
        base = harness.load_yaml(harness.run(
            [real_compose, "-f", files[1], "config"]).stdout)
        assert set(merged["services"]) == set(harness.SLICES), merged["services"].keys()
        # The example's inline programs are Python at least.
        for service, b in base["services"].items():
            if b["command"][:2] == ["python", "-c"]:
                compile(b["command"][2], f"<{service}'s command>", "exec")
        for service, job_id in jobs.items():
            s = merged["services"][service]
            b = base["services"][service]
            container = json.loads(daemon.cli("container-args", "--json", job_id).stdout)
            # The service as written, unchanged: image, command, ports, volumes.
            assert s["image"] == harness.IMAGE == b["image"], s["image"]
            assert s["command"] == b["command"], service
            assert s.get("ports") == b.get("ports"), service
            for v in b.get("volumes", []):
                assert v in s["volumes"], f"{service}: lost {v}"
            # Plus the slice: the override's keys with the daemon's values.
            env_list = {k: str(v) for k, v in s["environment"].items()}
            for entry in container["env"]:
                k, v = entry.split("=", 1)
                assert env_list.get(k) == v.replace("$", "$$"), f"{service}: {k}={env_list.get(k)}"
            assert env_list["GPUSLICE_JOB_ID"] == job_id, env_list
            assert env_list["LD_PRELOAD"] == "/usr/lib/gpuslice/libgpuslice.so", env_list
            for m in container["mounts"]:
                mode = "ro" if m["read_only"] else "rw"
                v = f"{m['host_path']}:{m['container_path']}:{mode}"
                assert v in s["volumes"], f"{service}: no {v} in {s['volumes']}"
            assert sorted(s.get("devices", [])) == sorted(container["device_nodes"]), service
            parent = container.get("cgroup_parent", "")
            assert s.get("cgroup_parent", "") == parent, f"{service}: {s.get('cgroup_parent')}"
            limits = [v for v in s["volumes"]
                      if v.endswith(f"/job-{job_id}/limits:ro")]
            assert len(limits) == 1, f"{service}: the limits page is not read-only: {s['volumes']}"

        # A second `up` is refused while the first holds the slices.
        again = harness.run([script, "--state-dir", state, "up"], env=env, check=False)
        assert again.returncode != 0 and "already up" in again.stderr, again.stderr

        # down: compose down first, then the holders are cancelled.
        os.remove(record)
        down = harness.run([script, "--state-dir", state, "down"], env=env)
        print(down.stdout, end="")
        with open(record) as f:
            calls = [json.loads(line) for line in f]
        assert calls == [files + ["down"]], calls
        # Cancel signals a running holder and returns; its job ends once
        # the holder's processes have (kill_grace 1 s), a moment later on a
        # busy machine.
        for service, job_id in jobs.items():
            deadline = time.monotonic() + 30
            while daemon.job(job_id)["state"] != "cancelled" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert daemon.job(job_id)["state"] == "cancelled", (service, daemon.job(job_id))
        assert not os.listdir(state), os.listdir(state)
        ok = True
        print("compose_e2e: ok")
    finally:
        if daemon:
            if not ok:
                print("--- gpusliced.log ---\n" + daemon.daemon_log())
            daemon.close()
        ws.close()


if __name__ == "__main__":
    sys.exit(main())
