#pragma once

// Where the node's GPUs outside MIG mode sit in the placement core: by flat
// position, node * kGpusPerNode + GPU. core::ClusterState holds at most
// kMaxGpusPerNode GPUs per node; larger inventories (the placement
// benchmark's 1,000 GPUs) are split into nodes of that many GPUs, and a
// multi-GPU job stays within one of them.

#include <cstddef>
#include <cstdint>

#include "core/placement/placement_model.h"

namespace gpuslice::daemon {

inline constexpr size_t kGpusPerNode = core::kMaxGpusPerNode;

// The one-GPU placement of the GPU at flat position `flat`.
inline core::Placement FlatPlacement(size_t flat) {
  core::Placement p;
  p.node = static_cast<uint32_t>(flat / kGpusPerNode);
  p.gpu_count = 1;
  p.gpus[0] = static_cast<uint8_t>(flat % kGpusPerNode);
  return p;
}

}  // namespace gpuslice::daemon
