#pragma once

// Picking jobs the way Slurm users do (pure, tested without a daemon):
// `ps`/`cancel`/`show` filters (--user, --state, --name, --pool), which the
// daemon applies (GET /v1/jobs, docs/API.md), and the index list of a job
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
  std::vector<std::string> names;   // Only jobs of these names (arrays: their members).
  std::optional<std::string> pool;  // Only jobs of this pool.
  bool finished = false;            // Finished jobs too (ps -a).
  size_t limit = 100;               // Jobs on the page; 0: all of them.
};

// The daemon's default page, and so `ps`'s.
inline constexpr size_t kDefaultPsLimit = 100;

// "queued", "running,queued", "ended" (exited, cancelled, timed_out and
// failed); the states of core::JobState otherwise. Errors name the token.
core::Result<std::set<std::string>> ParseStates(std::string_view text);

// Whether any state of `states` is one a job has after it ended (then `ps`
// must ask for finished jobs too).
bool WantsEndedJobs(const std::set<std::string>& states);

// The request target that asks the daemon for the jobs `filter` picks:
// `path` ("/v1/jobs" or "/v1/jobs/summary") with its query parameters,
// each value escaped ("/v1/jobs?state=queued&user=alice&limit=100").
std::string JobsTarget(std::string_view path, const JobFilter& filter);

// `text` with every byte outside [A-Za-z0-9-._~] written as %XX.
std::string UrlEncode(std::string_view text);

// The indices of a job array: "1-20", "0,3,5", "1-3,10"; ascending, no
// repeats, at most kMaxArrayJobs of them.
inline constexpr size_t kMaxArrayJobs = 1000;
core::Result<std::vector<uint32_t>> ParseArrayIndices(std::string_view text);

}  // namespace gpuslice::cli
