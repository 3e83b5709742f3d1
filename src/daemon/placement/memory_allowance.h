#pragma once

// The memory watchdog's allowance (docs/DAEMON.md, "Enforcement watchdog"):
// how far above a job's limit on one GPU NVML may show the job's processes
// before the watchdog acts.
//
// NVML counts driver memory (a context per process, modules, the driver's
// rounding) that the shim charges to the slice only after the fact: a
// context that tips the slice over is undone a moment later, a module load
// is never refused, rounding is learnt at the next context event. So a
// process the shim registered may briefly hold up to about one context more
// than the slice's count. A process without the shim was never charged
// anything: all it holds beyond the limit is an escape, and it gets nothing.
//
// Which processes the shim registered comes from the job's slice region,
// which the job writes: a job can name any of its own processes there. What
// that buys is bounded by a ceiling per job and GPU (`watchdog_allowance_max`).

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace gpuslice::daemon {

// The size of a fresh context on each GPU, learnt from NVML's per-process
// figures (never from anything a job writes). Every process NVML lists on a
// GPU holds at least one context there, so the smallest figure seen is an
// upper bound on a context's size, and is its size once a process holding a
// context and nothing else has been seen. Only settled figures count: a
// process's figure that is the same at two samples in a row (a context being
// created, or memory being allocated, passes through smaller figures for a
// moment).
//
// Not thread-safe: the daemon's housekeeping thread alone feeds and reads it.
class ContextSizes {
 public:
  // NVML's figure for process `pid` on GPU `gpu_index` at this sample; 0
  // (NVML gives no figure) is ignored.
  void Observe(uint32_t gpu_index, int64_t pid, uint64_t bytes);
  // Ends the sample: the figures of processes not observed in it are
  // forgotten (a later figure of the same pid is a first one again).
  void EndSample();
  // The context size learnt for the GPU; nullopt before a settled figure.
  std::optional<uint64_t> Of(uint32_t gpu_index) const;

 private:
  using Key = std::pair<uint32_t, int64_t>;  // (GPU, pid)
  std::map<Key, uint64_t> previous_;         // Figures of the last sample.
  std::map<Key, uint64_t> current_;          // Of the sample being taken.
  std::map<uint32_t, uint64_t> smallest_;    // Smallest settled figure per GPU.
};

// A job's allowance on one GPU: `registered` processes the shim registered
// there (NVML lists them on the GPU and the job's slice names them), one
// context of `context_bytes` each, at most `ceiling_bytes`. No registered
// process: 0. A context size not known yet (nullopt): the ceiling, so that
// no honest job is ended before a context was measured.
uint64_t MemoryAllowance(uint32_t registered, std::optional<uint64_t> context_bytes,
                         uint64_t ceiling_bytes);

}  // namespace gpuslice::daemon
