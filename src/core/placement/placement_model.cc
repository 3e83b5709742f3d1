#include "core/placement/placement_model.h"

#include <string>
#include <utility>

#include "core/units.h"

namespace gpuslice::core {

uint32_t NodeState::GpuMilliFree() const {
  uint32_t sum = 0;
  for (const GpuState& g : gpus) sum += g.milli_free;
  return sum;
}

uint32_t NodeState::GpuMilliTotal() const {
  uint32_t sum = 0;
  for (const GpuState& g : gpus) sum += g.milli_total;
  return sum;
}

Demand Demand::CpuOnly(uint64_t cpu_milli, uint64_t mem_bytes) {
  Demand d;
  d.cpu_milli = cpu_milli;
  d.mem_bytes = mem_bytes;
  return d;
}

Demand Demand::WholeGpus(uint32_t count, uint64_t cpu_milli, uint64_t mem_bytes) {
  Demand d = CpuOnly(cpu_milli, mem_bytes);
  d.gpus = count;
  d.gpu_milli = kMilliPerGpu;
  return d;
}

Demand Demand::Fraction(uint32_t milli, uint64_t gpu_mem, uint64_t cpu_milli,
                        uint64_t mem_bytes) {
  Demand d = CpuOnly(cpu_milli, mem_bytes);
  d.gpus = 1;
  d.gpu_milli = milli;
  d.gpu_mem = gpu_mem;
  return d;
}

TaskClass Demand::Class() const {
  if (gpus == 0) return TaskClass::kCpuOnly;
  if (IsFraction()) return TaskClass::kShared;
  switch (gpus) {
    case 1: return TaskClass::kOneGpu;
    case 2: return TaskClass::kTwoGpus;
    case 4: return TaskClass::kFourGpus;
    case 8: return TaskClass::kEightGpus;
    default: return TaskClass::kOther;
  }
}

Status Demand::Validate() const {
  if (gpus == 0) {
    if (gpu_milli != 0 || gpu_mem != 0) {
      return InvalidArgumentError("demand: gpu_milli and gpu_mem must be 0 when gpus is 0");
    }
    return Status::Ok();
  }
  if (gpus > kMaxGpusPerNode) {
    return InvalidArgumentError("demand: gpus " + std::to_string(gpus) + " exceeds " +
                                std::to_string(kMaxGpusPerNode) + " per node");
  }
  if (gpu_milli == 0 || gpu_milli > kMilliPerGpu) {
    return InvalidArgumentError("demand: gpu_milli " + std::to_string(gpu_milli) +
                                " is outside 1..1000");
  }
  if (gpus > 1 && gpu_milli != kMilliPerGpu) {
    return InvalidArgumentError("demand: a fraction (gpu_milli " + std::to_string(gpu_milli) +
                                ") must ask for exactly 1 GPU, not " + std::to_string(gpus));
  }
  if (gpu_milli == kMilliPerGpu && gpu_mem != 0) {
    return InvalidArgumentError("demand: gpu_mem applies to fractions only; whole GPUs take all");
  }
  return Status::Ok();
}

std::string Demand::Describe() const {
  std::string out = "cpu " + std::to_string(cpu_milli) + "m, mem " + FormatBytes(mem_bytes);
  if (gpus == 0) return out;
  if (IsFraction()) {
    out += ", 1 GPU x " + std::to_string(gpu_milli) + "\u2030";
    if (gpu_mem != 0) out += " + " + FormatBytes(gpu_mem);
  } else {
    out += ", " + std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
  }
  return out;
}

Result<uint8_t> ClusterState::InternModel(std::string_view name) {
  if (name.empty()) return InvalidArgumentError("GPU model name is empty");
  int found = FindModel(name);
  if (found >= 0) return static_cast<uint8_t>(found);
  if (models_.size() >= kMaxGpuModels) {
    return ResourceExhaustedError("more than " + std::to_string(kMaxGpuModels) +
                                  " GPU models; cannot add '" + std::string(name) + "'");
  }
  models_.emplace_back(name);
  return static_cast<uint8_t>(models_.size() - 1);
}

int ClusterState::FindModel(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

Result<uint64_t> ClusterState::ModelMask(std::string_view spec) {
  uint64_t mask = 0;
  while (!spec.empty()) {
    size_t bar = spec.find('|');
    std::string_view name = spec.substr(0, bar);
    if (name.empty()) {
      return InvalidArgumentError("empty GPU model name in model list");
    }
    GPUSLICE_ASSIGN_OR_RETURN(uint8_t id, InternModel(name));
    mask |= uint64_t{1} << id;
    if (bar == std::string_view::npos) break;
    spec.remove_prefix(bar + 1);
    if (spec.empty()) return InvalidArgumentError("GPU model list ends with '|'");
  }
  return mask;
}

Result<uint32_t> ClusterState::AddNode(NodeState node) {
  const std::string where = "node '" + node.name + "': ";
  if (node.name.empty()) return InvalidArgumentError("node name is empty");
  if (node.gpus.size() > kMaxGpusPerNode) {
    return InvalidArgumentError(where + std::to_string(node.gpus.size()) +
                                " GPUs exceed the limit of " + std::to_string(kMaxGpusPerNode));
  }
  if (node.cpu_free != node.cpu_total || node.mem_free != node.mem_total) {
    return InvalidArgumentError(where + "must be added empty (free == total)");
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuState& g = node.gpus[i];
    if (g.milli_total != kMilliPerGpu || !g.IsIdle()) {
      return InvalidArgumentError(where + "GPU " + std::to_string(i) +
                                  " must be idle with milli_total 1000");
    }
    if (g.model >= models_.size()) {
      return InvalidArgumentError(where + "GPU " + std::to_string(i) + " has unknown model id " +
                                  std::to_string(g.model));
    }
  }
  node.tasks_by_class = {};
  node.version = 0;
  total_cpu_milli_ += node.cpu_total;
  for (const GpuState& g : node.gpus) {
    total_gpu_milli_ += g.milli_total;
    free_gpu_milli_ += g.milli_free;
  }
  total_gpus_ += static_cast<uint32_t>(node.gpus.size());
  nodes_.push_back(std::move(node));
  return static_cast<uint32_t>(nodes_.size() - 1);
}

Result<uint32_t> ClusterState::AddUniformNode(std::string name, uint64_t cpu_milli,
                                              uint64_t mem_bytes, uint32_t gpu_count,
                                              std::string_view model, uint64_t gpu_mem) {
  NodeState node;
  node.name = std::move(name);
  node.cpu_total = node.cpu_free = cpu_milli;
  node.mem_total = node.mem_free = mem_bytes;
  if (gpu_count > 0) {
    GPUSLICE_ASSIGN_OR_RETURN(uint8_t id, InternModel(model));
    GpuState g;
    g.model = id;
    g.mem_total = g.mem_free = gpu_mem;
    node.gpus.assign(gpu_count, g);
  }
  return AddNode(std::move(node));
}

Status ClusterState::CheckPlacement(const Demand& demand, const Placement& p) const {
  GPUSLICE_RETURN_IF_ERROR(demand.Validate());
  if (p.node >= nodes_.size()) {
    return InvalidArgumentError("placement names node " + std::to_string(p.node) + " of " +
                                std::to_string(nodes_.size()));
  }
  if (p.gpu_count != demand.gpus) {
    return InvalidArgumentError("placement has " + std::to_string(p.gpu_count) +
                                " GPUs but the demand asks for " + std::to_string(demand.gpus));
  }
  const NodeState& n = nodes_[p.node];
  uint32_t seen = 0;
  for (int i = 0; i < p.gpu_count; ++i) {
    uint8_t g = p.gpus[i];
    if (g >= n.gpus.size()) {
      return InvalidArgumentError("placement names GPU " + std::to_string(g) + " of node '" +
                                  n.name + "' which has " + std::to_string(n.gpus.size()));
    }
    if (seen & (1u << g)) {
      return InvalidArgumentError("placement names GPU " + std::to_string(g) + " twice");
    }
    seen |= 1u << g;
    if (!demand.AllowsModel(n.gpus[g].model)) {
      return InvalidArgumentError("GPU " + std::to_string(g) + " of node '" + n.name +
                                  "' is a model the demand does not allow");
    }
  }
  return Status::Ok();
}

Status ClusterState::Allocate(const Demand& demand, const Placement& p) {
  GPUSLICE_RETURN_IF_ERROR(CheckPlacement(demand, p));
  NodeState& n = nodes_[p.node];
  if (n.cpu_free < demand.cpu_milli || n.mem_free < demand.mem_bytes) {
    return ResourceExhaustedError("node '" + n.name + "' lacks CPU or memory for " +
                                  demand.Describe());
  }
  for (int i = 0; i < p.gpu_count; ++i) {
    const GpuState& g = n.gpus[p.gpus[i]];
    bool fits = demand.IsWhole()
                    ? g.IsIdle()
                    : g.milli_free >= demand.gpu_milli &&
                          (g.mem_total == 0 || g.mem_free >= demand.gpu_mem);
    if (!fits) {
      return ResourceExhaustedError("GPU " + std::to_string(p.gpus[i]) + " of node '" + n.name +
                                    "' cannot hold " + demand.Describe());
    }
  }
  // All checks passed: apply.
  n.cpu_free -= demand.cpu_milli;
  n.mem_free -= demand.mem_bytes;
  for (int i = 0; i < p.gpu_count; ++i) {
    GpuState& g = n.gpus[p.gpus[i]];
    if (demand.IsWhole()) {
      g.milli_free = 0;
      g.mem_free = 0;
    } else {
      g.milli_free -= demand.gpu_milli;
      if (g.mem_total != 0) g.mem_free -= demand.gpu_mem;
    }
  }
  free_gpu_milli_ -= demand.TotalGpuMilli();
  ++n.tasks_by_class[static_cast<int>(demand.Class())];
  ++n.version;
  return Status::Ok();
}

Status ClusterState::Release(const Demand& demand, const Placement& p) {
  GPUSLICE_RETURN_IF_ERROR(CheckPlacement(demand, p));
  NodeState& n = nodes_[p.node];
  const int cls = static_cast<int>(demand.Class());
  if (n.cpu_free + demand.cpu_milli > n.cpu_total || n.mem_free + demand.mem_bytes > n.mem_total ||
      n.tasks_by_class[cls] == 0) {
    return FailedPreconditionError("release of " + demand.Describe() + " on node '" + n.name +
                                   "' exceeds what is allocated there");
  }
  for (int i = 0; i < p.gpu_count; ++i) {
    const GpuState& g = n.gpus[p.gpus[i]];
    bool ok = demand.IsWhole() ? g.milli_free == 0
                               : g.milli_free + demand.gpu_milli <= g.milli_total &&
                                     (g.mem_total == 0 || g.mem_free + demand.gpu_mem <= g.mem_total);
    if (!ok) {
      return FailedPreconditionError("release on GPU " + std::to_string(p.gpus[i]) + " of node '" +
                                     n.name + "' exceeds what is allocated there");
    }
  }
  n.cpu_free += demand.cpu_milli;
  n.mem_free += demand.mem_bytes;
  for (int i = 0; i < p.gpu_count; ++i) {
    GpuState& g = n.gpus[p.gpus[i]];
    if (demand.IsWhole()) {
      g.milli_free = g.milli_total;
      g.mem_free = g.mem_total;
    } else {
      g.milli_free += demand.gpu_milli;
      if (g.mem_total != 0) g.mem_free += demand.gpu_mem;
    }
  }
  free_gpu_milli_ += demand.TotalGpuMilli();
  --n.tasks_by_class[cls];
  ++n.version;
  return Status::Ok();
}

Result<Demand> DemandFromRequest(const ResourceRequest& request, uint64_t cpu_milli,
                                 uint64_t mem_bytes) {
  GPUSLICE_RETURN_IF_ERROR(request.Validate());
  Demand d = Demand::CpuOnly(cpu_milli, mem_bytes);
  switch (request.kind) {
    case RequestKind::kWholeGpus:
      d = Demand::WholeGpus(request.gpus_min, cpu_milli, mem_bytes);
      break;
    case RequestKind::kFraction:
      // A fraction with no compute cap (0) or the full share (1000) cannot
      // share compute with anyone, so it is placed as a whole GPU.
      if (request.compute_milli == 0 || request.compute_milli >= kMilliPerGpu) {
        d = Demand::WholeGpus(1, cpu_milli, mem_bytes);
      } else {
        d = Demand::Fraction(request.compute_milli, request.memory_bytes, cpu_milli, mem_bytes);
      }
      break;
    case RequestKind::kMig: {
      uint32_t slices = request.mig.compute_slices;
      uint32_t milli = (slices * kMilliPerGpu + 6) / 7;
      if (milli >= kMilliPerGpu) milli = kMilliPerGpu - 1;
      d = Demand::Fraction(milli, uint64_t{request.mig.memory_gb} * 1000000000ull, cpu_milli,
                           mem_bytes);
      break;
    }
  }
  GPUSLICE_RETURN_IF_ERROR(d.Validate());
  return d;
}

}  // namespace gpuslice::core
