#pragma once

// The shim's configuration, read from the environment once, at the first
// CUDA or NVML call (never in the library constructor, never on a hot path).
//
//   GPUSLICE_DISABLE=1           pass every call straight through.
//   GPUSLICE_MEMORY_LIMIT=4GiB   standalone limit, every device the process
//                                sees; or "0=4GiB,1=2GiB" per visible ordinal.
//   GPUSLICE_SLICE=/path         the slice region (set by the daemon, or by
//                                the shim itself for standalone descendants).
//   GPUSLICE_LOG_LEVEL=warn      error|warn|info|debug.
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
#include "shim/log.h"

namespace gpuslice::shim {

inline constexpr char kEnvDisable[] = "GPUSLICE_DISABLE";
inline constexpr char kEnvMemoryLimit[] = "GPUSLICE_MEMORY_LIMIT";
inline constexpr char kEnvSlice[] = "GPUSLICE_SLICE";
inline constexpr char kEnvLogLevel[] = "GPUSLICE_LOG_LEVEL";

struct ShimConfig {
  bool disabled = false;
  LogLevel log_level = LogLevel::kWarn;
  std::string slice_path;          // Empty: no slice (pass-through).
  bool has_limit = false;          // GPUSLICE_MEMORY_LIMIT parsed fine.
  std::map<int, uint64_t> limits;  // Ordinal -> bytes; -1: every device.
  std::vector<std::string> problems;

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
