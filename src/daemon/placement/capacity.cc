#include "daemon/placement/capacity.h"

#include <algorithm>
#include <map>

#include "core/strings.h"
#include "core/units.h"
#include "daemon/placement/flat_gpu.h"

namespace gpuslice::daemon {
namespace {

using core::Status;

}  // namespace

core::Result<std::unique_ptr<NodeCapacity>> NodeCapacity::Create(
    const std::vector<GpuInfo>& gpus, core::Policy policy, const std::vector<std::string>& pool_of,
    const std::string& default_pool) {
  const core::PolicyInfo& info = core::InfoOf(policy);
  if (info.needs_rng) {
    return core::InvalidArgumentError("placement policy '" + std::string(info.name) +
                                      "' is random; the daemon's placements are deterministic");
  }
  if (!pool_of.empty() && pool_of.size() != gpus.size()) {
    return core::InternalError("pools: one pool per GPU expected");
  }
  std::unique_ptr<NodeCapacity> c(new NodeCapacity());
  c->options_.policy = policy;
  c->pools_ = PoolIndex(default_pool);
  core::NodeState node;
  auto flush = [&]() -> Status {
    if (node.gpus.empty()) return Status::Ok();
    node.name = "local" + std::to_string(c->state_.size());
    // CPU and host memory are not what the daemon places; give the node a
    // nominal amount so demands asking for none always fit there.
    node.cpu_total = node.cpu_free = 1;
    node.mem_total = node.mem_free = 1;
    auto added = c->state_.AddNode(std::move(node));
    if (!added.ok()) return added.status();
    node = core::NodeState();
    return Status::Ok();
  };
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& g = gpus[i];
    std::string pool = pool_of.empty() ? std::string() : pool_of[i];
    if (!pool.empty()) c->pools_.Add(pool);
    if (g.mig_enabled) {
      for (const MigInstance& m : g.mig) c->mig_.Add(g.index, g.model, m, pool);
      continue;
    }
    core::GpuState s;
    s.mem_total = s.mem_free = g.memory_total;
    std::string model = g.model.empty() ? "gpu" : g.model;
    if (!pool.empty()) model += "@" + pool;
    GPUSLICE_ASSIGN_OR_RETURN(s.model, c->state_.InternModel(model));
    if (!pool.empty()) c->pools_.AddModel(pool, s.model);
    s.island = static_cast<int16_t>(g.island);
    node.gpus.push_back(s);
    c->node_gpus_->push_back(g);
    if (node.gpus.size() == kGpusPerNode) GPUSLICE_RETURN_IF_ERROR(flush());
  }
  GPUSLICE_RETURN_IF_ERROR(flush());
  return c;
}

Status NodeCapacity::SetDemand(uint64_t id, const core::ResourceRequest& request) {
  DemandEntry e;
  e.request = request;
  GPUSLICE_ASSIGN_OR_RETURN(e.pool, pools_.Resolve(request));
  if (request.kind == core::RequestKind::kMig) {
    if (mig_.empty()) {
      return core::InvalidArgumentError("--mig " + request.mig.ToString() +
                                        ": no GPU on this machine is in MIG mode");
    }
  } else {
    core::ResourceRequest r = request;
    if (r.kind == core::RequestKind::kFraction && r.compute_milli == 0) r.compute_milli = 1;
    GPUSLICE_ASSIGN_OR_RETURN(e.demand, core::DemandFromRequest(r));
    uint64_t mask = pools_.ModelMaskFor(request, e.pool, state_.models());
    e.demand.model_mask = mask;
    // A pool of MIG GPUs only (or no GPU of the models asked) has no mask
    // bit; 0 would mean "any GPU".
    const bool restricted = !e.pool.empty() || !request.gpu_models.empty();
    e.ever_fits = state_.TotalGpus() > 0 && (!restricted || mask != 0) &&
                  core::CouldEverFit(state_, e.demand).ok();
  }
  if (e.request.kind != core::RequestKind::kMig) ++profile_changes_;
  (*demands_)[id] = std::move(e);
  return Status::Ok();
}

