#pragma once

// Resume on demand (docs/SUSPEND.md): a process of a suspended daemon slice
// that makes a CUDA call asks the daemon to resume its job, and the call
// goes on once the daemon has.
//
// The daemon says "suspended" in the slice's read-only limits page
// (LimitsHeader::suspension: the suspension's id, 0 while the job runs);
// the process asks by copying that id into its own region
// (RegionHeader::resume_request), which the daemon reads as untrusted input
// and honours only for that job and that suspension, in queue order. Nothing
// else is needed: no socket, no privilege, nothing a job could not already
// write.
//
// Every interposed entry point that uses the GPU (allocations and frees,
// contexts, modules, launches, cuMemGetInfo) calls ResumeIfSuspended first,
// before anything that reaches the driver: a checkpointed process's driver
// calls block until the daemon restores it (the driver's lock), so the
// request has to be made before the call gets there. Lookups
// (cuGetProcAddress) and device properties (cuDeviceTotalMem) do not ask.

#include <atomic>
#include <cstdint>

namespace gpuslice::shim {

// The limits page's suspension word and the region's request word of this
// process's slice; null when the slice has no limits page (standalone, an
// older daemon's, or a page the process could not use): such a slice is
// never suspended on demand. Set once by initialisation before the phase is
// published (its release store), so a thread that acquired the phase reads
// them without further ordering; inherited by a forked child with the
// mappings they point into.
extern const std::atomic<uint64_t>* g_suspension;
extern std::atomic<uint64_t>* g_resume_request;

void SetResumeWords(const std::atomic<uint64_t>* suspension, std::atomic<uint64_t>* request);

// The slow path: stores the request, then waits (1 ms polls, 10 ms after the
// first 200 ms; no time bound: the suspension is the daemon's decision, as a
// pause is) until the page says the job runs again. By then the daemon has
// restored the slice's limits (they are stored before the word is cleared)
// and is restoring the job's checkpointed processes; a driver call made now
// waits in the driver until this process is unlocked. Never fails and never
// allocates.
void AwaitResume();

// What every such entry point calls: one load of a process-global pointer,
// one relaxed load of the page's word (a read-mostly line every process of
// the slice shares) and a branch while the job runs. Relaxed is enough: a
// call that misses a suspension the daemon is setting right now goes to the
// driver as it did before resume on demand existed (it blocks there if its
// process is checkpointed already); AwaitResume's loads acquire.
inline void ResumeIfSuspended() {
  const std::atomic<uint64_t>* suspension = g_suspension;
  if (suspension != nullptr &&
      __builtin_expect(suspension->load(std::memory_order_relaxed) != 0, 0)) {
    AwaitResume();
  }
}

}  // namespace gpuslice::shim
