#include "kubernetes/extender/placement/extender.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "core/units.h"

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

// Node CPU is kube-scheduler's business; the core model wants a total, so
// every node gets the same nominal one and pods ask none.
constexpr uint64_t kNominalCpuMilli = 1000;
// The learnt profile: as the daemon's (NodeCapacity), the last pods' asks,
// at most the most frequent shapes.
constexpr size_t kRecentDemands = 256;
constexpr size_t kMaxProfileShapes = 16;
// Pods remembered between filter and bind.
constexpr size_t kMaxPods = 4096;

std::string PodKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

core::Placement OneGpu(uint32_t node, uint8_t gpu) {
  core::Placement p;
  p.node = node;
  p.gpu_count = 1;
  p.gpus[0] = gpu;
  return p;
}

// A GPU's report as allocations on the core model, so placement sees what
// the daemon has handed out. An unhealthy GPU is taken whole: nothing new
// goes there.
void LoadGpu(core::ClusterState& state, uint32_t node, uint8_t gpu, const GpuReport& g) {
  const core::Placement p = OneGpu(node, gpu);
  if (g.whole || !g.healthy) {
    (void)state.Allocate(core::Demand::WholeGpus(1), p);
    return;
  }
  const uint64_t mem = std::min(g.memory_allocated, g.memory_total);
  const uint32_t milli = std::min(g.compute_allocated_milli, core::kMilliPerGpu);
  if (mem == 0 && milli == 0) return;
  // A fraction is 1..999 per-mille; a GPU whose shares add up to all of it
  // takes two.
  const uint32_t first = std::clamp<uint32_t>(milli, 1, core::kMilliPerGpu - 1);
  (void)state.Allocate(core::Demand::Fraction(first, mem), p);
  if (milli >= core::kMilliPerGpu) {
    (void)state.Allocate(core::Demand::Fraction(core::kMilliPerGpu - first, 0), p);
  }
}

std::string Gib(uint64_t bytes) {
  const double g = double(bytes) / double(core::kGiB);
  char buf[32];
  snprintf(buf, sizeof(buf), g == std::floor(g) ? "%.0f GiB" : "%.1f GiB", g);
  return buf;
}

std::string AskText(const ContainerAsk& a) {
  if (a.whole_gpus > 0) return std::to_string(a.whole_gpus) + " idle GPU(s)";
  if (a.mig_count > 0)
    return std::to_string(a.mig_count) + " MIG " + a.mig_profile + " instance(s)";
  std::string s = Gib(a.gpu_mem_bytes);
  // No '%' in a reason: kube-scheduler passes the text to its event
  // recorder as a format string ("30%!o(MISSING)n one GPU" in events).
  s += a.share_milli > 0 ? " + " + std::to_string(a.share_milli / 10) + " percent" : " (no share)";
  return s + " on one GPU";
}

// What the node has for an ask that did not fit, for the reason text.
std::string FreeText(const core::NodeState& n) {
  uint64_t best_mem = 0;
  uint32_t best_milli = 0, idle = 0;
  for (const core::GpuState& g : n.gpus) {
    if (g.IsIdle()) ++idle;
    if (g.milli_free > best_milli || (g.milli_free == best_milli && g.mem_free > best_mem)) {
      best_milli = g.milli_free;
      best_mem = g.mem_free;
    }
  }
  return "most free on one GPU: " + Gib(best_mem) + " + " + std::to_string(best_milli / 10) +
         " percent; idle GPUs: " + std::to_string(idle) + " of " + std::to_string(n.gpus.size());
}

// Could `ask` fit node `n` were it empty?
bool EverFits(const core::NodeState& n, const ContainerAsk& ask) {
  if (ask.whole_gpus > 0) return n.gpus.size() >= ask.whole_gpus;
  for (const core::GpuState& g : n.gpus) {
    if (g.mem_total == 0 || g.mem_total >= ask.gpu_mem_bytes) return true;
  }
  return false;
}

