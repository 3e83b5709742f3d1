#pragma once

// Job dependencies (`gpuslice submit --after 12,13:ok`), what Slurm calls
// --dependency=afterany / afterok: a queued job waits until each job it names
// has ended. Pure: the syntax, and what a dependency's end means for the job
// that waits on it. The daemon keeps the jobs; this file only judges them.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"

namespace gpuslice::core {

// Dependency and DependencyKind (plain data, a field of Job) are in job.h.

// More than this many in one job is refused (a submission stays bounded).
inline constexpr size_t kMaxDependencies = 100;

// Parses a comma-separated list: "12", "3,4:ok", "5:any". Ids are positive
// integers; the kinds are "ok" and "any" (the default). A job named twice
// keeps the stricter kind. The result is sorted by job id. Errors name the
// token ("--after '3:maybe': ...").
Result<std::vector<Dependency>> ParseDependencies(std::string_view text);

// The canonical text ParseDependencies reads back: "3,4:ok,5"; "" for none.
std::string FormatDependencies(const std::vector<Dependency>& deps);
// One of them: "12" or "12:ok".
std::string FormatDependency(const Dependency& dep);

// Where a dependency stands, given the state (and exit code) of its job.
enum class DependencyStatus {
  kWaiting,    // The job has not ended yet.
  kSatisfied,  // It ended as the dependency asks.
  kBroken,     // It ended otherwise (kOk only): the waiting job can never start.
};
DependencyStatus Evaluate(const Dependency& dep, JobState state, int exit_code);

// Why a job that waited on `dep` is cancelled when its job ended with `state`
// and `exit_code`: "dependency job 12 did not succeed (exit 3)".
std::string BrokenDependencyReason(const Dependency& dep, JobState state, int exit_code);

}  // namespace gpuslice::core
