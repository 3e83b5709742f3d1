#pragma once

// Elastic jobs ("--gpus 1-4"), as pure logic: a job that runs on between
// `min` and `max` whole GPUs. It starts with what is free (at least `min`),
// grows (if it asked to) by the GPUs that are idle while nothing waits, and shrinks
// back toward `min` when a waiting job needs GPUs that elastic jobs hold
// above their minimum. Each change waits out a cool-down per job, so a job
// that must restart its workers to rescale is not thrashed.
//
// The daemon checks every step against its capacity model (islands,
// pools): this file only decides who should change and by how much.

#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"

namespace gpuslice::core {

struct ElasticJob {
  uint64_t id = 0;
  uint32_t min = 1;
  uint32_t max = 1;
  uint32_t held = 1;  // GPUs it holds now.
  Priority priority = Priority::kNormal;
  int64_t last_change_ms = 0;  // Start or last grow/shrink.
};

struct ElasticStep {
  uint64_t id = 0;
  int delta = 0;  // +1 grow, -n shrink.
  std::string reason;
};

struct ElasticOptions {
  int64_t cooldown_ms = 30'000;
};

// Growth: while `idle_gpus` > 0 and nothing waits, the idle GPUs go to the
// jobs below their max that are out of their cool-down, one at a time round
// them, the job with the fewest GPUs first (then the highest priority, then
// the oldest id), until they are used up or every job is at its max. Each
// job's growth is one step (+n): a job restarts its workers once for it.
std::vector<ElasticStep> PlanElasticGrowth(const std::vector<ElasticJob>& jobs, uint32_t idle_gpus,
                                           bool queue_waiting, int64_t now_ms,
                                           const ElasticOptions& options = {});

// Shrinking for a waiting job that needs `needed_gpus` more idle GPUs than
// there are: GPUs above each job's min are given back, the lowest priority
// first, then the job holding the most above its min, until `needed_gpus`
// are found. Only jobs of priority at most `waiting_priority` give back
// (a high-priority elastic job does not shrink for a normal one). Cool-downs
// do not protect against pressure: a waiting job is not made to wait for
// them. Empty when the elastic jobs together cannot free enough (then
// shrinking would hurt them without starting anyone).
std::vector<ElasticStep> PlanElasticShrink(const std::vector<ElasticJob>& jobs,
                                           uint32_t needed_gpus, Priority waiting_priority);

}  // namespace gpuslice::core