// App containers' asks in placement order: the largest first (whole GPUs,
// then fractions by memory), so a small one does not take the room a big
// one needed on a node that could hold both.
std::vector<const ContainerAsk*> GpuAsks(const std::vector<ContainerAsk>& asks) {
  std::vector<const ContainerAsk*> out;
  for (const ContainerAsk& a : asks) {
    if (a.mig_count == 0) out.push_back(&a);
  }
  std::stable_sort(out.begin(), out.end(), [](const ContainerAsk* a, const ContainerAsk* b) {
    if (a->whole_gpus != b->whole_gpus) return a->whole_gpus > b->whole_gpus;
    if (a->gpu_mem_bytes != b->gpu_mem_bytes) return a->gpu_mem_bytes > b->gpu_mem_bytes;
    return a->share_milli > b->share_milli;
  });
  return out;
}

}  // namespace

Extender::Extender(ExtenderOptions options, NowFn now, KubeApi* api)
    : options_(options), now_(std::move(now)), api_(api) {}

void Extender::Publish(SnapshotPtr snapshot) {
  std::vector<Assumed> assumed;
  uint64_t version = 0;
  std::shared_ptr<const core::WorkloadProfile> profile;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = snapshot;
    ExpireAssumed(*snapshot);
    assumed = assumed_;
    version = assumed_version_;
    profile = profile_;
  }
  // The view is built here, on the poller's thread and outside the lock,
  // so a new snapshot costs the request path nothing; so is every node's
  // fragmentation now, which each decision starts from.
  std::unique_ptr<View> view = BuildView(*snapshot, assumed, version);
  if (profile != nullptr) {
    for (uint32_t i = 0; i < view->state.size(); ++i) {
      (void)view->cache.Get(*profile, i, view->state.node(i));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (snapshot_ != snapshot || assumed_version_ != version) return;
  // The cache knows a profile by its address, which a newer profile may
  // reuse: start cold rather than trust it.
  if (profile_ != profile) view->cache.Clear();
  view_ = std::move(view);
}

SnapshotPtr Extender::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

std::vector<Assumed> Extender::AssumedNow() {
  std::lock_guard<std::mutex> lock(mu_);
  if (snapshot_) ExpireAssumed(*snapshot_);
  return assumed_;
}

void Extender::ExpireAssumed(const Snapshot& snap) {
  const int64_t now = now_();
  auto shown = [&](const Assumed& a) {
    auto it = snap.nodes.find(a.node);
    if (it == snap.nodes.end() || !it->second.has_report || it->second.received_ms <= a.at_ms) {
      return false;
    }
    uint32_t whole = 0;
    uint64_t memory = 0, milli = 0;
    for (const GpuReport& g : it->second.report.gpus) {
      if (g.mig_enabled) continue;
      whole += g.whole ? 1 : 0;
      memory += g.memory_allocated;
      milli += g.compute_allocated_milli;
    }
    for (const GpuReport& g : it->second.report.gpus) {
      if (g.uuid != a.gpu_uuid) continue;
      if (a.mig_count > 0) {
        auto f = g.mig_free.find(a.mig_profile);
        return f != g.mig_free.end() && f->second + a.mig_count <= a.base_mig_free;
      }
      if (a.demand.IsWhole()) return g.whole || whole >= a.node_whole_needed;
      return (g.compute_allocated_milli >= a.base_milli + a.demand.gpu_milli &&
              g.memory_allocated >= a.base_memory + a.demand.gpu_mem) ||
             (milli >= a.node_milli_needed && memory >= a.node_memory_needed);
    }
    return false;
  };
  const size_t before = assumed_.size();
  std::erase_if(assumed_, [&](const Assumed& a) {
    return now - a.at_ms > options_.assume_ttl_ms || shown(a);
  });
  if (assumed_.size() != before) ++assumed_version_;
}

Extender::View& Extender::CurrentView() {
  static const Snapshot kEmpty;
  const Snapshot& snap = snapshot_ ? *snapshot_ : kEmpty;
  ExpireAssumed(snap);
  if (!view_ || view_->generation != snap.generation ||
      view_->assumed_version != assumed_version_) {
    // Publish builds each snapshot's view off the request path; this runs
    // only when a hold ended between two snapshots.
    view_ = BuildView(snap, assumed_, assumed_version_);
  }
  return *view_;
}

void Extender::ApplyAssumed(View& v, const Assumed& a) {
  auto it = v.index.find(a.node);
  if (it == v.index.end()) return;
  NodeView& nv = v.nodes[it->second];
  if (a.mig_count > 0) {
    uint32_t& free = nv.mig_free[a.mig_profile];
    free -= std::min(free, a.mig_count);
    return;
  }
  auto g = std::find(nv.gpu_uuids.begin(), nv.gpu_uuids.end(), a.gpu_uuid);
  if (g == nv.gpu_uuids.end()) return;
  const size_t i = static_cast<size_t>(g - nv.gpu_uuids.begin());
  core::Demand d = a.demand;
  if (d.IsFraction()) {
    // What the report already shows of the pod on this GPU is counted
    // there: gpusliced makes a pod's slice in two steps (memory, then its
    // share a moment later), and a report between them plus the whole
    // hold would make the GPU look fuller than it is; kube-scheduler then
    // parks a pod that fits for up to a minute.
    const uint64_t mem_shown =
        nv.reported_memory[i] > a.base_memory ? nv.reported_memory[i] - a.base_memory : 0;
    const uint32_t milli_shown =
        nv.reported_milli[i] > a.base_milli ? nv.reported_milli[i] - a.base_milli : 0;
    d.gpu_mem -= std::min(d.gpu_mem, mem_shown);
    // A fraction holds at least one per-mille in the model.
    d.gpu_milli = std::max<uint32_t>(1, d.gpu_milli - std::min(d.gpu_milli, milli_shown));
  }
  // Fails only when the node's report shows the GPU fuller than when the
  // pod was bound (someone else came first); the report then counts it.
  (void)v.state.Allocate(d, OneGpu(it->second, static_cast<uint8_t>(i)));
}

std::unique_ptr<Extender::View> Extender::BuildView(const Snapshot& snap,
                                                    const std::vector<Assumed>& assumed,
                                                    uint64_t assumed_version) {
  auto v = std::make_unique<View>();
  v->generation = snap.generation;
  v->assumed_version = assumed_version;
  // Node order is the placement's tie-break: by name, so equal nodes are
  // chosen the same way whatever the map's order.
  std::vector<const std::pair<const std::string, NodeEntry>*> entries;
  for (const auto& e : snap.nodes) {
    if (e.second.has_report) entries.push_back(&e);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* e : entries) {
    const NodeReport& r = e->second.report;
    core::NodeState n;
    n.name = e->first;
    n.cpu_total = n.cpu_free = kNominalCpuMilli;
    NodeView nv;
    nv.name = e->first;
    nv.received_ms = e->second.received_ms;
    nv.degraded = r.degraded;
    std::vector<const GpuReport*> plain;
    for (const GpuReport& g : r.gpus) {
      if (g.mig_enabled) {
        for (const auto& [profile, free] : g.mig_free) {
          if (!g.healthy || free == 0) continue;
          nv.mig_free[profile] += free;
          nv.mig_gpu.emplace(profile, g.uuid);
        }
        continue;
      }
      if (plain.size() == core::kMaxGpusPerNode) continue;  // The model's limit.
      auto model = v->state.InternModel(g.model.empty() ? "unknown" : g.model);
      if (!model.ok()) continue;
      core::GpuState gs;
      gs.mem_total = gs.mem_free = g.memory_total;
      gs.model = *model;
      n.gpus.push_back(gs);
      nv.gpu_uuids.push_back(g.uuid);
      nv.reported_memory.push_back(g.memory_allocated);
      nv.reported_milli.push_back(g.compute_allocated_milli);
      plain.push_back(&g);
    }
    auto idx = v->state.AddNode(std::move(n));
    if (!idx.ok()) continue;
    for (size_t i = 0; i < plain.size(); ++i) {
      LoadGpu(v->state, *idx, static_cast<uint8_t>(i), *plain[i]);
    }
    v->index[nv.name] = *idx;
    v->nodes.push_back(std::move(nv));
  }
  for (const Assumed& a : assumed) ApplyAssumed(*v, a);
  return v;
}

void Extender::LearnDemands(const PodRequest& pod) {
  const std::string key = pod.uid.empty() ? PodKey(pod.ns, pod.name) : pod.uid;
  if (std::find(recent_pods_.begin(), recent_pods_.end(), key) != recent_pods_.end()) return;
  recent_pods_.push_back(key);
  if (recent_pods_.size() > kRecentDemands) recent_pods_.pop_front();
  for (const ContainerAsk& a : pod.containers) {
    if (a.mig_count > 0) continue;
    recent_.push_back(a.ToDemand());
    ++profile_changes_;
    if (recent_.size() > kRecentDemands) recent_.pop_front();
  }
}

const core::WorkloadProfile* Extender::Profile() {
  if (recent_.empty()) return nullptr;
  if (profile_ && profile_changes_ < std::max<size_t>(8, recent_.size() / 4)) return profile_.get();
  profile_changes_ = 0;
  std::vector<core::Demand> all(recent_.begin(), recent_.end());
  core::ProfileOptions po;
  po.coverage = 1.0;
  auto profile = core::WorkloadProfile::FromDemands(all, po);
  if (!profile.ok()) return profile_.get();
  if (profile->shapes().size() > kMaxProfileShapes) {
    std::vector<core::TaskShape> top(profile->shapes().begin(),
                                     profile->shapes().begin() + kMaxProfileShapes);
    auto trimmed = core::WorkloadProfile::FromShapes(std::move(top));
    if (!trimmed.ok()) return profile_.get();
    profile = std::move(trimmed);
  }
  profile_ = std::make_shared<const core::WorkloadProfile>(std::move(*profile));
  // The view's cache knows profiles by address, and the new one may have
  // the old one's.
  if (view_) view_->cache.Clear();
  return profile_.get();
}

core::PlaceOptions Extender::PlaceOptionsNow(core::FragmentationCache* cache) {
  core::PlaceOptions o;
  o.policy = options_.policy;
  o.profile = Profile();
  if (core::InfoOf(o.policy).needs_profile && o.profile == nullptr) {
    o.policy = core::Policy::kBinpack;  // Nothing known yet: pack, as the daemon does.
  }
  o.frag_cache = o.profile != nullptr ? cache : nullptr;
  return o;
}

Extender::Evaluation Extender::Evaluate(View& view, const PodRequest& pod) {
  const size_t n = view.state.size();
  Evaluation ev;
  ev.fits.assign(n, 1);
  ev.never.assign(n, 0);
  ev.score.assign(n, 0);
  ev.reason.assign(n, "");
  auto fail = [&](size_t i, const std::string& why, bool never) {
    if (!ev.fits[i]) return;
    ev.fits[i] = 0;
    ev.never[i] = never ? 1 : 0;
    ev.reason[i] = "gpuslice: " + why;
  };
  std::vector<core::NodeOption> opts(n);
  const std::vector<const ContainerAsk*> asks = GpuAsks(pod.containers);
  if (asks.size() == 1) {
    const core::PlaceOptions o = PlaceOptionsNow(&view.cache);
    if (core::ScoreNodes(view.state, asks[0]->ToDemand(), o, opts).ok()) {
      for (size_t i = 0; i < n; ++i) {
        if (opts[i].fits) {
          ev.score[i] = opts[i].score;
        } else {
          const core::NodeState& node = view.state.node(uint32_t(i));
          fail(i,
               "container '" + asks[0]->name + "' needs " + AskText(*asks[0]) + "; " +
                   FreeText(node),
               !EverFits(node, *asks[0]));
        }
      }
    }
  } else if (asks.size() > 1) {
    // Several containers: each placed in turn on a copy, so the second sees
    // the first on every node (the copy is taken only for such pods). The
    // policy's cluster-wide terms then see every node holding the earlier
    // containers, a small bias accepted for a rare shape.
    core::ClusterState scratch = view.state;
    const core::PlaceOptions o = PlaceOptionsNow(nullptr);
    for (const ContainerAsk* a : asks) {
      const core::Demand d = a->ToDemand();
      if (!core::ScoreNodes(scratch, d, o, opts).ok()) break;
      for (size_t i = 0; i < n; ++i) {
        if (!ev.fits[i]) continue;
        if (!opts[i].fits) {
          const core::NodeState& node = scratch.node(uint32_t(i));
          fail(i,
               "container '" + a->name + "' needs " + AskText(*a) + " beside the pod's others; " +
                   FreeText(node),
               !EverFits(view.state.node(uint32_t(i)), *a));
          continue;
        }
        ev.score[i] += opts[i].score;
        (void)scratch.Allocate(d, opts[i].placement);
      }
    }
  }
  // MIG instances: counted per profile; the node left with the fewest free
  // of the profile is preferred (packing keeps whole MIG GPUs free).
  std::map<std::string, uint32_t> mig_need;
  for (const ContainerAsk& a : pod.containers) {
    if (a.mig_count > 0) mig_need[a.mig_profile] += a.mig_count;
  }
  for (const auto& [profile, need] : mig_need) {
    for (size_t i = 0; i < n; ++i) {
      auto f = view.nodes[i].mig_free.find(profile);
      const uint32_t free = f == view.nodes[i].mig_free.end() ? 0 : f->second;
      if (free < need) {
        fail(i,
             "needs " + std::to_string(need) + " free MIG " + profile + " instance(s), has " +
                 std::to_string(free),
             false);
      } else {
        ev.score[i] -= double(free - need);
      }
    }
  }
  // Init containers: each alone, before the app containers hold anything.
  for (const ContainerAsk& a : pod.init_containers) {
    for (size_t i = 0; i < n && a.mig_count > 0; ++i) {
      auto f = view.nodes[i].mig_free.find(a.mig_profile);
      if (f == view.nodes[i].mig_free.end() || f->second < a.mig_count) {
        fail(i, "init container '" + a.name + "' needs " + AskText(a), false);
      }
    }
    if (a.mig_count > 0) continue;
    const core::PlaceOptions o = PlaceOptionsNow(&view.cache);
    if (!core::ScoreNodes(view.state, a.ToDemand(), o, opts).ok()) continue;
    for (size_t i = 0; i < n; ++i) {
      if (opts[i].fits) continue;
      const core::NodeState& node = view.state.node(uint32_t(i));
      fail(i, "init container '" + a.name + "' needs " + AskText(a) + "; " + FreeText(node),
           !EverFits(node, a));
    }
  }
  return ev;
}

std::string Extender::Unusable(const Snapshot& snap, const std::string& name, int64_t now) const {
  auto it = snap.nodes.find(name);
  if (it == snap.nodes.end()) {
    return "gpuslice: node state unknown (not in --nodes-file and no InternalIP seen for it)";
  }
  const NodeEntry& e = it->second;
  const std::string last = e.last_error.empty() ? "" : "; last poll: " + e.last_error;
  if (!e.has_report)
    return "gpuslice: node state unknown (no report from its gpusliced yet" + last + ")";
  const int64_t age = now - e.received_ms;
  if (age > options_.stale_after_ms) {
    return "gpuslice: node state is stale (last report " + std::to_string(age / 1000) + " s ago" +
           last + ")";
  }
  if (e.report.degraded) {
    return "gpuslice: gpusliced on this node is degraded: " + e.report.degraded_reason;
  }
  return "";
}

void Extender::RememberPod(const PodRequest& pod) {
  const std::string key = PodKey(pod.ns, pod.name);
  if (pods_.emplace(key, pod).second) {
    pod_order_.push_back(key);
    if (pod_order_.size() > kMaxPods) {
      pods_.erase(pod_order_.front());
      pod_order_.pop_front();
    }
  } else {
    pods_[key] = pod;  // The same name may be a new pod (uid).
  }
}

FilterAnswer Extender::Filter(const PodRequest& pod, const std::vector<std::string>& nodes) {
  FilterAnswer out;
  out.pass.assign(nodes.size(), true);
  if (!pod.uses_gpuslice) return out;
  if (!pod.invalid.empty()) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      out.pass[i] = false;
      out.unresolvable[nodes[i]] = "gpuslice: " + pod.invalid;
    }
    return out;
  }
  std::lock_guard<std::mutex> lock(mu_);
  RememberPod(pod);
  LearnDemands(pod);
  View& view = CurrentView();
  const Evaluation& ev = CachedEvaluation(view, pod);
  static const Snapshot kEmpty;
  const Snapshot& snap = snapshot_ ? *snapshot_ : kEmpty;
  const int64_t now = now_();
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto idx = view.index.find(nodes[i]);
    if (idx != view.index.end()) {
      const NodeView& nv = view.nodes[idx->second];
      if (now - nv.received_ms <= options_.stale_after_ms && !nv.degraded) {
        if (ev.fits[idx->second]) continue;
        out.pass[i] = false;
        (ev.never[idx->second] ? out.unresolvable : out.failed)[nodes[i]] = ev.reason[idx->second];
        continue;
      }
    }
    // Not usable at all: say why (unknown, stale, degraded).
    std::string why = Unusable(snap, nodes[i], now);
    out.pass[i] = false;
    out.failed[nodes[i]] = why.empty() ? "gpuslice: node state unknown" : why;
  }
  return out;
}

