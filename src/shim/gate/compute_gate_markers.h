#pragma once

// The compute gate's completion markers and its measurement of GPU time
// (docs/COMPUTE.md: "Bounded queue", "In flight, and the per-launch
// estimate", "Charged by the GPU time the work used"): the events the gate
// records behind its batches, what they teach about the time one launch
// takes, and the GPU time each batch is reported to have used. Internal to
// compute_gate.cc, which holds g_mu around every ...Locked call; the slow
// path and the background thread only, never the launch fast path.

#include <atomic>
#include <cstdint>
#include <mutex>

#include "shim/gate/compute_gate.h"
#include "slice/compute/coord_turns.h"
#include "shim/base/cuda_api.h"

namespace gpuslice::shim::gate {

inline constexpr uint64_t kTargetBatchNs = 500'000;  // GPU time one batch of credits should take.

// The driver's event functions, resolved once by the gate's start.
struct Fns {
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventRecord_v7000_ptsz event_record_ptsz = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuEventElapsedTime_v2000 event_elapsed = nullptr;  // Optional: null, no timed samples.
  PFN_cuStreamIsCapturing_v10000 is_capturing = nullptr;
  PFN_cuStreamIsCapturing_v10000_ptsz is_capturing_ptsz = nullptr;
};

extern Fns g_fns;
// The turns this process follows (coord_turns.h), set once by the gate's
// start: where each batch's GPU time is reported.
extern slice::Turns* g_coord;

extern std::mutex g_mu;
extern int g_marker_count;  // Markers pending. Guarded by g_mu.
// Estimated GPU time of one launch, for sizing batches. Guarded by g_mu.
extern double g_ns_per_launch;
extern uint64_t g_popped_seq;  // Newest marker seen complete. Guarded by g_mu.
// Launches granted, not yet covered by a marker.
extern std::atomic<int64_t> g_unmarked;
// When the work granted so far should be done by the estimate: each grant
// queues behind what is already queued. Guarded by g_mu.
extern uint64_t g_expected_done_ns;

// Pops completed markers and brackets, refines the estimates and reports
// each completed batch's GPU time to g_coord. Needs g_mu.
void PollMarkersLocked(uint64_t now);
// Records a marker after this thread's launches on `stream`. Needs g_mu.
void MarkLocked(CUstream stream, bool per_thread, uint64_t now);
// Work of this process that may still be queued on the GPU. Needs g_mu.
bool InflightLocked(uint64_t now);
// Whether `stream` is capturing a graph (an event recorded there would
// become part of it).
bool Capturing(CUstream stream, bool per_thread);
// Whether the batch being granted should be bracketed: every batch until the
// estimate has a few samples, then one in kBracketEvery (a bracket costs two
// events; the estimate is an average that moves slowly). Needs g_mu.
bool BracketDueLocked();
// Records the event that opens this thread's batch bracket on `stream`, as
// the last thing before the batch's first launch. `behind_own`: work of
// this process may be queued before it (InflightLocked before the grant).
// False: no bracket.
bool OpenBracket(CUstream stream, bool per_thread, bool behind_own);
// Closes this thread's open bracket right behind its launch on `stream`.
void CloseBracket(CUstream stream, bool per_thread);
// A forked child starts over: none of the parent's markers, brackets or
// estimates (their events are the parent's context's, not the child's).
void ResetMarkersAfterFork();

}  // namespace gpuslice::shim::gate
