#include "kubernetes/device_plugin/daemon/reconcile.h"

#include <algorithm>
#include <set>

namespace gpuslice::kubernetes {

namespace {

const std::string& MemoryName() {
  static const std::string name = Resource{ResourceKind::kGpuMemory, ""}.Name();
  return name;
}
const std::string& ShareName() {
  static const std::string name = Resource{ResourceKind::kGpuShare, ""}.Name();
  return name;
}

const ContainerHolding* HolderOf(const std::vector<ContainerHolding>& containers,
                                 const PluginJob& job) {
  const std::string name = job.resource.Name();
  std::set<std::string> mine(job.ids.begin(), job.ids.end());
  for (const ContainerHolding& c : containers) {
    auto it = c.ids.find(name);
    if (it == c.ids.end()) continue;
    for (const std::string& id : it->second) {
      if (mine.count(id) > 0) return &c;
    }
  }
  return nullptr;
}

// The container's gpu-share IDs by GPU.
std::map<std::string, uint32_t> SharesByGpu(const ContainerHolding& c) {
  std::map<std::string, uint32_t> out;
  auto it = c.ids.find(ShareName());
  if (it == c.ids.end()) return out;
  for (const std::string& id : it->second) {
    auto p = ParseDeviceId(ResourceKind::kGpuShare, id);
    if (p.ok()) ++out[p->uuid];
  }
  return out;
}

}  // namespace

std::vector<Action> Reconcile(const std::vector<ContainerHolding>& containers,
                              const std::vector<PluginJob>& jobs, Clock::time_point now,
                              const ReconcileOptions& options) {
  std::vector<Action> out;
  for (const PluginJob& job : jobs) {
    const std::string name = "job " + std::to_string(job.id) + " (" + job.resource.Name() + ")";
    const ContainerHolding* c = HolderOf(containers, job);
    if (c == nullptr) {
      if (now - job.created >= options.release_grace) {
        Action a;
        a.kind = Action::Kind::kRelease;
        a.job = job.id;
        a.message = name + ": no container holds its device IDs any more";
        out.push_back(a);
      }
      continue;
    }
    Labels want = job.labels;
    want["namespace"] = c->key.ns;
    want["pod"] = c->key.pod;
    want["container"] = c->key.container;
    if (want != job.labels) {
      Action a;
      a.kind = Action::Kind::kSetLabels;
      a.job = job.id;
      a.labels = want;
      a.message = name + " belongs to " + c->key.ToString();
      out.push_back(a);
    }
    if (job.resource.kind != ResourceKind::kGpuMemory) continue;
    std::map<std::string, uint32_t> shares = SharesByGpu(*c);
    uint32_t here = 0;
    for (const auto& [gpu, n] : shares) {
      if (gpu == job.gpu_uuid) {
        here = n;
        continue;
      }
      Action a;
      a.kind = Action::Kind::kReport;
      a.job = job.id;
      a.message = c->key.ToString() + ": " + std::to_string(n) + "% of " + gpu + " (" +
                  ShareName() + ") is not on the GPU of its " + MemoryName() + " (" + job.gpu_uuid +
                  "); its slice gets no compute share from it";
      out.push_back(a);
    }
    if (here > 0 && job.compute_milli != here * 10) {
      Action a;
      a.kind = Action::Kind::kResizeCompute;
      a.job = job.id;
      a.compute_milli = here * 10;
      a.message = name + ": compute " + std::to_string(here) + "% from " + c->key.ToString() +
                  "'s " + ShareName();
      out.push_back(a);
    }
    if (job.paused && (here > 0 || now - job.created >= options.settle)) {
      Action a;
      a.kind = Action::Kind::kResume;
      a.job = job.id;
      a.message = name + ": resumed for " + c->key.ToString() +
                  (here > 0 ? "" : " (no " + ShareName() + ": no compute share of its own)");
      out.push_back(a);
    }
  }
  for (const ContainerHolding& c : containers) {
    auto share = c.ids.find(ShareName());
    if (share == c.ids.end() || share->second.empty() || c.ids.count(MemoryName()) > 0) continue;
    Action a;
    a.kind = Action::Kind::kReport;
    a.message = c.key.ToString() + " holds " + std::to_string(share->second.size()) + " " +
                ShareName() + " but no " + MemoryName() +
                ": a share alone gets no slice (ask for both; the gpuslice scheduler extender "
                "refuses such pods)";
    out.push_back(a);
  }
  return out;
}

}  // namespace gpuslice::kubernetes
