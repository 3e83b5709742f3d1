// NodeCapacity::PlaceOn: placement now on named GPUs, for external jobs
// (docs/KUBERNETES.md): a kubelet that admits a pod names the devices, and
// the slice goes there or is refused with the reason, never queued; for a
// job moved to another GPU (docs/SUSPEND.md), and for a suspended job that
// asked to resume (TryResume: where it was, else where it can move). And
// ProposeMoveFor: the move that would let a waiting job start.

#include <algorithm>
#include <map>

#include "core/placement/move_proposal.h"
#include "core/schedule/defrag.h"
#include "core/strings.h"
#include "daemon/placement/capacity.h"
#include "daemon/placement/flat_gpu.h"

namespace gpuslice::daemon {

using core::Status;

void NodeCapacity::SetResumeTarget(uint64_t id, core::Allocation own,
                                   std::vector<std::string> elsewhere) {
  resume_[id] = {std::move(own), std::move(elsewhere)};
}

core::FitResult NodeCapacity::TryResume(uint64_t id, const ResumeTarget& target) {
  if (held_.count(id) || !demands_->count(id)) return core::FitResult::kNotNow;
  // Where it was first: its processes' memory goes back without a move.
  if (Hold(id, target.own).ok()) return core::FitResult::kPlaced;
  if (!target.elsewhere.empty() && PlaceOn(id, target.elsewhere).ok()) {
    return core::FitResult::kPlaced;
  }
  return core::FitResult::kNotNow;
}

Status NodeCapacity::PlaceOn(uint64_t id, const std::vector<std::string>& candidates) {
  auto it = demands_->find(id);
  if (it == demands_->end())
    return core::InternalError("place: no demand for job " + std::to_string(id));
  if (held_.count(id))
    return core::AlreadyExistsError("job " + std::to_string(id) + " holds already");
  const DemandEntry& e = it->second;
  if (candidates.empty()) {
    switch (TryPlace(id)) {
      case core::FitResult::kPlaced:
        return Status::Ok();
      case core::FitResult::kNotNow:
        return core::FailedPreconditionError("does not fit now: " + WhyNotNow(id));
      default:
        return core::OutOfRangeError(e.request.Describe() + " can never fit on this machine");
    }
  }
  auto named = [&](const std::string& uuid) {
    return std::find(candidates.begin(), candidates.end(), uuid) != candidates.end();
  };
  const std::string names = core::Join(candidates, ", ");
  if (e.request.kind == core::RequestKind::kMig) {
    // A MIG instance named by its own UUID or by its GPU's.
    for (size_t i = 0; i < mig_.units().size(); ++i) {
      const MigInstances::Unit& m = mig_.at(i);
      if (!m.Free() || (!e.pool.empty() && m.pool != e.pool)) continue;
      if (!IsOfProfile(m.instance, e.request.mig) || !m.ModelAllowed(e.request)) continue;
      if (!named(m.instance.uuid) && !named((*node_gpus_)[m.gpu_index].uuid)) continue;
      (void)mig_.Take(i);  // Free, so not taken.
      held_[id] = {core::Placement{}, static_cast<int>(i)};
      return Status::Ok();
    }
    return core::FailedPreconditionError("does not fit now: no free MIG " +
                                         e.request.mig.ToString() + " instance on " + names);
  }
  if (!e.ever_fits) {
    return core::OutOfRangeError(e.request.Describe() + " can never fit on this machine");
  }
  // The named GPUs of this machine, in the order given, grouped by node of
  // the placement model (a placement never spans two).
  std::map<uint32_t, std::vector<uint8_t>> by_node;
  for (const std::string& uuid : candidates) {
    auto g = std::find_if(node_gpus_->begin(), node_gpus_->end(),
                          [&](const GpuInfo& x) { return x.uuid == uuid; });
    if (g == node_gpus_->end()) {
      return core::NotFoundError("no GPU " + uuid + " on this machine (or it is in MIG mode)");
    }
    const size_t flat = static_cast<size_t>(g - node_gpus_->begin());
    by_node[static_cast<uint32_t>(flat / kGpusPerNode)].push_back(
        static_cast<uint8_t>(flat % kGpusPerNode));
  }
  // The placements to try, in the order named: whole GPUs take the first
  // idle ones of a node, as many as asked; a fraction each named GPU in turn.
  std::vector<core::Placement> tries;
  for (const auto& [node, gpus] : by_node) {
    core::Placement p;
    p.node = node;
    for (uint8_t g : gpus) {
      if (!e.demand.IsWhole()) {
        p.gpu_count = 0;
        p.gpus[p.gpu_count++] = g;
        tries.push_back(p);
      } else if (p.gpu_count < e.demand.gpus && state_.node(node).gpus[g].IsIdle()) {
        p.gpus[p.gpu_count++] = g;
      }
    }
    if (e.demand.IsWhole() && p.gpu_count == e.demand.gpus) {
      std::sort(p.gpus.begin(), p.gpus.begin() + p.gpu_count);
      tries.push_back(p);
    }
  }
  std::string last;
  if (tries.empty() && e.demand.IsWhole()) {
    // Whatever else is idle on the machine: these GPUs are the ones asked for.
    uint32_t idle = 0;
    for (const auto& [node, gpus] : by_node) {
      for (uint8_t g : gpus) idle += state_.node(node).gpus[g].IsIdle() ? 1 : 0;
    }
    last = "needs " + std::to_string(e.demand.gpus) + " idle GPU" +
           (e.demand.gpus == 1 ? "" : "s") +
           " of those named; idle of them: " + std::to_string(idle);
  }
  for (const core::Placement& p : tries) {
    if (Status s = state_.Allocate(e.demand, p); !s.ok()) {
      last = s.message();
      continue;
    }
    bounds_.Invalidate();
    held_[id] = {p, -1};
    return Status::Ok();
  }
  return core::FailedPreconditionError("does not fit now on " + names + ": " +
                                       (last.empty() ? WhyNotNow(id) : last));
}

std::vector<core::PlacedTask> NodeCapacity::PlacedTasks(
    const std::function<bool(uint64_t)>& movable) const {
  std::vector<core::PlacedTask> tasks;
  for (const auto& [id, h] : held_) {
    if (h.mig >= 0) continue;
    auto d = demands_->find(id);
    if (d == demands_->end()) continue;
    core::PlacedTask t;
    t.id = id;
    t.demand = HeldDemand(d->second, h);
    t.placement = h.placement;
    // The driver restores a process only onto a GPU of its model, and a job
    // stays in its pool: both are the GPU's interned "model@pool".
    if (h.placement.gpu_count == 1) {
      t.demand.model_mask = 1ull << state_.node(h.placement.node).gpus[h.placement.gpus[0]].model;
    }
    t.movable = movable(id);
    tasks.push_back(t);
  }
  // By id: the plan must not depend on hash order.
  std::sort(tasks.begin(), tasks.end(),
            [](const core::PlacedTask& a, const core::PlacedTask& b) { return a.id < b.id; });
  return tasks;
}

core::PlaceOptions NodeCapacity::MoveOptions() {
  core::PlaceOptions options = options_;
  if (core::InfoOf(options.policy).needs_profile) {
    EnsureProfile();
    options.profile = profile_.get();
    if (options.profile == nullptr) options.policy = core::Policy::kBinpack;
  }
  options.frag_cache = nullptr;
  return options;
}

std::optional<NodeCapacity::MoveHint> NodeCapacity::ProposeMoveFor(
    uint64_t head_id, const std::function<bool(uint64_t)>& movable) {
  auto head = demands_->find(head_id);
  if (head == demands_->end() || held_.count(head_id) ||
      head->second.request.kind == core::RequestKind::kMig || !head->second.ever_fits) {
    return std::nullopt;
  }
  auto move = core::ProposeMove(state_, head->second.demand, PlacedTasks(movable), MoveOptions());
  if (!move.ok() || !*move) return std::nullopt;
  const core::Placement& to = (*move)->to;
  return MoveHint{(*move)->task_id, (*node_gpus_)[to.node * kGpusPerNode + to.gpus[0]].uuid};
}

std::vector<NodeCapacity::MoveHint> NodeCapacity::PlanDefragFor(
    uint64_t head_id, uint32_t max_moves, const std::function<bool(uint64_t)>& movable) {
  auto head = demands_->find(head_id);
  if (head == demands_->end() || held_.count(head_id) ||
      head->second.request.kind == core::RequestKind::kMig || !head->second.ever_fits) {
    return {};
  }
  core::DefragOptions opt;
  opt.max_moves = max_moves;
  auto plan =
      core::PlanDefrag(state_, head->second.demand, PlacedTasks(movable), MoveOptions(), opt);
  if (!plan.ok() || !*plan) return {};
  std::vector<MoveHint> out;
  for (const core::MoveProposal& m : (*plan)->moves) {
    out.push_back({m.task_id, (*node_gpus_)[m.to.node * kGpusPerNode + m.to.gpus[0]].uuid});
  }
  return out;
}

}  // namespace gpuslice::daemon
