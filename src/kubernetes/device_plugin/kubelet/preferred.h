#pragma once

// GetPreferredAllocation's choice (pure): which of the IDs the kubelet offers
// a container should get. The kubelet counts IDs; the plugin says where.
//
//   fractions (gpu-memory, gpu-share): all IDs on ONE GPU, the GPU chosen by
//     the core placement (src/core/placement/placement_policy.h, the frag-aware
//     default) over what the daemon reports free on each GPU, among the GPUs
//     with enough IDs available (and the one of must_include, if any). A GPU
//     where the other half of a fraction (a share for memory, memory for a
//     share) was just allocated and not yet tied to a container comes first:
//     the kubelet allocates a container's resources one by one, so this is
//     how memory and share of one container land on the same GPU when
//     nothing else (the extender) chose for them.
//   whole GPUs: must_include plus GPUs chosen by the core placement.
//   MIG: must_include, then the offered instances in order.
//
// Always answers allocation_size IDs containing must_include when the offer
// allows it; when placement finds nothing (the daemon's view and the
// kubelet's differ) it falls back to the GPU with the most room.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kubernetes/device_plugin/base/devices.h"

namespace gpuslice::kubernetes {

struct PreferenceRequest {
  std::vector<std::string> available;
  std::vector<std::string> must_include;
  int32_t size = 0;
};

// `pairing_gpus`: GPU UUIDs to prefer for a fraction, best first (see above).
// Errors when the request is malformed: a size below must_include's count or
// above what is offered, IDs not of this resource.
core::Result<std::vector<std::string>> PreferredIds(const Resource& resource,
                                                    const Inventory& inventory,
                                                    const PreferenceRequest& request,
                                                    const std::vector<std::string>& pairing_gpus);

}  // namespace gpuslice::kubernetes
