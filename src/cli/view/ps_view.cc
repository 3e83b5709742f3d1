#include "cli/view/ps_view.h"

#include <string.h>

#include <charconv>
#include <cstdio>

#include "cli/view/table.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string GpuColumn(const json& job) {
  // A suspended job keeps its allocation for its resume, but holds no GPU.
  if (!job.contains("allocation") || Str(job, "state") == "suspended") return "-";
  std::string out;
  for (const auto& i : job["allocation"]["gpu_indices"]) {
    if (!out.empty()) out += ",";
    out += std::to_string(i.get<int>());
  }
  return out;
}

// How long the job has run: from its start to its end, or to now.
std::string Elapsed(const json& j, int64_t now_ms) {
  int64_t started = j.value("started_ms", int64_t{0});
  if (started <= 0 || j.value("state", "") == "queued") return "-";
  int64_t ended = j.value("ended_ms", int64_t{0});
  return FormatAge((ended > 0 ? ended : now_ms) - started);
}

std::string Flags(const json& j) {
  std::string out;
  for (const json& f : j.value("flags", json::array())) {
    if (f.is_string()) out += (out.empty() ? "" : ",") + f.get<std::string>();
  }
  return out;
}

std::string Note(const json& j) {
  const std::string state = Str(j, "state");
  if (state == "queued") {
    // Its fair-share factor (0-1, the queue's order within a priority) when
    // the daemon ranks by it (docs/DAEMON.md, "Fair share").
    if (j.contains("fair_share") && j["fair_share"].is_number()) {
      char fs[32];
      std::snprintf(fs, sizeof fs, "fair share %.2f; ", j["fair_share"].get<double>());
      return fs + j.value("waiting_for", "");
    }
    return j.value("waiting_for", "");
  }
  if (state == "running") return Flags(j);  // The daemon's policy flags (docs/DAEMON.md).
  if (state == "suspended") {
    // Why (who suspended it), where it was, its flags, and, once its
    // processes asked to be resumed, what it waits for in the queue.
    std::string note = j.value("reason", "");
    std::string gpus;
    if (j.contains("allocation")) {
      for (const auto& i : j["allocation"]["gpu_indices"]) {
        gpus += (gpus.empty() ? "" : ",") + std::to_string(i.get<int>());
      }
    }
    if (!gpus.empty()) note += (note.empty() ? "" : "; ") + ("was on GPU " + gpus);
    const std::string flags = Flags(j);
    if (!flags.empty()) note += (note.empty() ? "" : "; ") + flags;
    const std::string waiting = j.value("waiting_for", "");
    if (!waiting.empty()) note += (note.empty() ? "" : "; ") + waiting;
    return note;
  }
  int code = j.value("exit_code", -1);
  std::string note = code >= 0 ? "exit " + std::to_string(code) : "";
  if (const char* sig = SignalName(code)) note += std::string(" (") + sig + ")";
  std::string reason = j.value("reason", "");
  if (!reason.empty()) note += (note.empty() ? "" : "; ") + reason;
  return note;
}

std::string Time(const json& j, const char* key, int64_t now_ms) {
  const int64_t at = j.value(key, int64_t{0});
  return at > 0 ? FormatAge(now_ms - at) + " ago" : "-";
}

std::string Command(const json& j) {
  std::string out;
  for (const json& a : j.value("argv", json::array())) {
    if (a.is_string()) out += (out.empty() ? "" : " ") + a.get<std::string>();
  }
  return out.empty() ? "-" : out;
}

// The fields of `ps` and `--format`, in the order `--format` lists them.
struct PsField {
  const char* name;
  const char* header;
  std::string (*value)(const json& job, int64_t now_ms);
};

