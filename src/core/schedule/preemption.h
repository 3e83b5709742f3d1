#pragma once

// Priority preemption, as pure logic: a high-priority request that does not
// fit may end lower-priority running jobs to make room. This file chooses the
// victims (or says why there are none); the daemon signals them.
//
// Rules:
//   - only jobs of strictly lower priority than the request are victims;
//   - with kLowerAfterMinRuntime only those that ran at least min_runtime;
//   - the victims must make the request fit, checked by placing it on a copy
//     of the capacity model with them released (so fragmentation, islands
//     and MIG profiles count exactly as the placement core sees them);
//   - among the sets that do, prefer losing the least work: candidates are
//     taken cheapest first (lower priority, then the least accumulated
//     GPU-time, a restartable job before one that is not, the most recently
//     started), and then every victim that is not needed is spared again, the
//     most expensive first. The result is minimal (no victim can be spared),
//     not necessarily the cheapest of all minimal sets: that search is
//     exponential and the greedy order already favours cheap victims.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/schedule/queue.h"
#include "core/status.h"
#include "core/units.h"

namespace gpuslice::core {

enum class PreemptionMode { kNever, kLower, kLowerAfterMinRuntime };

struct PreemptionPolicy {
  PreemptionMode mode = PreemptionMode::kNever;
  std::chrono::milliseconds min_runtime{0};  // kLowerAfterMinRuntime only.

  std::string ToString() const;  // "never", "lower", "lower-after:10m"
};
// "never" | "lower" | "lower-after:DURATION" (e.g. "lower-after:10m").
Result<PreemptionPolicy> ParsePreemptionPolicy(std::string_view text);

// A running job as a possible victim.
struct PreemptCandidate {
  uint64_t id = 0;
  Priority priority = Priority::kNormal;
  int64_t started_ms = 0;
  bool restartable = false;
  // GPUs' worth it holds (whole GPUs: their count; a fraction: its share of
  // one GPU, e.g. 0.3). Times its run time, the work lost by ending it.
  double gpu_weight = 1.0;
};

struct PreemptionPlan {
  std::vector<uint64_t> victims;  // Cheapest first.
  double lost_gpu_seconds = 0;    // Sum over victims of weight x run time.
};

// Chooses victims so that job `request_id` (whose demand `model` knows; not
// placed on it) fits. `model` holds every candidate as running; it is not
// changed. Errors (kFailedPrecondition) say why nothing can be preempted:
// preemption is off, nothing has lower priority, the lower ones ran less than
// the minimum, or even ending all of them would not make room.
Result<PreemptionPlan> PlanPreemption(uint64_t request_id, Priority request_priority,
                                      const std::vector<PreemptCandidate>& running,
                                      const PreemptionPolicy& policy, int64_t now_ms,
                                      const CapacityModel& model);

// The victim search behind PlanPreemption, without its rules about who may
// be a victim: the cheapest minimal set of `candidates` (cheapest first, as
// above) whose end makes job `request_id` fit `model`. Over-quota
// borrowing reclaims capacity with it (quota.h). kFailedPrecondition when
// there is no candidate or even all of them would not make room.
Result<PreemptionPlan> ChooseVictims(uint64_t request_id,
                                     const std::vector<PreemptCandidate>& candidates,
                                     int64_t now_ms, const CapacityModel& model);

}  // namespace gpuslice::core