void NodeCapacity::ForgetDemand(uint64_t id) {
  resume_.erase(id);
  auto it = demands_->find(id);
  if (it == demands_->end()) return;
  if (it->second.request.kind != core::RequestKind::kMig) {
    recent_.push_back(it->second.demand);
    if (recent_.size() > kRecentDemands) recent_.pop_front();
    ++profile_changes_;
  }
  demands_->erase(it);
}

void NodeCapacity::EnsureProfile() {
  size_t known = demands_->size() + recent_.size();
  if (profile_ && profile_changes_ < std::max<size_t>(8, known / 4)) return;
  // Sorted by id, so equal-weight shapes come in the same order every time
  // (the placements must not depend on hash order).
  std::vector<std::pair<uint64_t, const core::Demand*>> live;
  live.reserve(demands_->size());
  for (const auto& [id, e] : *demands_) {
    if (e.request.kind != core::RequestKind::kMig) live.emplace_back(id, &e.demand);
  }
  std::sort(live.begin(), live.end());
  std::vector<core::Demand> all(recent_.begin(), recent_.end());
  for (const auto& [id, d] : live) all.push_back(*d);
  profile_changes_ = 0;
  if (all.empty()) return;
  core::ProfileOptions po;
  po.coverage = 1.0;  // A node sees few shapes: keep them all.
  auto profile = core::WorkloadProfile::FromDemands(all, po);
  if (!profile.ok()) return;  // Keep the previous profile.
  // A decision costs O(shapes); requests typed by hand can all differ
  // (8GiB/30%, 9GiB/35%...). The heaviest shapes carry the signal.
  if (profile->shapes().size() > kMaxProfileShapes) {
    std::vector<core::TaskShape> top(profile->shapes().begin(),
                                     profile->shapes().begin() + kMaxProfileShapes);
    auto trimmed = core::WorkloadProfile::FromShapes(std::move(top));
    if (!trimmed.ok()) return;
    profile = std::move(trimmed);
  }
  profile_ = std::make_shared<const core::WorkloadProfile>(std::move(*profile));
}

