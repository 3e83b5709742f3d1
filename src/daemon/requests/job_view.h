#pragma once

// What the node daemon answers to reads (jobs/service.h): a job with
// what only the live daemon knows, its usage, its log, foreign GPU processes
// and the queue-wait histogram. Plain values, copied out of the service.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "daemon/requests/job_query.h"  // JobGroup
#include "daemon/usage/foreign_use.h"   // ForeignProcess
#include "daemon/usage/usage_book.h"    // JobUsage, WaitHistogram
#include "daemon/waits/dependencies.h"  // DependencyView

namespace gpuslice::daemon {

// A job plus what only the live daemon knows.
struct JobView {
  core::Job job;
  // 1-based; 0 when not waiting in the queue (a queued job, or a suspended
  // one whose processes asked to be resumed).
  int queue_position = 0;
  std::string waiting_for;        // Why it waits.
  std::optional<JobUsage> usage;  // Running jobs, once sampled.
  // Policy flags of a running job: "idle", "paused", "over_limit", "preempted".
  std::vector<std::string> flags;
  std::vector<DependencyView> after;  // One per job.after entry.
  // Why the last suspend or resume of this job failed ("" if it did not).
  std::string checkpoint_error;
  // Its fair-share factor (0-1, core/fair_share.h) as of the last ranking,
  // for live jobs while fair share is on; -1 otherwise.
  double fair_share = -1;
  // The job first in line: when it is expected to start (its reservation),
  // when known.
  std::optional<int64_t> expected_start_ms = std::nullopt;
};

struct LogChunk {
  std::string data;
  uint64_t next_offset = 0;
  core::JobState state = core::JobState::kQueued;
  int exit_code = -1;
};

// A page of GET /v1/jobs (job_query.h).
struct JobPage {
  std::vector<JobView> jobs;
  // The last id of this page when more jobs match after it (the cursor of
  // the next page); unset on the last page.
  std::optional<uint64_t> next_cursor;
};

// GET /v1/jobs/summary: counts by state and the groups of alike jobs, each
// with the view of its first member (a queued group: where it stands).
struct JobSummary {
  std::map<std::string, uint64_t> counts;
  std::vector<JobGroup> groups;  // At most the query's limit.
  size_t groups_total = 0;
  std::vector<JobView> first;  // One per group.
};

}  // namespace gpuslice::daemon
