#!/usr/bin/env python3
"""A real Prometheus (Debian's package) scrapes a real gpusliced on the
simulated GPU: the daemon's metrics listener answers (metrics and the status
page, nothing else), a running job's series and the GPU's DCGM series reach
Prometheus with sane values, and faults injected into the simulated GPU (an
XID, ECC errors, a hot GPU) show up under dcgm-exporter's names.

Skips (exit 77) only when the prometheus binary is absent.
"""

import json
import os
import subprocess
import sys

from harness import Daemon, Prometheus, Workspace, http_get, need, wait_until

GiB = 1 << 30


def main():
    need(os.environ.get("GPUSLICE_PROMETHEUS"), "prometheus")
    ws = Workspace("gpuslice-prom-e2e-")
    ok = False
    try:
        daemon = Daemon(ws)
        # The listener serves metrics without credentials, and nothing else.
        status, ctype, body = http_get(f"http://{daemon.metrics_address}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
        assert "gpuslice_daemon_up 1\n" in body, body[:2000]
        # The status page is forwarded to the API's own routes.
        status, ctype, body = http_get(f"http://{daemon.metrics_address}/status.json")
        assert status == 200 and ctype.startswith("application/json"), (status, ctype)
        assert "gpus" in json.loads(body), body[:500]
        status, ctype, body = http_get(f"http://{daemon.metrics_address}/status")
        assert status == 200 and ctype.startswith("text/html"), (status, ctype)
        try:
            http_get(f"http://{daemon.metrics_address}/v1/jobs")
            raise AssertionError("/v1/jobs answered on the metrics listener")
        except Exception as e:  # urllib raises HTTPError for the 404.
            assert "404" in str(e), e

        # A job holding 1 GiB of its 4 GiB slice for a while.
        job = daemon.submit("--mem", "4GiB", "--compute", "50%", "--name", "prom-e2e", "--",
                            os.environ["GPUSLICE_WORKER"], "--name", "prom", "--mem", "1GiB",
                            "--duty", "50%", "--seconds", "40")
        prom = Prometheus(ws, daemon.metrics_address)

        sel = f'{{job="gpuslice",job_id="{job}"}}'
        limit = wait_until("the job's memory limit in Prometheus",
                           lambda: prom.query("gpuslice_job_memory_limit_bytes" + sel), 45)
        assert limit[0][1] == 4 * GiB, limit
        labels = limit[0][0]
        assert labels["name"] == "prom-e2e" and labels["user"] and labels["gpu"] == "0", labels
        assert labels["UUID"].startswith("GPU-"), labels

        used = wait_until("the job's charged memory to reach 1 GiB",
                          lambda: [v for v in prom.query("gpuslice_job_memory_used_bytes" + sel)
                                   if v[1] >= GiB], 45)
        assert used[0][1] <= 4 * GiB, used
        target = prom.query("gpuslice_job_compute_share_target_ratio" + sel)
        assert target and target[0][1] == 0.5, target

        # The GPU under dcgm-exporter's names, modelName restored by the
        # example's relabelling; MiB as dcgm-exporter reports them.
        fb = wait_until("DCGM_FI_DEV_FB_USED of the GPU holding the job",
                        lambda: [v for v in prom.query('DCGM_FI_DEV_FB_USED{gpu="0"}')
                                 if v[1] >= 1024], 45)
        fb_labels, fb_used = fb[0]
        assert fb_labels["modelName"] and "model_name" not in fb_labels, fb_labels
        assert fb_labels["device"] == "nvidia0" and fb_labels["Hostname"], fb_labels
        total = prom.query('DCGM_FI_DEV_FB_TOTAL{gpu="0"}')[0][1]
        free = prom.query('DCGM_FI_DEV_FB_FREE{gpu="0"}')[0][1]
        assert 1024 <= fb_used <= total and abs(fb_used + free - total) <= 1, (fb_used, free, total)
        assert 70000 <= total <= 90000, total  # An 80 GB H100, in MiB.
        sim = prom.query('gpuslice_gpu_simulated{gpu="0"}')
        assert sim and sim[0][1] == 1, sim
        alloc = prom.query('gpuslice_gpu_memory_allocated_ratio{gpu="0"}')
        assert alloc and abs(alloc[0][1] - 4 / 80) < 0.01, alloc
        running = prom.query("gpuslice_jobs_running")
        assert running and running[0][1] == 1, running
        started = prom.query('gpuslice_events_total{kind="started"}')
        assert started and started[0][1] >= 1, started
        up = prom.query('up{job="gpuslice"}')
        assert up and up[0][1] == 1, up

        # Faults injected into the simulated GPU reach Prometheus through the
        # daemon's NVML: an XID event, ECC errors and a hot GPU.
        for fault in (["xid", "0", "79"], ["ecc", "0", "5", "1"], ["temperature", "0", "95"]):
            subprocess.run([os.environ["GPUSLICE_SIM_FAULT"], *fault], env=daemon.env, check=True,
                           timeout=30)

        def value(expr):
            r = prom.query(expr)
            return r[0][1] if r else None

        wait_until("the XID error in Prometheus",
                   lambda: value('gpuslice_gpu_xid_errors_total{gpu="0"}') == 1, 30)
        assert value('DCGM_FI_DEV_XID_ERRORS{gpu="0"}') == 79
        wait_until("the ECC errors in Prometheus",
                   lambda: value('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0"}') == 5
                   and value('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0"}') == 1, 30)
        wait_until("the temperature in Prometheus",
                   lambda: value('DCGM_FI_DEV_GPU_TEMP{gpu="0"}') == 95, 30)
        daemon.cli("cancel", str(job))
        ok = True
        print("prometheus_e2e: OK")
    finally:
        ws.close(keep_logs_on_failure=not ok)


if __name__ == "__main__":
    sys.exit(main())
