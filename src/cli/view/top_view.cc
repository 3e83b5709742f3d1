#include "cli/view/top_view.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "cli/view/table.h"
#include "core/units.h"

namespace gpuslice::cli {

using nlohmann::json;

namespace {

// Eighths of a cell, for UTF-8 bars: U+258F (1/8) .. U+2589 (7/8).
constexpr const char* kEighths[] = {"",       "\u258f", "\u258e", "\u258d",
                                    "\u258c", "\u258b", "\u258a", "\u2589"};
constexpr const char* kFull = "\u2588";
constexpr const char* kEmpty = "\u2591";

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

std::string Text(const json& j, const char* key) { return Clean(Get<std::string>(j, key, "")); }

std::string Pct(double pct) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", std::clamp(pct, 0.0, 999.0));
  return buf;
}

std::string Pad(const std::string& s, size_t width, bool utf8) {
  std::string out = Fit(s, width, utf8);
  size_t w = DisplayWidth(out);
  return w < width ? out + std::string(width - w, ' ') : out;
}

std::string PadLeft(const std::string& s, size_t width) {
  size_t w = DisplayWidth(s);
  return w < width ? std::string(width - w, ' ') + s : s;
}

std::string TrimRight(std::string s) {
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// "12.5 GiB" -> "12.5G": slice rows have little room.
std::string ShortBytes(uint64_t bytes) {
  std::string s = core::FormatBytes(bytes);
  size_t sp = s.find(' ');
  if (sp == std::string::npos || sp + 1 >= s.size()) return s;
  char unit = s[sp + 1];
  return s.substr(0, sp) + (unit == 'B' ? std::string("B") : std::string(1, unit));
}

TopSlice SliceFrom(const json& s, const std::map<uint64_t, const json*>& jobs) {
  TopSlice t;
  t.job = Get<uint64_t>(s, "job", 0);
  t.user = Text(s, "user");
  t.name = Text(s, "name");
  t.memory_limit = Get<uint64_t>(s, "memory_limit", 0);
  t.memory_used = s.contains("memory_used") ? Get<int64_t>(s, "memory_used", -1) : -1;
  t.compute_milli = Get<uint32_t>(s, "compute_milli", 0);
  auto it = jobs.find(t.job);
  if (it != jobs.end()) {
    const json& j = *it->second;
    t.whole_gpu = j.contains("request") && Get<std::string>(j["request"], "kind", "") == "gpus";
    if (j.contains("flags") && j["flags"].is_array()) {
      for (const json& f : j["flags"]) {
        if (f.is_string()) t.flags.push_back(Clean(f.get<std::string>()));
      }
    }
    t.idle = std::find(t.flags.begin(), t.flags.end(), "idle") != t.flags.end();
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      t.achieved_pct = Get<double>(u, "gpu_util_pct", -1);
      t.low_use_ms = Get<int64_t>(u, "low_use_ms", 0);
      t.refused_allocs = Get<uint64_t>(u, "refused_allocs", 0);
      t.idle = t.idle || Get<bool>(u, "idle", false);
      if (t.memory_used < 0 && u.contains("memory_used_bytes")) {
        t.memory_used = Get<int64_t>(u, "memory_used_bytes", -1);
      }
    }
  }
  return t;
}

// The columns of a slice row, sized to the terminal's width.
struct SliceColumns {
  size_t user, name, bar;
};

constexpr size_t kIndent = 4, kJobW = 6, kMemTextW = 13, kComputeW = 9;

SliceColumns SliceLayout(size_t width) {
  SliceColumns c;
  size_t extra = width > 80 ? width - 80 : 0;
  c.user = std::min<size_t>(8 + extra / 10, 16);
  c.name = std::min<size_t>(12 + extra / 4, 40);
  size_t flags = std::min<size_t>(12 + extra / 4, 40);  // The rest of the line, at least this.
  size_t fixed =
      kIndent + kJobW + 1 + c.user + 1 + c.name + 1 + kMemTextW + 1 + 1 + kComputeW + 1 + flags;
  c.bar = width > fixed ? std::min<size_t>(width - fixed, 40) : 0;
  if (c.bar < 6) c.bar = 0;  // Too small to read: the figures alone.
  return c;
}

std::string SliceHeader(const SliceColumns& c, bool utf8) {
  return TrimRight(
      std::string(kIndent, ' ') + Pad("JOB", kJobW, utf8) + " " + Pad("USER", c.user, utf8) + " " +
      Pad("NAME", c.name, utf8) + " " +
      Pad(c.bar ? "MEMORY USED/LIMIT" : "USED/LIMIT", (c.bar ? c.bar + 1 : 0) + kMemTextW, utf8) +
      " " + Pad("SHARE/GOT", kComputeW, utf8) + " FLAGS");
}

std::string SliceRow(const TopSlice& s, const SliceColumns& c, bool utf8) {
  std::string mem;
  if (c.bar) {
    double frac = s.memory_limit && s.memory_used > 0
                      ? static_cast<double>(s.memory_used) / static_cast<double>(s.memory_limit)
                      : 0.0;
    mem = Bar(frac, c.bar, utf8) + " ";
  }
  mem += (s.memory_used >= 0 ? ShortBytes(static_cast<uint64_t>(s.memory_used)) : "?") + "/" +
         ShortBytes(s.memory_limit);
  std::string target = s.whole_gpu           ? "100%"
                       : s.compute_milli > 0 ? core::FormatShareMilli(s.compute_milli)
                                             : "-";
  std::string got = s.achieved_pct >= 0 ? Pct(s.achieved_pct) : "-";
  std::vector<std::string> flags;
  // The daemon's flags in capitals ("IDLE", "PAUSED", "OVER LIMIT"), then ours.
  for (std::string f : s.flags) {
    for (char& c : f)
      c = c == '_' ? ' ' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    flags.push_back(f);
  }
  if (s.low_use_ms >= 60'000) flags.push_back("low use " + FormatAge(s.low_use_ms));
  if (s.refused_allocs) flags.push_back(std::to_string(s.refused_allocs) + " refused");
  std::string f;
  for (const std::string& x : flags) f += (f.empty() ? "" : ", ") + x;
  return TrimRight(std::string(kIndent, ' ') + Pad(std::to_string(s.job), kJobW, utf8) + " " +
                   Pad(s.user, c.user, utf8) + " " + Pad(s.name, c.name, utf8) + " " +
                   Pad(mem, (c.bar ? c.bar + 1 : 0) + kMemTextW, utf8) + " " +
                   Pad(target + "/" + got, kComputeW, utf8) + " " + f);
}

// "  UTIL [bar]  42%": the bar takes what the label and figures leave.
std::string BarLine(const std::string& label, double frac, const std::string& figures, size_t width,
                    bool utf8) {
  size_t fixed = 2 + label.size() + 1 + 1 + DisplayWidth(figures);
  size_t bar = width > fixed + 4 ? width - fixed : 4;
  return "  " + label + " " + Bar(frac, bar, utf8) + " " + figures;
}

}  // namespace

std::string Clean(const std::string& s) { return Shown(s); }

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

std::string Fit(const std::string& s, size_t width, bool utf8) {
  if (DisplayWidth(s) <= width) return s;
  if (width == 0) return "";
  std::string out;
  size_t cols = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    unsigned char c = s[i];
    if (c >= 0xf0) {
      len = 4;
    } else if (c >= 0xe0) {
      len = 3;
    } else if (c >= 0xc0) {
      len = 2;
    }
    if (cols + 1 >= width) break;  // Keep one column for the mark.
    out.append(s, i, len);
    ++cols;
    i += len;
  }
  return out + (utf8 ? "\u2026" : "~");
}

