#include "daemon/node/doctor.h"

#include "daemon/node/child_probe.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

std::vector<std::string> CudartCandidates() {
  std::vector<std::string> dirs;
  if (const char* lp = getenv("LD_LIBRARY_PATH")) {
    std::string s = lp;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  if (const char* home = getenv("CUDA_HOME")) dirs.push_back(std::string(home) + "/lib64");
  for (const char* d : {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
                        "/usr/lib/x86_64-linux-gnu", "/usr/lib64"}) {
    dirs.push_back(d);
  }
  std::vector<std::string> found;
  for (const std::string& d : dirs) {
    DIR* dir = opendir(d.c_str());
    if (dir == nullptr) continue;
    while (dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name.rfind("libcudart.so.", 0) == 0) found.push_back(d + "/" + name);
    }
    closedir(dir);
    if (!found.empty()) break;
  }
  return found;
}

}  // namespace

std::string CudaVersionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

CompatVerdict RuntimeCompatibility(int runtime, int driver) {
  std::string r = CudaVersionString(runtime), d = CudaVersionString(driver);
  if (runtime <= 0 || driver <= 0) return {false, "version unknown"};
  if (driver >= runtime) {
    return {true, "CUDA runtime " + r + " on a driver supporting CUDA " + d + ": compatible"};
  }
  if (runtime / 1000 == driver / 1000 && runtime / 1000 >= 11) {
    return {true, "CUDA runtime " + r + " on a driver supporting only CUDA " + d +
                      ": works through minor version compatibility; features that need a newer "
                      "driver (e.g. PTX compiled by a newer toolkit) will fail"};
  }
  return {false, "CUDA runtime " + r + " needs a driver supporting CUDA " + r +
                     " or newer; this driver supports " + d + ": upgrade the driver"};
}

const char* const kSimulatorScope =
    "SIMULATED GPU: programs on the CUDA driver API (cuda.h, linked with -lcuda) run unchanged, "
    "and kernels take time without computing; programs on the CUDA runtime (libcudart: PyTorch, "
    "TensorFlow, most CUDA C++) do not run (docs/SIMULATOR.md, \"Not simulated\")";

json Doctor::Run() {
  json checks = json::array();
  bool all_ok = true;
  auto add = [&](const std::string& name, bool ok, const std::string& detail) {
    checks.push_back({{"name", name}, {"ok", ok}, {"detail", detail}});
    all_ok = all_ok && ok;
  };
  // A fact the user must know that is not a fault of this machine: "ok" says
  // whether the thing works, but the machine's verdict does not count it.
  auto note = [&](const std::string& name, bool ok, const std::string& detail) {
    checks.push_back({{"name", name}, {"ok", ok}, {"note", true}, {"detail", detail}});
  };
  const bool simulated = inventory_.simulated();
  if (simulated) {
    note("simulator", true, kSimulatorScope);
  }

  // GPUs and NVML, as the daemon read them.
  bool have_nvml = !inventory_.source.empty();
  add("gpus", have_nvml && !inventory_.gpus.empty(),
      have_nvml ? std::to_string(inventory_.gpus.size()) + " GPU(s) from " +
                      (inventory_.simulated() ? "the SIMULATED GPU (no NVIDIA driver found)"
                                              : "NVML") +
                      " via " + inventory_.library
                : "NVML could not be read");
  add("nvml", have_nvml,
      have_nvml ? "NVML " + inventory_.nvml_version + ", driver " + inventory_.driver_version
                : "no NVML");

  if (!options_.job_tracking.empty()) {
    add("job_tracking", options_.job_cgroups, options_.job_tracking);
  }

  // The CUDA driver: loaded the way a job loads it.
  std::string cuda_lib = inventory_.simulated() && !options_.sim_lib_dir.empty()
                             ? options_.sim_lib_dir + "/libcuda.so.1"
                             : "libcuda.so.1";
  ProbeResult driver = RunInChild(options_.job_env, [&]() -> ProbeResult {
    void* h = dlopen(cuda_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return {false, std::string("cannot load ") + cuda_lib + ": " + dlerror()};
    using InitFn = int (*)(unsigned);
    using VersionFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
    auto version = reinterpret_cast<VersionFn>(dlsym(h, "cuDriverGetVersion"));
    if (init == nullptr || version == nullptr) return {false, "libcuda lacks cuInit"};
    int v = 0;
    if (version(&v) != 0) return {false, "cuDriverGetVersion failed"};
    int rc = init(0);
    if (rc != 0) return {false, std::to_string(v) + " cuInit failed with CUresult " + std::to_string(rc)};
    return {true, std::to_string(v)};
  });
  int driver_version = driver.ok ? std::atoi(driver.text.c_str()) : 0;
  add("cuda_driver", driver.ok,
      driver.ok ? "CUDA driver API " + CudaVersionString(driver_version) + " (" + cuda_lib + ")"
                : driver.text);

  // The shim: does it load into a process?
  if (options_.shim_path.empty() || access(options_.shim_path.c_str(), R_OK) != 0) {
    add("shim", false, "shim not found at '" + options_.shim_path + "'");
  } else {
    ProbeResult shim = RunInChild(options_.job_env, [&]() -> ProbeResult {
      void* h = dlopen(options_.shim_path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) return {false, dlerror()};
      return {true, "loads"};
    });
    add("shim", shim.ok, options_.shim_path + ": " + shim.text);
  }

  // The installed CUDA runtime, if any, against the driver.
  std::vector<std::string> cudart = CudartCandidates();
  if (simulated) {
    // Its version would match, but the simulated driver lacks what it needs.
    note("cuda_runtime", false,
         (cudart.empty() ? std::string("no libcudart found") : cudart[0]) +
             ": CUDA runtime programs do not run on the SIMULATED GPU (their CUDA calls fail "
             "with 'operation not supported'); they need an NVIDIA GPU and driver");
  } else if (cudart.empty()) {
    add("cuda_runtime", true,
        "no libcudart found (frameworks such as PyTorch bring their own; nothing to check)");
  } else {
    ProbeResult rt = RunInChild(options_.job_env, [&]() -> ProbeResult {
      void* h = dlopen(cudart[0].c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) return {false, dlerror()};
      using Fn = int (*)(int*);
      auto fn = reinterpret_cast<Fn>(dlsym(h, "cudaRuntimeGetVersion"));
      int v = 0;
      if (fn == nullptr || fn(&v) != 0) return {false, "cudaRuntimeGetVersion failed"};
      return {true, std::to_string(v)};
    });
    if (!rt.ok) {
      add("cuda_runtime", false, cudart[0] + ": " + rt.text);
    } else {
      CompatVerdict verdict = RuntimeCompatibility(std::atoi(rt.text.c_str()), driver_version);
      add("cuda_runtime", verdict.compatible, cudart[0] + ": " + verdict.detail);
    }
  }
  return {{"ok", all_ok},
          {"simulated", inventory_.simulated()},
          {"driver_version", inventory_.driver_version},
          {"nvml_version", inventory_.nvml_version},
          {"cuda_driver_version", driver_version},
          {"checks", checks}};
}

}  // namespace gpuslice::daemon
