#pragma once

// `gpuslice ps` as text: the table of jobs from the daemon's JSON list (pure,
// so that it is tested without a daemon).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace gpuslice::cli {

// One line per job of `list` (GET /v1/jobs), at `now_ms`. Columns:
// AGE is the time since submission; ELAPSED the time the job has run (up to
// now, or to its end; "-" while it has not started); NOTE says why a queued
// job waits, how an ended one ended, or a running one's policy flags.
std::string RenderPs(const nlohmann::json& list, int64_t now_ms);

// A job's dependencies (its "after" list) for `gpuslice show`: "1:ok
// (running, waiting), 2 (exit 3, satisfied)"; "" when it has none.
std::string DependenciesText(const nlohmann::json& job);

// "killed by SIGUSR1" for an exit code of 128 + a signal number (how an end
// by a signal is recorded), else nullptr.
const char* SignalName(int exit_code);

}  // namespace gpuslice::cli
