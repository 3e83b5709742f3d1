"""An open loop of requests (no GPU needed; compute_check.py's open-loop
pair uses it, open_loop_test.py tests it).

Requests arrive on a fixed schedule, one every `period_s` from the start,
whether or not the previous one is done (as requests reach a service). A
request that arrives while the previous one still runs starts as soon as
that one completes: it is late, and its wait is in its latency, which runs
from its scheduled arrival to its completion. The same bookkeeping as
gpuslice-demo-worker's (src/cli/demo/open_loop.h), so that the figures of a
real GPU compare with the simulator's.
"""

import math


def arrivals(start_s, period_s, seconds):
    """The scheduled arrival times of the requests offered in `seconds`."""
    if period_s <= 0:
        raise ValueError("period must be positive, got %r" % period_s)
    i = 0
    while i * period_s < seconds:
        yield start_s + i * period_s
        i += 1


def offered(period_s, seconds):
    """How many requests arrive in `seconds`."""
    return max(0, math.ceil(seconds / period_s)) if seconds > 0 else 0


def nearest_rank(sorted_values, percent):
    """The smallest value that at least `percent` of the values do not exceed."""
    if not sorted_values:
        return None
    k = math.ceil(percent * len(sorted_values) / 100.0)
    return sorted_values[min(max(k, 1), len(sorted_values)) - 1]


def summary(records, period_s, seconds):
    """What a run came to. `records`: (arrival, started, completed) times of
    the served requests, in order, seconds on one clock; the loop stopped
    at `seconds` past the first arrival (requests still waiting then were
    not served). Latencies in ms; None when nothing was served."""
    n_offered = offered(period_s, seconds)
    latencies = sorted((done - arrival) * 1000.0 for arrival, _, done in records)
    late, max_late_ms, prev_done = 0, 0.0, None
    for arrival, started, done in records:
        if prev_done is not None and prev_done > arrival:
            late += 1
            max_late_ms = max(max_late_ms, (started - arrival) * 1000.0)
        prev_done = done
    return {
        "offered": n_offered,
        "served": len(records),
        "delivered_fraction": round(len(records) / n_offered, 4) if n_offered else 0.0,
        "p50_ms": nearest_rank(latencies, 50),
        "p99_ms": nearest_rank(latencies, 99),
        "max_ms": latencies[-1] if latencies else None,
        "late": late,
        "max_late_ms": round(max_late_ms, 3),
    }
