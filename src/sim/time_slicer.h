#pragma once

// Time-slicing of one unit between processes, as a GPU without MPS does: one
// process's kernels run at a time; when its quantum is used up and another
// process has kernels waiting, the unit passes to the next waiting process
// in slot order (round robin), so saturating processes get equal shares.
//
// The arbiter lives in shared memory (layout::Arbiter). `holder` names the
// running process and doubles as the futex word waiters sleep on. A holder
// that died, or stopped refreshing its heartbeat for long, is evicted by the
// next waiter that notices, so a SIGKILLed process never stalls the others.
//
// One TimeSlicer per (process, unit), used by that unit's executor thread
// only.

#include <cstdint>

#include "sim/device_model.h"

namespace gpuslice::sim {

class TimeSlicer {
 public:
  // How far a timeline may trail the wall clock before the gap counts as
  // idle GPU time (a process that was not scheduled for long).
  static constexpr uint64_t kMaxLagNs = 20000000;

  TimeSlicer(DeviceModel* model, uint32_t unit);

  // Blocks until this process holds the unit. Returns where its timeline
  // starts: the instant the previous holder handed over (on the GPU's
  // timeline, so the OS's wake-up latency is not lost GPU time, up to
  // kMaxLagNs), or, if the unit was free, `ready_ns` (when this process's
  // work could first run; 0: now) but not before the unit was released.
  uint64_t Acquire(uint64_t ready_ns = 0);
  // Called by the holder at slice boundaries with its timeline position
  // (`cursor_ns`, CLOCK_MONOTONIC ns). If the quantum that began at the last
  // Acquire is used up and another process waits, hands the unit over at
  // `cursor_ns`, waits for its turn again and returns true with
  // `*resume_ns` set as Acquire() would return.
  bool MaybeYield(uint64_t cursor_ns, uint64_t* resume_ns);
  // The holder has no more kernels: passes the unit on (or frees it).
  void Release(uint64_t cursor_ns);
  bool holding() const { return holding_; }
  uint32_t unit() const { return unit_; }

 private:
  void SetWaiting(bool waiting);
  // The next waiting slot after ours, or -1.
  int NextWaiter() const;
  void HandTo(int slot, uint64_t at_ns);
  void CheckHolder(uint32_t holder);

  DeviceModel* model_;
  uint32_t unit_;
  layout::Arbiter* arbiter_;
  int slot_;
  bool holding_ = false;
  uint64_t quantum_start_ns_ = 0;
};

}  // namespace gpuslice::sim
