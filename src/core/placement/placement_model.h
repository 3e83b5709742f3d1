#pragma once

// The placement model: what a cluster (or one node) has, what a task asks for,
// and where a task was put. Shared by the node daemon (one node, a few GPUs)
// and the cluster replay (1,000+ nodes), so it is plain data with explicit
// accounting and no I/O. Units are integers throughout: CPU in milli-cores,
// memory in bytes, GPU compute in per-mille of one GPU (1000 = a whole GPU,
// the unit of ParseShareMilli and of the openb trace).

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/jobs/request.h"
#include "core/status.h"

namespace gpuslice::core {

inline constexpr uint32_t kMilliPerGpu = 1000;
// Fixed so a Placement needs no heap allocation. DGX-2-class nodes have 16.
inline constexpr int kMaxGpusPerNode = 16;
// GPU models are interned into a table of at most this many names, so a set
// of allowed models is one 64-bit mask.
inline constexpr int kMaxGpuModels = 64;
// Island id of a GPU whose NVLink/PCIe topology is unknown.
inline constexpr int16_t kUnknownIsland = -1;

// One GPU. Contract: 0 <= milli_free <= milli_total and, when memory is
// tracked (mem_total > 0), 0 <= mem_free <= mem_total. mem_total == 0 means
// GPU memory is not tracked (as in the openb trace) and memory never limits.
struct GpuState {
  uint32_t milli_total = kMilliPerGpu;
  uint32_t milli_free = kMilliPerGpu;
  uint64_t mem_total = 0;
  uint64_t mem_free = 0;
  uint8_t model = 0;              // Index into ClusterState::models().
  int16_t island = kUnknownIsland;  // GPUs sharing an island id are NVLink/PCIe peers.

  bool IsIdle() const { return milli_free == milli_total && mem_free == mem_total; }
};

// Kinds of GPU task, counted per node: the gpu-clustering policy keeps tasks
// of one kind together, and the daemon reports them.
enum class TaskClass : uint8_t { kCpuOnly, kShared, kOneGpu, kTwoGpus, kFourGpus, kEightGpus, kOther };
inline constexpr int kNumTaskClasses = 7;

// One machine: host CPU and memory plus up to kMaxGpusPerNode GPUs.
// Contract: free <= total for every resource; `version` increases on every
// Allocate/Release so callers may cache per-node derived values.
struct NodeState {
  std::string name;
  uint64_t cpu_total = 0;  // milli-cores
  uint64_t cpu_free = 0;
  uint64_t mem_total = 0;  // bytes
  uint64_t mem_free = 0;
  std::vector<GpuState> gpus;
  std::array<uint32_t, kNumTaskClasses> tasks_by_class{};
  uint64_t version = 0;

  uint32_t GpuMilliFree() const;
  uint32_t GpuMilliTotal() const;
};

// What one task asks for. Three shapes:
//   CPU only:        gpus == 0, gpu_milli == 0.
//   Whole GPUs:      gpus >= 1, gpu_milli == 1000; each GPU must be idle and
//                    is taken entirely (all its compute and memory).
//   Part of one GPU: gpus == 1, 0 < gpu_milli < 1000, plus gpu_mem bytes
//                    (ignored on GPUs that do not track memory).
// `model_mask` restricts GPU models (bit i = ClusterState::models()[i]);
// 0 means any model.
struct Demand {
  uint64_t cpu_milli = 0;
  uint64_t mem_bytes = 0;
  uint32_t gpus = 0;
  uint32_t gpu_milli = 0;
  uint64_t gpu_mem = 0;
  uint64_t model_mask = 0;

  static Demand CpuOnly(uint64_t cpu_milli, uint64_t mem_bytes);
  static Demand WholeGpus(uint32_t count, uint64_t cpu_milli = 0, uint64_t mem_bytes = 0);
  static Demand Fraction(uint32_t milli, uint64_t gpu_mem, uint64_t cpu_milli = 0,
                         uint64_t mem_bytes = 0);

  bool IsFraction() const { return gpus == 1 && gpu_milli < kMilliPerGpu; }
  bool IsWhole() const { return gpus >= 1 && gpu_milli == kMilliPerGpu; }
  // GPU compute asked in per-mille (2 whole GPUs = 2000).
  uint64_t TotalGpuMilli() const { return uint64_t{gpus} * gpu_milli; }
  bool AllowsModel(uint8_t model) const {
    return model_mask == 0 || (model_mask >> model) & 1u;
  }
  TaskClass Class() const;