Status NodeCapacity::CouldEverFit(const core::ResourceRequest& request) const {
  GPUSLICE_ASSIGN_OR_RETURN(std::string pool, pools_.Resolve(request));
  std::string in_pool = pool.empty() ? "" : " in pool '" + pool + "'";
  if (!request.gpu_models.empty()) {
    // The models of the GPUs it could use (MIG instances for a MIG request,
    // the GPUs outside MIG mode otherwise), and whether one is asked for.
    std::vector<std::string> have;
    bool any = false;
    auto consider = [&](const std::string& model) {
      if (std::find(have.begin(), have.end(), model) == have.end()) have.push_back(model);
      for (const std::string& w : request.gpu_models) any = any || core::GpuModelMatches(w, model);
    };
    if (request.kind == core::RequestKind::kMig) {
      for (const MigInstances::Unit& m : mig_.units()) {
        if (pool.empty() || m.pool == pool) consider(m.model);
      }
    } else {
      for (size_t i = 0; i < node_gpus_->size(); ++i) {
        const core::GpuState& g =
            state_.node(static_cast<uint32_t>(i / kGpusPerNode)).gpus[i % kGpusPerNode];
        if (pool.empty() || PoolIndex::PoolOfModel(state_.models()[g.model]) == pool) {
          consider((*node_gpus_)[i].model);
        }
      }
    }
    if (!any) {
      return core::OutOfRangeError(
          "--gpu-model " + core::FormatGpuModels(request.gpu_models) + ": no GPU of that model" +
          (pool.empty() ? " on this machine" : in_pool) + " (" +
          (have.empty() ? std::string("none there") : "here: " + core::Join(have, ", ")) + ")");
    }
  }
  if (request.kind == core::RequestKind::kMig) {
    if (mig_.empty()) {
      return core::OutOfRangeError("--mig " + request.mig.ToString() +
                                   ": no GPU on this machine is in MIG mode");
    }
    if (mig_.Find(request, pool, /*free_only=*/false) < 0) {
      std::string have;
      for (const MigInstances::Unit& m : mig_.units()) {
        if (!pool.empty() && m.pool != pool) continue;
        if (have.find(m.instance.profile) == std::string::npos) {
          have += (have.empty() ? "" : ", ") + m.instance.profile;
        }
      }
      return core::OutOfRangeError("--mig " + request.mig.ToString() +
                                   ": no MIG instance of that profile" + in_pool +
                                   " here (have: " + (have.empty() ? "none" : have) + ")");
    }
    return Status::Ok();
  }
  core::ResourceRequest r = request;
  if (r.kind == core::RequestKind::kFraction && r.compute_milli == 0) r.compute_milli = 1;
  GPUSLICE_ASSIGN_OR_RETURN(core::Demand d, core::DemandFromRequest(r));
  if (!pool.empty()) d.model_mask = pools_.MaskOf(pool);
  // GPUs in MIG mode hold only MIG instances: say so, and how to ask for one.
  std::string mig_note;
  {
    std::vector<uint32_t> mig_gpus;
    std::string profiles;
    for (const MigInstances::Unit& m : mig_.units()) {
      if (!pool.empty() && m.pool != pool) continue;
      if (std::find(mig_gpus.begin(), mig_gpus.end(), m.gpu_index) == mig_gpus.end()) {
        mig_gpus.push_back(m.gpu_index);
      }
      if (profiles.find(m.instance.profile) == std::string::npos) {
        profiles += (profiles.empty() ? "" : ", ") + m.instance.profile;
      }
    }
    if (!mig_gpus.empty()) {
      bool one = mig_gpus.size() == 1;
      mig_note = "; " + std::to_string(mig_gpus.size()) + (one ? " GPU is" : " GPUs are") +
                 " in MIG mode" + in_pool + (one ? " (it holds" : " (they hold") +
                 " only MIG instances: ask for one with --mig PROFILE, here " + profiles + ")";
    }
  }
  if (state_.TotalGpus() == 0 || (!pool.empty() && d.model_mask == 0)) {
    return core::OutOfRangeError(request.Describe() + " can never fit" +
                                 (pool.empty() ? " on this machine" : in_pool) +
                                 ": no GPU is outside MIG mode" + mig_note);
  }
  if (core::CouldEverFit(state_, d).ok()) return Status::Ok();
  // What the machine has, in the words the request used (the placement
  // core's own message speaks of nodes, CPU and per-mille).
  uint32_t gpus = 0, best_island = 0;
  uint64_t largest = 0;
  std::map<int, uint32_t> per_island;
  for (const core::NodeState& n : state_.nodes()) {
    for (const core::GpuState& g : n.gpus) {
      if (!d.AllowsModel(g.model)) continue;
      ++gpus;
      largest = std::max(largest, g.mem_total);
      best_island = std::max(best_island, ++per_island[g.island]);
    }
  }
  std::string have;
  if (request.kind == core::RequestKind::kFraction) {
    have = "the largest GPU" + in_pool + " has " + core::FormatBytes(largest);
  } else {
    have = std::to_string(gpus) + " GPU" + (gpus == 1 ? " is" : "s are") + " outside MIG mode" +
           in_pool;
    if (best_island < gpus && best_island < request.gpus_min) {
      have += ", at most " + std::to_string(best_island) +
              " of them linked together (a job's GPUs must be)";
    }
  }
  return core::OutOfRangeError(request.Describe() + " can never fit" +
                               (pool.empty() ? " on this machine" : in_pool) + ": " + have +
                               mig_note);
}

