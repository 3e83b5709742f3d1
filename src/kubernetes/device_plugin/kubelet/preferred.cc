#include "kubernetes/device_plugin/kubelet/preferred.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/placement/placement_policy.h"
#include "core/placement/placement_profile.h"

namespace gpuslice::kubernetes {

namespace {

// One node of the given GPUs (in order), loaded with what the daemon reports
// on them, and the demands that load is made of (the workload profile's
// shapes: fragmentation is measured against what this node runs).
struct NodeModel {
  core::ClusterState state;
  std::vector<std::string> uuids;  // Index in the node -> GPU UUID.
  std::vector<core::Demand> demands;
};

core::Result<NodeModel> BuildNode(const Inventory& inventory,
                                  const std::vector<std::string>& uuids) {
  NodeModel m;
  core::NodeState node;
  node.name = "node";
  // Host resources play no part here: large enough never to limit.
  node.cpu_total = node.cpu_free = uint64_t{1} << 40;
  node.mem_total = node.mem_free = uint64_t{1} << 60;
  for (const std::string& uuid : uuids) {
    const NodeGpu* g = inventory.Find(uuid);
    if (g == nullptr || m.uuids.size() >= static_cast<size_t>(core::kMaxGpusPerNode)) continue;
    GPUSLICE_ASSIGN_OR_RETURN(uint8_t model,
                              m.state.InternModel(g->model.empty() ? "gpu" : g->model));
    core::GpuState gs;
    gs.mem_total = gs.mem_free = g->memory_total;
    gs.model = model;
    gs.island = static_cast<int16_t>(g->island);
    node.gpus.push_back(gs);
    m.uuids.push_back(uuid);
  }
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t n, m.state.AddNode(std::move(node)));
  for (uint8_t i = 0; i < m.uuids.size(); ++i) {
    const NodeGpu* g = inventory.Find(m.uuids[i]);
    core::Placement at;
    at.node = n;
    at.gpu_count = 1;
    at.gpus[0] = i;
    auto take = [&](const core::Demand& d, bool shape) {
      if (m.state.Allocate(d, at).ok() && shape) m.demands.push_back(d);
    };
    for (const SliceShape& s : g->slices) {
      if (s.Whole()) {
        take(core::Demand::WholeGpus(1), true);
      } else {
        take(core::Demand::Fraction(std::max<uint32_t>(1, s.compute_milli),
                                    std::min(s.memory_limit, g->memory_total)),
             true);
      }
    }
    // Memory held outside gpuslice is not a shape anyone asks for.
    if (g->foreign_memory > 0) {
      take(core::Demand::Fraction(1, std::min(g->foreign_memory, g->memory_total)), false);
    }
  }
  return m;
}

// The placement's GPUs for `demand` on `uuids`, or an error when none fits.
core::Result<std::vector<std::string>> Place(const Inventory& inventory,
                                             const std::vector<std::string>& uuids,
                                             const core::Demand& demand) {
  GPUSLICE_ASSIGN_OR_RETURN(NodeModel m, BuildNode(inventory, uuids));
  m.demands.push_back(demand);
  core::ProfileOptions po;
  po.coverage = 1.0;  // A node sees few shapes: keep them all.
  GPUSLICE_ASSIGN_OR_RETURN(core::WorkloadProfile profile,
                            core::WorkloadProfile::FromDemands(m.demands, po));
  core::PlaceOptions options;
  options.policy = core::kDefaultPolicy;
  options.profile = &profile;
  GPUSLICE_ASSIGN_OR_RETURN(core::Placement p, core::Place(m.state, demand, options));
  std::vector<std::string> out;
  for (int i = 0; i < p.gpu_count; ++i) out.push_back(m.uuids[p.gpus[i]]);
  return out;
}

struct Offer {
  std::vector<std::string> must;                      // must_include on this GPU.
  std::vector<std::pair<int64_t, std::string>> free;  // (unit, id) offered, not in must.
  size_t Count() const { return must.size() + free.size(); }
};

core::Result<std::vector<std::string>> PreferFraction(const Resource& resource,
                                                      const Inventory& inventory,
                                                      const PreferenceRequest& request,
                                                      const std::vector<std::string>& pairing) {
  const size_t size = static_cast<size_t>(request.size);
  std::map<std::string, Offer> offers;
  std::vector<std::string> order;  // GPUs in inventory order, then others.
  for (const NodeGpu& g : inventory.gpus) order.push_back(g.uuid);
  std::set<std::string> must_gpus;
  for (const std::string& id : request.must_include) {
    GPUSLICE_ASSIGN_OR_RETURN(ParsedId p, ParseDeviceId(resource.kind, id));
    offers[p.uuid].must.push_back(id);
    must_gpus.insert(p.uuid);
  }
  std::set<std::string> must(request.must_include.begin(), request.must_include.end());
  for (const std::string& id : request.available) {
    if (must.count(id) > 0) continue;
    GPUSLICE_ASSIGN_OR_RETURN(ParsedId p, ParseDeviceId(resource.kind, id));
    offers[p.uuid].free.emplace_back(p.unit, id);
  }
  for (const auto& [uuid, offer] : offers) {
    if (std::find(order.begin(), order.end(), uuid) == order.end()) order.push_back(uuid);
  }
  // Candidates: GPUs with enough IDs, holding all of must_include. When
  // must_include spans GPUs no answer is on one GPU: the kubelet's own
  // choice stands (must_include, then the first others).
  std::vector<std::string> candidates;
  for (const std::string& uuid : order) {
    auto it = offers.find(uuid);
    if (it == offers.end() || it->second.Count() < size) continue;
    if (!must_gpus.empty() && (must_gpus.size() > 1 || must_gpus.count(uuid) == 0)) continue;
    candidates.push_back(uuid);
  }
  std::string chosen;
  for (const std::string& uuid : pairing) {
    if (std::find(candidates.begin(), candidates.end(), uuid) != candidates.end()) {
      chosen = uuid;
      break;
    }
  }
  if (chosen.empty() && candidates.size() == 1) chosen = candidates[0];
  if (chosen.empty() && !candidates.empty()) {
    core::Demand demand;
    if (resource.kind == ResourceKind::kGpuMemory) {
      // The compute share arrives separately (or never): assume the same
      // part of the GPU as of its memory, the shape most fractions have.
      // Assuming none would make every GPU with memory left over look like
      // stranded compute to the fragmentation measure.
      uint64_t smallest = 0;
      for (const std::string& uuid : candidates) {
        const NodeGpu* g = inventory.Find(uuid);
        if (g != nullptr && g->memory_total > 0 && (smallest == 0 || g->memory_total < smallest)) {
          smallest = g->memory_total;
        }
      }
      uint64_t milli = smallest == 0 ? 1 : size * kGiB * core::kMilliPerGpu / smallest;
      demand = core::Demand::Fraction(
          static_cast<uint32_t>(std::clamp<uint64_t>(milli, 1, core::kMilliPerGpu - 1)),
          size * kGiB);
    } else if (size * 10 >= core::kMilliPerGpu) {
      demand = core::Demand::WholeGpus(1);
    } else {
      demand = core::Demand::Fraction(static_cast<uint32_t>(size * 10), 0);
    }
    auto placed = Place(inventory, candidates, demand);
    if (placed.ok() && !placed->empty()) chosen = placed->front();
  }
  if (chosen.empty() && !candidates.empty()) {
    // The daemon sees no room where the kubelet offers IDs (memory held
    // outside Kubernetes): the GPU with the most room; Allocate will say
    // what does not fit.
    auto room = [&](const std::string& uuid) -> uint64_t {
      const NodeGpu* g = inventory.Find(uuid);
      if (g == nullptr) return 0;
      return resource.kind == ResourceKind::kGpuMemory ? g->memory_free : g->milli_free;
    };
    chosen = *std::max_element(
        candidates.begin(), candidates.end(),
        [&](const std::string& a, const std::string& b) { return room(a) < room(b); });
  }
  std::vector<std::string> out;
  if (chosen.empty()) {
    // No single GPU can hold it: must_include, then the offer in order.
    out = request.must_include;
    for (const std::string& id : request.available) {
      if (out.size() >= size) break;
      if (must.count(id) == 0) out.push_back(id);
    }
    return out;
  }
  Offer& offer = offers[chosen];
  out = offer.must;
  std::sort(offer.free.begin(), offer.free.end());
  for (const auto& [unit, id] : offer.free) {
    if (out.size() >= size) break;
    out.push_back(id);
  }
  return out;
}

core::Result<std::vector<std::string>> PreferWhole(const Inventory& inventory,
                                                   const PreferenceRequest& request) {
  const size_t size = static_cast<size_t>(request.size);
  std::vector<std::string> out = request.must_include;
  std::set<std::string> must(out.begin(), out.end());
  std::vector<std::string> free;
  for (const std::string& id : request.available) {
    GPUSLICE_RETURN_IF_ERROR(ParseDeviceId(ResourceKind::kGpu, id).status());
    if (must.count(id) == 0) free.push_back(id);
  }
  if (out.size() >= size) return out;
  const uint32_t need = static_cast<uint32_t>(size - out.size());
  auto placed = Place(inventory, free, core::Demand::WholeGpus(need));
  if (placed.ok() && placed->size() == need) {
    out.insert(out.end(), placed->begin(), placed->end());
    return out;
  }
  for (const std::string& id : free) {
    if (out.size() >= size) break;
    out.push_back(id);
  }
  return out;
}

}  // namespace

