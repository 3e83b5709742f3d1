#pragma once

// The plugin's calls to the kubelet (gRPC over its unix sockets): register a
// resource, and list which container holds which device IDs.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "kubernetes/device_plugin/base/devices.h"
#include "kubernetes/device_plugin/daemon/reconcile.h"

namespace gpuslice::kubernetes {

// Registers `resource` served on `endpoint` (a socket file name in the
// kubelet's device plugin folder) with the kubelet's `kubelet_socket`:
// version v1beta1, GetPreferredAllocation available. Errors: kUnavailable
// when no kubelet answers within `timeout`; the kubelet's refusal otherwise.
core::Status RegisterWithKubelet(const std::string& kubelet_socket, const Resource& resource,
                                 const std::string& endpoint, std::chrono::milliseconds timeout);

// Who holds which device IDs, as the kubelet records it.
class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  // Every container holding gpuslice.dev devices (others left out).
  virtual core::Result<std::vector<ContainerHolding>> List() = 0;
  // Which kubelet answers: changes when it restarts (its socket is made
  // anew); 0 when unknown.
  virtual uint64_t Generation() { return 0; }
};

// The kubelet's v1.PodResourcesLister on a unix socket.
// One channel, kept while it works and made again after an error (gRPC's
// own reconnection backs off for up to minutes; a kubelet restarts in
// seconds). Not thread-safe: the reconciler's thread only.
class GrpcPodResources final : public PodResourcesSource {
 public:
  explicit GrpcPodResources(std::string socket);
  ~GrpcPodResources() override;
  core::Result<std::vector<ContainerHolding>> List() override;
  // The socket's inode and change time.
  uint64_t Generation() override;

 private:
  class Stub;
  std::string socket_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace gpuslice::kubernetes