const PsField kFields[] = {
    {"id", "ID", [](const json& j, int64_t) { return std::to_string(j.value("id", uint64_t{0})); }},
    {"user", "USER", [](const json& j, int64_t) { return Str(j, "user"); }},
    {"name", "NAME", [](const json& j, int64_t) { return Str(j, "name"); }},
    {"state", "STATE", [](const json& j, int64_t) { return Str(j, "state"); }},
    {"request", "REQUEST",
     [](const json& j, int64_t) {
       return j.contains("request") ? j["request"].value("describe", std::string("?"))
                                    : std::string("?");
     }},
    {"prio", "PRIO",
     [](const json& j, int64_t) {
       return j.contains("request") ? j["request"].value("priority", std::string("?"))
                                    : std::string("?");
     }},
    {"pool", "POOL",
     [](const json& j, int64_t) {
       return j.contains("request") ? j["request"].value("pool", std::string("-"))
                                    : std::string("-");
     }},
    {"gpu", "GPU", [](const json& j, int64_t) { return GpuColumn(j); }},
    {"image", "IMAGE",
     [](const json& j, int64_t) { return j.contains("image") ? Str(j, "image") : "-"; }},
    {"age", "AGE",
     [](const json& j, int64_t now) { return FormatAge(now - j.value("submitted_ms", now)); }},
    {"elapsed", "ELAPSED", [](const json& j, int64_t now) { return Elapsed(j, now); }},
    {"pos", "POS",
     [](const json& j, int64_t) {
       // Queued jobs, and suspended ones waiting in the queue to resume.
       const int position = j.value("queue_position", 0);
       return Str(j, "state") == "queued" || position > 0 ? std::to_string(position)
                                                          : std::string("-");
     }},
    {"note", "NOTE", [](const json& j, int64_t) { return Note(j); }},
    {"hold", "HOLD",
     [](const json& j, int64_t) { return j.contains("hold") ? Str(j, "hold") : "-"; }},
    {"flags", "FLAGS", [](const json& j, int64_t) { return Flags(j); }},
    {"mode", "MODE", [](const json& j, int64_t) { return Str(j, "mode"); }},
    {"submitted", "SUBMITTED",
     [](const json& j, int64_t now) { return Time(j, "submitted_ms", now); }},
    {"started", "STARTED", [](const json& j, int64_t now) { return Time(j, "started_ms", now); }},
    {"ended", "ENDED", [](const json& j, int64_t now) { return Time(j, "ended_ms", now); }},
    {"exit", "EXIT",
     [](const json& j, int64_t) {
       const int code = j.value("exit_code", -1);
       return code >= 0 ? std::to_string(code) : std::string("-");
     }},
    {"reason", "REASON", [](const json& j, int64_t) { return Str(j, "reason"); }},
    {"command", "COMMAND", [](const json& j, int64_t) { return Command(j); }},
    {"pid", "PID",
     [](const json& j, int64_t) {
       const int64_t pid = j.value("pid", int64_t{0});
       return pid > 0 ? std::to_string(pid) : std::string("-");
     }},
};
constexpr size_t kFieldCount = sizeof kFields / sizeof kFields[0];

size_t FieldIndex(std::string_view name) {
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (name == kFields[i].name) return i;
  }
  return kFieldCount;
}

std::vector<PsColumn> DefaultColumns(const json& jobs) {
  // An IMAGE column only when a container job is listed: most lists have none.
  bool images = false;
  for (const json& j : jobs) images = images || j.contains("image");
  std::vector<std::string_view> names = {"id", "user", "name", "state", "request", "prio", "gpu"};
  if (images) names.push_back("image");
  names.insert(names.end(), {"age", "elapsed", "pos", "note"});
  std::vector<PsColumn> out;
  for (std::string_view n : names) out.push_back({FieldIndex(n), 0});
  return out;
}

// A cell cut to `width` bytes with a '~' for the rest; never inside a UTF-8
// sequence (Shown keeps UTF-8 in a UTF-8 locale).
std::string Cut(std::string s, size_t width) {
  if (width == 0 || s.size() <= width) return s;
  if (width == 1) return "~";
  size_t end = width - 1;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "~";
}

}  // namespace

const char* SignalName(int exit_code) {
  // 128 + N is how the supervisor (and a shell) reports an end by signal N.
  if (exit_code <= 128 || exit_code > 128 + 64) return nullptr;
  static thread_local char buf[32];
  const char* abbrev = sigabbrev_np(exit_code - 128);
  if (abbrev == nullptr) return nullptr;
  std::snprintf(buf, sizeof buf, "killed by SIG%s", abbrev);
  return buf;
}

std::vector<std::string> PsFieldNames() {
  std::vector<std::string> out;
  for (const PsField& f : kFields) out.push_back(f.name);
  return out;
}

