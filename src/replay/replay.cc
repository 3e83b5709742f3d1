#include "replay/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "core/placement/move_proposal.h"
#include "core/placement/placement_profile.h"
#include "core/placement/placement_random.h"
#include "core/units.h"

namespace gpuslice::replay {

using core::ClusterState;
using core::Demand;
using core::Result;
using core::Status;

Result<ReplayInput> BuildInput(std::span<const core::TraceNode> nodes,
                               std::span<const core::TraceTask> tasks) {
  ReplayInput in;
  for (const core::TraceNode& n : nodes) {
    Result<uint32_t> added = in.cluster.AddUniformNode(
        n.name, n.cpu_milli, n.memory_mib * core::kMiB, n.gpus, n.model, /*gpu_mem=*/0);
    if (!added.ok()) {
      return added.status().WithContext("node list line " + std::to_string(n.line));
    }
  }
  in.tasks.reserve(tasks.size());
  for (const core::TraceTask& t : tasks) {
    Demand d = Demand::CpuOnly(t.cpu_milli, t.memory_mib * core::kMiB);
    d.gpus = t.num_gpu;
    d.gpu_milli = t.gpu_milli;
    Result<uint64_t> mask = in.cluster.ModelMask(t.gpu_spec);
    if (!mask.ok()) return mask.status().WithContext("task list line " + std::to_string(t.line));
    d.model_mask = *mask;
    Status valid = d.Validate();
    if (!valid.ok()) return valid.WithContext("task list line " + std::to_string(t.line));
    in.tasks.push_back(d);
  }
  return in;
}

std::vector<Demand> ArrivalSequence(std::span<const Demand> tasks, uint64_t capacity_milli,
                                    double inflate, uint64_t seed, bool shuffle) {
  std::vector<Demand> seq(tasks.begin(), tasks.end());
  core::PlacementRng rng(seed);
  const double target = inflate * static_cast<double>(capacity_milli);
  double total = 0;
  for (const Demand& d : seq) total += static_cast<double>(d.TotalGpuMilli());
  // Inflation: draw trace tasks with replacement until the next draw would
  // overshoot the target (as the paper's simulator does).
  const uint32_t n = static_cast<uint32_t>(tasks.size());
  while (n > 0 && total < target) {
    const Demand& d = tasks[rng.Uniform(n)];
    if (total + static_cast<double>(d.TotalGpuMilli()) > target) break;
    total += static_cast<double>(d.TotalGpuMilli());
    seq.push_back(d);
  }
  if (shuffle) {
    for (size_t i = seq.size(); i > 1; --i) {
      std::swap(seq[i - 1], seq[rng.Uniform(static_cast<uint32_t>(i))]);
    }
  }
  return seq;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(rank), values.end());
  return values[rank];
}

namespace {

// The cluster with its nodes in a seeded random order. Policies break ties
// by node order; the paper's simulator orders nodes by a random prefix per
// run, so a fixed order would bias every tie towards the same nodes.
Result<ClusterState> PermutedCluster(const ClusterState& in, uint64_t seed) {
  std::vector<uint32_t> order(in.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  core::PlacementRng rng(seed ^ 0x6a09e667f3bcc909ull);
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[rng.Uniform(static_cast<uint32_t>(i))]);
  }
  ClusterState out;
  for (const std::string& model : in.models()) {
    GPUSLICE_RETURN_IF_ERROR(out.InternModel(model).status());
  }
  for (uint32_t i : order) GPUSLICE_RETURN_IF_ERROR(out.AddNode(in.node(i)).status());
  return out;
}

double FragmentedGpus(const core::WorkloadProfile& profile, const ClusterState& s) {
  uint64_t milli = 0;
  for (const core::NodeState& n : s.nodes()) milli += core::StrandedGpuMilli(profile, n);
  return static_cast<double>(milli) / core::kMilliPerGpu;
}

}  // namespace

