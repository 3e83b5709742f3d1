#pragma once

// The simulated machine's hardware: which GPUs exist, their properties and
// MIG layout. Parsed from GPUSLICE_SIM_GPUS (a short spec) or
// GPUSLICE_SIM_CONFIG (a JSON file); see docs/SIMULATOR.md for the grammar
// and schema. Pure parsing: no shared memory, no processes.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sim/state_layout.h"

namespace gpuslice::sim {

// One MIG instance (a GPU instance with one compute instance spanning it).
struct MigSpec {
  std::string profile;          // "1g.10gb"
  uint32_t compute_slices = 0;  // Of the GPU's 7.
  uint32_t memory_slices = 0;   // Of the GPU's 8.
  uint64_t memory_bytes = 0;
  uint32_t sm_count = 0;
};

struct DeviceSpec {
  std::string model;  // Catalog key, "H100-80GB"; "custom" when fully specified in JSON.
  std::string name;   // As NVML/CUDA report it: "NVIDIA H100 80GB HBM3".
  std::string uuid;   // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; derived when empty.
  uint64_t total_memory = 0;
  uint32_t sm_count = 0;
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint32_t pci_domain = 0;
  uint32_t pci_bus = 0;
  uint32_t pci_device = 0;
  uint32_t clock_khz = 0;         // SM boost clock.
  uint32_t memory_clock_khz = 0;  // Memory clock.
  uint32_t memory_bus_width = 0;  // Bits.
  uint32_t l2_cache_bytes = 0;
  uint32_t power_limit_mw = 0;  // TDP: power at full utilisation.
  uint32_t idle_power_mw = 0;
  bool mig_capable = false;
  std::vector<MigSpec> mig;  // Empty: MIG disabled.
};

struct SimConfig {
  std::vector<DeviceSpec> devices;
  // Order-independent digest of everything above; stored in the state file
  // so a process with a different configuration notices.
  uint64_t Fingerprint() const;
};

using layout::kMaxDevices;
using layout::kMaxMigPerDevice;

// Short spec: "2xH100-80GB", "1xA100-40GB:mig=1g.5gb*7",
// "H100-80GB,1xL4:mem=20GiB". Errors name the offending token.
core::Result<SimConfig> ParseGpuSpec(std::string_view spec);

// JSON document (the contents of a GPUSLICE_SIM_CONFIG file).
core::Result<SimConfig> ParseConfigJson(std::string_view json_text);

// The configuration a process should use, from its environment:
// GPUSLICE_SIM_CONFIG (file) wins over GPUSLICE_SIM_GPUS; neither set gives
// the default, one H100-80GB. `*explicit_config` tells whether the
// environment named one (a process with no explicit configuration accepts
// whatever an existing state file holds).
core::Result<SimConfig> ConfigFromEnvironment(bool* explicit_config);

// Known models, for error messages and docs: "A100-40GB, A100-80GB, ...".
std::string KnownModels();

}  // namespace gpuslice::sim