std::string Bar(double fraction, size_t width, bool utf8) {
  if (width < 2) return "";
  size_t inner = width - 2;
  double f = std::isfinite(fraction) ? std::clamp(fraction, 0.0, 1.0) : 0.0;
  std::string out = "[";
  if (utf8) {
    size_t eighths = static_cast<size_t>(std::lround(f * static_cast<double>(inner) * 8));
    size_t full = eighths / 8, part = eighths % 8;
    for (size_t i = 0; i < full; ++i) out += kFull;
    size_t used = full;
    if (part && used < inner) {
      out += kEighths[part];
      ++used;
    }
    for (; used < inner; ++used) out += kEmpty;
  } else {
    size_t full = static_cast<size_t>(std::lround(f * static_cast<double>(inner)));
    out += std::string(full, '#') + std::string(inner - full, '.');
  }
  return out + "]";
}

TopModel ModelFromJson(const json& status, const json& gpus, const json& jobs, const json& events) {
  TopModel m;
  m.state = Text(status, "state");
  m.degraded_reason = Text(status, "degraded_reason");
  m.version = Text(status, "version");
  m.simulated = Get<bool>(status, "simulated", false);
  m.running = Get<int>(status, "running", 0);
  m.queued = Get<int>(status, "queued", 0);

  std::map<uint64_t, const json*> by_id;
  m.queue_truncated = jobs.is_object() && jobs.contains("next_cursor");
  if (jobs.is_object() && jobs.contains("jobs") && jobs["jobs"].is_array()) {
    for (const json& j : jobs["jobs"]) by_id[Get<uint64_t>(j, "id", 0)] = &j;
    for (const json& j : jobs["jobs"]) {
      if (Get<std::string>(j, "state", "") != "queued") continue;
      TopQueued q;
      q.position = Get<int>(j, "queue_position", 0);
      q.job = Get<uint64_t>(j, "id", 0);
      q.user = Text(j, "user");
      q.name = Text(j, "name");
      if (j.contains("request")) {
        q.request = Text(j["request"], "describe");
        q.priority = Text(j["request"], "priority");
      }
      q.submitted_ms = Get<int64_t>(j, "submitted_ms", 0);
      q.waiting_for = Text(j, "waiting_for");
      m.queue.push_back(std::move(q));
    }
    std::stable_sort(m.queue.begin(), m.queue.end(), [](const TopQueued& a, const TopQueued& b) {
      return a.position < b.position;
    });
  }
  if (gpus.is_object() && gpus.contains("gpus") && gpus["gpus"].is_array()) {
    for (const json& g : gpus["gpus"]) {
      TopGpu t;
      t.index = Get<uint32_t>(g, "index", 0);
      t.model = Text(g, "model");
      t.uuid = Text(g, "uuid");
      t.memory_total = Get<uint64_t>(g, "memory_total", 0);
      t.memory_used = Get<uint64_t>(g, "memory_used", 0);
      t.utilization_pct = Get<int32_t>(g, "utilization_pct", -1);
      t.temperature_c = Get<int32_t>(g, "temperature_c", -1);
      t.power_w = Get<double>(g, "power_w", -1);
      t.mig = Get<bool>(g, "mig_enabled", false);
      if (g.contains("slices") && g["slices"].is_array()) {
        for (const json& s : g["slices"]) t.slices.push_back(SliceFrom(s, by_id));
      }
      if (g.contains("foreign_processes") && g["foreign_processes"].is_array()) {
        for (const json& p : g["foreign_processes"]) {
          TopForeign f;
          f.pid = Get<uint32_t>(p, "pid", 0);
          f.user = Text(p, "user");
          f.memory = Get<uint64_t>(p, "used_memory", 0);
          t.foreign.push_back(std::move(f));
        }
      }
      if (g.contains("processes") && g["processes"].is_array()) {
        for (const json& p : g["processes"]) {
          TopProcess pr;
          pr.pid = Get<uint32_t>(p, "pid", 0);
          pr.user = Text(p, "user");
          pr.job = Get<uint64_t>(p, "job", 0);
          pr.memory = Get<uint64_t>(p, "used_memory", 0);
          pr.sm_pct = Get<int32_t>(p, "sm_util_pct", -1);
          t.processes.push_back(std::move(pr));
        }
        std::stable_sort(
            t.processes.begin(), t.processes.end(),
            [](const TopProcess& a, const TopProcess& b) { return a.memory > b.memory; });
      }
      if (t.mig && g.contains("mig") && g["mig"].is_array()) {
        for (const json& mj : g["mig"]) {
          TopMig mi;
          mi.uuid = Text(mj, "uuid");
          mi.profile = Text(mj, "profile");
          mi.memory_total = Get<uint64_t>(mj, "memory_total", 0);
          mi.job = Get<uint64_t>(mj, "job", 0);
          mi.user = Text(mj, "user");
          mi.name = Text(mj, "name");
          mi.utilization_pct = Get<double>(mj, "utilization_pct", -1);
          if (mj.contains("foreign_processes") && mj["foreign_processes"].is_array() &&
              !mj["foreign_processes"].empty()) {
            mi.foreign_pid = Get<uint32_t>(mj["foreign_processes"][0], "pid", 0);
            mi.foreign_user = Text(mj["foreign_processes"][0], "user");
          }
          t.instances.push_back(std::move(mi));
        }
      }
      m.gpus.push_back(std::move(t));
    }
  }
  const json* ev = &events;
  if (events.is_object() && events.contains("events")) ev = &events["events"];
  if (ev->is_array()) {
    for (const json& e : *ev) {
      TopEvent t;
      t.at_ms = Get<int64_t>(e, "at_ms", 0);
      t.kind = Text(e, "kind");
      t.job = Get<uint64_t>(e, "job", Get<uint64_t>(e, "job_id", 0));
      t.user = Text(e, "user");
      t.message = Text(e, "message");
      m.events.push_back(std::move(t));
    }
  }
  return m;
}