Result<ReplayResult> RunReplay(const ReplayInput& input, const ReplayConfig& config) {
  if (!(config.step > 0 && config.step <= 1)) {
    return core::InvalidArgumentError("replay step " + std::to_string(config.step) +
                                      " is outside (0, 1]");
  }
  if (!(config.inflate >= config.step && config.inflate <= 10)) {
    return core::InvalidArgumentError("inflation " + std::to_string(config.inflate) +
                                      " is outside [step, 10]");
  }
  if (input.tasks.empty()) return core::InvalidArgumentError("replay: the task list is empty");
  GPUSLICE_ASSIGN_OR_RETURN(ClusterState state, PermutedCluster(input.cluster, config.seed));
  const uint64_t capacity = state.TotalGpuMilli();
  if (capacity == 0) return core::InvalidArgumentError("replay: the cluster has no GPUs");

  // The policy's profile is the trace as published (the paper's "typical
  // pods"); the fragmentation report uses every shape, memory included.
  const double coverage = config.profile_coverage > 0                 ? config.profile_coverage
                          : config.policy == core::Policy::kFragAware ? 1.0
                                                                      : 0.95;
  GPUSLICE_ASSIGN_OR_RETURN(
      core::WorkloadProfile profile,
      core::WorkloadProfile::FromDemands(input.tasks, {.coverage = coverage}));
  if (config.policy == core::Policy::kFragAware) {
    profile = profile.WithRarity(state, core::kDefaultRarityBoost);
  }
  GPUSLICE_ASSIGN_OR_RETURN(
      core::WorkloadProfile all_shapes,
      core::WorkloadProfile::FromDemands(input.tasks, {.coverage = 1.0, .with_memory = true}));

  const std::vector<Demand> seq =
      ArrivalSequence(input.tasks, capacity, config.inflate, config.seed, config.shuffle);
  // Decisions draw from their own stream so the arrival order does not
  // depend on the policy.
  core::PlacementRng rng(config.seed ^ 0x5deece66dull);
  // Each decision recomputes the fragmentation of the node the last one
  // changed only; the placements are the same as without the cache.
  core::FragmentationCache frag_cache;
  const core::PlaceOptions options{config.policy, &profile, &rng, &frag_cache};

  ReplayResult result;
  result.moves = config.moves;
  result.policy = config.policy;
  result.seed = config.seed;
  result.capacity_gpus = static_cast<double>(capacity) / core::kMilliPerGpu;
  const int num_steps = static_cast<int>(std::floor(config.inflate / config.step + 1e-9));
  std::vector<double> window_us, all_us;
  all_us.reserve(seq.size());
  uint64_t arrived_milli = 0, failed = 0, arrived = 0, moved_for = 0;
  // What is placed, by task index (--moves only): the candidates to move.
  std::vector<core::PlacedTask> placed;
  int next_step = 1;

  auto snapshot = [&](double ratio) {
    StepStats st;
    st.arrived_ratio = ratio;
    st.arrived_gpus = static_cast<double>(arrived_milli) / core::kMilliPerGpu;
    const uint64_t allocated = capacity - state.FreeGpuMilli();
    st.allocated_gpus = static_cast<double>(allocated) / core::kMilliPerGpu;
    st.alloc_ratio = static_cast<double>(allocated) / static_cast<double>(capacity);
    st.unallocated_gpus = static_cast<double>(state.FreeGpuMilli()) / core::kMilliPerGpu;
    st.fragmented_gpus = FragmentedGpus(all_shapes, state);
    st.arrived_tasks = arrived;
    st.failed_tasks = failed;
    st.moved_for = moved_for;
    st.decision_p50_us = Percentile(window_us, 50);
    st.decision_p99_us = Percentile(window_us, 99);
    window_us.clear();
    result.steps.push_back(st);
  };

  for (const Demand& d : seq) {
    arrived_milli += d.TotalGpuMilli();
    ++arrived;
    const auto t0 = std::chrono::steady_clock::now();
    Result<core::Placement> where = core::Place(state, d, options);
    const auto t1 = std::chrono::steady_clock::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    window_us.push_back(us);
    all_us.push_back(us);
    if (where.ok()) {
      Status applied = state.Allocate(d, *where);
      if (!applied.ok()) {
        return core::InternalError("policy " + std::string(core::PolicyName(config.policy)) +
                                   " returned a placement Allocate refused: " + applied.ToString());
      }
      if (config.moves) placed.push_back({placed.size(), d, *where, true});
    } else if (where.status().code() == core::StatusCode::kInvalidArgument) {
      return where.status();
    } else if (config.moves && where.status().code() == core::StatusCode::kResourceExhausted) {
      GPUSLICE_ASSIGN_OR_RETURN(std::optional<core::MoveProposal> move,
                                core::ProposeMove(state, d, placed, options));
      if (!move) {
        ++failed;
      } else {
        core::PlacedTask& t = placed[move->task_id];
        GPUSLICE_RETURN_IF_ERROR(state.Release(t.demand, move->from));
        GPUSLICE_RETURN_IF_ERROR(state.Allocate(t.demand, move->to));
        t.placement = move->to;
        GPUSLICE_RETURN_IF_ERROR(state.Allocate(d, move->head));
        placed.push_back({placed.size(), d, move->head, true});
        ++moved_for;
      }
    } else {
      ++failed;
    }
    while (next_step < num_steps &&
           static_cast<double>(arrived_milli) >=
               next_step * config.step * static_cast<double>(capacity) - 1e-6) {
      snapshot(next_step * config.step);
      ++next_step;
    }
  }
  // The last step closes the run: inflation stops just short of the target.
  while (next_step <= num_steps) {
    snapshot(next_step * config.step);
    ++next_step;
  }
  result.decisions = all_us.size();
  result.decision_p50_us = Percentile(all_us, 50);
  result.decision_p99_us = Percentile(all_us, 99);
  result.decision_max_us = all_us.empty() ? 0 : *std::max_element(all_us.begin(), all_us.end());
  return result;
}

}  // namespace gpuslice::replay
