#pragma once

// Upper bounds of what one placement could get now on a core::ClusterState,
// so that most requests that cannot fit a busy machine are turned away
// without running a placement. Computed lazily: whoever changes the state
// calls Invalidate, and the next Of recomputes them.

#include <algorithm>
#include <cstdint>

#include "core/placement/placement_model.h"

namespace gpuslice::daemon {

class FreeBounds {
 public:
  struct Bounds {
    uint64_t max_mem_free = 0;    // The most free memory on one GPU.
    uint32_t max_milli_free = 0;  // The largest free compute share on one GPU.
    uint32_t idle_gpus = 0;
  };

  void Invalidate() { dirty_ = true; }
  // The bounds of `state`, the state every Invalidate was about.
  const Bounds& Of(const core::ClusterState& state) {
    if (!dirty_) return bounds_;
    bounds_ = Bounds();
    for (const core::NodeState& n : state.nodes()) {
      for (const core::GpuState& g : n.gpus) {
        bounds_.max_mem_free = std::max(bounds_.max_mem_free, g.mem_free);
        bounds_.max_milli_free = std::max(bounds_.max_milli_free, g.milli_free);
        if (g.IsIdle()) ++bounds_.idle_gpus;
      }
    }
    dirty_ = false;
    return bounds_;
  }

 private:
  Bounds bounds_;
  bool dirty_ = true;
};

}  // namespace gpuslice::daemon
