#pragma once

// `gpuslice doctor`: is this machine able to run sliced GPU jobs? Driver,
// CUDA and NVML versions, whether the shim loads, whether the installed CUDA
// runtime is compatible with the driver. Each probe that loads a library runs
// in a forked child, so a crashing or hanging library cannot take the daemon
// down (a probe that takes over 5 s is reported as hung). A Slurm node's
// checks are the CLI's (src/slurm/slurm_doctor.h): the daemon links no
// integration.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

struct DoctorOptions {
  std::string shim_path;
  std::string sim_lib_dir;           // Where the simulated libcuda is, when simulated.
  std::vector<std::string> job_env;  // GPUSLICE_SIM_* for the probes.
  // How jobs are tracked (Launcher::Tracking) and whether by cgroup: without
  // cgroups a process that calls setsid escapes its job.
  std::string job_tracking;
  bool job_cgroups = false;
};

// CUDA versions are encoded as 1000 * major + 10 * minor (13000 = 13.0).
struct CompatVerdict {
  bool compatible = false;
  std::string detail;
};
// Whether a CUDA runtime of version `runtime` runs on a driver supporting
// `driver`: yes when the driver is at least as new; within one major version
// through CUDA's minor version compatibility (with a caveat); never across
// major versions.
CompatVerdict RuntimeCompatibility(int runtime, int driver);
std::string CudaVersionString(int v);

// What runs on the simulated GPU and what does not, as doctor says it.
extern const char* const kSimulatorScope;

class Doctor {
 public:
  Doctor(DoctorOptions options, const InventorySnapshot& inventory)
      : options_(std::move(options)), inventory_(inventory) {}
  // {"checks": [{"name", "ok", "detail"}...], "ok": all passed}. A check
  // with "note": true is a fact to know (on the simulated GPU: what runs and
  // that the CUDA runtime does not) and does not count towards "ok".
  nlohmann::json Run();

 private:
  DoctorOptions options_;
  const InventorySnapshot& inventory_;
};

}  // namespace gpuslice::daemon
