#pragma once

// CDI (Container Device Interface: podman, containerd, CRI-O, Docker >= 25
// read it): one spec per running job, kind `gpuslice.dev/slice`, device
// name = the job id, so `podman run --device gpuslice.dev/slice=12 IMAGE`
// runs IMAGE inside job 12's slice. The spec injects what the slice needs
// and nothing more: the GPUs' device nodes (and nvidiactl, nvidia-uvm when
// present), the shim and the driver libraries (read-only), the slice's
// region (the job's own, read-write), the daemon's limits page (read-only:
// the job cannot raise its limit from inside either), the coordination
// directory, and the environment the daemon gives a host job. See
// docs/CONTAINERS.md.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/container_flags.h"
#include "core/status.h"

namespace gpuslice::daemon {

inline constexpr char kCdiKind[] = "gpuslice.dev/slice";
// The CDI version of the spec: what podman 4.3 (Debian 12) reads.
inline constexpr char kCdiVersion[] = "0.5.0";
// Where the shim and the driver libraries appear inside a container.
inline constexpr char kCdiShimPath[] = "/usr/lib/gpuslice/libgpuslice.so";
inline constexpr char kCdiDriverDir[] = "/usr/lib/gpuslice/driver";

using CdiMount = core::ContainerMount;

// Everything one job's device injects.
struct CdiSlice {
  uint64_t job_id = 0;
  std::vector<std::string> device_nodes;  // Host paths, injected at the same path.
  std::vector<CdiMount> mounts;
  std::vector<std::string> env;  // "K=V".
  // Supplementary groups of the container's processes: an external job's
  // slice group (SliceLimits::shared_gid), so that whatever uid the
  // container runs as reaches its region and members file.
  std::vector<uint32_t> additional_gids;
  friend bool operator==(const CdiSlice&, const CdiSlice&) = default;
};

// Where the driver says which capability device node grants access to a
// MIG instance, and where those nodes are.
inline constexpr char kMigMinorsPath[] = "/proc/driver/nvidia-caps/mig-minors";
inline constexpr char kNvidiaCapsDir[] = "/dev/nvidia-caps";
// The capability nodes a process needs to use MIG instance (`gi`, `ci`) of
// the GPU with device minor `gpu_minor`: the GPU instance's and the compute
// instance's "access" capabilities, from `mig_minors` (the text of
// kMigMinorsPath: lines "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13").
std::vector<std::string> MigCapabilityNodes(std::string_view mig_minors, uint32_t gpu_minor,
                                            uint32_t gi, uint32_t ci);

// The simulated GPU's state file `state` (GPUSLICE_SIM_STATE) for a
// container, read-write: its folder when the folder holds nothing else (the
// simulator replaces a stale state file by a new inode, which a mount of the
// file would not follow), else the file alone, with a warning logged once:
// a folder holding anything else (a daemon's socket or state) is never
// mounted. Nothing when the file does not exist.
std::optional<CdiMount> SimStateMount(const std::string& state);

// The spec document (JSON, which every CDI reader accepts).
nlohmann::json CdiSpec(const CdiSlice& slice);
// "gpuslice-12.json".
std::string CdiSpecFileName(uint64_t job_id);

// The specs in one directory, kept equal to the running jobs. Writes are
// atomic (a temporary file renamed into place, 0644), so an engine never
// reads half a spec. Files of ours (gpuslice-*.json) whose job is not
// running are removed, including those a previous daemon left.
class CdiSpecs {
 public:
  explicit CdiSpecs(std::string dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }

  // Writes (or rewrites, when it changed) the spec of one job.
  core::Status Write(const CdiSlice& slice);
  void Remove(uint64_t job_id);
  // Makes the directory hold exactly `running`'s specs.
  core::Status Sync(const std::map<uint64_t, CdiSlice>& running);

 private:
  core::Status CheckDir() const;

  std::string dir_;
  bool swept_ = false;                    // Stale files of earlier daemons removed.
  std::map<uint64_t, CdiSlice> written_;  // What is on disk, as we wrote it.
};

}  // namespace gpuslice::daemon
