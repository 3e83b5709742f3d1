#pragma once

// The work queue of one (process, unit): the simulated GPU's engine for this
// process. Work runs on one thread in submission order, whatever stream it
// was submitted on: that preserves stream order and event dependencies at
// the cost of concurrency between streams of one process (docs/SIMULATOR.md).
//
// Kernels take simulated time: the executor holds the unit's time-slicing
// arbiter while it sleeps to absolute deadlines on its own timeline
// (`cursor`), so back-to-back tiny kernels add up exactly, and records the
// busy time in the device model.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "sim/device_model.h"
#include "sim/time_slicer.h"

namespace gpuslice::sim::driver {

class Executor;

// True on threads that must never wait at the checkpoint gate (driver.h,
// DriverMutex): executors, whose work a lock waits for, and the checkpoint
// service thread.
inline thread_local bool tls_passes_checkpoint_gate = false;

struct Work {
  enum class Kind { kKernel, kAction, kWait };
  Kind kind = Kind::kAction;
  uint64_t cost_ns = 0;          // kKernel.
  std::function<void()> action;  // kAction (copies, memsets, host functions, event stamps).
  Executor* wait_on = nullptr;   // kWait: another executor's work ...
  uint64_t wait_seq = 0;         // ... up to this sequence number.
  uint64_t submitted_ns = 0;     // Set by Submit (CLOCK_MONOTONIC).
  // kAction that takes no GPU time and only marks a point of the timeline
  // (an event record): complete as soon as the work before it is.
  bool instant = false;
};

class Executor {
 public:
  Executor(DeviceModel* model, uint32_t unit);
  ~Executor();  // Drains the queue, then stops the thread.
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues work; returns its sequence number (1, 2, ...).
  uint64_t Submit(Work work);
  // Runs `action` now if the queue is idle, else queues it and waits: either
  // way it runs after all work submitted before.
  void RunInOrder(const std::function<void()>& action);
  bool Done(uint64_t seq);
  // Whether work up to `seq` is complete on the GPU's timeline at `now_ns`:
  // done, or all that is left of it is the end of the kernel in progress
  // (due by now) and instant items behind it. The executor thread wakes at
  // the kernel's end only when the CPU lets it (tens of microseconds late
  // on a busy machine, milliseconds at worst); a GPU's event is complete at
  // the kernel's end. `*end_ns`: where the timeline stood (0: done already).
  bool DoneOnTimeline(uint64_t seq, uint64_t now_ns, uint64_t* end_ns);
  void WaitFor(uint64_t seq);
  // As WaitFor, giving up at `deadline_ns` (CLOCK_MONOTONIC; 0: never).
  // Returns whether the work is done.
  bool WaitFor(uint64_t seq, uint64_t deadline_ns);
  uint64_t last_submitted();
  // Moves this executor to another unit (a checkpoint restored onto another
  // GPU): lets go of the old unit's arbiter, and from then on runs, slices
  // and accounts there. Runs in order on the executor's thread; call with
  // nothing else queued.
  void Rebind(uint32_t unit);
  // The executor's simulated clock (CLOCK_MONOTONIC ns) when the work in
  // progress started; used to stamp events.
  uint64_t cursor_ns() const { return cursor_; }
  uint32_t unit() const { return unit_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  void RunKernel(uint64_t cost_ns);

  DeviceModel* model_;
  std::atomic<uint32_t> unit_;  // Written by the executor thread only (Rebind).
  TimeSlicer slicer_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::pair<uint64_t, Work>> queue_;  // Guarded by mu_.
  uint64_t submitted_ = 0;                       // Guarded by mu_.
  uint64_t completed_ = 0;                       // Guarded by mu_.
  bool running_ = false;                         // Guarded by mu_: an item is in progress.
  // The end of the running kernel once its last step is under way (0:
  // not yet, or no kernel runs).
  std::atomic<uint64_t> kernel_end_ns_{0};
  bool stop_ = false;    // Guarded by mu_.
  uint64_t cursor_ = 0;  // Executor thread only.
  std::thread thread_;
};

}  // namespace gpuslice::sim::driver
