#include "cli/demo/nvml_library.h"

#include <dlfcn.h>

namespace gpuslice::cli {

NvmlLibrary::~NvmlLibrary() {
  if (initialised_ && nvmlShutdown) nvmlShutdown();
  if (handle_) dlclose(handle_);
}

core::Status NvmlLibrary::Open(const std::string& path) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    return core::UnavailableError("cannot load " + path + ": " + (err ? err : "unknown error"));
  }
#define GPUSLICE_NVML_RESOLVE_(name, params) \
  name = reinterpret_cast<name##_fn>(dlsym(handle_, #name));
  GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_RESOLVE_)
#undef GPUSLICE_NVML_RESOLVE_
  nvmlErrorString = reinterpret_cast<nvmlErrorString_fn>(dlsym(handle_, "nvmlErrorString"));
  if (!nvmlInit_v2) return core::UnavailableError(path + " has no nvmlInit_v2");
  GPUSLICE_RETURN_IF_ERROR(Check(nvmlInit_v2(), "nvmlInit_v2"));
  initialised_ = true;
  return core::Status::Ok();
}

core::Status NvmlLibrary::Check(nvmlReturn_t r, const char* call) const {
  if (r == NVML_SUCCESS) return core::Status::Ok();
  std::string msg = std::string(call) + ": NVML error " + std::to_string(static_cast<int>(r));
  if (nvmlErrorString) msg += " (" + std::string(nvmlErrorString(r)) + ")";
  return core::UnavailableError(msg);
}

}  // namespace gpuslice::cli