Status NodeCapacity::Hold(uint64_t id, const core::Allocation& a) {
  auto it = demands_->find(id);
  if (it == demands_->end())
    return core::InternalError("hold: no demand for job " + std::to_string(id));
  if (held_.count(id))
    return core::AlreadyExistsError("job " + std::to_string(id) + " holds already");
  if (it->second.request.kind == core::RequestKind::kMig) {
    const int i = a.gpu_uuids.empty() ? -1 : mig_.IndexOf(a.gpu_uuids[0]);
    if (i >= 0) {
      if (!mig_.Take(i))
        return core::AlreadyExistsError("MIG " + a.gpu_uuids[0] + " is taken twice");
      held_[id] = {core::Placement{}, i};
      return Status::Ok();
    }
    return core::NotFoundError("job " + std::to_string(id) + " held a MIG instance that is gone");
  }
  core::Placement p;
  bool first = true;
  for (size_t k = 0; k < a.gpu_uuids.size(); ++k) {
    auto g = std::find_if(node_gpus_->begin(), node_gpus_->end(),
                          [&](const GpuInfo& x) { return x.uuid == a.gpu_uuids[k]; });
    if (g == node_gpus_->end()) {
      return core::NotFoundError("job " + std::to_string(id) + " held GPU " + a.gpu_uuids[k] +
                                 ", which this machine no longer has");
    }
    size_t flat = static_cast<size_t>(g - node_gpus_->begin());
    uint32_t node = static_cast<uint32_t>(flat / kGpusPerNode);
    if (!first && node != p.node) {
      return core::InvalidArgumentError("job " + std::to_string(id) + " spans GPU groups");
    }
    first = false;
    p.node = node;
    p.gpus[p.gpu_count++] = static_cast<uint8_t>(flat % kGpusPerNode);
  }
  std::sort(p.gpus.begin(), p.gpus.begin() + p.gpu_count);
  Held h{p, -1};
  GPUSLICE_RETURN_IF_ERROR(state_.Allocate(HeldDemand(it->second, h), p));
  bounds_.Invalidate();
  held_[id] = h;
  return Status::Ok();
}

Status NodeCapacity::HoldOutsidePool(uint64_t id, const core::ResourceRequest& request,
                                     const core::Allocation& allocation) {
  DemandEntry e;
  e.request = request;
  if (request.kind != core::RequestKind::kMig) {
    core::ResourceRequest r = request;
    if (r.kind == core::RequestKind::kFraction && r.compute_milli == 0) r.compute_milli = 1;
    GPUSLICE_ASSIGN_OR_RETURN(e.demand, core::DemandFromRequest(r));
    e.demand.model_mask = 0;  // Any GPU: it holds what it held.
    ++profile_changes_;
  }
  (*demands_)[id] = std::move(e);
  if (allocation.empty()) return Status::Ok();
  return Hold(id, allocation);
}

Status NodeCapacity::Resize(uint64_t id, const core::ResourceRequest& request) {
  auto d = demands_->find(id);
  auto h = held_.find(id);
  if (d == demands_->end() || h == held_.end()) {
    return core::InternalError("resize: job " + std::to_string(id) + " holds nothing");
  }
  if (request.kind != core::RequestKind::kFraction || h->second.mig >= 0) {
    return core::FailedPreconditionError("only parts of a GPU can be resized");
  }
  core::ResourceRequest r = request;
  if (r.compute_milli == 0) r.compute_milli = 1;
  GPUSLICE_ASSIGN_OR_RETURN(core::Demand next, core::DemandFromRequest(r));
  next.model_mask = d->second.demand.model_mask;
  const core::Placement& p = h->second.placement;
  GPUSLICE_RETURN_IF_ERROR(state_.Release(d->second.demand, p));
  bounds_.Invalidate();
  if (Status s = state_.Allocate(next, p); !s.ok()) {
    const core::GpuState& g = state_.node(p.node).gpus[p.gpus[0]];
    std::string free = core::FormatBytes(g.mem_free) + " + " + core::FormatShareMilli(g.milli_free);
    (void)state_.Allocate(d->second.demand, p);
    const GpuInfo& info = (*node_gpus_)[p.node * kGpusPerNode + p.gpus[0]];
    return core::ResourceExhaustedError("GPU " + std::to_string(info.index) + " has only " + free +
                                        " free besides this job; " + request.Describe() +
                                        " does not fit there");
  }
  d->second.demand = next;
  d->second.request = request;
  // A shrink may have freed what foreign use lacked.
  if (foreign_.Recharge(state_)) bounds_.Invalidate();
  return Status::Ok();
}

std::unique_ptr<core::CapacityModel> NodeCapacity::Clone() const {
  return std::unique_ptr<core::CapacityModel>(new NodeCapacity(*this));
}

