#include "cli/ps_view.h"

#include <string.h>

#include <cstdio>

#include "cli/table.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

std::string GpuColumn(const json& job) {
  if (!job.contains("allocation")) return "-";
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

namespace {

std::string Note(const json& j) {
  std::string state = j["state"];
  std::string note;
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
  if (state == "suspended") {
    // Why (who suspended it), its flags, and, once its processes asked to
    // be resumed, what it waits for in the queue.
    note = j.value("reason", "");
    for (const json& f : j.value("flags", json::array())) {
      note += (note.empty() ? "" : ",") + f.get<std::string>();
    }
    const std::string waiting = j.value("waiting_for", "");
    if (!waiting.empty()) note += (note.empty() ? "" : "; ") + waiting;
    return note;
  }
  if (state == "running") {
    // The daemon's policy flags, as it names them (docs/DAEMON.md).
    for (const json& f : j.value("flags", json::array())) {
      note += (note.empty() ? "" : ",") + f.get<std::string>();
    }
    return note;
  }
  int code = j.value("exit_code", -1);
  note = code >= 0 ? "exit " + std::to_string(code) : "";
  if (const char* sig = SignalName(code)) note += std::string(" (") + sig + ")";
  std::string reason = j.value("reason", "");
  if (!reason.empty()) note += (note.empty() ? "" : "; ") + reason;
  return note;
}

}  // namespace

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
  const json jobs = list.value("jobs", json::array());
  // An IMAGE column only when a container job is listed: most lists have none.
  bool images = false;
  for (const json& j : jobs) images = images || j.contains("image");
  std::vector<std::string> header = {"ID", "USER", "NAME", "STATE", "REQUEST", "PRIO", "GPU"};
  if (images) header.push_back("IMAGE");
  header.insert(header.end(), {"AGE", "ELAPSED", "POS", "NOTE"});
  Table t(header);
  for (const json& j : jobs) {
    std::string state = j["state"];
    // Queued jobs, and suspended ones waiting in the queue to resume.
    const int position = j.value("queue_position", 0);
    std::string pos = state == "queued" || position > 0 ? std::to_string(position) : "-";
    std::vector<std::string> row = {std::to_string(j["id"].get<uint64_t>()),
                                    j.value("user", ""),
                                    j.value("name", ""),
                                    state,
                                    j["request"].value("describe", std::string("?")),
                                    j["request"].value("priority", std::string("?")),
                                    GpuColumn(j)};
    if (images) row.push_back(j.contains("image") ? j.value("image", "") : "-");
    row.insert(row.end(), {FormatAge(now_ms - j.value("submitted_ms", now_ms)), Elapsed(j, now_ms),
                           pos, Note(j)});
    t.Add(row);
  }
  return t.Render();
}

}  // namespace gpuslice::cli
