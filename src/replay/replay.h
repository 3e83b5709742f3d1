#pragma once

// Cluster-scale placement replay: the experiment of the FGD paper (Weng et
// al., ATC'23, section 6) run through the same core::Place the daemon uses.
//
// Tasks arrive one by one into an empty cluster and never depart. The trace
// is "inflated": tasks drawn from it at random (seeded) are appended until
// the arrived GPU demand reaches `inflate` x cluster capacity, and the whole
// sequence is shuffled with the same seed (the paper's --shuffle-pod). The
// node order is permuted with the seed too: policies break ties by node
// order, and the paper's simulator orders nodes by a seeded random prefix. At
// every `step` of arrived demand (5% by default) a snapshot records how
// much of the cluster is allocated and how long decisions took.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/placement/placement_model.h"
#include "core/placement/placement_policy.h"
#include "core/status.h"
#include "core/placement/trace.h"

namespace gpuslice::replay {

// The cluster and the task list of one trace, ready to replay.
struct ReplayInput {
  core::ClusterState cluster;
  std::vector<core::Demand> tasks;  // In trace order.
};

// Builds the cluster (one GPU model per node, GPU memory untracked as in
// the trace) and the demands (gpu_spec -> model mask). Errors name the
// trace line of the bad node or task.
core::Result<ReplayInput> BuildInput(std::span<const core::TraceNode> nodes,
                                     std::span<const core::TraceTask> tasks);

struct ReplayConfig {
  core::Policy policy = core::kDefaultPolicy;
  double inflate = 1.3;  // Arrived GPU demand at the end, x capacity; >= step.
  uint64_t seed = 42;
  bool shuffle = true;   // false: trace order, then the inflation draws.
  double step = 0.05;    // Snapshot interval, x capacity.
  // Profile coverage for the fragmentation-aware policies; 0 = the policy's
  // own: 0.95 for fgd (the paper's), 1.0 for frag-aware (rare big shapes,
  // such as 8-GPU tasks of 120 cores, then still count; frag-aware also
  // weighs shapes by rarity, WorkloadProfile::WithRarity; see
  // docs/PLACEMENT.md).
  double profile_coverage = 0;
  // When a task does not fit, look for one move of a placed single-GPU task
  // after which it does (core::ProposeMove), and make it: the replay's
  // answer to "how often would a move have let the job start".
  bool moves = false;
};

// One snapshot, taken when arrived GPU demand first reaches `arrived_ratio`
// (or at the end of the run for the last step).
struct StepStats {
  double arrived_ratio = 0;     // The step: 0.05, 0.10, ...
  double arrived_gpus = 0;      // GPU demand arrived so far, in GPUs.
  double allocated_gpus = 0;    // GPU capacity allocated, in GPUs.
  double alloc_ratio = 0;       // allocated / capacity.
  double unallocated_gpus = 0;  // capacity - allocated, in GPUs.
  double fragmented_gpus = 0;   // Free capacity no task shape could use.
  uint64_t arrived_tasks = 0;
  uint64_t failed_tasks = 0;    // Arrived but not placed (cumulative).
  uint64_t moved_for = 0;       // Placed after one move (cumulative; --moves).
  double decision_p50_us = 0;   // Over decisions since the previous step.
  double decision_p99_us = 0;
};

struct ReplayResult {
  core::Policy policy = core::kDefaultPolicy;
  uint64_t seed = 0;
  double capacity_gpus = 0;
  std::vector<StepStats> steps;
  bool moves = false;  // ReplayConfig::moves.
  uint64_t decisions = 0;
  double decision_p50_us = 0;  // Over the whole run.
  double decision_p99_us = 0;
  double decision_max_us = 0;
};

// The arrival sequence for one seed (see the file comment). Deterministic.
std::vector<core::Demand> ArrivalSequence(std::span<const core::Demand> tasks,
                                          uint64_t capacity_milli, double inflate, uint64_t seed,
                                          bool shuffle);

// Runs one replay. A task that does not fit (now or ever) counts as failed,
// as in the paper. Errors: an invalid config (inflate, step, coverage).
core::Result<ReplayResult> RunReplay(const ReplayInput& input, const ReplayConfig& config);

// The p-th percentile (0..100) of `values` (nearest rank); 0 when empty.
double Percentile(std::vector<double> values, double p);

}  // namespace gpuslice::replay
