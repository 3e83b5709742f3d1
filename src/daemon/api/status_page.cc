#include "daemon/api/status_page.h"

#include <unistd.h>

#include <chrono>
#include <map>

namespace gpuslice::daemon {

using nlohmann::json;

namespace {

// Only the page's own inline style and script, and fetches to its own origin.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'";

// The page. "@SNAPSHOT@" is replaced by the snapshot (JsonForScript). The
// script draws everything from that object with textContent, so nothing in it
// is ever parsed as markup.
constexpr const char* kPage = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuslice status</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 1em 2em; color: #1d1d1f; background: #f7f7f8; }
h1 { font-size: 1.35em; margin: .2em 0; }
h2 { font-size: 1.1em; margin: 1.4em 0 .3em; }
h3 { font-size: 1em; margin: 0 0 .3em; }
.gpu { border: 1px solid #d0d0d7; border-radius: 6px; padding: .6em 1em; margin: .8em 0; background: #fff; }
.bar { display: inline-block; width: 14em; height: .85em; background: #e4e4ea; border-radius: 3px;
       vertical-align: middle; overflow: hidden; margin-right: .5em; }
.bar > span { display: block; height: 100%; background: #3a74d0; }
.bar.hot > span { background: #cc3b33; }
.bar.small { width: 6em; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { text-align: left; padding: .12em .9em .12em 0; vertical-align: top; }
th { font-weight: 600; color: #55555f; }
.muted { color: #6e6e78; }
.bad { color: #b3261e; font-weight: 600; }
.flag { color: #9a5b00; font-weight: 600; }
code { font-size: .92em; word-break: break-all; }
</style>
</head>
<body>
<h1>gpuslice <span id="host"></span></h1>
<p id="summary" class="muted">loading</p>
<div id="gpus"></div>
<h2>Queue</h2>
<div id="queue"></div>
<h2>Recent events</h2>
<div id="events"></div>
<noscript>This page draws itself with JavaScript; <a href="status.json">status.json</a> has the same data.</noscript>
<script type="application/json" id="snapshot">@SNAPSHOT@</script>
<script>
"use strict";
(function () {
  const REFRESH_MS = 3000;
  let last = null;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function bytes(n) {
    if (n === null || n === undefined) return "?";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (Math.round(n * 10) / 10) + " " + units[i];
  }
  function bar(frac, small) {
    const b = el("span", small ? "bar small" : "bar");
    const fill = el("span");
    const f = Math.max(0, Math.min(1, Number(frac) || 0));
    fill.style.width = (f * 100).toFixed(1) + "%";
    b.appendChild(fill);
    if (f > 0.9) b.classList.add("hot");
    return b;
  }
  function pct(v) { return v === null || v === undefined ? "?" : Math.round(v) + "%"; }
  function age(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const two = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d" + two(Math.floor(s / 3600) % 24) + "h";
  }
  function cell(c) {
    const td = el("td");
    if (c instanceof Node) td.appendChild(c); else if (c !== null && c !== undefined) td.textContent = String(c);
    return td;
  }
  function table(headers, rows) {
    const t = el("table");
    if (headers.length) {
      const hr = el("tr");
      headers.forEach((h) => hr.appendChild(el("th", null, h)));
      t.appendChild(hr);
    }
    rows.forEach((r) => {
      const tr = el("tr");
      r.forEach((c) => tr.appendChild(cell(c)));
      t.appendChild(tr);
    });
    return t;
  }
  function withText(node, text) {
    const span = el("span");
    span.appendChild(node);
    span.appendChild(document.createTextNode(text));
    return span;
  }
  function put(id, nodes) { document.getElementById(id).replaceChildren(...nodes); }

  function render(s, note) {
    document.getElementById("host").textContent = s.host || "";
    const summary = document.getElementById("summary");
    const parts = ["daemon " + s.state];
    if (s.simulated) parts.push("SIMULATED GPUs");
    parts.push(s.running + " running", s.queue.length + " queued");
    parts.push("updated " + new Date(s.generated_ms).toLocaleTimeString());
    summary.textContent = parts.join(" \u00b7 ") + (note ? " \u00b7 " + note : "");
    summary.className = s.state === "ok" && !note ? "muted" : "bad";
    if (s.degraded_reason) summary.textContent += " \u2014 " + s.degraded_reason;

    put("gpus", s.gpus.map((g) => {
      const box = el("div", "gpu");
      box.id = "gpu-" + g.index;
      const h = el("h3", null, "GPU " + g.index + " \u00b7 " + g.model + " ");
      h.appendChild(el("span", "muted", g.uuid));
      box.appendChild(h);
      const facts = [];
      if (g.temperature_c !== undefined) facts.push(g.temperature_c + " \u00b0C");
      if (g.power_w !== undefined) facts.push(Math.round(g.power_w) + " W");
      box.appendChild(table([], [
        ["Utilisation", withText(bar((g.utilization_pct || 0) / 100), pct(g.utilization_pct))],
        ["Memory", withText(bar(g.memory_total ? (g.memory_used || 0) / g.memory_total : 0),
                            bytes(g.memory_used) + " / " + bytes(g.memory_total))],
      ].concat(facts.length ? [["Sensors", facts.join(", ")]] : [])));
      if (!g.slices.length) {
        box.appendChild(el("p", "muted", "no slices"));
      } else {
        box.appendChild(table(
          ["Job", "User", "Name", "Command", "Memory used / limit", "Share", "GPU use", "Flags"],
          g.slices.map((sl) => {
            const flags = [];
            (sl.flags || []).forEach((f) => flags.push(String(f).replace(/_/g, " ")));
            if (sl.low_use_ms >= 60000) flags.push("low use " + age(sl.low_use_ms));
            if (sl.refused_allocs) flags.push(sl.refused_allocs + " refused");
            return [sl.job, sl.user, sl.name, el("code", null, sl.command),
                    withText(bar(sl.memory_limit ? (sl.memory_used || 0) / sl.memory_limit : 0, true),
                             bytes(sl.memory_used) + " / " + bytes(sl.memory_limit)),
                    sl.whole_gpu ? "whole GPU" : (sl.compute_milli ? sl.compute_milli / 10 + "%" : "-"),
                    pct(sl.gpu_util_pct), el("span", "flag", flags.join(", "))];
          })));
      }
      return box;
    }));

    put("queue", s.queue.length ? [table(
      ["#", "Job", "User", "Name", "Command", "Request", "Priority", "Waited", "Waiting for"],
      s.queue.map((q) => [q.position, q.job, q.user, q.name, el("code", null, q.command), q.request,
                          q.priority, age(s.generated_ms - q.submitted_ms), q.waiting_for]))]
      : [el("p", "muted", "nothing waiting")]);

    put("events", s.events.length ? [table(
      ["When", "Kind", "Job", "User", "What"],
      s.events.slice().reverse().map((e) => [age(s.generated_ms - e.at_ms) + " ago", e.kind,
                                            e.job || "", e.user, e.message]))]
      : [el("p", "muted", "no events yet")]);
  }

  function refresh() {
    fetch("status.json", {cache: "no-store"})
      .then((r) => { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then((s) => { last = s; render(s, ""); })
      .catch((err) => { if (last) render(last, "refresh failed: " + err.message); });
  }

  last = JSON.parse(document.getElementById("snapshot").textContent);
  render(last, "");
  setInterval(refresh, REFRESH_MS);
})();
</script>
</body>
</html>
)html";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// The command line, cut to kMaxCommandChars on a UTF-8 character boundary.
std::string CommandText(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
    if (out.size() > kMaxCommandChars) break;
  }
  if (out.size() <= kMaxCommandChars) return out;
  size_t cut = kMaxCommandChars;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) --cut;
  return out.substr(0, cut) + "\u2026";
}

// The memory the shim charged to `job` on the GPU or MIG instance `uuid`.
std::optional<uint64_t> SliceMemoryUsed(Service& service, const core::Job& job,
                                        const std::string& uuid) {
  if (job.region_path.empty()) return std::nullopt;
  auto usage = service.regions().Usage(job.region_path);
  if (!usage.ok()) return std::nullopt;
  for (const SliceUsage& su : *usage) {
    if (su.uuid == uuid) return su.used_bytes;
  }
  return std::nullopt;
}

json SliceJson(Service& service, const JobView& v, size_t alloc_index) {
  const core::Job& job = v.job;
  json s = {{"job", job.id},
            {"user", job.user},
            {"name", job.request.name},
            {"command", CommandText(job.argv)},
            {"whole_gpu", job.request.kind == core::RequestKind::kWholeGpus},
            {"memory_limit", job.allocation.memory_bytes_per_gpu},
            {"compute_milli", job.allocation.compute_milli}};
  const std::string& uuid = job.allocation.gpu_uuids[alloc_index];
  if (auto used = SliceMemoryUsed(service, job, uuid)) s["memory_used"] = *used;
  s["flags"] = v.flags;
  if (v.usage) {
    if (v.usage->gpu_util_known) s["gpu_util_pct"] = v.usage->gpu_util_pct;
    s["low_use_ms"] = v.usage->low_use_ms;
    s["refused_allocs"] = v.usage->refused_allocs;
    if (!s.contains("memory_used")) s["memory_used"] = v.usage->memory_used_bytes;
  }
  return s;
}

ApiResponse Page(int status, std::string body, const char* type) {
  ApiResponse r{status, std::move(body), type, {}};
  r.headers.push_back({"Content-Security-Policy", kContentSecurityPolicy});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

}  // namespace

std::string JsonForScript(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += c;
    }
  }
  return out;
}

json StatusSnapshot(Service& service) {
  const InventorySnapshot& inv = service.inventory();
  std::vector<JobView> jobs = service.reads().List(false);
  int64_t now = NowMs();

  json gpus = json::array();
  for (const GpuInfo& g : inv.gpus) {
    json gj = {{"index", g.index},
               {"model", g.model},
               {"uuid", g.uuid},
               {"memory_total", g.memory_total},
               {"mig_enabled", g.mig_enabled}};
    for (const GpuUsage& u : service.usage().gpus()) {
      if (u.index != g.index) continue;
      gj["memory_used"] = u.memory_used;
      // Unknown (MIG mode without GPM) is left out: the page shows "?".
      if (u.utilization_known) gj["utilization_pct"] = u.utilization_pct;
      if (u.temperature_c >= 0) gj["temperature_c"] = u.temperature_c;
      if (u.power_mw > 0) gj["power_w"] = u.power_mw / 1000.0;
    }
    json slices = json::array();
    for (const JobView& v : jobs) {
      if (v.job.state != core::JobState::kRunning) continue;
      const core::Allocation& a = v.job.allocation;
      for (size_t i = 0; i < a.gpu_indices.size() && i < a.gpu_uuids.size(); ++i) {
        if (a.gpu_indices[i] == g.index) slices.push_back(SliceJson(service, v, i));
      }
    }
    gj["slices"] = std::move(slices);
    gpus.push_back(std::move(gj));
  }

  json queue = json::array();
  int running = 0;
  for (const JobView& v : jobs) {
    if (v.job.state == core::JobState::kRunning) ++running;
    if (v.job.state != core::JobState::kQueued) continue;
    queue.push_back({{"position", v.queue_position},
                     {"job", v.job.id},
                     {"user", v.job.user},
                     {"name", v.job.request.name},
                     {"command", CommandText(v.job.argv)},
                     {"request", v.job.request.Describe()},
                     {"priority", std::string(core::PriorityName(v.job.request.priority))},
                     {"submitted_ms", v.job.submitted_ms},
                     {"waiting_for", v.waiting_for}});
  }

  json events = json::array();
  EventQuery q;
  q.limit = kStatusEvents;
  if (auto ev = service.events().Query(q); ev.ok()) {
    for (const Event& e : *ev) {
      events.push_back({{"at_ms", e.at_ms},
                        {"kind", e.kind},
                        {"job", e.job_id},
                        {"user", e.user},
                        {"message", service.reads().PublicText(e.job_id, e.message)}});
    }
  }

  return {{"generated_ms", now},
          {"host", HostName()},
          {"state", service.degraded_mode().degraded() ? "degraded" : "ok"},
          {"degraded_reason", service.degraded_mode().reason()},
          {"simulated", inv.simulated()},
          {"running", running},
          {"gpus", std::move(gpus)},
          {"queue", std::move(queue)},
          {"events", std::move(events)}};
}

std::string StatusPageHtml(const json& snapshot) {
  std::string page = kPage;
  const std::string marker = "@SNAPSHOT@";
  page.replace(page.find(marker), marker.size(), JsonForScript(snapshot));
  return page;
}

void RegisterStatusPage(Api& api, Service& service) {
  api.AddRoute("GET", "/status", [&service](const ApiRequest&) {
    return Page(200, StatusPageHtml(StatusSnapshot(service)), "text/html; charset=utf-8");
  });
  api.AddRoute("GET", "/status.json", [&service](const ApiRequest&) {
    return Page(200, StatusSnapshot(service).dump(-1, ' ', false, json::error_handler_t::replace),
                "application/json");
  });
}

}  // namespace gpuslice::daemon