core::FitResult NodeCapacity::TryPlace(uint64_t id) {
  if (auto r = resume_.find(id); r != resume_.end()) return TryResume(id, r->second);
  auto it = demands_->find(id);
  if (it == demands_->end() || held_.count(id)) return core::FitResult::kNever;
  const DemandEntry& e = it->second;
  if (e.request.kind == core::RequestKind::kMig) {
    int i = mig_.Find(e.request, e.pool, /*free_only=*/true);
    if (i < 0) {
      return mig_.Find(e.request, e.pool, false) < 0 ? core::FitResult::kNever
                                                     : core::FitResult::kNotNow;
    }
    (void)mig_.Take(i);  // Free, so not taken.
    held_[id] = {core::Placement{}, i};
    return core::FitResult::kPlaced;
  }
  if (!e.ever_fits) return core::FitResult::kNever;
  const FreeBounds::Bounds& b = bounds_.Of(state_);
  if (e.demand.IsWhole()
          ? e.demand.gpus > b.idle_gpus
          : e.demand.gpu_mem > b.max_mem_free || e.demand.gpu_milli > b.max_milli_free) {
    return core::FitResult::kNotNow;
  }
  core::PlaceOptions options = options_;
  if (core::InfoOf(options.policy).needs_profile) {
    EnsureProfile();
    options.profile = profile_.get();
    options.frag_cache = &frag_cache_;
    // No GPU demand learnt yet (cannot happen with `id` registered, but a
    // placement must never fail for want of a profile): pack.
    if (options.profile == nullptr) options.policy = core::Policy::kBinpack;
  }
  const core::ResourceRequest& r = e.request;
  if (r.kind == core::RequestKind::kWholeGpus && r.gpus_max > r.gpus_min) {
    // Elastic: as many as it can get now, at least its minimum (below).
    for (uint32_t n = std::min(r.gpus_max, b.idle_gpus); n > r.gpus_min; --n) {
      core::Demand more = e.demand;
      more.gpus = n;
      auto p = core::Place(state_, more, options);
      if (p.ok() && state_.Allocate(more, *p).ok()) {
        bounds_.Invalidate();
        held_[id] = {*p, -1};
        return core::FitResult::kPlaced;
      }
    }
  }
  auto p = core::Place(state_, e.demand, options);
  if (!p.ok()) {
    return p.status().code() == core::StatusCode::kResourceExhausted ? core::FitResult::kNotNow
                                                                     : core::FitResult::kNever;
  }
  if (!state_.Allocate(e.demand, *p).ok()) return core::FitResult::kNotNow;
  bounds_.Invalidate();
  held_[id] = {*p, -1};
  return core::FitResult::kPlaced;
}

void NodeCapacity::Release(uint64_t id) {
  auto h = held_.find(id);
  if (h == held_.end()) return;
  if (h->second.mig >= 0) {
    mig_.Give(h->second.mig);
  } else {
    auto d = demands_->find(id);
    if (d != demands_->end()) {
      (void)state_.Release(HeldDemand(d->second, h->second), h->second.placement);
    }
    bounds_.Invalidate();
  }
  held_.erase(h);
  if (foreign_.Recharge(state_)) bounds_.Invalidate();
}

bool NodeCapacity::Mirror(uint64_t id, const core::CapacityModel& source) {
  // Only NodeCapacity models of the same machine meet here (the planner
  // clones them from one another).
  const auto& from = static_cast<const NodeCapacity&>(source);
  auto h = from.held_.find(id);
  auto d = demands_->find(id);
  if (h == from.held_.end() || d == demands_->end() || held_.count(id)) return false;
  if (h->second.mig >= 0) {
    if (!mig_.Take(h->second.mig)) return false;
  } else if (!state_.Allocate(HeldDemand(d->second, h->second), h->second.placement).ok()) {
    return false;
  }
  bounds_.Invalidate();
  held_[id] = h->second;
  return true;
}

core::Demand NodeCapacity::HeldDemand(const DemandEntry& e, const Held& h) {
  core::Demand d = e.demand;
  if (h.mig < 0 && d.IsWhole() && h.placement.gpu_count > 0) d.gpus = h.placement.gpu_count;
  return d;
}

