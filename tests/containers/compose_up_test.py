"""deploy/containers/compose-up.sh with a fake gpuslice and a fake compose
command on PATH (both record their calls; no daemon, no docker-compose):

- --dry-run prints the commands of `up` and `down` and runs none of them;
- up submits one holder job per service with its caps, waits while a job is
  queued, writes one override per service with `container-args --compose`
  and starts compose with all the files (extra arguments passed on);
- down runs compose down, then cancels the holders, and clears the state;
- when a slice ends before running, or compose up fails, up undoes itself:
  compose down (only if it was started), cancel every holder, no state left.
"""

import json
import os
import sys

import harness

# The fake gpuslice: ids from 41; `show` says "queued" the first time for
# each job, then $FAKE_STATE_<id> or "running"; container-args prints a
# fragment naming the job. Each call is a JSON line in $RECORD.
FAKE_GPUSLICE = r'''
import json, os, sys
args = sys.argv[1:]
record = os.environ["RECORD"]
with open(record, "a") as f:
    f.write(json.dumps(["gpuslice", *args]) + "\n")
counter = record + ".next"
if args[0] == "submit":
    n = int(open(counter).read()) if os.path.exists(counter) else 41
    open(counter, "w").write(str(n + 1))
    print(n)
elif args[0] == "show":
    job = args[-1]
    seen = record + ".seen-" + job
    state = os.environ.get("FAKE_STATE_" + job, "running") if os.path.exists(seen) else "queued"
    open(seen, "w").close()
    print(json.dumps({"id": int(job), "state": state}, indent=2))
elif args[0] == "container-args":
    service, job = args[2], args[3]
    print(f"services:\n  \"{service}\":\n    environment:\n      \"GPUSLICE_JOB_ID\": \"{job}\"")
elif args[0] == "cancel":
    for job in args[1:]:
        print(f"job {job}: cancelling")
else:
    sys.exit("fake gpuslice: unexpected " + " ".join(args))
'''

# The fake compose: records; fails `up` when $FAKE_COMPOSE_UP_FAILS is set.
FAKE_COMPOSE = r'''
import json, os, sys
args = sys.argv[1:]
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps(["compose", *args]) + "\n")
if "up" in args and os.environ.get("FAKE_COMPOSE_UP_FAILS"):
    sys.exit("fake compose: up failed")
'''

SUBMIT_FLAGS = {
    "inference": ["--mem", "6GiB", "--compute", "30%", "--compute-mode", "hard", "--priority",
                  "high"],
    "notebook": ["--mem", "4GiB", "--compute", "20%", "--compute-mode", "hard", "--priority",
                 "normal"],
    "trainer": ["--mem", "10GiB", "--compute", "50%", "--compute-mode", "work-conserving",
                "--priority", "low"],
}


class Setup:
    def __init__(self, ws, name):
        self.dir = ws.path(name)
        os.makedirs(os.path.join(self.dir, "bin"))
        self.record = os.path.join(self.dir, "calls")
        self.state = os.path.join(self.dir, "state")
        harness.write_program(os.path.join(self.dir, "bin", "gpuslice"), FAKE_GPUSLICE)
        harness.write_program(os.path.join(self.dir, "bin", "compose"), FAKE_COMPOSE)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE")}
        self.env.update(PATH=os.path.join(self.dir, "bin") + ":" + os.environ["PATH"],
                        RECORD=self.record, GPUSLICE_COMPOSE="compose",
                        GPUSLICE_COMPOSE_TIMEOUT="30")
        self.script = os.path.join(harness.compose_dir(), "compose-up.sh")
        self.base = os.path.join(harness.compose_dir(), "docker-compose.yml")

    def run(self, *args, check=True, **env):
        return harness.run([self.script, "--state-dir", self.state, *args],
                           env=dict(self.env, **env), check=check)

    def calls(self):
        if not os.path.exists(self.record):
            return []
        with open(self.record) as f:
            calls = [json.loads(line) for line in f]
        os.remove(self.record)
        return calls

    def files(self):
        out = ["-f", self.base]
        for service in SUBMIT_FLAGS:
            out += ["-f", os.path.join(self.state, service + ".yml")]
        return out


