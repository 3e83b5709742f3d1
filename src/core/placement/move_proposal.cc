#include "core/placement/move_proposal.h"

#include <algorithm>
#include <vector>

namespace gpuslice::core {
namespace {

// Whether freeing `t` could give `head` room on t's node: its GPU (with t
// gone) and the node's host resources, for the demand's shape.
bool FreeingHelps(const ClusterState& state, const Demand& head, const PlacedTask& t) {
  const NodeState& n = state.node(t.placement.node);
  const GpuState& g = n.gpus[t.placement.gpus[0]];
  if (n.cpu_free + t.demand.cpu_milli < head.cpu_milli) return false;
  if (n.mem_free + t.demand.mem_bytes < head.mem_bytes) return false;
  if (!head.AllowsModel(g.model)) return false;
  const uint32_t milli = g.milli_free + t.demand.gpu_milli;
  const uint64_t mem = g.mem_total == 0 ? 0 : g.mem_free + std::min(t.demand.gpu_mem, g.mem_total);
  if (head.IsFraction()) {
    return milli >= head.gpu_milli && (g.mem_total == 0 || mem >= head.gpu_mem);
  }
  // Whole GPUs: t's GPU becomes idle, and the node has the others idle.
  if (milli != g.milli_total || (g.mem_total != 0 && mem != g.mem_total)) return false;
  uint32_t idle = 1;
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    if (i != t.placement.gpus[0] && n.gpus[i].IsIdle() && head.AllowsModel(n.gpus[i].model)) {
      ++idle;
    }
  }
  return idle >= head.gpus;
}

}  // namespace

Result<std::optional<MoveProposal>> ProposeMove(const ClusterState& state, const Demand& head,
                                                std::span<const PlacedTask> tasks,
                                                const PlaceOptions& options,
                                                const MoveOptions& move_options) {
  GPUSLICE_RETURN_IF_ERROR(head.Validate());
  if (head.gpus == 0) return std::optional<MoveProposal>();  // No GPU to free.
  std::vector<const PlacedTask*> candidates;
  for (const PlacedTask& t : tasks) {
    if (!t.movable || t.demand.gpus != 1 || t.placement.gpu_count != 1) continue;
    if (t.placement.node >= state.size() ||
        t.placement.gpus[0] >= state.node(t.placement.node).gpus.size()) {
      return InvalidArgumentError("task " + std::to_string(t.id) +
                                  " is placed on a GPU the cluster lacks");
    }
    if (FreeingHelps(state, head, t)) candidates.push_back(&t);
  }
  // Cheapest first: the least device memory, then compute, to move.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const PlacedTask* a, const PlacedTask* b) {
                     if (a->demand.gpu_mem != b->demand.gpu_mem)
                       return a->demand.gpu_mem < b->demand.gpu_mem;
                     return a->demand.gpu_milli < b->demand.gpu_milli;
                   });
  if (candidates.size() > move_options.max_tries) candidates.resize(move_options.max_tries);
  if (candidates.empty()) return std::optional<MoveProposal>();
  // Tried on a copy; each try is undone before the next. No fragmentation
  // cache: the copy's node versions would collide with the caller's.
  ClusterState work = state;
  PlaceOptions opts = options;
  opts.frag_cache = nullptr;
  for (const PlacedTask* t : candidates) {
    GPUSLICE_RETURN_IF_ERROR(
        work.Release(t->demand, t->placement).WithContext("task " + std::to_string(t->id)));
    std::optional<MoveProposal> found;
    Result<Placement> h = Place(work, head, opts);
    if (h.ok() && work.Allocate(head, *h).ok()) {
      Result<Placement> to = Place(work, t->demand, opts);
      if (to.ok() && !(*to == t->placement)) {
        found = MoveProposal{t->id, t->placement, *to, *h};
      }
      GPUSLICE_RETURN_IF_ERROR(work.Release(head, *h));
    }
    GPUSLICE_RETURN_IF_ERROR(work.Allocate(t->demand, t->placement));
    if (found) return found;
  }
  return std::optional<MoveProposal>();
}

}  // namespace gpuslice::core