const Extender::Evaluation& Extender::CachedEvaluation(View& view, const PodRequest& pod) {
  // The profile first: learning the pod may rebuild it.
  const core::WorkloadProfile* profile = Profile();
  if (evals_generation_ != view.generation || evals_assumed_ != view.assumed_version ||
      evals_profile_ != profile || evals_.size() > 64) {
    evals_.clear();
    evals_generation_ = view.generation;
    evals_assumed_ = view.assumed_version;
    evals_profile_ = profile;
  }
  // What the pod asks, names included (they are in the reasons).
  std::string key;
  for (const auto* list : {&pod.containers, &pod.init_containers}) {
    for (const ContainerAsk& a : *list) {
      key += a.name + '\0' + std::to_string(a.gpu_mem_bytes) + ',' + std::to_string(a.share_milli) +
             ',' + std::to_string(a.whole_gpus) + ',' + a.mig_profile + ',' +
             std::to_string(a.mig_count) + ';';
    }
    key += '|';
  }
  auto it = evals_.find(key);
  if (it == evals_.end()) it = evals_.emplace(key, Evaluate(view, pod)).first;
  return it->second;
}

std::vector<int64_t> Extender::Prioritize(const PodRequest& pod,
                                          const std::vector<std::string>& nodes) {
  std::vector<int64_t> out(nodes.size(), 0);
  if (!pod.uses_gpuslice || !pod.invalid.empty()) return out;
  std::lock_guard<std::mutex> lock(mu_);
  RememberPod(pod);
  LearnDemands(pod);
  View& view = CurrentView();
  const Evaluation& eval = CachedEvaluation(view, pod);
  // The policy's preference, spread linearly over 0..10 between the worst
  // and the best candidate: kube-scheduler adds it (times the extender's
  // weight) to its own plugins' scores, and only the order is meaningful.
  std::vector<int> idx(nodes.size(), -1);
  double lo = 0, hi = 0;
  bool any = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto it = view.index.find(nodes[i]);
    if (it == view.index.end() || !eval.fits[it->second]) continue;
    idx[i] = int(it->second);
    const double s = eval.score[it->second];
    lo = any ? std::min(lo, s) : s;
    hi = any ? std::max(hi, s) : s;
    any = true;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (idx[i] < 0) continue;
    const double s = eval.score[size_t(idx[i])];
    out[i] = hi > lo ? std::llround(double(kMaxExtenderPriority) * (s - lo) / (hi - lo))
                     : kMaxExtenderPriority;
  }
  return out;
}

