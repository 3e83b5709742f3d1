#include "kubernetes/device_plugin/daemon/allocator.h"

#include <utility>

#include "kubernetes/device_plugin/base/log.h"

namespace gpuslice::kubernetes {

ContainerAnswer AnswerFor(const ContainerEdits& edits, bool cdi) {
  ContainerAnswer a;
  if (cdi) {
    a.cdi_devices.push_back(edits.cdi_device);
    return a;
  }
  for (const std::string& kv : edits.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    a.envs[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  a.mounts = edits.mounts;
  a.device_nodes = edits.device_nodes;
  return a;
}

Allocator::Allocator(DaemonClient* daemon, JobBook* book, AllocatorOptions options)
    : daemon_(daemon), book_(book), options_(std::move(options)) {}

core::Result<ExternalJobSpec> Allocator::SpecFor(const Resource& resource,
                                                 const std::vector<std::string>& ids,
                                                 std::string* gpu_uuid) const {
  ExternalJobSpec spec;
  switch (resource.kind) {
    case ResourceKind::kGpuMemory: {
      GPUSLICE_ASSIGN_OR_RETURN(IdGroup g, OnOneGpu(resource, ids));
      *gpu_uuid = g.uuid;
      spec.mem_bytes = ids.size() * kGiB;
      spec.gpu_uuids = {g.uuid};
      // Held until its compute share is known (the reconciler resumes it).
      spec.paused = true;
      break;
    }
    case ResourceKind::kGpu: {
      if (ids.empty()) return core::InvalidArgumentError(resource.Name() + ": no device IDs");
      GPUSLICE_ASSIGN_OR_RETURN(std::vector<IdGroup> groups, GroupByGpu(resource.kind, ids));
      spec.gpus = static_cast<uint32_t>(groups.size());
      spec.gpu_uuids = ids;
      break;
    }
    case ResourceKind::kMig: {
      if (ids.size() != 1) {
        // CUDA shows a process one MIG instance; a container gets one.
        return core::InvalidArgumentError(resource.Name() + ": " + std::to_string(ids.size()) +
                                          " MIG instances for one container; ask for 1 (CUDA "
                                          "uses one MIG instance per process)");
      }
      GPUSLICE_RETURN_IF_ERROR(ParseDeviceId(resource.kind, ids[0]).status());
      spec.mig = resource.mig_profile;
      spec.gpu_uuids = ids;
      break;
    }
    case ResourceKind::kGpuShare:
      return core::InternalError("gpu-share creates no job");
  }
  spec.name = "k8s-" + resource.ShortName();
  spec.labels = IdsLabels(resource, ids);
  spec.labels[kOwnerLabel] = options_.node;
  spec.labels[kResourceLabel] = resource.Name();
  return spec;
}

core::Result<ContainerAnswer> Allocator::Allocate(const Resource& resource,
                                                  const std::vector<std::string>& ids) {
  const Clock::time_point now = Clock::now();
  if (resource.kind == ResourceKind::kGpuShare) {
    GPUSLICE_ASSIGN_OR_RETURN(IdGroup g, OnOneGpu(resource, ids));
    book_->NoteShareAllocated(g.uuid, now, options_.pairing_window);
    return ContainerAnswer{};
  }
  std::string gpu_uuid;
  GPUSLICE_ASSIGN_OR_RETURN(ExternalJobSpec spec, SpecFor(resource, ids, &gpu_uuid));
  // The kubelet hands out only IDs it holds free: a job of ours still on
  // them is stale (an init container's, a pod deleted while we were down).
  for (uint64_t stale : book_->Overlapping(resource, ids)) {
    core::Status s = daemon_->Cancel(stale);
    if (!s.ok() && s.code() != core::StatusCode::kNotFound &&
        s.code() != core::StatusCode::kFailedPrecondition) {
      return s.WithContext("releasing job " + std::to_string(stale) +
                           " that held these device IDs before");
    }
    LogInfo("released job " + std::to_string(stale) + ": the kubelet gave its " + resource.Name() +
            " IDs to a new container");
    book_->Remove(stale);
  }
  GPUSLICE_ASSIGN_OR_RETURN(JobInfo job, daemon_->CreateJob(spec));
  auto edits = daemon_->Container(job.id);
  if (!edits.ok()) {
    (void)daemon_->Cancel(job.id);  // Leave nothing behind; the error says why.
    return edits.status().WithContext("job " + std::to_string(job.id));
  }
  PluginJob pj;
  pj.id = job.id;
  pj.resource = resource;
  pj.gpu_uuid = gpu_uuid;
  pj.ids = ids;
  pj.labels = spec.labels;
  pj.paused = spec.paused;
  pj.compute_milli = job.compute_milli;
  pj.created = now;
  if (resource.kind == ResourceKind::kGpuMemory) {
    book_->AddMemoryJob(std::move(pj), options_.pairing_window);
  } else {
    book_->Add(std::move(pj));
  }
  ContainerAnswer answer = AnswerFor(*edits, options_.cdi);
  answer.job = job.id;
  return answer;
}

}  // namespace gpuslice::kubernetes
