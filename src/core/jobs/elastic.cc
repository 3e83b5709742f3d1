#include "core/jobs/elastic.h"

#include <algorithm>

namespace gpuslice::core {

std::vector<ElasticStep> PlanElasticGrowth(const std::vector<ElasticJob>& jobs, uint32_t idle_gpus,
                                           bool queue_waiting, int64_t now_ms,
                                           const ElasticOptions& options) {
  std::vector<ElasticStep> steps;
  if (queue_waiting || idle_gpus == 0) return steps;
  std::vector<const ElasticJob*> growable;
  for (const ElasticJob& j : jobs) {
    if (j.held < j.max && now_ms - j.last_change_ms >= options.cooldown_ms) {
      growable.push_back(&j);
    }
  }
  std::sort(growable.begin(), growable.end(), [](const ElasticJob* a, const ElasticJob* b) {
    if (a->held != b->held) return a->held < b->held;
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->id < b->id;
  });
  // One GPU at a time round the jobs, so that the idle GPUs are shared out
  // fewest-first, but each job's whole growth is one step (one restart).
  std::vector<uint32_t> grow(growable.size(), 0);
  for (bool any = true; any && idle_gpus > 0;) {
    any = false;
    for (size_t i = 0; i < growable.size() && idle_gpus > 0; ++i) {
      if (growable[i]->held + grow[i] >= growable[i]->max) continue;
      ++grow[i];
      --idle_gpus;
      any = true;
    }
  }
  for (size_t i = 0; i < growable.size(); ++i) {
    if (grow[i] == 0) continue;
    const ElasticJob* j = growable[i];
    steps.push_back({j->id, static_cast<int>(grow[i]),
                     std::string(grow[i] == 1 ? "a GPU is" : "GPUs are") +
                         " idle and nothing waits: " + std::to_string(j->held) + " -> " +
                         std::to_string(j->held + grow[i]) + " of at most " +
                         std::to_string(j->max)});
  }
  return steps;
}

std::vector<ElasticStep> PlanElasticShrink(const std::vector<ElasticJob>& jobs,
                                           uint32_t needed_gpus, Priority waiting_priority) {
  std::vector<ElasticStep> steps;
  if (needed_gpus == 0) return steps;
  std::vector<const ElasticJob*> donors;
  uint32_t spare = 0;
  for (const ElasticJob& j : jobs) {
    if (j.held > j.min && j.priority <= waiting_priority) {
      donors.push_back(&j);
      spare += j.held - j.min;
    }
  }
  if (spare < needed_gpus) return steps;
  std::sort(donors.begin(), donors.end(), [](const ElasticJob* a, const ElasticJob* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    uint32_t ea = a->held - a->min, eb = b->held - b->min;
    if (ea != eb) return ea > eb;
    return a->id > b->id;  // The newest gives back first.
  });
  for (const ElasticJob* j : donors) {
    if (needed_gpus == 0) break;
    uint32_t give = std::min(needed_gpus, j->held - j->min);
    needed_gpus -= give;
    steps.push_back({j->id, -static_cast<int>(give),
                     "a waiting job needs GPUs: " + std::to_string(j->held) + " -> " +
                         std::to_string(j->held - give) + " (at least " + std::to_string(j->min) +
                         ")"});
  }
  return steps;
}

}  // namespace gpuslice::core