json ModelToJson(const TopModel& m) {
  json gpus = json::array();
  for (const TopGpu& g : m.gpus) {
    json slices = json::array();
    for (const TopSlice& s : g.slices) {
      json sj = {{"job", s.job},
                 {"user", s.user},
                 {"name", s.name},
                 {"whole_gpu", s.whole_gpu},
                 {"memory_limit_bytes", s.memory_limit},
                 {"compute_milli", s.compute_milli},
                 {"low_use_ms", s.low_use_ms},
                 {"idle", s.idle},
                 {"flags", s.flags},
                 {"refused_allocs", s.refused_allocs}};
      sj["memory_used_bytes"] = s.memory_used >= 0 ? json(s.memory_used) : json(nullptr);
      sj["achieved_util_pct"] = s.achieved_pct >= 0 ? json(s.achieved_pct) : json(nullptr);
      slices.push_back(std::move(sj));
    }
    json gj = {{"index", g.index},
               {"model", g.model},
               {"uuid", g.uuid},
               {"memory_total_bytes", g.memory_total},
               {"memory_used_bytes", g.memory_used},
               {"utilization_pct", g.utilization_pct >= 0 ? json(g.utilization_pct) : json(nullptr)},
               {"mig_enabled", g.mig},
               {"slices", slices}};
    json foreign = json::array();
    for (const TopForeign& f : g.foreign) {
      foreign.push_back({{"pid", f.pid}, {"user", f.user}, {"memory_bytes", f.memory}});
    }
    gj["foreign_processes"] = foreign;
    json processes = json::array();
    for (const TopProcess& p : g.processes) {
      processes.push_back({{"pid", p.pid},
                           {"user", p.user},
                           {"job", p.job ? json(p.job) : json(nullptr)},
                           {"memory_bytes", p.memory},
                           {"sm_util_pct", p.sm_pct >= 0 ? json(p.sm_pct) : json(nullptr)}});
    }
    gj["processes"] = processes;
    if (!g.mig) {
      gj["memory_reserved_bytes"] = g.Reserved();
      gj["memory_free_for_jobs_bytes"] = g.FreeForJobs();
    }
    json mig = json::array();
    for (const TopMig& mi : g.instances) {
      json mj = {{"uuid", mi.uuid},
                 {"profile", mi.profile},
                 {"memory_total_bytes", mi.memory_total},
                 {"job", mi.job ? json(mi.job) : json(nullptr)}};
      if (mi.job) mj["user"] = mi.user;
      if (mi.foreign_pid) mj["foreign_pid"] = mi.foreign_pid;
      mj["utilization_pct"] = mi.utilization_pct >= 0 ? json(mi.utilization_pct) : json(nullptr);
      mig.push_back(std::move(mj));
    }
    gj["mig"] = mig;
    gj["temperature_c"] = g.temperature_c >= 0 ? json(g.temperature_c) : json(nullptr);
    gj["power_w"] = g.power_w >= 0 ? json(g.power_w) : json(nullptr);
    gpus.push_back(std::move(gj));
  }
  json queue = json::array();
  for (const TopQueued& q : m.queue) {
    queue.push_back({{"position", q.position},
                     {"job", q.job},
                     {"user", q.user},
                     {"name", q.name},
                     {"request", q.request},
                     {"priority", q.priority},
                     {"submitted_ms", q.submitted_ms},
                     {"waiting_for", q.waiting_for}});
  }
  json events = json::array();
  for (const TopEvent& e : m.events) {
    events.push_back({{"at_ms", e.at_ms},
                      {"kind", e.kind},
                      {"job", e.job},
                      {"user", e.user},
                      {"message", e.message}});
  }
  json j = {{"host", m.host},           {"time_ms", m.now_ms},
            {"state", m.state},         {"degraded_reason", m.degraded_reason},
            {"simulated", m.simulated}, {"running", m.running},
            {"queued", m.queued},       {"gpus", gpus},
            {"queue", queue},           {"events", events}};
  if (!m.error.empty()) j["error"] = m.error;
  return j;
}

