#pragma once

// Allocate for one container and one resource: the slice is created in
// gpusliced as an external job held to the GPUs the IDs name, and the
// container is told how to join it: by its CDI device name, or (runtimes
// without CDI, --no-cdi) by the same environment, mounts and device nodes.
//
//   gpu, mig-*   a job of those GPUs / that MIG instance, running at once.
//   gpu-memory   N IDs on GPU g: a job of N GiB on g, paused (no kernel
//                launches) until the reconciler has given it the container's
//                gpu-share and resumed it.
//   gpu-share    nothing is created: the kubelet calls Allocate once per
//                resource, so the share cannot be tied to its memory here;
//                the reconciler ties them through the PodResources API.
//
// IDs the kubelet hands out again belong to whoever it hands them to: a job
// of the plugin holding any of them (an init container's, a pod gone while
// the plugin was down) is released first. A daemon refusal is returned with
// the daemon's message; a job whose container answer fails is released, so
// a failed Allocate leaves nothing behind. Thread-safe.

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "kubernetes/device_plugin/daemon/daemon_client.h"
#include "kubernetes/device_plugin/base/devices.h"
#include "kubernetes/device_plugin/daemon/job_book.h"

namespace gpuslice::kubernetes {

// What the kubelet passes to the runtime for one container (the content of
// a ContainerAllocateResponse), independent of gRPC.
struct ContainerAnswer {
  std::vector<std::string> cdi_devices;
  std::map<std::string, std::string> envs;
  std::vector<ContainerEdits::Mount> mounts;
  std::vector<std::string> device_nodes;
  uint64_t job = 0;  // The job created; 0 for gpu-share.
};

struct AllocatorOptions {
  std::string node;  // The owner label's value.
  bool cdi = true;   // false: envs, mounts and device nodes instead.
  // How long a share allocation and a memory job wait for each other as
  // pairing hints.
  Clock::duration pairing_window = std::chrono::seconds(10);
};

// The answer for `edits` (pure).
ContainerAnswer AnswerFor(const ContainerEdits& edits, bool cdi);

class Allocator {
 public:
  Allocator(DaemonClient* daemon, JobBook* book, AllocatorOptions options);

  core::Result<ContainerAnswer> Allocate(const Resource& resource,
                                         const std::vector<std::string>& ids);

 private:
  core::Result<ExternalJobSpec> SpecFor(const Resource& resource,
                                        const std::vector<std::string>& ids,
                                        std::string* gpu_uuid) const;

  DaemonClient* daemon_;
  JobBook* book_;
  AllocatorOptions options_;
};

}  // namespace gpuslice::kubernetes
