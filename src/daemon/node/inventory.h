#pragma once

// What GPUs this machine has, behind a seam: NvmlInventory (nvml_inventory.h)
// reads NVML (the real libnvidia-ml.so.1, or our simulated one), tests use
// FakeInventory. The daemon reads the inventory at start and answers
// `gpuslice gpus` from a fresh Usage() each time.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::daemon {

struct MigInstance {
  std::string uuid;     // "MIG-..."
  std::string profile;  // "1g.10gb"; empty when NVML does not say.
  uint64_t memory_total = 0;
  uint32_t gpu_instance_id = 0;
  uint32_t compute_instance_id = 0;
};

struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;   // "GPU-..."
  std::string model;  // "NVIDIA H100 80GB HBM3"
  uint64_t memory_total = 0;
  uint32_t sm_count = 0;  // 0 when unknown.
  std::string pci_bus_id;
  // The minor number of its device node /dev/nvidiaN (NVML), -1 when NVML
  // does not say. Not always its index: Slurm's gres.conf names GPUs by node.
  int minor = -1;
  // GPUs with the same island id are NVLink/PCIe-switch peers; -1: unknown.
  int island = -1;
  std::string link;  // "nvlink", "pcie" or "" (unknown).
  bool mig_enabled = false;
  std::vector<MigInstance> mig;
};

// NVML's gpuInstanceId / computeInstanceId of a process that does not run
// on a MIG device.
inline constexpr uint32_t kNoMigInstance = 0xFFFFFFFFu;

struct GpuProcess {
  uint32_t pid = 0;
  uint64_t used_memory = 0;
  // Its SM use over the last sampling interval (NVML per-process samples).
  uint32_t sm_util_pct = 0;
  // On a GPU in MIG mode, the MIG device it runs in (NVML's nvmlProcessInfo_t
  // gpuInstanceId and computeInstanceId, as in MigInstance); kNoMigInstance
  // otherwise, or when NVML does not say. A process on several MIG devices
  // of one GPU is listed once per device.
  uint32_t gpu_instance_id = kNoMigInstance;
  uint32_t compute_instance_id = kNoMigInstance;
};

// The MIG device of `gpu` that `p` runs in (same GPU and compute instance
// ids), or null when it runs on no MIG device that the inventory knows.
inline const MigInstance* MigInstanceOf(const GpuInfo& gpu, const GpuProcess& p) {
  if (p.gpu_instance_id == kNoMigInstance) return nullptr;
  for (const MigInstance& m : gpu.mig) {
    if (m.gpu_instance_id == p.gpu_instance_id && m.compute_instance_id == p.compute_instance_id) {
      return &m;
    }
  }
  return nullptr;
}

// Activity of one GPU instance of a GPU in MIG mode, from NVML's GPM
// (Hopper and newer): percent of the sampling interval during which its
// engines ran work. -1: NVML gives no figure (no GPM, as on an A100, or the
// first sample), which never means idle.
struct MigUsage {
  uint32_t gpu_instance_id = 0;
  double utilization_pct = -1;
  bool known() const { return utilization_pct >= 0; }
};

struct GpuUsage {
  uint32_t index = 0;
  uint64_t memory_used = 0;
  uint64_t memory_total = 0;
  uint32_t utilization_pct = 0;
  // False when NVML gives no utilisation for the GPU (MIG mode without GPM):
  // utilization_pct is then 0 and means nothing.
  bool utilization_known = true;
  // In MIG mode: one entry per GPU instance.
  std::vector<MigUsage> mig;
  uint32_t memory_util_pct = 0;
  int32_t temperature_c = -1;  // -1: unknown.
  uint32_t power_mw = 0;       // 0: unknown.
  // Health. Volatile ECC error counts (single-bit corrected, double-bit
  // uncorrected); -1 when NVML cannot tell (ECC off or not supported).
  int64_t ecc_corrected = -1;
  int64_t ecc_uncorrected = -1;
  // XID events seen since the daemon started watching (NVML events) and the
  // code of the last one (0: none yet); xid_watched is false when NVML
  // cannot deliver XID events for this GPU.
  bool xid_watched = false;
  uint64_t xid_errors = 0;
  uint32_t last_xid = 0;
  // The last XID that was not the application's own fault (IsApplicationXid):
  // the GPU is unhealthy from then on (0: none).
  uint32_t last_critical_xid = 0;
  std::vector<GpuProcess> processes;
};

// XIDs a program causes itself (an illegal address, a bad launch, a
// timeout it asked for: 13, 31, 43, 45, 68, 109): they say nothing about
// the GPU's health. Every other XID does.
bool IsApplicationXid(uint32_t xid);

// Whether a GPU is fit for new work, and if not why ("XID 79", "12
// uncorrected ECC errors"); "" when healthy (the device plugin's Unhealthy).
std::string UnhealthyReason(const GpuUsage& usage);

// The usage entry of GPU instance `gpu_instance_id`, or null.
inline const MigUsage* MigUsageOf(const GpuUsage& usage, uint32_t gpu_instance_id) {
  for (const MigUsage& m : usage.mig) {
    if (m.gpu_instance_id == gpu_instance_id) return &m;
  }
  return nullptr;
}

struct InventorySnapshot {
  // "nvml" (a real driver) or "simulated" (our libnvidia-ml.so.1).
  std::string source;
  std::string library;  // The path that was loaded.
  // `library` as the host sees it (the driver root's prefix taken off, see
  // NvmlInventory); "" = the same.
  std::string host_library;
  std::string driver_version;
  std::string nvml_version;
  int cuda_driver_version = 0;  // e.g. 13000.
  std::vector<GpuInfo> gpus;

  bool simulated() const { return source == "simulated"; }
};

class Inventory {
 public:
  virtual ~Inventory() = default;
  virtual core::Result<InventorySnapshot> Read() = 0;
  // Live figures for each GPU of the last Read().
  virtual core::Result<std::vector<GpuUsage>> Usage() = 0;
};

class FakeInventory : public Inventory {
 public:
  explicit FakeInventory(InventorySnapshot snapshot) : snapshot_(std::move(snapshot)) {}
  core::Result<InventorySnapshot> Read() override { return snapshot_; }
  // `usage` when a test set it, else idle GPUs.
  core::Result<std::vector<GpuUsage>> Usage() override {
    if (!usage.empty()) return usage;
    std::vector<GpuUsage> u;
    for (const GpuInfo& g : snapshot_.gpus) {
      GpuUsage gu;
      gu.index = g.index;
      gu.memory_total = g.memory_total;
      u.push_back(gu);
    }
    return u;
  }

  std::vector<GpuUsage> usage;

 private:
  InventorySnapshot snapshot_;
};

}  // namespace gpuslice::daemon
