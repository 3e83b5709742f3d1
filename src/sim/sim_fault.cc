// gpuslice-sim-fault: injects faults into the simulated GPU, for tests and
// demos of monitoring (docs/SIMULATOR.md, "Faults"). Opens the same device
// state as every simulated process (GPUSLICE_SIM_STATE, GPUSLICE_SIM_GPUS,
// ...), so NVML in any process, the daemon's included, sees the fault.
//
//   gpuslice-sim-fault xid GPU CODE                   an XID event
//   gpuslice-sim-fault ecc GPU CORRECTED UNCORRECTED  add volatile ECC errors
//   gpuslice-sim-fault temperature GPU CELSIUS|auto   fix the temperature
//
// Exits 0 when done, 2 on a usage error or when the state cannot be opened.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/version.h"
#include "sim/device_model.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: gpuslice-sim-fault xid GPU CODE\n"
               "       gpuslice-sim-fault ecc GPU CORRECTED UNCORRECTED\n"
               "       gpuslice-sim-fault temperature GPU CELSIUS|auto\n");
  return 2;
}

// A non-negative decimal number, or false.
bool Number(const char* text, unsigned long long* out) {
  char* end = nullptr;
  if (text[0] == '-' || text[0] == '\0') return false;
  *out = std::strtoull(text, &end, 10);
  return *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("gpuslice-sim-fault %s\n", std::string(gpuslice::core::Version()).c_str());
    return 0;
  }
  if (argc < 4) return Usage();
  const std::string what = argv[1];
  unsigned long long gpu = 0;
  if (!Number(argv[2], &gpu)) {
    std::fprintf(stderr, "gpuslice-sim-fault: bad GPU index '%s'\n", argv[2]);
    return 2;
  }
  auto options = gpuslice::sim::ModelOptionsFromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "gpuslice-sim-fault: %s\n", options.status().message().c_str());
    return 2;
  }
  auto model = gpuslice::sim::DeviceModel::Open(*options);
  if (!model.ok()) {
    std::fprintf(stderr, "gpuslice-sim-fault: %s\n", model.status().message().c_str());
    return 2;
  }
  if (gpu >= (*model)->device_count()) {
    std::fprintf(stderr, "gpuslice-sim-fault: no GPU %llu (the simulated machine has %u)\n", gpu,
                 (*model)->device_count());
    return 2;
  }
  const uint32_t device = uint32_t(gpu);
  unsigned long long a = 0, b = 0;
  if (what == "xid" && argc == 4 && Number(argv[3], &a) && a > 0 && a <= 0xffffffffull) {
    (*model)->faults().InjectXid(device, uint32_t(a));
  } else if (what == "ecc" && argc == 5 && Number(argv[3], &a) && Number(argv[4], &b)) {
    (*model)->faults().AddEccErrors(device, a, b);
  } else if (what == "temperature" && argc == 4 && std::string(argv[3]) == "auto") {
    (*model)->faults().SetTemperature(device, 0);
  } else if (what == "temperature" && argc == 4 && Number(argv[3], &a) && a > 0 && a < 200) {
    (*model)->faults().SetTemperature(device, int32_t(a));
  } else {
    return Usage();
  }
  return 0;
}
