#pragma once

// Foreign GPU use as NodeCapacity charges it to the placement state, per GPU
// outside MIG mode (by flat position, flat_gpu.h). Two parts make a GPU's
// charge: memory that processes belonging to no job hold (kForeign), and
// memory that jobs' processes hold beyond their limits (kOverLimit). Each
// part is charged like a slice of its own (1 per-mille of compute, so the
// GPU is not idle for whole-GPU requests, and its bytes), but only as far as
// the GPU's free memory allows: a job placed earlier keeps what it holds,
// and the rest is charged by Recharge as soon as jobs give memory back.
//
// The charges live in a core::ClusterState the caller owns and passes in;
// they are values, copied with the state they were charged to.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/placement/placement_model.h"

namespace gpuslice::daemon {

class ForeignCharges {
 public:
  enum class Part { kForeign, kOverLimit };

  // Sets `part` of the charge of the GPU at flat position `flat` (inventory
  // index `gpu_index`) to `bytes`, named by `who` for messages; 0 clears it.
  // Charges `state` again when it changed. True when it released or took
  // anything in `state` (what was computed from `state` is stale).
  bool Set(core::ClusterState& state, size_t flat, uint32_t gpu_index, Part part, uint64_t bytes,
           std::string who);
  // After memory was given back: charges what foreign use still lacks.
  // True as Set.
  bool Recharge(core::ClusterState& state);

  // What is charged now on the GPU with inventory index `gpu_index`, both
  // parts together (at most what was set).
  uint64_t Charged(uint32_t gpu_index) const;
  // The same by flat position.
  uint64_t ChargedAt(size_t flat) const;
  // For messages: "; GPU 3: 2 GiB held by processes outside gpuslice (pid
  // 4242, user bob)" and "; GPU 3: 1 GiB held beyond their limits by job
  // 12", for each GPU whose flat position `include` says yes to.
  std::string Describe(const std::function<bool(size_t flat)>& include) const;

 private:
  struct Charge {
    uint32_t gpu_index = 0;
    uint64_t foreign = 0;
    uint64_t over = 0;
    std::string foreign_who;
    std::string over_who;
    uint64_t charged = 0;  // Held in the state while > 0.
    uint64_t Wanted() const { return foreign + over; }
  };
  // (Re)charges the GPU at `flat` as far as its free memory allows; forgets
  // it when nothing is wanted. True as Set.
  bool ChargeOne(core::ClusterState& state, size_t flat);

  std::map<size_t, Charge> by_flat_;
};

}  // namespace gpuslice::daemon