uint64_t TopGpu::Reserved() const {
  uint64_t sum = 0;
  for (const TopSlice& s : slices) sum += s.whole_gpu ? memory_total : s.memory_limit;
  return std::min(sum, memory_total);
}

uint64_t TopGpu::ForeignMemory() const {
  uint64_t sum = 0;
  for (const TopForeign& f : foreign) sum += f.memory;
  return sum;
}

uint64_t TopGpu::FreeForJobs() const {
  const uint64_t taken = Reserved() + ForeignMemory();
  return taken >= memory_total ? 0 : memory_total - taken;
}

std::vector<std::string> RenderTop(const TopModel& m, const RenderOptions& o,
                                   std::vector<uint64_t>* line_jobs) {
  const size_t w = std::max<size_t>(o.width, 40);
  const bool u = o.utf8;
  std::vector<std::string> out;
  if (line_jobs != nullptr) line_jobs->clear();
  // A line about job `job`: marked when it is the selected one.
  auto emit_for = [&](uint64_t job, std::string line) {
    if (job != 0 && job == o.selected_job && line.size() >= 2) line.replace(0, 1, ">");
    out.push_back(Fit(TrimRight(line), w, u));
    if (line_jobs != nullptr) line_jobs->push_back(job);
  };
  auto emit = [&](const std::string& line) { emit_for(0, line); };

  std::string state = m.state.empty() ? "unreachable" : m.state;
  std::string head = "gpuslice top  " + Clean(m.host) + "  daemon " + state +
                     (m.simulated ? "  SIMULATED" : "") + "  " + m.time_text + "  running " +
                     std::to_string(m.running) + "  queued " + std::to_string(m.queued);
  emit(head);
  if (!m.degraded_reason.empty()) emit("DEGRADED: " + m.degraded_reason);
  if (!m.error.empty()) emit("error: " + Clean(m.error));

  const std::string deg = u ? "\u00b0C" : "C";
  for (const TopGpu& g : m.gpus) {
    emit("");
    std::string line = "GPU " + std::to_string(g.index) + "  " + g.model;
    if (g.temperature_c >= 0) line += "  " + std::to_string(g.temperature_c) + deg;
    if (g.power_w >= 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "  %.0f W", g.power_w);
      line += buf;
    }
    line += "  " + std::to_string(g.slices.size()) + (g.slices.size() == 1 ? " slice" : " slices") +
            (g.mig ? "  MIG" : "") + "  " + g.uuid;
    emit(line);
    if (g.utilization_pct >= 0) {
      emit(BarLine("UTIL", g.utilization_pct / 100.0, PadLeft(Pct(g.utilization_pct), 4), w, u));
    } else {
      // No figure is not 0%: NVML measures a GPU in MIG mode only with GPM.
      emit("    UTIL  n/a (NVML has no utilisation for this GPU in MIG mode: no GPM)");
    }
    double mem_frac = g.memory_total ? static_cast<double>(g.memory_used) / g.memory_total : 0.0;
    emit(BarLine("MEM ", mem_frac,
                 core::FormatBytes(g.memory_used) + " / " + core::FormatBytes(g.memory_total), w,
                 u));
    if (!g.mig) {
      // What jobs reserved (placement's view) beside what NVML says is used:
      // two idle 20 GiB jobs use nothing and leave no room.
      const double resv = g.memory_total ? double(g.Reserved()) / double(g.memory_total) : 0.0;
      emit(BarLine("RESV", resv,
                   core::FormatBytes(g.Reserved()) + " reserved, " +
                       core::FormatBytes(g.FreeForJobs()) + " free for jobs",
                   w, u));
    }
    for (const TopForeign& f : g.foreign) {
      emit("    outside gpuslice: pid " + std::to_string(f.pid) + " (" + Clean(f.user) + ") " +
           core::FormatBytes(f.memory));
    }
    for (const TopMig& mi : g.instances) {
      std::string whose = mi.job ? "job " + std::to_string(mi.job) + " " + Clean(mi.user) +
                                       (mi.name.empty() ? "" : " " + Clean(mi.name))
                          : mi.foreign_pid
                              ? "outside gpuslice (pid " + std::to_string(mi.foreign_pid) + ", " +
                                    Clean(mi.foreign_user) + ")"
                              : "free";
      const std::string busy =
          mi.utilization_pct >= 0 ? "busy " + PadLeft(Pct(mi.utilization_pct), 4) : "busy  n/a";
      emit("    MIG " + Pad(Clean(mi.profile), 10, u) + " " +
           PadLeft(core::FormatBytes(mi.memory_total), 9) + "  " + busy + "  " + whose + "  " +
           Clean(mi.uuid));
    }
    if (g.slices.empty()) {
      emit("    (no slices)");
      continue;
    }
    SliceColumns c = SliceLayout(w);
    emit(SliceHeader(c, u));
    for (const TopSlice& s : g.slices) emit_for(s.job, SliceRow(s, c, u));
    if (!g.processes.empty()) {
      // Each process as nvitop shows it: its memory on this GPU and its SM use.
      const size_t user_w = c.user;
      emit("    " + Pad("PID", 9, u) + Pad("USER", user_w + 1, u) + Pad("JOB", kJobW + 1, u) +
           PadLeft("GPU MEM", 9) + PadLeft("SM", 6));
      for (const TopProcess& p : g.processes) {
        emit_for(p.job, "    " + Pad(std::to_string(p.pid), 9, u) + Pad(p.user, user_w + 1, u) +
                            Pad(p.job ? std::to_string(p.job) : "-", kJobW + 1, u) +
                            PadLeft(ShortBytes(p.memory), 9) +
                            PadLeft(p.sm_pct >= 0 ? Pct(p.sm_pct) : "-", 6));
      }
    }
  }

  emit("");
  // The daemon's count; with thousands waiting only the start of the queue
  // is fetched.
  const size_t waiting = m.queue_truncated ? std::max<size_t>(m.queue.size(), size_t(m.queued))
                                            : m.queue.size();
  emit(
      "QUEUE (" + std::to_string(waiting) + " waiting" +
      (waiting > m.queue.size() ? ", the first " + std::to_string(m.queue.size()) + " shown" : "") +
      ")");
  if (m.queue.empty()) {
    emit("    (none waiting)");
  } else {
    size_t extra = w > 80 ? w - 80 : 0;
    size_t user_w = std::min<size_t>(8 + extra / 10, 16),
           name_w = std::min<size_t>(12 + extra / 4, 40), req_w = 16;
    emit("    " + Pad("POS", 4, u) + Pad("JOB", 7, u) + Pad("USER", user_w + 1, u) +
         Pad("NAME", name_w + 1, u) + Pad("REQUEST", req_w + 1, u) + Pad("PRIO", 7, u) +
         Pad("WAITED", 7, u) + "WAITING FOR");
    for (const TopQueued& q : m.queue) {
      emit_for(q.job, "    " + Pad(std::to_string(q.position), 4, u) +
                          Pad(std::to_string(q.job), 7, u) + Pad(q.user, user_w, u) + " " +
                          Pad(q.name, name_w, u) + " " + Pad(q.request, req_w, u) + " " +
                          Pad(q.priority, 7, u) + Pad(FormatAge(m.now_ms - q.submitted_ms), 7, u) +
                          q.waiting_for);
    }
  }

  emit("");
  emit("EVENTS");
  if (m.events.empty()) emit("    (none)");
  size_t first = m.events.size() > o.max_events ? m.events.size() - o.max_events : 0;
  for (size_t i = first; i < m.events.size(); ++i) {
    const TopEvent& e = m.events[i];
    std::string who = e.job ? "job " + std::to_string(e.job) : "";
    if (!e.user.empty()) who += (who.empty() ? "" : " ") + e.user;
    emit("    " + PadLeft(FormatAge(m.now_ms - e.at_ms), 6) + " ago  " + Pad(e.kind, 12, u) + " " +
         Pad(who, 18, u) + " " + e.message);
  }
  return out;
}

}  // namespace gpuslice::cli
