"""Stands in for slurmstepd in slurm_security_test: a root process that
drops its effective uid to a user (as slurmstepd does around the SPANK
plugin's user_init), asks gpusliced for a bound external job on that user's
behalf, starts "tasks" below itself, and stays alive until told to stop.

  fake_stepd.py SOCKET UID GID TASK_UID... -- prints one JSON line:
  {"holder": pid, "tasks": {uid: pid}, "status": http_status, "job": {...}}
then sleeps until stdin closes (the test holds it open).
"""

import json
import os
import pwd
import socket
import subprocess
import sys


def post(path, body):
    data = json.dumps(body).encode()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: " +
                  str(len(data)).encode() + b"\r\n\r\n" + data)
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(payload or b"{}")


def main():
    sock, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    task_uids = [int(u) for u in sys.argv[4:]]
    tasks = {}
    for tu in task_uids:
        p = subprocess.Popen(["/usr/bin/setpriv", f"--reuid={tu}", f"--regid={tu}",
                              "--clear-groups", "sleep", "300"])
        tasks[tu] = p.pid
    # As slurmstepd around user_init: the user's groups and effective ids,
    # real uid root.
    os.setgroups(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
    os.setegid(gid)
    os.seteuid(uid)
    status, job = post(sock, {"mode": "external", "bound_to_caller": True, "mem": "1GiB",
                              "labels": {"slurm_job": "7"}})
    os.seteuid(0)
    os.setegid(0)
    os.setgroups([])
    print(json.dumps({"holder": os.getpid(), "tasks": tasks, "status": status, "job": job}),
          flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
