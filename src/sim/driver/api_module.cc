// Modules, functions and kernel launches.

#include <cstring>
#include <fstream>
#include <sstream>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

// Kernel names declared in PTX text (".entry name" / ".visible .entry name(").
// Binary images (cubin, fatbin) are accepted with any function name.
std::set<std::string> PtxEntries(const char* image) {
  std::set<std::string> out;
  if (std::strstr(image, ".version") == nullptr && std::strstr(image, ".entry") == nullptr) {
    return out;
  }
  const char* p = image;
  while ((p = std::strstr(p, ".entry")) != nullptr) {
    p += 6;
    while (*p == ' ' || *p == '\t') ++p;
    const char* start = p;
    while (*p != '\0' && *p != '(' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '{') ++p;
    if (p > start) out.emplace(start, p);
  }
  return out;
}

bool IsTextImage(const void* image) {
  const unsigned char* b = static_cast<const unsigned char*>(image);
  for (int i = 0; i < 4; ++i) {
    if (b[i] == 0 || b[i] > 0x7e) return false;  // ELF / fatbin magic are not text.
  }
  return true;
}

CUresult LoadModule(CUmodule* out, const void* image, const std::string& text) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new Module();
  m->ctx = ctx;
  if (!text.empty()) {
    m->entries = PtxEntries(text.c_str());
  } else if (IsTextImage(image)) {
    m->entries = PtxEntries(static_cast<const char*>(image));
  }
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Driver::Get().modules.insert(m);
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult ValidFunction(CUfunction f, Function** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Function* fn = reinterpret_cast<Function*>(f);
  if (fn == nullptr || Driver::Get().functions.count(fn) == 0) return CUDA_ERROR_INVALID_HANDLE;
  *out = fn;
  return CUDA_SUCCESS;
}

CUresult DoLaunch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned shared,
                  CUstream stream, void** params, void** extra, bool cooperative) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Function* fn = nullptr;
  if (CUresult r = ValidFunction(f, &fn); r != CUDA_SUCCESS) return r;
  if (fn->module->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || threads == 0 || threads > 1024 ||
      block[0] > 1024 || block[1] > 1024 || block[2] > 64 || grid[0] > 2147483647u ||
      grid[1] > 65535 || grid[2] > 65535) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shared > static_cast<unsigned>(fn->max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
  Launch l;
  l.func = fn;
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = grid[i];
    l.block[i] = block[i];
  }
  l.shared_mem = shared;
  if (cooperative) {
    uint64_t per_sm = std::max<uint64_t>(1, std::min<uint64_t>(32, 2048 / threads));
    if (uint64_t{grid[0]} * grid[1] * grid[2] > per_sm * ctx->device->info.sm_count) {
      return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
  }
  l.cost_ns = KernelCostNs(l, params, extra, ctx->device->info.sm_count);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  Work w;
  w.kind = Work::Kind::kKernel;
  w.cost_ns = l.cost_ns;
  return SubmitLocked(s, std::move(w), &l);
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule(module, image, "");
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image,
                                                       unsigned int, CUjit_option*, void**) {
  return LoadModule(module, image, "");
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return LoadModule(module, image, "");
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(fname, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream buf;
  buf << in.rdbuf();
  std::string data = buf.str();
  if (data.empty()) return CUDA_ERROR_INVALID_IMAGE;
  bool text = IsTextImage(data.c_str());
  return LoadModule(module, data.c_str(), text ? data : std::string());
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Module* m = reinterpret_cast<Module*>(handle);
  if (m == nullptr || drv.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, f] : m->functions) {
    drv.functions.erase(f);
    delete f;
  }
  drv.modules.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction* out, CUmodule handle,
                                                        const char* name) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Module* m = reinterpret_cast<Module*>(handle);
  if (m == nullptr || drv.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!m->entries.empty() && m->entries.count(name) == 0) return CUDA_ERROR_NOT_FOUND;
  Function*& f = m->functions[name];
  if (f == nullptr) {
    f = new Function();
    f->module = m;
    f->name = name;
    // "sim_sleep_us", also as a C++-mangled name (_Z12sim_sleep_usj).
    f->sleep_kernel =
        f->name == "sim_sleep_us" || f->name.find("12sim_sleep_us") != std::string::npos;
    drv.functions.insert(f);
  }
  *out = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr*, size_t*, CUmodule handle,
                                                         const char* name) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Module* m = reinterpret_cast<Module*>(handle);
  if (m == nullptr || Driver::Get().modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_FOUND;  // Module globals are not simulated.
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attr,
                                                       CUfunction f) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Function* fn = nullptr;
  if (CUresult r = ValidFunction(f, &fn); r != CUDA_SUCCESS) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = 32;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = fn->max_dynamic_shared;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: {
      const auto& g = fn->module->ctx->device->gpu;
      *pi = static_cast<int>(g.cc_major * 10 + g.cc_minor);
      break;
    }
    default:
      if (attr < 0 || attr >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *pi = 0;
  }
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr,
                                                       int value) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Function* fn = nullptr;
  if (CUresult r = ValidFunction(f, &fn); r != CUDA_SUCCESS) return r;
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
    fn->max_dynamic_shared = value;
  } else if (attr != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT &&
             attr != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH &&
             attr != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT &&
             attr != CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH &&
             attr != CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED &&
             attr != CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction f, CUfunc_cache) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Function* fn = nullptr;
  return ValidFunction(f, &fn);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                                   unsigned int gz, unsigned int bx,
                                                   unsigned int by, unsigned int bz,
                                                   unsigned int shared, CUstream stream,
                                                   void** params, void** extra) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return DoLaunch(f, grid, block, shared, stream, params, extra, false);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx,
                                                              unsigned int gy, unsigned int gz,
                                                              unsigned int bx, unsigned int by,
                                                              unsigned int bz, unsigned int shared,
                                                              CUstream stream, void** params) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return DoLaunch(f, grid, block, shared, stream, params, nullptr, true);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                                     void** params, void** extra) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = config->attrs[i].value.cooperative != 0;
    }
  }
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return DoLaunch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra,
                  cooperative);
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuLaunchKernel_ptsz, cuLaunchKernel)
GPUSLICE_CU_ALIAS(cuLaunchKernelEx_ptsz, cuLaunchKernelEx)
GPUSLICE_CU_ALIAS(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel)
