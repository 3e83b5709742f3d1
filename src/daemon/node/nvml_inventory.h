#pragma once

// The GPU inventory from NVML, loaded with dlopen so the daemon runs on
// machines without NVIDIA's driver. Mode kAuto tries the system's
// libnvidia-ml.so.1 and falls back to the simulated one in `sim_lib_dir`
// (our build's lib/sim) when there is none or it sees no GPU; the snapshot's
// `source` says which, and the daemon says so in its log and in `gpus`.
//
// Topology: GPUs whose PCIe common ancestor is at most a PCIe switch share an
// island ("pcie"); GPUs with an active NVLink share one island ("nvlink", as
// on NVSwitch systems). Both come from optional NVML calls; without them the
// topology is unknown (-1) and placement ignores islands.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/nvml_abi.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

struct Nvml;

enum class GpuSourceMode { kAuto, kNvml, kSimulated };
core::Result<GpuSourceMode> ParseGpuSourceMode(std::string_view text);

class NvmlInventory : public Inventory {
 public:
  // `driver_root`: where the host's NVIDIA driver root is in the daemon's
  // view ("/" or "": the system's library search); NVML and the CUDA
  // driver are then loaded from the first of the usual library folders
  // under it that holds libnvidia-ml.so.1.
  NvmlInventory(GpuSourceMode mode, std::string sim_lib_dir, std::string driver_root = "/")
      : mode_(mode), sim_lib_dir_(std::move(sim_lib_dir)), driver_root_(std::move(driver_root)) {}
  ~NvmlInventory() override;
  core::Result<InventorySnapshot> Read() override;
  core::Result<std::vector<GpuUsage>> Usage() override;

 private:
  core::Result<InventorySnapshot> ReadFrom(const std::string& library, bool simulated);

  // NVIDIA's libnvidia-ml.so.1: a name for the system's search, or its path
  // under driver_root_.
  core::Result<std::string> DriverLibrary(const std::string& name) const;

  GpuSourceMode mode_;
  std::string sim_lib_dir_;
  std::string driver_root_;
  void* handle_ = nullptr;
  size_t gpu_count_ = 0;
  // Per GPU: in MIG mode at the last Read(), its GPU instances then, and
  // whether NVML measures it with GPM (Hopper and newer).
  std::vector<bool> mig_enabled_;
  std::vector<std::vector<uint32_t>> mig_gpu_instances_;
  std::vector<bool> gpm_supported_;
  // GPM: the previous sample of each GPU (gpu instance kNoMigInstance) and
  // GPU instance; a figure is the activity between it and the next one.
  std::optional<double> GpmUtil(const Nvml& n, nvmlDevice_t d, uint32_t gpu, uint32_t gpu_instance);
  void ForgetGpmSamples(const Nvml& n);
  struct GpmSeries {
    nvmlGpmSample_t sample = nullptr;
    std::chrono::steady_clock::time_point taken;
    std::optional<double> pct;  // Over the interval that ended with `sample`.
  };
  static constexpr std::chrono::milliseconds kGpmMinInterval{500};
  std::map<std::pair<uint32_t, uint32_t>, GpmSeries> gpm_samples_;
  // Per GPU: the newest per-process utilisation sample already seen, so each
  // Usage() averages only the samples since the previous one.
  std::vector<unsigned long long> last_sample_us_;
  // XID events: one event set for every GPU that supports them, drained on
  // each Usage(); counts and last code per GPU.
  void WatchXids();
  nvmlEventSet_t xid_events_ = nullptr;
  std::vector<bool> xid_watched_;
  std::vector<uint64_t> xid_errors_;
  std::vector<uint32_t> last_xid_;
  std::vector<uint32_t> last_critical_xid_;
};

}  // namespace gpuslice::daemon
