#include "core/schedule/defrag.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace gpuslice::core {
namespace {

// One way to make room: free `gpus` of `node` by moving `movers` away.
struct Candidate {
  uint32_t node = 0;
  std::vector<uint8_t> gpus;
  std::vector<const PlacedTask*> movers;
  uint64_t moved_mem = 0;

  auto Cost() const { return std::make_tuple(movers.size(), moved_mem, node); }
};

uint64_t Key(uint32_t node, uint32_t gpu) { return uint64_t{node} * kMaxGpusPerNode + gpu; }

// What it costs to make GPU `g` of node `n` idle: the tasks on it, when they
// can all move (false otherwise, or when something else holds it).
bool FreeingCost(const ClusterState& state, uint32_t n, uint32_t g,
                 const std::map<uint64_t, std::vector<const PlacedTask*>>& on_gpu,
                 std::vector<const PlacedTask*>* movers, uint64_t* mem) {
  const GpuState& gpu = state.node(n).gpus[g];
  if (gpu.IsIdle()) return true;
  auto it = on_gpu.find(Key(n, g));
  if (it == on_gpu.end()) return false;  // Held by what no task accounts for.
  uint32_t milli = gpu.milli_free;
  uint64_t free_mem = gpu.mem_free;
  for (const PlacedTask* t : it->second) {
    if (!t->movable || t->demand.gpus != 1) return false;
    milli += t->demand.gpu_milli;
    free_mem += gpu.mem_total == 0 ? 0 : std::min(t->demand.gpu_mem, gpu.mem_total);
    movers->push_back(t);
    *mem += t->demand.gpu_mem;
  }
  // Only if moving them all leaves it idle (nothing unaccounted for on it).
  return milli == gpu.milli_total && (gpu.mem_total == 0 || free_mem == gpu.mem_total);
}

std::vector<Candidate> WholeGpuCandidates(
    const ClusterState& state, const Demand& head, const DefragOptions& opt,
    const std::map<uint64_t, std::vector<const PlacedTask*>>& on_gpu) {
  std::vector<Candidate> out;
  for (uint32_t n = 0; n < state.size(); ++n) {
    const NodeState& node = state.node(n);
    if (node.gpus.size() < head.gpus || node.cpu_total < head.cpu_milli ||
        node.mem_total < head.mem_bytes) {
      continue;
    }
    // The GPUs it may use, by island, each with what freeing it costs.
    std::map<int16_t, std::vector<Candidate>> by_island;
    for (uint32_t g = 0; g < node.gpus.size(); ++g) {
      if (!head.AllowsModel(node.gpus[g].model)) continue;
      Candidate c;
      c.node = n;
      c.gpus = {static_cast<uint8_t>(g)};
      if (!FreeingCost(state, n, g, on_gpu, &c.movers, &c.moved_mem)) continue;
      by_island[node.gpus[g].island].push_back(std::move(c));
    }
    for (auto& [island, gpus] : by_island) {
      if (gpus.size() < head.gpus) continue;
      std::stable_sort(gpus.begin(), gpus.end(),
                       [](const Candidate& a, const Candidate& b) { return a.Cost() < b.Cost(); });
      Candidate c;
      c.node = n;
      for (uint32_t i = 0; i < head.gpus; ++i) {
        c.gpus.push_back(gpus[i].gpus[0]);
        c.movers.insert(c.movers.end(), gpus[i].movers.begin(), gpus[i].movers.end());
        c.moved_mem += gpus[i].moved_mem;
      }
      if (c.movers.empty() || c.movers.size() > opt.max_moves) continue;
      std::sort(c.gpus.begin(), c.gpus.end());
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<Candidate> FractionCandidates(
    const ClusterState& state, const Demand& head, const DefragOptions& opt,
    const std::map<uint64_t, std::vector<const PlacedTask*>>& on_gpu) {
  std::vector<Candidate> out;
  for (const auto& [key, tasks] : on_gpu) {
    const uint32_t n = static_cast<uint32_t>(key / kMaxGpusPerNode);
    const uint32_t g = static_cast<uint32_t>(key % kMaxGpusPerNode);
    const GpuState& gpu = state.node(n).gpus[g];
    if (!head.AllowsModel(gpu.model) || gpu.milli_total < head.gpu_milli ||
        (gpu.mem_total != 0 && gpu.mem_total < head.gpu_mem)) {
      continue;
    }
    // Largest first: the fewest moves that make room.
    std::vector<const PlacedTask*> movable;
    for (const PlacedTask* t : tasks) {
      if (t->movable && t->demand.gpus == 1) movable.push_back(t);
    }
    std::stable_sort(movable.begin(), movable.end(), [](const PlacedTask* a, const PlacedTask* b) {
      if (a->demand.gpu_milli != b->demand.gpu_milli)
        return a->demand.gpu_milli > b->demand.gpu_milli;
      return a->demand.gpu_mem > b->demand.gpu_mem;
    });
    Candidate c;
    c.node = n;
    c.gpus = {static_cast<uint8_t>(g)};
    uint32_t milli = gpu.milli_free;
    uint64_t mem = gpu.mem_free;
    auto fits = [&] {
      return milli >= head.gpu_milli && (gpu.mem_total == 0 || mem >= head.gpu_mem);
    };
    for (const PlacedTask* t : movable) {
      if (fits() || c.movers.size() >= opt.max_moves) break;
      milli += t->demand.gpu_milli;
      mem += gpu.mem_total == 0 ? 0 : std::min(t->demand.gpu_mem, gpu.mem_total);
      c.movers.push_back(t);
      c.moved_mem += t->demand.gpu_mem;
    }
    if (!c.movers.empty() && fits()) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Result<std::optional<DefragPlan>> PlanDefrag(const ClusterState& state, const Demand& head,
                                             std::span<const PlacedTask> tasks,
                                             const PlaceOptions& options,
                                             const DefragOptions& defrag) {
  GPUSLICE_RETURN_IF_ERROR(head.Validate());
  if (head.gpus == 0 || defrag.max_moves == 0) return std::optional<DefragPlan>();
  std::map<uint64_t, std::vector<const PlacedTask*>> on_gpu;
  for (const PlacedTask& t : tasks) {
    if (t.placement.node >= state.size()) {
      return InvalidArgumentError("task " + std::to_string(t.id) +
                                  " is on a node the cluster lacks");
    }
    for (int i = 0; i < t.placement.gpu_count; ++i) {
      if (t.placement.gpus[i] >= state.node(t.placement.node).gpus.size()) {
        return InvalidArgumentError("task " + std::to_string(t.id) +
                                    " is placed on a GPU the cluster lacks");
      }
      on_gpu[Key(t.placement.node, t.placement.gpus[i])].push_back(&t);
    }
  }
  std::vector<Candidate> candidates = head.IsFraction()
                                          ? FractionCandidates(state, head, defrag, on_gpu)
                                          : WholeGpuCandidates(state, head, defrag, on_gpu);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.Cost() < b.Cost(); });
  if (candidates.size() > defrag.max_tries) candidates.resize(defrag.max_tries);
  if (candidates.empty()) return std::optional<DefragPlan>();

  // Tried on one copy; each failed try is undone before the next. No
  // fragmentation cache: the copy's node versions would collide with the
  // caller's.
  ClusterState work = state;
  PlaceOptions opts = options;
  opts.frag_cache = nullptr;
  for (const Candidate& c : candidates) {
    for (const PlacedTask* t : c.movers) {
      GPUSLICE_RETURN_IF_ERROR(
          work.Release(t->demand, t->placement).WithContext("task " + std::to_string(t->id)));
    }
    Placement at;
    at.node = c.node;
    for (uint8_t g : c.gpus) at.gpus[at.gpu_count++] = g;
    DefragPlan plan;
    plan.head = at;
    std::vector<std::pair<const PlacedTask*, Placement>> placed;
    const bool head_in = work.Allocate(head, at).ok();
    bool ok = head_in;
    // The largest first: the small ones fit into what is left.
    std::vector<const PlacedTask*> order = c.movers;
    std::stable_sort(order.begin(), order.end(), [](const PlacedTask* a, const PlacedTask* b) {
      return a->demand.gpu_milli > b->demand.gpu_milli;
    });
    for (size_t i = 0; ok && i < order.size(); ++i) {
      const PlacedTask* t = order[i];
      Result<Placement> to = Place(work, t->demand, opts);
      ok = to.ok() && work.Allocate(t->demand, *to).ok();
      if (ok) placed.emplace_back(t, *to);
    }
    if (ok) {
      for (const auto& [t, to] : placed) {
        if (to == t->placement) continue;  // Back where it was: no move.
        plan.moves.push_back({t->id, t->placement, to, at});
        plan.moved_gpu_mem += t->demand.gpu_mem;
      }
      if (!plan.moves.empty()) return std::optional<DefragPlan>(std::move(plan));
    }
    // Undo: the demand out, the tasks back where they were.
    for (const auto& [t, to] : placed) GPUSLICE_RETURN_IF_ERROR(work.Release(t->demand, to));
    if (head_in) GPUSLICE_RETURN_IF_ERROR(work.Release(head, at));
    for (const PlacedTask* t : c.movers) {
      GPUSLICE_RETURN_IF_ERROR(work.Allocate(t->demand, t->placement));
    }
  }
  return std::optional<DefragPlan>();
}

}  // namespace gpuslice::core
