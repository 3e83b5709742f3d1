#pragma once

// The waiting queue of the node daemon, as pure logic: given the jobs that
// wait (in queue order), the jobs that run (with their end time when they
// have a maximum run time) and a model of the free capacity, decide which
// waiting jobs start now and why each of the others waits.
//
// Order: priority (high first), then rank (higher first: the caller's
// fair-share and age factors, schedule/fair_share.h), then arrival. The first job that
// does not fit is the head; it is never delayed by what starts after it. A
// later, smaller job may start before it ("backfill") only if either
//   (a) it will have ended (by its maximum run time) before the head's
//       reservation time: the earliest time at which, as running jobs reach
//       their expected ends, the head fits; or
//   (b) the head would still fit at that time with the candidate running: it
//       uses only capacity the head does not need.
// A running job's expected end is its deadline (maximum run time) when it
// has one, else its estimated end (the daemon's default run-time estimates,
// schedule/runtime_estimate.h), else unknown. Rule (a) trusts deadlines only: an
// estimate is not enforced, so a candidate without a maximum run time is
// admitted by rule (b) alone. When the head's reservation depends on a job
// with no expected end, its time is unknown (treated as infinite) and only
// rule (b) can admit a candidate, where every job that runs now counts as
// ended by then, but nothing started in this pass does.
//
// Opportunistic jobs (PlanOptions::opportunistic: jobs borrowing capacity
// over their group's quota) start only when they fit now and rule (b) (or
// (a)) lets them; one that does not fit waits without becoming the head, so
// it never holds back a job within its guarantee.
//
// The planner does not place anything itself: the daemon's CapacityModel
// (over the placement core) answers "does it fit", so this file holds no
// second placement algorithm.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace gpuslice::core {

// Rough size of a request, only used to skip candidates that cannot fit
// because a no-larger one did not (same model constraint): once a shape failed
// in a pass, any shape that dominates it fails too, since a pass only ever
// takes capacity.
struct QueueShape {
  uint32_t gpus = 0;
  uint32_t milli = 0;  // Per GPU.
  uint64_t mem = 0;    // Per GPU.
  uint64_t constraint = 0;  // Opaque; shapes compare only when equal.

  bool Dominates(const QueueShape& o) const {
    return constraint == o.constraint && gpus >= o.gpus && milli >= o.milli && mem >= o.mem;
  }
};

struct QueuedJob {
  uint64_t id = 0;
  Priority priority = Priority::kNormal;
  uint64_t seq = 0;  // Arrival order; unique.
  std::optional<std::chrono::milliseconds> max_runtime;
  // Its expected run time when it has no maximum run time (a default
  // estimate): a job started in a pass is expected to end after this, for
  // the reservation of the head behind it. Never used for rule (a).
  std::optional<std::chrono::milliseconds> estimate = std::nullopt;
  QueueShape shape;
  // Order within a priority: higher first (schedule/fair_share.h, QueueRank). Equal
  // ranks keep arrival order.
  double rank = 0;
};

// True when `a` goes before `b` in the queue.
bool QueueBefore(const QueuedJob& a, const QueuedJob& b);

struct RunningJob {
  uint64_t id = 0;
  std::optional<int64_t> ends_at_ms;  // Start + maximum run time, if any.
  // When it is expected to end without a maximum run time (an estimate,
  // schedule/runtime_estimate.h); ignored when ends_at_ms is set.
  std::optional<int64_t> expected_end_ms = std::nullopt;
};

enum class FitResult { kPlaced, kNotNow, kNever };

// The free capacity, as the planner sees it. The daemon implements it over the
// placement core; tests use a toy. Contract: TryPlace takes capacity only when
// it returns kPlaced; Release gives back what a running job or a job placed on
// this model holds; Clone is a deep, independent copy.
class CapacityModel {
 public:
  virtual ~CapacityModel() = default;
  virtual std::unique_ptr<CapacityModel> Clone() const = 0;
  virtual FitResult TryPlace(uint64_t job_id) = 0;
  virtual void Release(uint64_t job_id) = 0;
  // Places job `job_id` exactly where it sits in `source` (a model of the
  // same machine, e.g. the one this was cloned from); false when that does
  // not fit here.
  virtual bool Mirror(uint64_t job_id, const CapacityModel& source) = 0;
};

enum class WaitReason {
  kHead,             // First in line; waits for capacity to free.
  kBehindHead,       // Does not fit now either.
  kWouldDelayHead,   // Fits now, but starting it would delay the head.
  kNotConsidered,    // Past the per-pass backfill limit; looked at next pass.
  kNeverFits,        // No GPU here could ever hold it (the daemon fails it).
  kHeld,             // Held back by PlanOptions::held (e.g. its owner's quota).
  kBorrowWait,       // Opportunistic: does not fit now, and is never the head.
};
std::string_view WaitReasonName(WaitReason reason);

struct WaitingJob {
  uint64_t id = 0;
  int position = 0;  // 1-based among the jobs that still wait.
  WaitReason reason = WaitReason::kHead;
};

struct QueuePlan {
  std::vector<uint64_t> start;       // In the order they were placed.
  std::vector<WaitingJob> waiting;   // In queue order; excludes never_fit.
  std::vector<uint64_t> never_fit;
  uint64_t head = 0;                 // 0 when nothing waits.
  // The head's reservation time, when known, and whether it rests on a
  // run-time estimate (some job it waits for has no maximum run time).
  std::optional<int64_t> head_reservation_ms;
  bool reservation_estimated = false;
  // TryPlace calls on the caller's model (the cost driver of a pass).
  int placements_tried = 0;
};

struct PlanOptions {
  // Candidates behind the head that get the (costly) rule (b) check per pass.
  int max_backfill_checks = 64;
  bool backfill = true;
  // Holds a job back for something other than capacity (quotas). Asked in
  // queue order before a job is placed; a held job waits with kHeld, takes
  // nothing and is never the head, so it delays no one. `started` is told of
  // each job the pass starts, in order, so `held` can count it (two jobs of
  // one user may each fit the quota alone but not together).
  std::function<bool(uint64_t id)> held;
  std::function<void(uint64_t id)> started;
  // Asked of each job that is not held: true makes it opportunistic (see
  // the top of this file). Unset: none is.
  std::function<bool(uint64_t id)> opportunistic;
  // Asked of the head: false makes its reservation rest on deadlines alone
  // (the running jobs' estimated ends are ignored), so that backfill is as
  // free as without estimates. Unset: estimates always count. The daemon
  // answers from how long the head has waited (`reserve_after`).
  std::function<bool(uint64_t id)> use_estimates;
};

// `queued` must be sorted by QueueBefore (the daemon keeps it so; sorting
// 10,000 jobs on every event would cost more than the rest of the pass).
// Places what starts on `model` (so the caller can read placements from it).
QueuePlan PlanQueue(const std::vector<QueuedJob>& queued, const std::vector<RunningJob>& running,
                    int64_t now_ms, CapacityModel& model, const PlanOptions& options = {});

}  // namespace gpuslice::core
