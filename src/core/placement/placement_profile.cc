#include "core/placement/placement_profile.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace gpuslice::core {
namespace {

// The shape key: demands that place identically are one shape.
using ShapeKey = std::tuple<uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, uint64_t>;

ShapeKey KeyOf(const Demand& d) {
  return {d.cpu_milli, d.mem_bytes, d.gpus, d.gpu_milli, d.gpu_mem, d.model_mask};
}

// A node's GPUs after a delta, in flat arrays the measures can scan quickly.
struct GpuView {
  int n = 0;
  uint64_t cpu_free = 0;
  uint64_t mem_free = 0;
  uint32_t total_free = 0;
  uint32_t milli[kMaxGpusPerNode];
  uint64_t mem[kMaxGpusPerNode];
  bool idle[kMaxGpusPerNode];
  bool tracked[kMaxGpusPerNode];
  uint8_t model[kMaxGpusPerNode];
  uint64_t models = 0;  // Bit m: some GPU of the node is model m.
};

void MakeView(const NodeState& node, const NodeDelta& delta, GpuView* v) {
  v->n = static_cast<int>(node.gpus.size());
  v->cpu_free = node.cpu_free >= delta.cpu_milli ? node.cpu_free - delta.cpu_milli : 0;
  v->mem_free = node.mem_free >= delta.mem_bytes ? node.mem_free - delta.mem_bytes : 0;
  v->total_free = 0;
  for (int i = 0; i < v->n; ++i) {
    const GpuState& g = node.gpus[i];
    uint32_t milli = g.milli_free;
    uint64_t mem = g.mem_free;
    if (delta.gpu_mask & (1u << i)) {
      if (delta.gpu_milli >= kMilliPerGpu) {
        milli = 0;
        mem = 0;
      } else {
        milli = milli >= delta.gpu_milli ? milli - delta.gpu_milli : 0;
        if (g.mem_total != 0) mem = mem >= delta.gpu_mem ? mem - delta.gpu_mem : 0;
      }
    }
    v->milli[i] = milli;
    v->mem[i] = mem;
    v->idle[i] = milli == g.milli_total && mem == g.mem_total;
    v->tracked[i] = g.mem_total != 0;
    v->model[i] = g.model;
    v->models |= uint64_t{1} << g.model;
    v->total_free += milli;
  }
}

bool GpuUsableFor(const GpuView& v, int i, const Demand& s) {
  if (!s.AllowsModel(v.model[i])) return false;
  if (s.gpu_milli >= kMilliPerGpu) return v.idle[i];
  return v.milli[i] >= s.gpu_milli && (!v.tracked[i] || v.mem[i] >= s.gpu_mem);
}

}  // namespace

Result<WorkloadProfile> WorkloadProfile::FromDemands(std::span<const Demand> demands,
                                                     const ProfileOptions& options) {
  if (demands.empty()) return InvalidArgumentError("workload profile: no demands given");
  if (!(options.coverage > 0 && options.coverage <= 1)) {
    return InvalidArgumentError("workload profile: coverage " + std::to_string(options.coverage) +
                                " is outside (0, 1]");
  }
  std::map<ShapeKey, std::pair<Demand, uint64_t>> counts;
  uint64_t total = 0;
  for (const Demand& d : demands) {
    GPUSLICE_RETURN_IF_ERROR(d.Validate());
    if (d.gpus == 0 && !options.include_cpu_only) continue;
    Demand shape = d;
    if (!options.with_memory) shape.mem_bytes = 0;
    auto [it, inserted] = counts.try_emplace(KeyOf(shape), shape, 0);
    ++it->second.second;
    ++total;
  }
  if (total == 0) return InvalidArgumentError("workload profile: no demand asks for a GPU");
  std::vector<std::pair<Demand, uint64_t>> sorted;
  sorted.reserve(counts.size());
  for (auto& [key, value] : counts) sorted.push_back(value);
  // Most frequent first; the map order breaks ties, so the result is stable.
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<TaskShape> shapes;
  uint64_t covered = 0;
  for (const auto& [demand, count] : sorted) {
    if (static_cast<double>(covered) >= options.coverage * static_cast<double>(total)) break;
    shapes.push_back({demand, static_cast<double>(count)});
    covered += count;
  }
  return FromShapes(std::move(shapes));
}

Result<WorkloadProfile> WorkloadProfile::FromShapes(std::vector<TaskShape> shapes) {
  if (shapes.empty()) return InvalidArgumentError("workload profile: no shapes");
  double sum = 0;
  for (const TaskShape& s : shapes) {
    if (!(s.weight > 0)) {
      return InvalidArgumentError("workload profile: shape " + s.demand.Describe() +
                                  " has non-positive weight");
    }
    GPUSLICE_RETURN_IF_ERROR(s.demand.Validate());
    sum += s.weight;
  }
  for (TaskShape& s : shapes) s.weight /= sum;
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const TaskShape& a, const TaskShape& b) { return a.weight > b.weight; });
  WorkloadProfile p;
  p.shapes_ = std::move(shapes);
  p.Compile();
  return p;
}

void WorkloadProfile::Compile() {
  flat_.clear();
  groups_.clear();
  for (const TaskShape& shape : shapes_) {
    const Demand& s = shape.demand;
    int32_t group = -1;
    if (s.gpus > 0) {
      const GpuGroup key{s.gpus, s.gpu_milli, s.gpu_mem, s.model_mask};
      auto same = [&](const GpuGroup& g) {
        return g.gpus == key.gpus && g.gpu_milli == key.gpu_milli && g.gpu_mem == key.gpu_mem &&
               g.model_mask == key.model_mask;
      };
      auto it = std::find_if(groups_.begin(), groups_.end(), same);
      group = static_cast<int32_t>(it - groups_.begin());
      if (it == groups_.end()) groups_.push_back(key);
    }
    flat_.push_back({s.cpu_milli, s.mem_bytes, shape.weight * shape.rarity, group});
  }
}