core::Result<core::Allocation> NodeCapacity::SetElasticGpus(uint64_t id, uint32_t count) {
  auto d = demands_->find(id);
  auto h = held_.find(id);
  if (d == demands_->end() || h == held_.end() || h->second.mig >= 0) {
    return core::InternalError("elastic: job " + std::to_string(id) + " holds no GPUs");
  }
  const core::ResourceRequest& r = d->second.request;
  if (r.kind != core::RequestKind::kWholeGpus || count < r.gpus_min || count > r.gpus_max) {
    return core::InvalidArgumentError("elastic: job " + std::to_string(id) + " runs on " +
                                      r.Describe() + ", not " + std::to_string(count));
  }
  core::Placement p = h->second.placement;
  core::Demand old_demand = HeldDemand(d->second, h->second);
  if (count < p.gpu_count) {
    p.gpu_count = static_cast<uint8_t>(count);  // Gives back its last GPUs.
  } else if (count > p.gpu_count) {
    const core::NodeState& node = state_.node(p.node);
    int16_t island = node.gpus[p.gpus[0]].island;
    for (size_t g = 0; g < node.gpus.size() && p.gpu_count < count; ++g) {
      const core::GpuState& gs = node.gpus[g];
      bool mine = std::find(p.gpus.begin(), p.gpus.begin() + p.gpu_count, g) !=
                  p.gpus.begin() + p.gpu_count;
      if (mine || !gs.IsIdle() || !old_demand.AllowsModel(gs.model)) continue;
      if (island != core::kUnknownIsland && gs.island != island) continue;
      p.gpus[p.gpu_count++] = static_cast<uint8_t>(g);
    }
    if (p.gpu_count < count) {
      return core::ResourceExhaustedError("no idle GPU for job " + std::to_string(id) +
                                          " to grow onto");
    }
    std::sort(p.gpus.begin(), p.gpus.begin() + p.gpu_count);
  } else {
    return *AllocationOf(id);
  }
  core::Demand next = old_demand;
  next.gpus = count;
  GPUSLICE_RETURN_IF_ERROR(state_.Release(old_demand, h->second.placement));
  if (Status s = state_.Allocate(next, p); !s.ok()) {
    (void)state_.Allocate(old_demand, h->second.placement);
    return s;
  }
  bounds_.Invalidate();
  h->second.placement = p;
  if (foreign_.Recharge(state_)) bounds_.Invalidate();
  return *AllocationOf(id);
}

std::optional<core::Allocation> NodeCapacity::AllocationOf(uint64_t id) const {
  auto h = held_.find(id);
  auto d = demands_->find(id);
  if (h == held_.end() || d == demands_->end()) return std::nullopt;
  core::Allocation a;
  const core::ResourceRequest& r = d->second.request;
  if (h->second.mig >= 0) {
    const MigInstances::Unit& m = mig_.at(h->second.mig);
    a.gpu_indices = {m.gpu_index};
    a.gpu_uuids = {m.instance.uuid};
    a.memory_bytes_per_gpu = m.instance.memory_total;
    return a;
  }
  const core::Placement& p = h->second.placement;
  for (int i = 0; i < p.gpu_count; ++i) {
    const GpuInfo& g = (*node_gpus_)[p.node * kGpusPerNode + p.gpus[i]];
    a.gpu_indices.push_back(g.index);
    a.gpu_uuids.push_back(g.uuid);
    a.memory_bytes_per_gpu = g.memory_total;
  }
  if (r.kind == core::RequestKind::kFraction) {
    a.memory_bytes_per_gpu = r.memory_bytes;
    a.compute_milli = r.compute_milli;
  }
  return a;
}

core::QueueShape NodeCapacity::ShapeOf(uint64_t id) const {
  core::QueueShape s;
  auto d = demands_->find(id);
  if (d == demands_->end()) return s;
  const DemandEntry& e = d->second;
  if (e.request.kind == core::RequestKind::kMig) {
    // MIG profiles do not order by size against each other reliably.
    s.constraint =
        1ull << 63 | (uint64_t{e.request.mig.compute_slices} << 32) | e.request.mig.memory_gb;
    return s;
  }
  s.gpus = e.demand.gpus;
  s.milli = e.demand.gpu_milli;
  s.mem = e.demand.IsWhole() ? 0 : e.demand.gpu_mem;
  s.constraint = e.demand.model_mask;
  return s;
}

