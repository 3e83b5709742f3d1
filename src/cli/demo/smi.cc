// gpuslice-smi: what NVML sees, in the spirit of nvidia-smi — each GPU's
// memory, utilisation, temperature and power, then every compute process with
// its memory and recent SM utilisation. Works against NVIDIA's NVML or our
// simulated one; under the shim it shows the slice's virtualised view.
//
//   gpuslice-smi            one snapshot
//   gpuslice-smi --loop 1   refresh every second (Ctrl-C to stop)

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cli/demo/nvml_library.h"
#include "core/units.h"
#include "core/version.h"

namespace gpuslice::cli {
namespace {

using core::FormatBytes;

std::string Bar(unsigned percent, int width = 20) {
  int filled = static_cast<int>(percent * width / 100);
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

// Process utilisation: the newest sample per pid from the last few seconds.
std::map<unsigned, unsigned> SmUtilByPid(const NvmlLibrary& nvml, nvmlDevice_t dev) {
  std::map<unsigned, unsigned> out;
  if (!nvml.nvmlDeviceGetProcessUtilization) return out;
  auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  unsigned long long since = static_cast<unsigned long long>(now_us) - 3'000'000ull;
  unsigned count = 0;
  nvmlReturn_t r = nvml.nvmlDeviceGetProcessUtilization(dev, nullptr, &count, since);
  if (r != NVML_ERROR_INSUFFICIENT_SIZE || count == 0) return out;
  std::vector<nvmlProcessUtilizationSample_t> samples(count);
  if (nvml.nvmlDeviceGetProcessUtilization(dev, samples.data(), &count, since) != NVML_SUCCESS) {
    return out;
  }
  std::map<unsigned, unsigned long long> newest;
  for (unsigned i = 0; i < count; ++i) {
    const auto& s = samples[i];
    if (s.timeStamp >= newest[s.pid]) {
      newest[s.pid] = s.timeStamp;
      out[s.pid] = s.smUtil;
    }
  }
  return out;
}

core::Status PrintSnapshot(const NvmlLibrary& nvml) {
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "?";
  nvml.nvmlSystemGetDriverVersion(driver, sizeof driver);
  int cuda = 0;
  nvml.nvmlSystemGetCudaDriverVersion(&cuda);
  unsigned n = 0;
  GPUSLICE_RETURN_IF_ERROR(nvml.Check(nvml.nvmlDeviceGetCount_v2(&n), "nvmlDeviceGetCount_v2"));
  std::printf("driver %s, CUDA %d.%d, %u GPU(s)\n", driver, cuda / 1000, (cuda % 1000) / 10, n);
  std::printf("%-3s %-24s %-22s %-26s %5s %6s\n", "GPU", "name", "memory used / total",
              "utilisation", "temp", "power");
  struct Proc {
    unsigned gpu;
    nvmlProcessInfo_t info;
    unsigned sm;
  };
  std::vector<Proc> procs;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t dev;
    GPUSLICE_RETURN_IF_ERROR(
        nvml.Check(nvml.nvmlDeviceGetHandleByIndex_v2(i, &dev), "nvmlDeviceGetHandleByIndex_v2"));
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "?";
    nvml.nvmlDeviceGetName(dev, name, sizeof name);
    nvmlMemory_t mem{};
    GPUSLICE_RETURN_IF_ERROR(
        nvml.Check(nvml.nvmlDeviceGetMemoryInfo(dev, &mem), "nvmlDeviceGetMemoryInfo"));
    nvmlUtilization_t util{};
    nvml.nvmlDeviceGetUtilizationRates(dev, &util);
    unsigned temp = 0, power_mw = 0;
    nvml.nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp);
    nvml.nvmlDeviceGetPowerUsage(dev, &power_mw);
    std::string memtext = FormatBytes(mem.used) + " / " + FormatBytes(mem.total);
    std::printf("%-3u %-24s %-22s %s %3u%% %4uC %5uW\n", i, name, memtext.c_str(),
                Bar(util.gpu).c_str(), util.gpu, temp, power_mw / 1000);
    unsigned count = 0;
    nvmlReturn_t r = nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, nullptr);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE && count > 0) {
      std::vector<nvmlProcessInfo_t> infos(count);
      if (nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos.data()) ==
          NVML_SUCCESS) {
        auto sm = SmUtilByPid(nvml, dev);
        for (unsigned k = 0; k < count; ++k) procs.push_back({i, infos[k], sm[infos[k].pid]});
      }
    }
  }
  std::printf("\n%-3s %-8s %-12s %-8s %s\n", "GPU", "pid", "memory", "SM util", "command");
  if (procs.empty()) std::printf("    (no compute processes)\n");
  for (const auto& p : procs) {
    char comm[64] = "?";
    std::string path = "/proc/" + std::to_string(p.info.pid) + "/comm";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      if (std::fgets(comm, sizeof comm, f)) comm[std::strcspn(comm, "\n")] = 0;
      std::fclose(f);
    }
    std::printf("%-3u %-8u %-12s %6u%%  %s\n", p.gpu, p.info.pid,
                FormatBytes(p.info.usedGpuMemory).c_str(), p.sm, comm);
  }
  return core::Status::Ok();
}

}  // namespace
}  // namespace gpuslice::cli

int main(int argc, char** argv) {
  double loop_s = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("gpuslice-smi %s\n", std::string(gpuslice::core::Version()).c_str());
      return 0;
    }
    if (std::strcmp(argv[i], "--loop") == 0 && i + 1 < argc) {
      loop_s = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gpuslice-smi [--loop SECONDS]\n");
      return 2;
    }
  }
  gpuslice::cli::NvmlLibrary nvml;
  if (auto s = nvml.Open(); !s.ok()) {
    std::fprintf(stderr, "gpuslice-smi: %s\n", s.message().c_str());
    return 1;
  }
  do {
    if (auto s = gpuslice::cli::PrintSnapshot(nvml); !s.ok()) {
      std::fprintf(stderr, "gpuslice-smi: %s\n", s.message().c_str());
      return 1;
    }
    if (loop_s > 0) {
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(loop_s));
      std::printf("\n");
    }
  } while (loop_s > 0);
  return 0;
}