WorkloadProfile WorkloadProfile::WithRarity(const ClusterState& cluster, double max_boost) const {
  WorkloadProfile out = *this;
  const double total = static_cast<double>(cluster.TotalGpuMilli());
  if (total <= 0 || !(max_boost > 1)) return out;
  for (TaskShape& shape : out.shapes_) {
    const Demand& s = shape.demand;
    if (s.gpus == 0) continue;  // Counts all free GPU milli anyway.
    double hosts = 0;
    for (const NodeState& n : cluster.nodes()) {
      if (n.cpu_total < s.cpu_milli || n.mem_total < s.mem_bytes) continue;
      uint32_t allowed = 0;
      for (const GpuState& g : n.gpus) {
        if (s.AllowsModel(g.model) && (g.mem_total == 0 || g.mem_total >= s.gpu_mem)) ++allowed;
      }
      if (allowed >= s.gpus) hosts += static_cast<double>(n.GpuMilliTotal());
    }
    shape.rarity = hosts > 0 ? std::min(max_boost, total / hosts) : 1;
  }
  out.Compile();
  return out;
}

NodeDelta DeltaOf(const Demand& demand, const uint8_t* gpus, int gpu_count) {
  NodeDelta d;
  d.cpu_milli = demand.cpu_milli;
  d.mem_bytes = demand.mem_bytes;
  d.gpu_milli = demand.gpu_milli;
  d.gpu_mem = demand.gpu_mem;
  for (int i = 0; i < gpu_count; ++i) d.gpu_mask |= 1u << gpus[i];
  return d;
}

double NodeFragmentation(const WorkloadProfile& profile, const NodeState& node,
                         const NodeDelta& delta) {
  GpuView v;
  MakeView(node, delta, &v);
  if (v.total_free == 0) return 0;
  // Per GPU group: the free milli a shape of the group could not use if the
  // host fits it (all of it when too few GPUs have room). Reused across
  // calls so a decision allocates nothing.
  thread_local std::vector<uint32_t> unusable;
  unusable.resize(profile.groups_.size());
  for (size_t g = 0; g < profile.groups_.size(); ++g) {
    const WorkloadProfile::GpuGroup& group = profile.groups_[g];
    // Most nodes hold one model, and most groups of a trace with model
    // lists (gpuspec33) allow none of it: nothing to scan.
    if (group.model_mask != 0 && (group.model_mask & v.models) == 0) {
      unusable[g] = v.total_free;
      continue;
    }
    Demand s;
    s.gpus = group.gpus;
    s.gpu_milli = group.gpu_milli;
    s.gpu_mem = group.gpu_mem;
    s.model_mask = group.model_mask;
    uint32_t usable = 0;
    uint32_t usable_milli = 0;
    for (int i = 0; i < v.n; ++i) {
      if (GpuUsableFor(v, i, s)) {
        ++usable;
        usable_milli += v.milli[i];
      }
    }
    unusable[g] = usable >= s.gpus ? v.total_free - usable_milli : v.total_free;
  }
  // Summed shape by shape in profile order, as the per-shape definition
  // reads, so the result is bit-identical to it (placements compare scores
  // exactly, and ties go to the first node).
  double frag = 0;
  for (const WorkloadProfile::FlatShape& s : profile.flat_) {
    if (s.group < 0 || v.cpu_free < s.cpu_milli || v.mem_free < s.mem_bytes) {
      frag += s.weight * v.total_free;
    } else {
      frag += s.weight * unusable[static_cast<size_t>(s.group)];
    }
  }
  return frag;
}

double FragmentationCache::Get(const WorkloadProfile& profile, uint32_t index,
                               const NodeState& node) {
  if (profile_ != &profile) {
    Clear();
    profile_ = &profile;
  }
  if (index >= frag_.size()) {
    frag_.resize(index + 1, 0);
    version_plus_one_.resize(index + 1, 0);
  }
  if (version_plus_one_[index] != node.version + 1) {
    frag_[index] = NodeFragmentation(profile, node);
    version_plus_one_[index] = node.version + 1;
  }
  return frag_[index];
}

void FragmentationCache::Clear() {
  profile_ = nullptr;
  version_plus_one_.clear();
  frag_.clear();
}

uint64_t StrandedGpuMilli(const WorkloadProfile& profile, const NodeState& node) {
  GpuView v;
  MakeView(node, {}, &v);
  if (v.total_free == 0) return 0;
  uint32_t usable_any = 0;  // Bit i: some shape could use GPU i.
  for (const TaskShape& shape : profile.shapes()) {
    const Demand& s = shape.demand;
    if (s.gpus == 0 || v.cpu_free < s.cpu_milli || v.mem_free < s.mem_bytes) continue;
    uint32_t mask = 0;
    uint32_t count = 0;
    for (int i = 0; i < v.n; ++i) {
      if (GpuUsableFor(v, i, s)) {
        mask |= 1u << i;
        ++count;
      }
    }
    if (count >= s.gpus) usable_any |= mask;
  }
  uint64_t stranded = 0;
  for (int i = 0; i < v.n; ++i) {
    if (!(usable_any & (1u << i))) stranded += v.milli[i];
  }
  return stranded;
}

}  // namespace gpuslice::core
