#pragma once

// The workload profile and the fragmentation measures built on it.
//
// Fragmentation only means something relative to what will be asked for: a
// GPU with 300‰ free is useless to a cluster of whole-GPU jobs and perfect for
// one of 250‰ notebooks. A WorkloadProfile is the distribution of task shapes
// (the "typical pods" of the FGD paper), and the measures below say how much
// free GPU capacity those shapes could not use.

#include <cstdint>
#include <span>
#include <vector>

#include "core/placement/placement_model.h"
#include "core/status.h"

namespace gpuslice::core {

struct ProfileOptions {
  // Keep the most frequent shapes until they cover this share of tasks, then
  // renormalise (the FGD paper uses 95%). 1.0 keeps every shape.
  double coverage = 0.95;
  // Count CPU-only tasks as shapes (the paper does).
  bool include_cpu_only = true;
  // Keep host memory in the shape key (the paper does not).
  bool with_memory = false;
};

// The rarity cap frag-aware uses (WorkloadProfile::WithRarity): measured
// on the openb replay, docs/PLACEMENT.md.
inline constexpr double kDefaultRarityBoost = 20;

// One task shape and its probability. weight > 0; weights sum to 1.
struct TaskShape {
  Demand demand;
  double weight = 0;
  // Multiplies the shape's weight in NodeFragmentation only (1 = the FGD
  // measure). See WorkloadProfile::WithRarity.
  double rarity = 1;
};

struct NodeDelta;

// Contract: immutable after construction; shapes sorted by weight, heaviest
// first; at least one shape.
class WorkloadProfile {
 public:
  // Builds the profile from observed (or expected) demands. Errors if
  // `demands` is empty or coverage is outside (0, 1].
  static Result<WorkloadProfile> FromDemands(std::span<const Demand> demands,
                                             const ProfileOptions& options = {});
  // From explicit shapes; weights are normalised. Errors on an empty list,
  // a non-positive weight or an invalid demand.
  static Result<WorkloadProfile> FromShapes(std::vector<TaskShape> shapes);

  // The same shapes, each shape's fragmentation weight multiplied by how
  // rare the nodes that could host it are: min(max_boost, C / C_s), where C
  // is the cluster's GPU capacity and C_s that of the nodes which, empty,
  // could hold the shape (CPU, memory, model, GPU count). A shape only a few
  // nodes can hold (120 cores and 8 GPUs: 39 of 1,213 openb nodes) then
  // protects those nodes in proportion to how few they are, not just to how
  // often it is asked for. Weights (the demand mix) stay as they are.
  WorkloadProfile WithRarity(const ClusterState& cluster, double max_boost) const;

  const std::vector<TaskShape>& shapes() const { return shapes_; }

 private:
  friend double NodeFragmentation(const WorkloadProfile&, const NodeState&, const NodeDelta&);

  // What NodeFragmentation needs of one shape, in profile order: host
  // demand, weight x rarity, and its GPU group (-1: asks for no GPU).
  struct FlatShape {
    uint64_t cpu_milli;
    uint64_t mem_bytes;
    double weight;
    int32_t group;
  };
  // The GPU part of a demand. Shapes that differ only in CPU or host memory
  // (91 shapes of the default openb trace are 24 groups) use the same GPUs
  // on any node, so each group's GPU scan is done once per evaluation.
  struct GpuGroup {
    uint32_t gpus;
    uint32_t gpu_milli;
    uint64_t gpu_mem;
    uint64_t model_mask;
  };
  // Rebuilds flat_ and groups_ from shapes_; every constructor calls it.
  void Compile();

  std::vector<TaskShape> shapes_;
  std::vector<FlatShape> flat_;
  std::vector<GpuGroup> groups_;
};

// What a node would look like after a hypothetical allocation, without
// copying it: `demand` applied at `gpu_mask` (bit i = GPU i) on top of the
// node's current state. A default Delta is "no change".
struct NodeDelta {
  uint64_t cpu_milli = 0;
  uint64_t mem_bytes = 0;
  uint32_t gpu_mask = 0;
  uint32_t gpu_milli = 0;  // Per GPU in the mask; 1000 empties it.
  uint64_t gpu_mem = 0;    // Per GPU in the mask (fractions on tracked GPUs).
};
NodeDelta DeltaOf(const Demand& demand, const uint8_t* gpus, int gpu_count);

// The FGD measure (Weng et al., ATC'23): the expected GPU milli on `node`
// that a task drawn from `profile` could not use. For each shape: if the
// node cannot host it at all (CPU, memory, model, not enough GPUs with room)
// or it asks for no GPU, all free GPU milli counts; otherwise the free milli
// of the GPUs too full for it counts. Cost: O(shapes x GPUs on the node).
double NodeFragmentation(const WorkloadProfile& profile, const NodeState& node,
                         const NodeDelta& delta = {});

// Each node's NodeFragmentation under one profile, recomputed only for nodes
// whose NodeState::version changed since it was last asked (one Allocate
// changes one node, so a decision over 1,213 nodes recomputes one). Valid
// for one ClusterState and one profile at a time: Get resets it when given
// another profile; a caller switching states must call Clear. Not
// thread-safe; values are bit-identical to NodeFragmentation's.
class FragmentationCache {
 public:
  double Get(const WorkloadProfile& profile, uint32_t index, const NodeState& node);
  void Clear();

 private:
  const WorkloadProfile* profile_ = nullptr;
  std::vector<uint64_t> version_plus_one_;  // 0: not cached.
  std::vector<double> frag_;
};

// Free GPU milli on `node` that no GPU shape of `profile` could use at all:
// capacity stranded by the current state. Cost: O(shapes x GPUs).
uint64_t StrandedGpuMilli(const WorkloadProfile& profile, const NodeState& node);

}  // namespace gpuslice::core
