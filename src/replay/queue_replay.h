#pragma once

// The queue replay (`gpuslice-replay --queue`): the openb trace's
// arrivals and departures (each task's creation and deletion times) through
// the queue the node daemon runs: core::PlanQueue with its reservations and
// backfill, core::Place, fair share and aging (core/fair_share.h), run-time
// estimates (core/runtime_estimate.h) and automatic defragmentation
// (core/defrag.h), driven by a simulated clock instead of processes. It
// reports GPU allocation over time, how long whole-GPU and fractional tasks
// waited, the moves made, and each user's GPU-hours, while tasks waited,
// against its max-min fair share of what was allocated then.
//
// The trace has no users: each GPU task is given to one of the users drawn
// at random (seeded) with the weights of `user_mix`, so that users ask for
// different amounts. A task runs for its trace lifetime (deletion minus
// creation) once it starts; it arrives at its creation time divided by
// `arrival_scale` (a scale above 1 packs the same work into less time: more
// load). CPU-only tasks are left out (the daemon places GPU work only);
// tasks no node of the given cluster could ever hold are counted and
// dropped. Every task has normal priority.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/placement/placement_policy.h"
#include "core/status.h"
#include "core/placement/trace.h"
#include "replay/replay.h"

namespace gpuslice::replay {

struct QueueReplayConfig {
  std::string label = "all-on";  // Names the run in reports.
  core::Policy policy = core::kDefaultPolicy;
  uint64_t seed = 42;
  double arrival_scale = 1.0;
  // Tasks created before this (seconds into the trace) are left out, and
  // the replay starts empty then: the openb trace holds 25 GPU tasks from
  // its first 115 days, against 7,000 in its last 35.
  int64_t from_s = 0;
  // Tasks created at or after this (seconds into the trace) are left out
  // too (0: none), so that a window of the trace, e.g. a week, is replayed
  // alone. Above from_s when set.
  int64_t until_s = 0;
  // A task runs at most this long (0: its whole lifetime). Tasks still
  // running when the trace was taken carry its end as their deletion time,
  // so their lifetimes are cut short anyway; a cap keeps a handful of them
  // (up to 30 days) from being most of a user's GPU-hours.
  int64_t max_runtime_ms = 0;
  std::vector<double> user_mix = {40, 30, 20, 10};
  // Each trace row's user (an index into user_mix), for a trace whose
  // owners are known; rows past its end are drawn with the weights.
  std::vector<uint32_t> task_users;
  // The daemon's scheduling, each part on or off ("today" = all off).
  bool fair_share = true;
  int64_t half_life_ms = 7LL * 24 * 3600 * 1000;
  int64_t max_age_ms = 24LL * 3600 * 1000;
  bool estimates = true;
  int64_t default_runtime_ms = 3600 * 1000;
  // The head's reservation counts estimates only once it has waited this
  // long (0: at once).
  int64_t reserve_after_ms = 0;
  bool defragment = true;
  uint32_t max_moves = 2;
  uint32_t moves_per_hour = 2;
  bool pack_fractions = true;
  bool backfill = true;
  // Deserved quotas with over-quota borrowing (core/schedule/quota_pass.h,
  // docs/DAEMON.md "Over-quota borrowing"), as an admin sets them for fair
  // shares: each user is the one member of its own group, whose quota
  // guarantees an equal part of the GPUs (compute, 100% per GPU). A task
  // beyond its group's part starts as a borrower on idle capacity; when a
  // task within its part is first in line and does not fit, borrowers are
  // chosen (core::ChooseVictims) and suspended, and go back to the queue
  // with the run time they have left (every task counts as suspendable).
  bool quotas = false;
  // The allocation series' step.
  int64_t sample_ms = 3600 * 1000;
};

struct UserShare {
  std::string name;
  double weight = 0;  // Of user_mix.
  uint64_t tasks = 0;
  double gpu_hours = 0;
  // While tasks waited: the GPU-hours it got, its max-min fair share of
  // what was allocated then (an equal share, or what it asked for when that
  // is less, the rest shared among the others), and how far apart
  // (relative; 0.1 = 10%).
  double contended_gpu_hours = 0;
  double fair_gpu_hours = 0;
  double deviation = 0;
  // The same, only while every user had a task waiting (the setting of the fair-share target, "when
  // all are busy"): then each user wants more than it holds.
  double all_busy_gpu_hours = 0;
  double all_busy_fair_gpu_hours = 0;
  double all_busy_deviation = 0;
};

struct QueueReplayResult {
  QueueReplayConfig config;
  double capacity_gpus = 0;
  uint64_t tasks = 0;          // GPU tasks replayed.
  uint64_t never_fit = 0;      // Dropped: no node here could ever hold them.
  uint64_t moves = 0;          // Tasks moved to let the head start.
  uint64_t reclaims = 0;       // Borrowers suspended for a task within its quota.
  uint64_t plans = 0;          // Scheduling passes.
  double simulated_hours = 0;  // First arrival to last departure.
  // Time-weighted allocated share of the GPU capacity: while some task
  // waited, and over the whole run.
  double busy_hours = 0;
  double mean_alloc_busy = 0;
  double mean_alloc = 0;
  // Waits (start - arrival), seconds, of tasks of whole GPUs and of parts
  // of one GPU.
  uint64_t whole_tasks = 0, fraction_tasks = 0;
  double whole_wait_p50_s = 0, whole_wait_p95_s = 0;
  double fraction_wait_p50_s = 0, fraction_wait_p95_s = 0;
  // Tasks of two GPUs or more (the ones a queue of small tasks starves):
  // how many, their p95 wait, and the longest wait of any task.
  uint64_t multi_tasks = 0;
  double multi_wait_p95_s = 0;
  double max_wait_s = 0;
  double contended_hours = 0;  // Some task waited (the same as busy_hours).
  double max_user_deviation = 0;
  // Time every user had a task waiting, in all and its longest unbroken
  // stretch (a stretch of minutes cannot show fair share: what runs then
  // mostly started before anything waited), and the largest deviation then.
  double all_busy_hours = 0;
  double longest_all_busy_hours = 0;
  double max_user_deviation_all_busy = 0;
  std::vector<UserShare> users;
  std::vector<std::pair<double, double>> alloc_series;  // (hours, allocated share).
  double wall_seconds = 0;
};

// The max-min fair split of `total` among users asking for `demands`: each
// gets an equal part of what is left, or what it asks for when that is less
// (users are served from the smallest demand up). The parts sum to
// min(total, sum of demands).
std::vector<double> MaxMinShares(std::span<const double> demands, double total);

// Runs one queue replay of `tasks` (the trace rows, which need creation and
// deletion times) on `input.cluster` (input.tasks[i] is tasks[i]'s demand).
// Errors: no task with times, an invalid config.
core::Result<QueueReplayResult> RunQueueReplay(const ReplayInput& input,
                                               std::span<const core::TraceTask> tasks,
                                               const QueueReplayConfig& config);

// The configurations `--queue` compares: "today" (priority and arrival,
// backfill on maximum run times only, no moves), "all-on" (all on), and
// each part of it off in turn.
std::vector<QueueReplayConfig> QueueReplayVariants(const QueueReplayConfig& base);

// A table of the runs (one row each), and their JSON.
std::string FormatQueueTable(const std::vector<QueueReplayResult>& runs);
std::string QueueResultsJson(const std::vector<QueueReplayResult>& runs,
                             const std::string& command);

}  // namespace gpuslice::replay
