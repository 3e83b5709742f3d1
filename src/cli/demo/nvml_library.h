#pragma once

// Loads libnvidia-ml.so.1 (NVIDIA's or our simulated one, whichever the
// dynamic loader finds) and resolves every entry point of nvml_abi.h. This is
// the one border where nvmlReturn_t becomes a Status for the CLI tools.

#include <string>

#include "core/nvml_abi.h"
#include "core/status.h"

namespace gpuslice::cli {

class NvmlLibrary {
 public:
  NvmlLibrary() = default;
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // dlopen()s `path` (default: the soname, found through the loader's search
  // path) and calls nvmlInit_v2. Entry points the library lacks stay null.
  core::Status Open(const std::string& path = "libnvidia-ml.so.1");

  // "nvmlDeviceGetName: NVML_ERROR_INVALID_ARGUMENT (Invalid Argument)".
  core::Status Check(nvmlReturn_t r, const char* call) const;

#define GPUSLICE_NVML_MEMBER_(name, params) name##_fn name = nullptr;
  GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_MEMBER_)
#undef GPUSLICE_NVML_MEMBER_
  nvmlErrorString_fn nvmlErrorString = nullptr;

 private:
  void* handle_ = nullptr;
  bool initialised_ = false;
};

}  // namespace gpuslice::cli