core::Result<std::vector<Extender::ContainerPlace>> Extender::PlaceOn(View& view,
                                                                      const PodRequest& pod,
                                                                      uint32_t index) {
  std::vector<ContainerPlace> out;
  const std::vector<const ContainerAsk*> asks = GpuAsks(pod.containers);
  if (!asks.empty()) {
    // The same choice Evaluate scored: each ask in turn over the whole
    // cluster, taking this node's option.
    core::ClusterState scratch = view.state;
    std::vector<core::NodeOption> opts(scratch.size());
    const core::PlaceOptions o = PlaceOptionsNow(nullptr);
    for (const ContainerAsk* a : asks) {
      const core::Demand d = a->ToDemand();
      GPUSLICE_RETURN_IF_ERROR(core::ScoreNodes(scratch, d, o, opts));
      if (!opts[index].fits) {
        return core::ResourceExhaustedError("container '" + a->name + "' needs " + AskText(*a) +
                                            "; " + FreeText(scratch.node(index)));
      }
      GPUSLICE_RETURN_IF_ERROR(scratch.Allocate(d, opts[index].placement));
      out.push_back({a, opts[index].placement, ""});
    }
  }
  std::map<std::string, uint32_t> used;
  for (const ContainerAsk& a : pod.containers) {
    if (a.mig_count == 0) continue;
    const NodeView& nv = view.nodes[index];
    auto f = nv.mig_free.find(a.mig_profile);
    uint32_t& u = used[a.mig_profile];
    if (f == nv.mig_free.end() || f->second < u + a.mig_count) {
      return core::ResourceExhaustedError("container '" + a.name + "' needs " + AskText(a));
    }
    u += a.mig_count;
    out.push_back({&a, {}, nv.mig_gpu.at(a.mig_profile)});
  }
  return out;
}