std::string NodeCapacity::WhyNotNow(uint64_t id) const {
  auto d = demands_->find(id);
  if (d == demands_->end()) return "unknown job";
  const DemandEntry& e = d->second;
  if (e.request.kind == core::RequestKind::kMig) {
    // Instances of its profile that processes outside gpuslice hold: nothing
    // a user sees in the queue explains those.
    std::string foreign;
    for (const MigInstances::Unit& m : mig_.units()) {
      if (m.foreign.empty() || (!e.pool.empty() && m.pool != e.pool)) continue;
      if (!IsOfProfile(m.instance, e.request.mig)) continue;
      foreign += "; " + m.instance.uuid + " (GPU " + std::to_string(m.gpu_index) +
                 "): " + core::FormatBytes(m.foreign_bytes) +
                 " held by processes outside gpuslice (" + m.foreign + ")";
    }
    return "needs a free MIG " + e.request.mig.ToString() + " instance" +
           (e.pool.empty() ? "" : " in pool '" + e.pool + "'") + "; all are taken" + foreign;
  }
  uint32_t idle = 0;
  uint64_t best_mem = 0;
  uint32_t best_milli = 0;
  for (const core::NodeState& n : state_.nodes()) {
    for (const core::GpuState& g : n.gpus) {
      if (!e.demand.AllowsModel(g.model)) continue;  // Another pool.
      if (g.IsIdle()) ++idle;
      if (g.mem_free > best_mem) {
        best_mem = g.mem_free;
        best_milli = g.milli_free;
      }
    }
  }
  std::string where = e.pool.empty() ? "" : " in pool '" + e.pool + "'";
  // What processes outside gpuslice hold on the GPUs it may use: the
  // reason a user cannot guess from `gpuslice gpus` alone.
  const std::string foreign = foreign_.Describe([&](size_t flat) {
    const core::Placement p = FlatPlacement(flat);
    return e.demand.AllowsModel(state_.node(p.node).gpus[p.gpus[0]].model);
  });
  if (e.demand.IsWhole()) {
    return "needs " + std::to_string(e.demand.gpus) + " idle GPU" +
           (e.demand.gpus == 1 ? "" : "s") + (e.demand.gpus > 1 ? " on one island" : "") + where +
           "; idle now: " + std::to_string(idle) + foreign;
  }
  // The free share only matters to a request with one.
  return "needs " + e.request.Describe() + " on one GPU" + where +
         "; most free on one GPU: " + core::FormatBytes(best_mem) +
         (e.request.compute_milli > 0 ? " + " + core::FormatShareMilli(best_milli) : "") + foreign;
}

std::optional<size_t> NodeCapacity::FlatOf(uint32_t gpu_index) const {
  auto g = std::find_if(node_gpus_->begin(), node_gpus_->end(),
                        [&](const GpuInfo& x) { return x.index == gpu_index; });
  if (g == node_gpus_->end()) return std::nullopt;  // A MIG GPU, or none.
  return static_cast<size_t>(g - node_gpus_->begin());
}

void NodeCapacity::SetForeign(uint32_t gpu_index, uint64_t bytes, std::string who) {
  std::optional<size_t> flat = FlatOf(gpu_index);
  if (!flat) return;
  if (foreign_.Set(state_, *flat, gpu_index, ForeignCharges::Part::kForeign, bytes,
                   std::move(who))) {
    bounds_.Invalidate();
  }
}

void NodeCapacity::SetOverLimit(uint32_t gpu_index, uint64_t bytes, std::string who) {
  std::optional<size_t> flat = FlatOf(gpu_index);
  if (!flat) return;
  if (foreign_.Set(state_, *flat, gpu_index, ForeignCharges::Part::kOverLimit, bytes,
                   std::move(who))) {
    bounds_.Invalidate();
  }
}

uint64_t NodeCapacity::UnpromisedBytes(uint32_t gpu_index) const {
  std::optional<size_t> flat = FlatOf(gpu_index);
  if (!flat) return 0;
  const core::Placement p = FlatPlacement(*flat);
  // What foreign use is charged was no job's either.
  return state_.node(p.node).gpus[p.gpus[0]].mem_free + foreign_.ChargedAt(*flat);
}

void NodeCapacity::SetForeignMig(const std::string& mig_uuid, uint64_t bytes, std::string who) {
  mig_.SetForeign(mig_uuid, bytes, std::move(who));
}

}  // namespace gpuslice::daemon