def submits():
    return [["gpuslice", "submit", "--name", "compose-" + s, *flags, "--", "sleep", "infinity"]
            for s, flags in SUBMIT_FLAGS.items()]


def dry_run(ws):
    t = Setup(ws, "dry")
    up = t.run("--dry-run", "up", "--build")
    lines = up.stdout.splitlines()
    commands = [line[2:] for line in lines if line.startswith("+ ")]
    assert commands[:3] == [" ".join(c) for c in submits()], commands
    for service in SUBMIT_FLAGS:
        want = (f"gpuslice container-args --compose {service} ID_{service} > "
                f"{t.state}/{service}.yml")
        assert want in commands, (want, commands)
    assert commands[-1] == " ".join(["compose", *t.files(), "up", "-d", "--build"]), commands[-1]
    assert sum(line.startswith("# wait until job ID_") for line in lines) == 3, lines
    down = t.run("--dry-run", "down")
    assert down.stdout.splitlines() == [
        "+ " + " ".join(["compose", *t.files(), "down"]),
        "+ gpuslice cancel ID_inference ID_notebook ID_trainer"], down.stdout
    assert t.calls() == [], "--dry-run ran something"
    assert not os.path.exists(t.state), "--dry-run wrote its state"


def up_and_down(ws):
    t = Setup(ws, "flow")
    up = t.run("up", "--build")
    calls = t.calls()
    assert calls[:3] == submits(), calls[:3]
    rest = calls[3:]
    for job, service in zip((41, 42, 43), SUBMIT_FLAGS):
        # Waited while queued, then asked for the override.
        want = [["gpuslice", "show", "--json", str(job)]] * 2 + [
            ["gpuslice", "container-args", "--compose", service, str(job)]]
        assert rest[:3] == want, (service, rest[:3])
        rest = rest[3:]
        with open(os.path.join(t.state, service + ".yml")) as f:
            assert f"\"GPUSLICE_JOB_ID\": \"{job}\"" in f.read(), service
    assert rest == [["compose", *t.files(), "up", "-d", "--build"]], rest
    with open(os.path.join(t.state, "jobs")) as f:
        assert f.read() == "inference 41\nnotebook 42\ntrainer 43\n"
    assert "compose-up: up" in up.stdout, up.stdout

    again = t.run("up", check=False)
    assert again.returncode != 0 and "already up" in again.stderr, again.stderr
    assert t.calls() == [], "a refused up ran something"

    t.run("down", "--volumes")
    assert t.calls() == [["compose", *t.files(), "down", "--volumes"],
                         ["gpuslice", "cancel", "41", "42", "43"]]
    assert os.listdir(t.state) == [], os.listdir(t.state)

    no = t.run("down", check=False)
    assert no.returncode != 0 and "not up" in no.stderr, no.stderr


def up_undoes_itself(ws):
    # The notebook's slice ends before running: nothing was started, so
    # only the three holders are cancelled.
    t = Setup(ws, "failed-slice")
    r = t.run("up", check=False, FAKE_STATE_42="failed")
    assert r.returncode != 0, r.stdout
    assert "the slice of notebook (job 42) is failed" in r.stderr, r.stderr
    calls = t.calls()
    assert not any(c[0] == "compose" for c in calls), calls
    assert calls[-1] == ["gpuslice", "cancel", "41", "42", "43"], calls[-1]
    assert os.listdir(t.state) == [], os.listdir(t.state)

    # compose up fails: what it may have started is taken down, then the
    # holders are cancelled.
    t = Setup(ws, "failed-compose")
    r = t.run("up", check=False, FAKE_COMPOSE_UP_FAILS="1")
    assert r.returncode != 0, r.stdout
    calls = t.calls()
    assert calls[-3:] == [["compose", *t.files(), "up", "-d"], ["compose", *t.files(), "down"],
                          ["gpuslice", "cancel", "41", "42", "43"]], calls[-3:]
    assert os.listdir(t.state) == [], os.listdir(t.state)


def main():
    ws = harness.Workspace("gpuslice-compose-up-")
    try:
        dry_run(ws)
        up_and_down(ws)
        up_undoes_itself(ws)
        print("compose_up_test: ok")
    finally:
        ws.close()


if __name__ == "__main__":
    sys.exit(main())