std::string Extender::AssignedGpusJson(const std::map<std::string, std::vector<std::string>>& m) {
  json j = json::object();
  for (const auto& [container, gpus] : m) j[container] = gpus;
  return j.dump();
}

core::Status Extender::Bind(const BindingArgs& args) {
  const std::string key = PodKey(args.pod_namespace, args.pod_name);
  std::optional<PodRequest> pod;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(key);
    if (it != pods_.end() &&
        (args.pod_uid.empty() || it->second.uid.empty() || it->second.uid == args.pod_uid)) {
      pod = it->second;
    }
  }
  if (!pod && api_ != nullptr) {
    // Not seen at filter (the extender restarted since): ask the API server.
    GPUSLICE_ASSIGN_OR_RETURN(json obj, api_->GetPod(args.pod_namespace, args.pod_name));
    GPUSLICE_ASSIGN_OR_RETURN(PodRequest parsed, ParsePod(obj));
    pod = std::move(parsed);
  }
  std::map<std::string, std::vector<std::string>> assigned;
  int64_t at = 0;
  bool held = false;
  if (pod && pod->uses_gpuslice) {
    if (!pod->invalid.empty()) return core::InvalidArgumentError(pod->invalid);
    std::lock_guard<std::mutex> lock(mu_);
    View& view = CurrentView();
    static const Snapshot kEmpty;
    const Snapshot& snap = snapshot_ ? *snapshot_ : kEmpty;
    at = now_();
    if (std::string why = Unusable(snap, args.node, at); !why.empty()) {
      return core::UnavailableError("node " + args.node + ": " + why);
    }
    auto idx = view.index.find(args.node);
    if (idx == view.index.end()) return core::UnavailableError("node " + args.node + ": unknown");
    auto places = PlaceOn(view, *pod, idx->second);
    if (!places.ok()) {
      return core::ResourceExhaustedError("pod " + key + " no longer fits node " + args.node +
                                          ": " + places.status().message());
    }
    const NodeView& nv = view.nodes[idx->second];
    const NodeReport& report = snap.nodes.at(args.node).report;
    auto base_of = [&](const std::string& uuid) -> const GpuReport* {
      for (const GpuReport& g : report.gpus) {
        if (g.uuid == uuid) return &g;
      }
      return nullptr;
    };
    const size_t first_new = assumed_.size();
    uint32_t node_whole = 0;
    uint64_t node_memory = 0, node_milli = 0;
    for (const GpuReport& g : report.gpus) {
      if (g.mig_enabled) continue;
      node_whole += g.whole ? 1 : 0;
      node_memory += g.memory_allocated;
      node_milli += g.compute_allocated_milli;
    }
    for (const ContainerPlace& cp : *places) {
      std::vector<std::string>& gpus = assigned[cp.ask->name];
      if (cp.ask->mig_count > 0) {
        Assumed a{key, args.node, cp.mig_gpu, at, {}, cp.ask->mig_profile, cp.ask->mig_count};
        if (const GpuReport* g = base_of(cp.mig_gpu)) {
          auto f = g->mig_free.find(cp.ask->mig_profile);
          a.base_mig_free = f == g->mig_free.end() ? 0 : f->second;
        }
        assumed_.push_back(std::move(a));
        gpus.push_back(cp.mig_gpu);
        continue;
      }
      const core::Demand d = cp.ask->ToDemand();
      // One assumption per GPU: a whole-GPU container's N GPUs each show
      // up in their own report line.
      const core::Demand per_gpu = d.IsWhole() ? core::Demand::WholeGpus(1) : d;
      for (int i = 0; i < cp.placement.gpu_count; ++i) {
        const std::string& uuid = nv.gpu_uuids[cp.placement.gpus[i]];
        Assumed a{key, args.node, uuid, at, per_gpu, "", 0};
        if (const GpuReport* g = base_of(uuid)) {
          a.base_memory = g->memory_allocated;
          a.base_milli = g->compute_allocated_milli;
        }
        if (per_gpu.IsWhole()) {
          a.node_whole_needed = ++node_whole;
        } else {
          a.node_memory_needed = node_memory += per_gpu.gpu_mem;
          a.node_milli_needed = node_milli += per_gpu.gpu_milli;
        }
        assumed_.push_back(std::move(a));
        gpus.push_back(uuid);
      }
    }
    // The view takes the holds in place: rebuilding it would cost the
    // next request what a new snapshot costs.
    for (size_t i = first_new; i < assumed_.size(); ++i) ApplyAssumed(view, assumed_[i]);
    view.assumed_version = ++assumed_version_;
    held = true;
  }
  auto undo = [&] {
    if (!held) return;
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(assumed_, [&](const Assumed& a) { return a.pod == key && a.at_ms == at; });
    ++assumed_version_;
  };
  if (api_ == nullptr) return core::Status::Ok();
  if (!assigned.empty()) {
    // Before the Binding, so the node's device plugin finds the GPUs on
    // the pod when the kubelet asks it to allocate.
    core::Status s = api_->AnnotatePod(args.pod_namespace, args.pod_name,
                                       {{kAnnotationAssignedNode, args.node},
                                        {kAnnotationAssignedGpus, AssignedGpusJson(assigned)}});
    if (!s.ok()) {
      undo();
      return s;
    }
  }
  core::Status s = api_->Bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node);
  if (!s.ok()) undo();
  return s;
}

}  // namespace gpuslice::kubernetes
