#include "shim/base/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/units.h"
#include "slice/region/region_layout.h"

namespace gpuslice::shim {

uint64_t ShimConfig::LimitFor(int ordinal) const {
  if (!has_limit) return slice::layout::kUnlimited;
  auto it = limits.find(ordinal);
  if (it != limits.end()) return it->second;
  it = limits.find(-1);
  return it != limits.end() ? it->second : slice::layout::kUnlimited;
}

ShimConfig ReadShimConfig(const std::function<const char*(const char*)>& env) {
  ShimConfig c;
  if (const char* level = env(kEnvLogLevel); level != nullptr && *level != '\0') {
    if (!ParseLogLevel(level, &c.log_level)) {
      c.problems.push_back(std::string(kEnvLogLevel) + ": unknown level '" + level +
                           "' (expected error, warn, info or debug); using warn");
    }
  }
  if (const char* disable = env(kEnvDisable); disable != nullptr && *disable != '\0') {
    if (std::strcmp(disable, "1") == 0) {
      c.disabled = true;
      return c;
    }
    if (std::strcmp(disable, "0") != 0) {
      c.problems.push_back(std::string(kEnvDisable) + ": bad value '" + disable +
                           "' (expected 0 or 1); the shim stays enabled");
    }
  }
  if (const char* slice = env(kEnvSlice); slice != nullptr && *slice != '\0') {
    if (slice[0] != '/') {
      c.problems.push_back(std::string(kEnvSlice) + ": '" + slice +
                           "' is not an absolute path; running without a memory limit");
    } else {
      c.slice_path = slice;
    }
  }
  if (const char* limits = env(kEnvLimits); limits != nullptr && *limits != '\0') {
    // Taken as given: whatever it names must pass LimitsPage::OpenReadOnly's
    // checks, and a page that cannot be used means no memory, never no limit.
    c.limits_path = limits;
  }
  if (const char* limit = env(kEnvMemoryLimit); limit != nullptr && *limit != '\0') {
    core::Result<std::map<int, uint64_t>> parsed = core::ParsePerDeviceBytes(limit);
    if (parsed.ok()) {
      c.has_limit = true;
      c.limits = std::move(*parsed);
    } else {
      c.problems.push_back(std::string(kEnvMemoryLimit) + "='" + limit +
                           "': " + parsed.status().message() +
                           "; running without a memory limit");
    }
  }
  if (const char* share = env(kEnvComputeShare); share != nullptr && *share != '\0') {
    core::Result<uint32_t> parsed = core::ParseShareMilli(share);
    if (parsed.ok() && *parsed > 0 && *parsed <= 1000) {
      c.has_share = true;
      c.share_milli = *parsed;
    } else {
      c.problems.push_back(std::string(kEnvComputeShare) + "='" + share + "': " +
                           (parsed.ok() ? std::string("must be above 0% and at most 100%")
                                        : parsed.status().message()) +
                           "; running without a compute share");
    }
  }
  if (const char* mode = env(kEnvComputeMode); mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "hard") == 0) {
      c.compute_mode = kRegionModeHard;
    } else if (std::strcmp(mode, "work-conserving") == 0) {
      c.compute_mode = kRegionModeWorkConserving;
    } else {
      c.problems.push_back(std::string(kEnvComputeMode) + ": unknown mode '" + mode +
                           "' (expected hard or work-conserving); using hard");
    }
  }
  if (const char* priority = env(kEnvPriority); priority != nullptr && *priority != '\0') {
    core::Result<core::Priority> parsed = core::ParsePriority(priority);
    if (parsed.ok()) {
      c.priority = uint32_t(*parsed) + 1;
    } else {
      c.problems.push_back(std::string(kEnvPriority) + "='" + priority +
                           "': " + parsed.status().message() + "; using normal");
    }
  }
  if (const char* dir = env(kEnvCoordDir); dir != nullptr && *dir != '\0') {
    if (dir[0] != '/') {
      c.problems.push_back(std::string(kEnvCoordDir) + ": '" + dir +
                           "' is not an absolute path; using the default");
    } else {
      c.coord_dir = dir;
    }
  }
  if (const char* corun = env(kEnvComputeCorun); corun != nullptr && *corun != '\0') {
    if (std::strcmp(corun, "0") == 0) {
      c.compute_corun = false;
    } else if (std::strcmp(corun, "1") != 0) {
      c.problems.push_back(std::string(kEnvComputeCorun) + ": bad value '" + corun +
                           "' (expected 0 or 1); co-running stays on");
    }
  }
  // A standalone slice exists only with a valid limit or share; a daemon slice
  // (region made by the daemon) carries its limits in the region.
  return c;
}

std::string StandaloneSliceDir(const char* xdg_runtime_dir, uid_t uid) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
    struct stat st {};
    if (stat(xdg_runtime_dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid) {
      return std::string(xdg_runtime_dir) + "/gpuslice";
    }
  }
  return "/dev/shm/gpuslice-" + std::to_string(uid);
}

std::string StandaloneSlicePath(const std::string& dir, pid_t pid, uint64_t nonce) {
  char name[96];
  std::snprintf(name, sizeof(name), "/slice-%d-%llx.region", int(pid),
                static_cast<unsigned long long>(nonce));
  return dir + name;
}

core::Status PrepareSliceDir(const std::string& dir, uid_t uid) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return core::PermissionDeniedError("cannot create slice directory " + dir + ": " +
                                       std::strerror(errno));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return core::PermissionDeniedError("cannot stat slice directory " + dir + ": " +
                                       std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return core::PermissionDeniedError("slice directory " + dir + " is not a directory");
  }
  if (st.st_uid != uid) {
    return core::PermissionDeniedError("slice directory " + dir + " belongs to uid " +
                                       std::to_string(st.st_uid) + ", not " +
                                       std::to_string(uid) + "; refusing to use it");
  }
  if ((st.st_mode & 0077) != 0) {
    return core::PermissionDeniedError("slice directory " + dir +
                                       " is accessible by other users; refusing to use it");
  }
  return core::Status::Ok();
}

}  // namespace gpuslice::shim
