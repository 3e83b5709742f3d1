#pragma once

// The compute gate: what every kernel and graph launch of a process passes
// through so that its slice stays within its compute share (docs/COMPUTE.md).
//
// Fast path (inline, below): one acquire load of g_gate and a branch; when
// the slice has a share, also a compare with, and a decrement of, this
// thread's credits (thread-local: no shared write). The gate is:
//   kGateOff          no share: launch freely;
//   an even number    the slice holds the GPU: threads with credits of this
//                     generation launch; others take the slow path;
//   an odd number     closed: every launch takes the slow path and waits.
// Every change increments it, so credits granted under one generation are
// void under the next.
//
// Slow path (WaitForLaunch): starts the coordination lazily (first launch:
// joins the per-GPU coordination file, starts a background thread), records
// a completion marker (an event) on the launch's stream, and waits, bounded,
// until the slice holds the GPU and has little enough work queued; then
// grants this thread a batch of credits sized to ~0.5 ms of GPU time.
//
// The background thread polls markers, publishes "work in flight" and a
// heartbeat, advances the shared schedule and opens/closes the gate.

#include <atomic>
#include <cstdint>

#include "shim/base/cuda_api.h"

namespace gpuslice::shim {

inline constexpr uint32_t kGateOff = 0;

extern std::atomic<uint32_t> g_gate;

// Laid out to stay at 64 bytes: the shim's thread-locals are initial-exec
// (static TLS), and a program that dlopens the library (shim_bench loads two
// copies) has only a small surplus of static TLS for it.
struct GateCredits {
  uint32_t gen = 0;     // The open gate generation these credits belong to.
  int32_t credits = 0;  // Launches left in this thread's batch.
  int32_t batch = 0;    // Size of the batch last granted (for markers).
  // GateLaunchDone calls MarkAfterLaunch when `credits` reaches this: after
  // the batch's first launch while its bracket is open, then after its last
  // (0); -1 when no batch is out.
  int32_t mark_at = -1;
  uint64_t granted_ns = 0;  // When it was granted (its work queued from then on).
  // This thread's newest marker: its sequence number (0: none) and stream.
  // A batch granted while that marker is still pending queues right behind
  // it, so the GPU time between the two markers is the batch's own.
  uint64_t last_seq = 0;
  CUstream last_stream = nullptr;
  uint64_t chain_seq = 0;  // last_seq at the grant, when it was pending; else 0.
  // An event recorded right before the batch's first launch; with
  // one recorded right after it, it times one launch on the GPU's clock.
  CUevent bracket = nullptr;
  bool last_per_thread = false;
  // The grant published work in flight without waking the arbiter: wake it
  // once the launch is queued (GateLaunchDone), so that the slice is charged
  // from when its work reached the GPU, not from before the launch call.
  bool ring_after_launch = false;
  // Another slice had work in flight at the grant: the GPU may time-slice
  // between the two, so the batch's marker span is not its own GPU time.
  bool contended = false;
};
static_assert(sizeof(GateCredits) == 64);
extern thread_local GateCredits t_gate __attribute__((tls_model("initial-exec")));

// True when a launch may go now without the slow path.
inline bool LaunchAllowedFast() {
  // Acquire: pairs with the release that changed the gate, so a thread that
  // sees a new generation also sees the coordinator state behind it.
  const uint32_t gate = g_gate.load(std::memory_order_acquire);
  if (__builtin_expect(gate == kGateOff, 1)) return true;
  if (gate == t_gate.gen && t_gate.credits > 0) {
    --t_gate.credits;
    return true;
  }
  return false;
}

// Waits (bounded) until a launch on `stream` may go. `per_thread` says the
// launch used a _ptsz entry point (stream 0 then means the per-thread
// stream). Never fails: on any coordination problem the launch goes.
void WaitForLaunch(CUstream stream, bool per_thread);

// The gate check every launch wrapper makes.
inline void GateLaunch(CUstream stream, bool per_thread) {
  if (!LaunchAllowedFast()) WaitForLaunch(stream, per_thread);
}

// Records the completion marker of this thread's batch on `stream`. Called
// after the batch's last launch (see GateLaunchDone).
void MarkBatchEnd(CUstream stream, bool per_thread);

// What GateLaunchDone calls when a launch reached GateCredits::mark_at:
// closes the batch's bracket after its first launch, records its marker
// after its last.
void MarkAfterLaunch(CUstream stream, bool per_thread);

// Wakes the arbiter after a granted launch went to the driver (see
// GateCredits::ring_after_launch).
void RingAfterLaunch();

// What every launch wrapper calls after the driver took a gated launch. When
// that launch used this thread's last credit, the batch's marker is recorded
// now, right behind it, rather than at the thread's next launch: a thread
// that launches one kernel and synchronises comes back only after the kernel
// ended, so a marker recorded then completes at once, teaches nothing, and
// the slice would look idle (uncharged, its turn handed over) while its
// kernel still ran (2 ms kernels split 30/70 slices about 50/50). After a
// batch's first launch it closes the batch's bracket. One thread-local
// compare on the fast path.
// The bracket is closed before the arbiter is rung: the ring (a system
// call) would otherwise count as part of the launch call that a bracket's
// sample has taken off (compute_gate_markers.cc, Bracket).
inline void GateLaunchDone(CUstream stream, bool per_thread) {
  if (__builtin_expect(t_gate.credits == t_gate.mark_at, 0)) MarkAfterLaunch(stream, per_thread);
  if (__builtin_expect(t_gate.ring_after_launch, 0)) RingAfterLaunch();
}

}  // namespace gpuslice::shim
