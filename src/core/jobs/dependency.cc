#include "core/jobs/dependency.h"

#include <algorithm>
#include <charconv>

namespace gpuslice::core {
namespace {

Status BadToken(std::string_view token, const std::string& why) {
  return InvalidArgumentError("--after '" + std::string(token.substr(0, 64)) + "': " + why);
}

}  // namespace

Result<std::vector<Dependency>> ParseDependencies(std::string_view text) {
  if (text.empty()) {
    return InvalidArgumentError("--after: empty; give job ids, e.g. --after 12 or --after 12:ok");
  }
  std::vector<Dependency> deps;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view token = text.substr(start, comma - start);
    start = comma + 1;
    if (token.empty()) return BadToken(text, "an empty entry between commas");
    const size_t colon = token.find(':');
    const std::string_view id = token.substr(0, colon);
    Dependency d;
    auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), d.job_id);
    if (id.empty() || ec != std::errc() || end != id.data() + id.size() || d.job_id == 0) {
      return BadToken(token, "'" + std::string(id.substr(0, 32)) +
                                 "' is not a job id (a positive integer, e.g. 12 or 12:ok)");
    }
    if (colon != std::string_view::npos) {
      const std::string_view kind = token.substr(colon + 1);
      if (kind == "ok") {
        d.kind = DependencyKind::kOk;
      } else if (kind != "any") {
        return BadToken(token, "unknown condition '" + std::string(kind.substr(0, 32)) +
                                   "' (ok: once it exited 0; any, the default: once it ended)");
      }
    }
    auto same = std::find_if(deps.begin(), deps.end(),
                             [&](const Dependency& e) { return e.job_id == d.job_id; });
    if (same != deps.end()) {
      if (d.kind == DependencyKind::kOk) same->kind = DependencyKind::kOk;  // The stricter.
      continue;
    }
    if (deps.size() == kMaxDependencies) {
      return InvalidArgumentError("--after: more than " + std::to_string(kMaxDependencies) +
                                  " jobs");
    }
    deps.push_back(d);
  }
  std::sort(deps.begin(), deps.end(),
            [](const Dependency& a, const Dependency& b) { return a.job_id < b.job_id; });
  return deps;
}

std::string FormatDependency(const Dependency& dep) {
  return std::to_string(dep.job_id) + (dep.kind == DependencyKind::kOk ? ":ok" : "");
}

std::string FormatDependencies(const std::vector<Dependency>& deps) {
  std::string out;
  for (const Dependency& d : deps) out += (out.empty() ? "" : ",") + FormatDependency(d);
  return out;
}

DependencyStatus Evaluate(const Dependency& dep, JobState state, int exit_code) {
  if (!IsTerminal(state)) return DependencyStatus::kWaiting;
  if (dep.kind == DependencyKind::kAny) return DependencyStatus::kSatisfied;
  return state == JobState::kExited && exit_code == 0 ? DependencyStatus::kSatisfied
                                                      : DependencyStatus::kBroken;
}

std::string BrokenDependencyReason(const Dependency& dep, JobState state, int exit_code) {
  std::string how = std::string(JobStateName(state));
  if (state == JobState::kExited) {
    how = exit_code >= 0 ? "exit " + std::to_string(exit_code) : "exit status unknown";
  }
  return "dependency job " + std::to_string(dep.job_id) + " did not succeed (" + how + ")";
}

}  // namespace gpuslice::core
