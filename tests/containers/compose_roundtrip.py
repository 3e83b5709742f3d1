"""`gpuslice container-args --compose`'s quoting, checked by the real
readers: the real CLI talks to a stand-in daemon (this script, on a unix
socket) whose answer holds values that YAML or compose would read otherwise
(':', '#', quotes, a leading '-', '${VAR}', '$$', "true", new lines, tabs,
non-ASCII, white space), and cgroup_parent. The override must read back
exactly with PyYAML (the '$' doubled for compose), and merged over a base
file by the real docker-compose (Debian's 1.29) give the same values again.
The CLI's refusals (a bad service name, --cdi with --compose, a path with
':') are checked too.
"""

import http.server
import json
import os
import socketserver
import sys
import threading

import harness

ODD = [
    "x: y # not a comment",
    "\"double\" and 'single' quotes",
    "- looks like a list item",
    "${HOME} and $$ and $",
    "",
    "true",
    "a=b=c",
    "line 1\nline 2\ttab\\n",
    "caf\u00e9 \u2028 \U0001F642",
    "  spaces around  ",
    "[1, 2] {a: b} & * ! | > % @ `",
]

CONTAINER = {
    "job": 7,
    "cdi_device": "gpuslice.dev/slice=7",
    "device_nodes": ["/dev/nvidia0", "/dev/nvidiactl"],
    "mounts": [
        {"host_path": "/srv/my models #1", "container_path": "/models/'x' \"y\"",
         "read_only": True},
        {"host_path": "/run/gpuslice/slices/job-7/region",
         "container_path": "/run/gpuslice/slices/job-7/region", "read_only": False},
    ],
    "env": [f"V{i}={v}" for i, v in enumerate(ODD)] + ["GPUSLICE_JOB_ID=7"],
    "cgroup_parent": "/gpuslice/job-7 $x #y",
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answer = CONTAINER

    def do_GET(self):
        if self.path == "/v1/jobs/7/container":
            status, body = 200, json.dumps(Handler.answer).encode()
        else:
            status, body = 404, json.dumps(
                {"error": {"code": "not_found", "message": "no route " + self.path}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def undollar(text):
    return text.replace("$$", "$")


def main():
    real_compose = harness.docker_compose_or_skip()
    ws = harness.Workspace("gpuslice-compose-roundtrip-")
    server = Server(ws.path("gpuslice.sock"), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
        env["GPUSLICE_SOCKET"] = ws.path("gpuslice.sock")
        cli = [harness.env_path("GPUSLICE_CLI"), "container-args"]

        text = harness.run(cli + ["--in-job", "--compose", "web.api-1", "7"], env=env).stdout
        print(text)
        assert text.isascii(), "the override is not ASCII"

        # PyYAML reads back the daemon's values ('$' doubled for compose).
        doc = harness.load_yaml(text)
        assert list(doc) == ["services"] and list(doc["services"]) == ["web.api-1"], doc
        s = doc["services"]["web.api-1"]
        assert s["devices"] == CONTAINER["device_nodes"], s["devices"]
        assert [undollar(v) for v in s["volumes"]] == [
            "/srv/my models #1:/models/'x' \"y\":ro",
            "/run/gpuslice/slices/job-7/region:/run/gpuslice/slices/job-7/region"], s["volumes"]
        want_env = dict(e.split("=", 1) for e in CONTAINER["env"])
        assert {k: undollar(v) for k, v in s["environment"].items()} == want_env, s["environment"]
        assert undollar(s["cgroup_parent"]) == CONTAINER["cgroup_parent"], s["cgroup_parent"]

        # The real docker-compose merges it over a base file and gives the
        # same values back (its output doubles '$' again).
        with open(ws.path("base.yml"), "w") as f:
            f.write("services:\n  web.api-1:\n    image: busybox\n"
                    "    environment:\n      KEPT: base\n")
        with open(ws.path("override.yml"), "w") as f:
            f.write(text)
        merged = harness.load_yaml(harness.run(
            [real_compose, "-f", ws.path("base.yml"), "-f", ws.path("override.yml"), "config"],
            env=env).stdout)
        m = merged["services"]["web.api-1"]
        assert m["image"] == "busybox", m
        assert {k: undollar(str(v)) for k, v in m["environment"].items()} == dict(
            want_env, KEPT="base"), m["environment"]
        assert sorted(undollar(v) for v in m["volumes"]) == sorted([
            "/srv/my models #1:/models/'x' \"y\":ro",
            "/run/gpuslice/slices/job-7/region:/run/gpuslice/slices/job-7/region:rw"]), m
        assert m["devices"] == CONTAINER["device_nodes"], m["devices"]
        assert undollar(m["cgroup_parent"]) == CONTAINER["cgroup_parent"], m["cgroup_parent"]

        # Without --in-job the job's cgroup is not handed on (engines with
        # systemd's cgroup manager refuse a path).
        plain = harness.load_yaml(harness.run(cli + ["--compose", "a", "7"], env=env).stdout)
        assert "cgroup_parent" not in plain["services"]["a"], plain
        # Without cgroup_parent (a daemon without cgroups, or one from before
        # it existed) the key is left out even with --in-job.
        Handler.answer = {k: v for k, v in CONTAINER.items() if k != "cgroup_parent"}
        plain = harness.load_yaml(
            harness.run(cli + ["--in-job", "--compose", "a", "7"], env=env).stdout)
        assert "cgroup_parent" not in plain["services"]["a"], plain

        # Refusals: usage errors (2) before the daemon is asked; what compose
        # cannot carry, as the daemon's answer is read (125).
        for args, code, says in [
            (["--compose", "my app", "7"], 2, "'my app' is not a compose service name"),
            (["--compose", "a", "--cdi", "7"], 2, "--compose and --cdi cannot be used together"),
        ]:
            r = harness.run(cli + args, env=env, check=False)
            assert r.returncode == code and says in r.stderr, (args, r.returncode, r.stderr)
            assert r.stdout == "", r.stdout
        Handler.answer = dict(CONTAINER, device_nodes=["/dev/a:b"])
        r = harness.run(cli + ["--compose", "a", "7"], env=env, check=False)
        assert r.returncode == 125 and "holds ':'" in r.stderr, (r.returncode, r.stderr)
        assert r.stdout == "", r.stdout
        print("compose_roundtrip: ok")
    finally:
        server.shutdown()
        server.server_close()
        ws.close()


if __name__ == "__main__":
    sys.exit(main())
