#include "sim/nvml/nvml_pci.h"

#include <charconv>
#include <string>

namespace gpuslice::sim {
namespace {

// Device ids of the boards in the simulator's catalog (sim/sim_config.cc).
struct ProductPciId {
  std::string_view name;
  uint32_t device_id;
};
constexpr ProductPciId kProductPciIds[] = {
    {"NVIDIA H100 80GB HBM3", 0x2330},
    {"NVIDIA H200", 0x2335},
    {"NVIDIA A100-SXM4-40GB", 0x20B0},
    {"NVIDIA A100-SXM4-80GB", 0x20B2},
    {"NVIDIA A30", 0x20B7},
    {"NVIDIA L40S", 0x26B9},
    {"NVIDIA L4", 0x27B8},
    {"NVIDIA A10", 0x2236},
    {"Tesla T4", 0x1EB8},
    {"Tesla V100-SXM2-32GB", 0x1DB5},
    {"NVIDIA GeForce RTX 4090", 0x2684},
};

bool ParseHexField(std::string_view text, size_t max_digits, uint32_t* out) {
  if (text.empty() || text.size() > max_digits) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 16);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

core::Result<PciAddress> ParsePciBusId(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return core::InvalidArgumentError("bad PCI bus id '" + std::string(text) +
                                      "': " + std::string(why));
  };
  const size_t dot = text.rfind('.');
  if (dot == std::string_view::npos) return bad("expected [domain:]bus:device.function");
  std::string_view head = text.substr(0, dot);
  PciAddress a;
  if (!ParseHexField(text.substr(dot + 1), 1, &a.function) || a.function > 7) {
    return bad("function must be one hex digit 0-7");
  }
  const size_t last_colon = head.rfind(':');
  if (last_colon == std::string_view::npos) return bad("expected [domain:]bus:device.function");
  if (!ParseHexField(head.substr(last_colon + 1), 2, &a.device) || a.device > 0x1F) {
    return bad("device must be hex 00-1f");
  }
  head = head.substr(0, last_colon);
  const size_t first_colon = head.rfind(':');
  std::string_view bus =
      first_colon == std::string_view::npos ? head : head.substr(first_colon + 1);
  if (!ParseHexField(bus, 2, &a.bus)) return bad("bus must be hex 00-ff");
  if (first_colon != std::string_view::npos &&
      !ParseHexField(head.substr(0, first_colon), 8, &a.domain)) {
    return bad("domain must be up to 8 hex digits");
  }
  return a;
}

uint32_t PciDeviceIdForName(std::string_view name) {
  uint32_t device_id = 0;
  for (const ProductPciId& p : kProductPciIds) {
    if (p.name == name) device_id = p.device_id;
  }
  return device_id << 16 | kNvidiaPciVendorId;
}

}  // namespace gpuslice::sim
