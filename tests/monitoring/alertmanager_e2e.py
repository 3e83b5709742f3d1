#!/usr/bin/env python3
"""End-to-end alerts: a job on the simulated GPU has allocations refused by
the shim at its memory limit; a real Prometheus evaluates the real rules of
deploy/prometheus/gpuslice.rules.yml (every `for:` shortened to 1s) against
the daemon's metrics; a real Alertmanager (Debian's prometheus-alertmanager)
routes the firing GpusliceAllocationsRefused alert to a webhook receiver
listening in this test; then GPU 0 is made hot (gpuslice-sim-fault
temperature 0 95) and GpusliceGpuHot arrives the same way; then an XID error
and an uncorrectable ECC error (gpuslice-sim-fault xid / ecc) bring the
critical GpusliceGpuXidError and GpusliceGpuEccUncorrectable.

Skips (exit 77) only when prometheus or prometheus-alertmanager is absent.
"""

import http.server
import json
import os
import re
import subprocess
import sys
import threading

from harness import Daemon, Prometheus, Workspace, free_port, http_get, need, wait_until


class Hook(http.server.BaseHTTPRequestHandler):
    received = []  # Alertmanager's webhook payloads, decoded.

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Hook.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    need(os.environ.get("GPUSLICE_PROMETHEUS"), "prometheus")
    need(os.environ.get("GPUSLICE_ALERTMANAGER"), "prometheus-alertmanager")
    ws = Workspace("gpuslice-alert-e2e-")
    hook = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    ok = False
    try:
        # The real rules, with every `for:` cut to 1s so a test can wait for them.
        with open(os.environ["GPUSLICE_RULES"]) as f:
            rules = re.sub(r"(\n\s+for:) \S+", r"\1 1s", f.read())
        rules_path = os.path.join(ws.dir, "rules.yml")
        with open(rules_path, "w") as f:
            f.write(rules)

        am_port = free_port()
        am_config = os.path.join(ws.dir, "alertmanager.yml")
        with open(am_config, "w") as f:
            f.write("route:\n  receiver: hook\n  group_by: [alertname]\n"
                    "  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n"
                    "receivers:\n  - name: hook\n    webhook_configs:\n"
                    f"      - url: http://127.0.0.1:{hook.server_port}/\n"
                    "        send_resolved: false\n")
        ws.start("alertmanager", [
            os.environ["GPUSLICE_ALERTMANAGER"], f"--config.file={am_config}",
            f"--storage.path={os.path.join(ws.dir, 'am')}",
            f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="])
        wait_until("Alertmanager to be ready",
                   lambda: http_get(f"http://127.0.0.1:{am_port}/-/ready")[0] == 200)

        daemon = Daemon(ws)
        prom = Prometheus(ws, daemon.metrics_address, rule_files=[rules_path],
                          alertmanager=f"127.0.0.1:{am_port}")
        # Sleeps first, so Prometheus sees the counter at 0 before it grows:
        # then 6 GiB in a 4 GiB slice, refused by the shim, a few times.
        worker = os.environ["GPUSLICE_WORKER"]
        script = (f"sleep 4; for i in 1 2 3; do {worker} --name refused --mem 6GiB "
                  "--seconds 1; sleep 1; done; sleep 60")
        job = daemon.submit("--mem", "4GiB", "--name", "alert-e2e", "--", "sh", "-c", script)

        def refused_alert():
            for payload in Hook.received:
                for alert in payload.get("alerts", []):
                    l = alert["labels"]
                    if (l.get("alertname") == "GpusliceAllocationsRefused"
                            and l.get("job_id") == str(job) and alert["status"] == "firing"):
                        return alert
            return None

        alert = wait_until("Alertmanager to deliver GpusliceAllocationsRefused to the webhook",
                           refused_alert, 60, 0.5)
        assert alert["labels"]["severity"] == "warning", alert
        assert alert["labels"]["name"] == "alert-e2e", alert
        assert "had allocations refused" in alert["annotations"]["summary"], alert
        refused = prom.query(f'gpuslice_job_refused_allocations_total{{job_id="{job}"}}')
        assert refused and refused[0][1] >= 1, refused

        # A hot GPU: GpusliceGpuHot, through the simulator's fault injection.
        subprocess.run([os.environ["GPUSLICE_SIM_FAULT"], "temperature", "0", "95"],
                       env=daemon.env, check=True, timeout=30)

        def hot_alert():
            for payload in Hook.received:
                for a in payload.get("alerts", []):
                    if a["labels"].get("alertname") == "GpusliceGpuHot" and a["status"] == "firing":
                        return a
            return None

        hot = wait_until("Alertmanager to deliver GpusliceGpuHot", hot_alert, 60, 0.5)
        assert hot["labels"]["gpu"] == "0" and hot["labels"]["severity"] == "warning", hot
        assert hot["annotations"]["summary"].endswith("runs at 95 C"), hot

        # Hardware faults: an XID error and an uncorrectable ECC error, both
        # critical. The counters were scraped at 0 before, so increase() sees
        # them rise.
        fault = os.environ["GPUSLICE_SIM_FAULT"]
        subprocess.run([fault, "xid", "0", "79"], env=daemon.env, check=True, timeout=30)
        subprocess.run([fault, "ecc", "0", "0", "2"], env=daemon.env, check=True, timeout=30)

        def firing(name):
            def find():
                for payload in Hook.received:
                    for a in payload.get("alerts", []):
                        if a["labels"].get("alertname") == name and a["status"] == "firing":
                            return a
                return None
            return find

        xid = wait_until("Alertmanager to deliver GpusliceGpuXidError",
                         firing("GpusliceGpuXidError"), 60, 0.5)
        assert xid["labels"]["gpu"] == "0" and xid["labels"]["severity"] == "critical", xid
        assert "reported XID errors" in xid["annotations"]["summary"], xid
        ecc = wait_until("Alertmanager to deliver GpusliceGpuEccUncorrectable",
                         firing("GpusliceGpuEccUncorrectable"), 60, 0.5)
        assert ecc["labels"]["gpu"] == "0" and ecc["labels"]["severity"] == "critical", ecc
        daemon.cli("cancel", str(job))
        ok = True
        print("alertmanager_e2e: OK, webhook got GpusliceAllocationsRefused, GpusliceGpuHot,"
              " GpusliceGpuXidError and GpusliceGpuEccUncorrectable")
    finally:
        hook.shutdown()
        ws.close(keep_logs_on_failure=not ok)


if __name__ == "__main__":
    sys.exit(main())
