#pragma once

// Picking jobs the way Slurm users do (pure, tested without a daemon):
// `ps`/`cancel` --user and --state filters, and the index list of a job
// array (`submit --array 1-20`).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::cli {

struct JobFilter {
  std::optional<std::string> user;  // Only this user's jobs.
  std::set<std::string> states;     // Only jobs in one of these states; empty: any.
};

// "queued", "running,queued", "ended" (exited, cancelled, timed_out and
// failed); the states of core::JobState otherwise. Errors name the token.
core::Result<std::set<std::string>> ParseStates(std::string_view text);

// Whether any state of `states` is one a job has after it ended (then `ps`
// must ask for finished jobs too).
bool WantsEndedJobs(const std::set<std::string>& states);

// Whether `job` (as GET /v1/jobs lists it) passes `filter`.
bool Matches(const nlohmann::json& job, const JobFilter& filter);

// `list` with only the jobs that pass `filter`.
nlohmann::json Filter(const nlohmann::json& list, const JobFilter& filter);

// The indices of a job array: "1-20", "0,3,5", "1-3,10"; ascending, no
// repeats, at most kMaxArrayJobs of them.
inline constexpr size_t kMaxArrayJobs = 1000;
core::Result<std::vector<uint32_t>> ParseArrayIndices(std::string_view text);

}  // namespace gpuslice::cli
