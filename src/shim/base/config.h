#pragma once

// The shim's configuration, read from the environment once, at the first
// CUDA or NVML call (never in the library constructor, never on a hot path).
//
//   GPUSLICE_DISABLE=1           pass every call straight through.
//   GPUSLICE_MEMORY_LIMIT=4GiB   standalone limit, every device the process
//                                sees; or "0=4GiB,1=2GiB" per visible ordinal.
//   GPUSLICE_SLICE=/path         the slice region (set by the daemon, or by
//                                the shim itself for standalone descendants).
//   GPUSLICE_LIMITS=/path        the daemon's read-only limits page: when set,
//                                every limit, share, priority and pause comes
//                                from it, never from the region.
//   GPUSLICE_LOG_LEVEL=warn      error|warn|info|debug.
//   GPUSLICE_COMPUTE_SHARE=30    standalone compute share ("30", "30%", "12.5%").
//   GPUSLICE_COMPUTE_MODE=hard   hard | work-conserving.
//   GPUSLICE_PRIORITY=normal     high | normal | low.
//   GPUSLICE_COORD_DIR=/path     where per-GPU coordination files live.
//
// A bad value never stops the process: it becomes one line in `problems`
// (printed on stderr) and the setting falls back to "no limit"/"warn".

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "shim/base/log.h"

namespace gpuslice::shim {

inline constexpr char kEnvDisable[] = "GPUSLICE_DISABLE";
inline constexpr char kEnvMemoryLimit[] = "GPUSLICE_MEMORY_LIMIT";
inline constexpr char kEnvSlice[] = "GPUSLICE_SLICE";
inline constexpr char kEnvLimits[] = "GPUSLICE_LIMITS";
inline constexpr char kEnvLogLevel[] = "GPUSLICE_LOG_LEVEL";
inline constexpr char kEnvComputeShare[] = "GPUSLICE_COMPUTE_SHARE";
inline constexpr char kEnvComputeMode[] = "GPUSLICE_COMPUTE_MODE";
inline constexpr char kEnvPriority[] = "GPUSLICE_PRIORITY";
inline constexpr char kEnvCoordDir[] = "GPUSLICE_COORD_DIR";
inline constexpr char kEnvComputeCorun[] = "GPUSLICE_COMPUTE_CORUN";

// Region DeviceEntry::compute_mode and ::priority encodings (0 = default, so
// that a region whose creator set only the share means hard cap, normal).
inline constexpr uint32_t kRegionModeHard = 0;
inline constexpr uint32_t kRegionModeWorkConserving = 2;
inline constexpr uint32_t kRegionPriorityDefault = 0;  // normal; else core::Priority + 1.

struct ShimConfig {
  bool disabled = false;
  LogLevel log_level = LogLevel::kWarn;
  std::string slice_path;          // Empty: no slice (pass-through).
  std::string limits_path;         // Empty: the region holds its own limits.
  bool has_limit = false;          // GPUSLICE_MEMORY_LIMIT parsed fine.
  std::map<int, uint64_t> limits;  // Ordinal -> bytes; -1: every device.
  bool has_share = false;           // GPUSLICE_COMPUTE_SHARE parsed fine.
  uint32_t share_milli = 0;         // 1..1000.
  uint32_t compute_mode = kRegionModeHard;
  uint32_t priority = kRegionPriorityDefault;
  std::string coord_dir;            // Empty: the standalone slice directory.
  // Decisions this process takes on the cooperative file let slices of low
  // duty co-run (docs/COMPUTE.md, "Co-running"); GPUSLICE_COMPUTE_CORUN=0:
  // exclusive turns. Under the daemon its own setting (compute_corun) rules.
  bool compute_corun = true;
  std::vector<std::string> problems;

  // True when this process roots a standalone slice (a memory limit or a
  // compute share of its own).
  bool Standalone() const { return has_limit || has_share; }

  // The standalone limit for visible ordinal `ordinal`, or kUnlimited.
  uint64_t LimitFor(int ordinal) const;
};

// `env` returns the value of a variable or nullptr (a seam for tests).
ShimConfig ReadShimConfig(const std::function<const char*(const char*)>& env);

// The directory for standalone slice regions: "$XDG_RUNTIME_DIR/gpuslice"
// when `xdg_runtime_dir` is a directory owned by `uid`, else
// "/dev/shm/gpuslice-<uid>". Makes one stat(2) call, no writes.
std::string StandaloneSliceDir(const char* xdg_runtime_dir, uid_t uid);

// "<dir>/slice-<pid>-<nonce>.region": unique per slice root process.
std::string StandaloneSlicePath(const std::string& dir, pid_t pid, uint64_t nonce);

// Creates `dir` (mode 0700) if missing and checks it is a directory owned by
// `uid` that nobody else can write to. PermissionDenied otherwise.
core::Status PrepareSliceDir(const std::string& dir, uid_t uid);

}  // namespace gpuslice::shim