core::Result<std::vector<PsColumn>> ParsePsFormat(std::string_view format) {
  auto known = [] {
    std::string out;
    for (const PsField& f : kFields) out += (out.empty() ? "" : ", ") + std::string(f.name);
    return out;
  };
  std::vector<PsColumn> out;
  while (true) {
    const size_t comma = format.find(',');
    std::string_view item = format.substr(0, comma);
    const size_t colon = item.find(':');
    const std::string_view name = item.substr(0, colon);
    PsColumn c;
    c.field = FieldIndex(name);
    if (c.field == kFieldCount) {
      return core::InvalidArgumentError("--format: unknown field '" +
                                        std::string(name.substr(0, 32)) + "' (fields: " + known() +
                                        ")");
    }
    if (colon != std::string_view::npos) {
      const std::string_view w = item.substr(colon + 1);
      auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), c.width);
      if (w.empty() || ec != std::errc() || p != w.data() + w.size() || c.width == 0 ||
          c.width > 999) {
        return core::InvalidArgumentError("--format: '" + std::string(item.substr(0, 40)) +
                                          "': the width after ':' must be a number from 1 to "
                                          "999");
      }
    }
    out.push_back(c);
    if (comma == std::string_view::npos) break;
    format.remove_prefix(comma + 1);
  }
  return out;
}

std::string DependenciesText(const json& job) {
  std::string out;
  for (const json& d : job.value("after", json::array())) {
    std::string one = std::to_string(d.value("job", uint64_t{0})) +
                      (d.value("condition", "") == "ok" ? ":ok" : "");
    if (d.contains("state")) {
      const std::string state = d.value("state", "");
      one += " (" +
             (state == "exited" ? "exit " + std::to_string(d.value("exit_code", -1)) : state) +
             ", " + d.value("status", "") + ")";
    }
    out += (out.empty() ? "" : ", ") + one;
  }
  return out;
}

std::string RenderPs(const json& list, int64_t now_ms) {
  return RenderPs(list, now_ms, DefaultColumns(list.value("jobs", json::array())));
}

std::string RenderPs(const json& list, int64_t now_ms, const std::vector<PsColumn>& columns) {
  std::vector<std::string> header;
  for (const PsColumn& c : columns) header.push_back(kFields[c.field].header);
  Table t(header);
  for (const json& j : list.value("jobs", json::array())) {
    std::vector<std::string> row;
    for (const PsColumn& c : columns) {
      row.push_back(Cut(Shown(kFields[c.field].value(j, now_ms)), c.width));
    }
    t.Add(std::move(row));
  }
  return t.Render();
}

std::string RenderSummary(const json& summary) {
  std::string out;
  uint64_t total = 0;
  const json counts = summary.value("counts", json::object());
  // In the order of a job's life, then the ends.
  for (const char* state :
       {"queued", "running", "suspended", "exited", "cancelled", "timed_out", "failed"}) {
    const uint64_t n = counts.value(state, uint64_t{0});
    if (n == 0) continue;
    out += (out.empty() ? "" : "  ") + std::string(state) + " " + std::to_string(n);
    total += n;
  }
  out = (out.empty() ? std::string("no jobs") : out + "  (" + std::to_string(total) + " jobs)") +
        "\n";
  const json groups = summary.value("groups", json::array());
  if (groups.empty()) return out;
  Table t({"IDS", "COUNT", "USER", "NAME", "STATE", "REQUEST", "PRIO", "POOL", "POS", "NOTE"});
  for (const json& g : groups) {
    const std::string state = Str(g, "state");
    std::string note = state == "queued" ? Str(g, "waiting_for") : "";
    if (g.value("held", false) && state == "queued" && note.find("held") == std::string::npos) {
      note = "held" + (note.empty() ? "" : "; " + note);
    }
    t.Add({Str(g, "ids"), std::to_string(g.value("count", uint64_t{0})), Shown(Str(g, "user")),
           Shown(Str(g, "name")), state, Str(g, "request"), Str(g, "priority"),
           Shown(Str(g, "pool")),
           g.contains("queue_position") ? std::to_string(g.value("queue_position", 0)) : "-",
           Shown(note)});
  }
  out += "\n" + t.Render();
  const uint64_t shown = groups.size(), all = summary.value("groups_total", shown);
  if (all > shown) {
    out += "(" + std::to_string(all - shown) + " more groups: -n 0 shows them all)\n";
  }
  return out;
}

}  // namespace gpuslice::cli