  // Checks the shape rules above; errors name the offending field.
  Status Validate() const;
  // "cpu 4000m, mem 8 GiB, 1 GPU x 460‰".
  std::string Describe() const;
};

// Where a task went: a node index and the GPU indices on that node
// (gpu_count entries, ascending). Fits in a few cache lines, never allocates.
struct Placement {
  uint32_t node = 0;
  uint8_t gpu_count = 0;
  std::array<uint8_t, kMaxGpusPerNode> gpus{};

  friend bool operator==(const Placement& a, const Placement& b) {
    if (a.node != b.node || a.gpu_count != b.gpu_count) return false;
    for (int i = 0; i < a.gpu_count; ++i) {
      if (a.gpus[i] != b.gpus[i]) return false;
    }
    return true;
  }
};

// The state of a set of nodes, with the accounting shared by the daemon and
// the replay. Not thread-safe: one writer, or external locking.
class ClusterState {
 public:
  // Interns a GPU model name ("A100-80GB", "T4"). Errors when the table holds
  // kMaxGpuModels names already or the name is empty.
  Result<uint8_t> InternModel(std::string_view name);
  // Index of a known model, or -1.
  int FindModel(std::string_view name) const;
  const std::vector<std::string>& models() const { return models_; }
  // The mask for a '|'-separated list such as "V100M16|V100M32" (the openb
  // gpu_spec syntax). Names not yet known are interned, so a constraint on a
  // model the cluster lacks is representable (and then never fits). "" -> 0.
  Result<uint64_t> ModelMask(std::string_view spec);

  // Adds an empty node; returns its index. Validates the node: totals > 0
  // where needed, at most kMaxGpusPerNode GPUs, free == total, models known.
  Result<uint32_t> AddNode(NodeState node);

  // Convenience: a node of `gpu_count` identical GPUs of `model` (interned),
  // all on island kUnknownIsland, GPU memory `gpu_mem` each (0 = untracked).
  Result<uint32_t> AddUniformNode(std::string name, uint64_t cpu_milli, uint64_t mem_bytes,
                                  uint32_t gpu_count, std::string_view model,
                                  uint64_t gpu_mem = 0);

  const std::vector<NodeState>& nodes() const { return nodes_; }
  const NodeState& node(uint32_t i) const { return nodes_[i]; }
  size_t size() const { return nodes_.size(); }

  // Takes the demand's resources at `placement`. Checks everything (indices,
  // capacity, model, idle GPUs for whole-GPU demands) and changes nothing on
  // error, so a bad placement can never over-allocate.
  Status Allocate(const Demand& demand, const Placement& placement);
  // Gives back what Allocate took. Errors (and changes nothing) if that would
  // raise any free amount above its total.
  Status Release(const Demand& demand, const Placement& placement);

  uint64_t TotalGpuMilli() const { return total_gpu_milli_; }
  uint64_t FreeGpuMilli() const { return free_gpu_milli_; }
  uint64_t TotalCpuMilli() const { return total_cpu_milli_; }
  uint32_t TotalGpus() const { return total_gpus_; }

 private:
  Status CheckPlacement(const Demand& demand, const Placement& placement) const;

  std::vector<std::string> models_;
  std::vector<NodeState> nodes_;
  uint64_t total_gpu_milli_ = 0;
  uint64_t free_gpu_milli_ = 0;
  uint64_t total_cpu_milli_ = 0;
  uint32_t total_gpus_ = 0;
};

// Maps a user request (src/core/jobs/request.h) to a Demand. Whole-GPU requests
// use gpus_min (elastic growth is the daemon's business). A fraction with no
// compute cap or a 100% share cannot share compute and becomes one whole GPU.
// A MIG profile is
// approximated as a fraction: compute_slices/7 of the compute (rounded up)
// and memory_gb (decimal) of GPU memory; MIG slice geometry is not modelled.
Result<Demand> DemandFromRequest(const ResourceRequest& request, uint64_t cpu_milli = 0,
                                 uint64_t mem_bytes = 0);

}  // namespace gpuslice::core
