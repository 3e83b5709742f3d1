#!/usr/bin/env python3
"""deploy/grafana/gpuslice.json parses as a Grafana dashboard, has the node,
GPU and job rows and the Hostname/gpu/user/job variables, and every metric
name in its PromQL, and in the alerting rules' expressions
(deploy/prometheus/gpuslice.rules.yml), exists in a real /metrics scrape of
gpusliced (every family is declared there with HELP and TYPE even before it
has samples). Prometheus's own `up` is the one other name the rules may use.
"""

import json
import os
import re
import sys

from harness import Daemon, Workspace

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan"}


def strip(expr):
    """PromQL without strings, label matchers, ranges and grouping clauses."""
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    return expr


def metric_names(expr):
    """The metric names an expression (or a label_values() query) reads."""
    m = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)?.*\)\s*", expr, re.S)
    if m:
        return {m.group(1)} if m.group(1) else set()
    names = set()
    text = strip(expr)
    for t in re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        name, call = t.group(1), t.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def families(scrape):
    out = set()
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            out.add(name)
            if kind == "histogram":
                out.update({name + "_bucket", name + "_sum", name + "_count"})
    return out


def check(dash, known):
    """Problems found in the dashboard `dash`, given the known metric names."""
    problems = []
    titles = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    for want in ("Node", "GPUs", "Jobs"):
        if want not in titles:
            problems.append(f"no '{want}' row (rows: {titles})")
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    for want in ("Hostname", "gpu", "user", "job"):
        if want not in variables:
            problems.append(f"no '{want}' variable")
    exprs = []
    for v in variables.values():
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            exprs.append((f"variable {v['name']}", q))
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        if "gridPos" not in p or "datasource" not in p:
            problems.append(f"panel '{p['title']}' lacks gridPos or datasource")
        if not p.get("targets"):
            problems.append(f"panel '{p['title']}' has no query")
        for t in p.get("targets", []):
            exprs.append((f"panel '{p['title']}'", t["expr"]))
            # Every query filters by host, "Daemon up" and "Jobs running" too.
            if "$Hostname" not in t["expr"]:
                problems.append(f"panel '{p['title']}' ignores the Hostname variable "
                                f"('{t['expr']}')")
    used = set()
    for where, expr in exprs:
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric in '{expr}'")
        for n in sorted(names - known):
            problems.append(f"{where}: '{n}' is not in gpusliced's /metrics ('{expr}')")
        used |= names
    return problems, used


def rule_exprs(text):
    """The `expr:` of each rule: one line, or an indented `|` block."""
    exprs, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        if m.group(2).strip() not in ("|", ">"):
            exprs.append(m.group(2))
            continue
        block = []
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > len(m.group(1))):
            block.append(lines[i].strip())
            i += 1
        exprs.append(" ".join(block))
    return exprs


def main():
    with open(os.environ["GPUSLICE_DASHBOARD"]) as f:
        dash = json.load(f)
    ws = Workspace("gpuslice-dash-check-")
    try:
        scrape = Daemon(ws).metrics()
    finally:
        ws.close()
    known = families(scrape)
    assert "DCGM_FI_DEV_FB_USED" in known and "gpuslice_job_memory_used_bytes" in known, known

    problems, used = check(dash, known)
    with open(os.environ["GPUSLICE_RULES"]) as f:
        exprs = rule_exprs(f.read())
    assert len(exprs) >= 10, exprs
    for expr in exprs:
        for n in sorted(metric_names(expr) - known - {"up"}):
            problems.append(f"rule '{expr}': '{n}' is not in gpusliced's /metrics")
    if problems:
        print("\n".join(problems))
        return 1
    # The checker itself catches an unknown name (so passing means something).
    broken = json.loads(json.dumps(dash))
    broken["panels"][1]["targets"][0]["expr"] = "rate(gpuslice_no_such_metric_total[5m])"
    bad, _ = check(broken, known)
    assert any("gpuslice_no_such_metric_total" in b for b in bad), bad
    print(f"dashboard_check: OK, {len(dash['panels'])} panels, "
          f"{len(used)} metrics, all in /metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