core::Result<std::vector<std::string>> PreferredIds(const Resource& resource,
                                                    const Inventory& inventory,
                                                    const PreferenceRequest& request,
                                                    const std::vector<std::string>& pairing_gpus) {
  if (request.size <= 0 || static_cast<size_t>(request.size) < request.must_include.size() ||
      static_cast<size_t>(request.size) > request.available.size() + request.must_include.size()) {
    return core::InvalidArgumentError(
        resource.Name() + ": allocation_size " + std::to_string(request.size) + " with " +
        std::to_string(request.must_include.size()) + " IDs to include and " +
        std::to_string(request.available.size()) + " available");
  }
  switch (resource.kind) {
    case ResourceKind::kGpuMemory:
    case ResourceKind::kGpuShare:
      return PreferFraction(resource, inventory, request, pairing_gpus);
    case ResourceKind::kGpu:
      return PreferWhole(inventory, request);
    case ResourceKind::kMig: {
      std::vector<std::string> out = request.must_include;
      std::set<std::string> must(out.begin(), out.end());
      for (const std::string& id : request.available) {
        if (out.size() >= static_cast<size_t>(request.size)) break;
        if (must.count(id) == 0) out.push_back(id);
      }
      return out;
    }
  }
  return core::InternalError("unknown resource kind");
}

}  // namespace gpuslice::kubernetes
