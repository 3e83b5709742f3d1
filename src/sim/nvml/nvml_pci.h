#pragma once

// PCI identity of simulated GPUs as NVML reports it: parsing the bus ids that
// nvmlDeviceGetHandleByPciBusId accepts, and the PCI device id of a product.

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace gpuslice::sim {

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;
  friend bool operator==(const PciAddress&, const PciAddress&) = default;
};

// "domain:bus:device.function" or "bus:device.function" (domain 0), fields
// in hex of any case and up to 8/2/2/1 digits: NVML's "00000000:18:00.0",
// CUDA's "0000:18:00.0", lspci's "18:00.0". Errors name the bad text.
core::Result<PciAddress> ParsePciBusId(std::string_view text);

// The PCI device id (high 16 bits) and NVIDIA's vendor id 0x10DE (low 16
// bits) of a product, by the name NVML reports ("NVIDIA H100 80GB HBM3").
// Products the simulator does not know get device id 0.
uint32_t PciDeviceIdForName(std::string_view name);

inline constexpr uint32_t kNvidiaPciVendorId = 0x10DE;

}  // namespace gpuslice::sim
