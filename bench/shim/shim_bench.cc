// What the shim costs, against the simulated driver, with and without the
// shim in the same run:
//   BM_Launch/{direct,shim}      ns per cuLaunchKernel (target: <= 50 ns added, median)
//   BM_AllocFree/{direct,shim}   ns per cuMemAlloc + cuMemFree pair (target: <= 1 us added)
//   BM_Init64/{direct,shim}      64 processes initialising CUDA at once, ms per
//                                process at p50/p99 (target: <= 50 ms added at p99)
//   BM_*Added                    the same, direct and shim interleaved batch by
//                                batch, reporting the added cost (robust to the
//                                load of a shared machine)
//   BM_LaunchAddedShare          direct, shim and shim with a compute share
//                                (GPUSLICE_COMPUTE_SHARE=100, within budget: the
//                                gate's fast path plus one slow path per batch of
//                                credits) interleaved; added ns of each
//
// "direct" calls the simulated libcuda.so.1 this program is linked with;
// "shim" calls the same functions through libgpuslice.so, loaded with
// dlopen(RTLD_LOCAL) so that it does not interpose the direct calls. The
// shim enforces a standalone slice (GPUSLICE_MEMORY_LIMIT), so the
// admission path is the one measured. "share" is a second instance of the
// shim (a copy of the library, so that dlopen loads it apart) initialised
// with a compute share, in a slice of its own.
//
// Each benchmark times batches of calls and reports the median and p99 of
// the per-call time over batches as counters p50_ns / p99_ns (ms for Init64).

#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct Api {
  PFN_cuLaunchKernel_v4000 launch = nullptr;
  PFN_cuMemAlloc_v3020 alloc = nullptr;
  PFN_cuMemFree_v3020 free = nullptr;
};

Api g_direct{&cuLaunchKernel, &cuMemAlloc_v2, &cuMemFree_v2};
Api g_shim;
Api g_share;  // Through a second shim instance with a compute share.
CUfunction g_kernel = nullptr;
std::string g_dir;

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = size_t(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void Report(benchmark::State& state, const std::vector<double>& per_call, const char* unit) {
  state.counters[std::string("p50_") + unit] = Percentile(per_call, 0.5);
  state.counters[std::string("p99_") + unit] = Percentile(per_call, 0.99);
}

bool Setup() {
  char tmpl[] = "/tmp/gpuslice-shim-bench-XXXXXX";
  g_dir = mkdtemp(tmpl);
  setenv("GPUSLICE_SIM_STATE", (g_dir + "/sim-state").c_str(), 1);
  setenv("XDG_RUNTIME_DIR", g_dir.c_str(), 1);
  setenv("GPUSLICE_MEMORY_LIMIT", "60GiB", 1);
  // Processes this benchmark starts find the simulated driver here.
  setenv("LD_LIBRARY_PATH", GPUSLICE_SIM_DIR, 1);
  CUdevice dev;
  CUcontext ctx;
  CUmodule module;
  static const char kPtx[] =
      ".version 8.0\n.target sm_90\n.visible .entry sim_sleep_us(.param .u32 us)\n{ ret; }\n";
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS ||
      cuModuleGetFunction(&g_kernel, module, "sim_sleep_us") != CUDA_SUCCESS) {
    std::fprintf(stderr, "shim_bench: cannot set up the simulated GPU\n");
    return false;
  }
  void* shim = dlopen(GPUSLICE_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  if (shim == nullptr) {
    std::fprintf(stderr, "shim_bench: %s\n", dlerror());
    return false;
  }
  g_shim.launch = reinterpret_cast<PFN_cuLaunchKernel_v4000>(dlsym(shim, "cuLaunchKernel"));
  g_shim.alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(shim, "cuMemAlloc_v2"));
  g_shim.free = reinterpret_cast<PFN_cuMemFree_v3020>(dlsym(shim, "cuMemFree_v2"));
  if (g_shim.launch == nullptr || g_shim.alloc == nullptr || g_shim.free == nullptr) return false;
  // The shim reads its configuration at its first CUDA call: make that
  // call now, before the environment changes for the second instance.
  CUdeviceptr p = 0;
  if (g_shim.alloc(&p, 1 << 20) != CUDA_SUCCESS || g_shim.free(p) != CUDA_SUCCESS) {
    std::fprintf(stderr, "shim_bench: allocation through the shim failed\n");
    return false;
  }
  // The share instance: a copy of the library (dlopen would return the
  // loaded one for the same file), configured by its own first call.
  const std::string copy = g_dir + "/libgpuslice-share.so";
  std::error_code ec;
  std::filesystem::copy_file(GPUSLICE_SHIM_PATH, copy, ec);
  if (ec) {
    std::fprintf(stderr, "shim_bench: cannot copy the shim: %s\n", ec.message().c_str());
    return false;
  }
  unsetenv("GPUSLICE_SLICE");  // Not the first instance's slice: one of its own.
  setenv("GPUSLICE_COMPUTE_SHARE", "100", 1);
  setenv("GPUSLICE_COMPUTE_MODE", "hard", 1);
  setenv("GPUSLICE_COORD_DIR", g_dir.c_str(), 1);
  void* share = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (share == nullptr) {
    std::fprintf(stderr, "shim_bench: %s\n", dlerror());
    return false;
  }
  g_share.launch = reinterpret_cast<PFN_cuLaunchKernel_v4000>(dlsym(share, "cuLaunchKernel"));
  g_share.alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(dlsym(share, "cuMemAlloc_v2"));
  g_share.free = reinterpret_cast<PFN_cuMemFree_v3020>(dlsym(share, "cuMemFree_v2"));
  const bool ok = g_share.launch != nullptr && g_share.alloc != nullptr &&
                  g_share.free != nullptr && g_share.alloc(&p, 1 << 20) == CUDA_SUCCESS &&
                  g_share.free(p) == CUDA_SUCCESS;
  unsetenv("GPUSLICE_COMPUTE_SHARE");
  unsetenv("GPUSLICE_COMPUTE_MODE");
  return ok;
}

void BM_Launch(benchmark::State& state, const Api* api) {
  constexpr int kBatch = 256;
  unsigned int us = 0;
  void* params[] = {&us};
  std::vector<double> per_call;
  for (auto _ : state) {
    uint64_t t0 = NowNs();
    for (int i = 0; i < kBatch; ++i) {
      api->launch(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    }
    uint64_t t1 = NowNs();
    per_call.push_back(double(t1 - t0) / kBatch);
    state.SetIterationTime(double(t1 - t0) / 1e9);
    // Drain the simulated queue outside the timed region.
    cuCtxSynchronize();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  Report(state, per_call, "ns");
}

void BM_AllocFree(benchmark::State& state, const Api* api) {
  constexpr int kBatch = 64;
  std::vector<double> per_pair;
  CUdeviceptr p[kBatch];
  for (auto _ : state) {
    uint64_t t0 = NowNs();
    for (int i = 0; i < kBatch; ++i) {
      if (api->alloc(&p[i], 1 << 20) != CUDA_SUCCESS) state.SkipWithError("alloc failed");
      api->free(p[i]);
    }
    uint64_t t1 = NowNs();
    per_pair.push_back(double(t1 - t0) / kBatch);
    state.SetIterationTime(double(t1 - t0) / 1e9);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
  Report(state, per_pair, "ns");
}

void BM_Init64(benchmark::State& state, bool with_shim) {
  constexpr int kProcesses = 64;
  std::vector<double> per_process_ms;
  for (auto _ : state) {
    std::vector<pid_t> pids(kProcesses);
    std::vector<uint64_t> start(kProcesses);
    for (int i = 0; i < kProcesses; ++i) {
      start[i] = NowNs();
      pids[i] = fork();
      if (pids[i] == 0) {
        if (with_shim) setenv("LD_PRELOAD", GPUSLICE_SHIM_PATH, 1);
        execl(GPUSLICE_BENCH_CHILD, GPUSLICE_BENCH_CHILD, nullptr);
        _exit(127);
      }
    }
    int failures = 0;
    for (int done = 0; done < kProcesses; ++done) {
      int status = 0;
      pid_t pid = wait(&status);
      uint64_t end = NowNs();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
      for (int i = 0; i < kProcesses; ++i) {
        if (pids[i] == pid) per_process_ms.push_back(double(end - start[i]) / 1e6);
      }
    }
    if (failures > 0) state.SkipWithError("a child failed to initialise CUDA");
  }
  Report(state, per_process_ms, "ms");
}

// Paired measurements: each iteration times a batch through the driver and a
// batch through the shim back to back (alternating which goes first), and
// records the difference per call. On a shared, busy machine this cancels
// the load drift that separate runs suffer from.
template <typename Batch>
void Paired(benchmark::State& state, Batch batch, int calls, const char* unit, double scale) {
  std::vector<double> added, direct, shim;
  bool shim_first = false;
  for (auto _ : state) {
    double d, s;
    if (shim_first) {
      s = batch(g_shim);
      d = batch(g_direct);
    } else {
      d = batch(g_direct);
      s = batch(g_shim);
    }
    shim_first = !shim_first;
    direct.push_back(d / calls / scale);
    shim.push_back(s / calls / scale);
    added.push_back((s - d) / calls / scale);
    state.SetIterationTime((s + d) / 1e9);
  }
  state.counters[std::string("direct_p50_") + unit] = Percentile(direct, 0.5);
  state.counters[std::string("shim_p50_") + unit] = Percentile(shim, 0.5);
  state.counters[std::string("added_p50_") + unit] = Percentile(added, 0.5);
  state.counters[std::string("direct_p99_") + unit] = Percentile(direct, 0.99);
  state.counters[std::string("shim_p99_") + unit] = Percentile(shim, 0.99);
}

void BM_LaunchAdded(benchmark::State& state) {
  constexpr int kBatch = 256;
  unsigned int us = 0;
  void* params[] = {&us};
  Paired(
      state,
      [&](const Api& api) {
        uint64_t t0 = NowNs();
        for (int i = 0; i < kBatch; ++i) {
          api.launch(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
        }
        double t = double(NowNs() - t0);
        cuCtxSynchronize();
        return t;
      },
      kBatch, "ns", 1.0);
}

// Three ways in turn (rotating which goes first): direct, through the shim,
// and through the shim with a compute share.
void BM_LaunchAddedShare(benchmark::State& state) {
  constexpr int kBatch = 256;
  unsigned int us = 0;
  void* params[] = {&us};
  const Api* apis[3] = {&g_direct, &g_shim, &g_share};
  std::vector<double> per_call[3], added_shim, added_share;
  int first = 0;
  for (auto _ : state) {
    double t[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const int w = (first + k) % 3;
      const uint64_t t0 = NowNs();
      for (int i = 0; i < kBatch; ++i) {
        apis[w]->launch(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
      }
      t[w] = double(NowNs() - t0) / kBatch;
      cuCtxSynchronize();
    }
    first = (first + 1) % 3;
    for (int w = 0; w < 3; ++w) per_call[w].push_back(t[w]);
    added_shim.push_back(t[1] - t[0]);
    added_share.push_back(t[2] - t[0]);
    state.SetIterationTime((t[0] + t[1] + t[2]) * kBatch / 1e9);
  }
  state.counters["direct_p50_ns"] = Percentile(per_call[0], 0.5);
  state.counters["shim_p50_ns"] = Percentile(per_call[1], 0.5);
  state.counters["share_p50_ns"] = Percentile(per_call[2], 0.5);
  state.counters["added_shim_p50_ns"] = Percentile(added_shim, 0.5);
  state.counters["added_share_p50_ns"] = Percentile(added_share, 0.5);
  state.counters["share_p99_ns"] = Percentile(per_call[2], 0.99);
}

void BM_AllocFreeAdded(benchmark::State& state) {
  constexpr int kBatch = 64;
  Paired(
      state,
      [&](const Api& api) {
        CUdeviceptr p;
        uint64_t t0 = NowNs();
        for (int i = 0; i < kBatch; ++i) {
          if (api.alloc(&p, 1 << 20) == CUDA_SUCCESS) api.free(p);
        }
        return double(NowNs() - t0);
      },
      kBatch, "ns", 1.0);
}

// 64 processes at once, direct and under the shim in alternating rounds;
// p50/p99 of the per-process time (fork to exit) over all rounds.
void BM_Init64Added(benchmark::State& state) {
  constexpr int kProcesses = 64;
  std::vector<double> times[2];
  int round = 0;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      bool with_shim = ((round + k) % 2) == 1;
      std::vector<pid_t> pids(kProcesses);
      std::vector<uint64_t> start(kProcesses);
      for (int i = 0; i < kProcesses; ++i) {
        start[i] = NowNs();
        pids[i] = fork();
        if (pids[i] == 0) {
          if (with_shim) setenv("LD_PRELOAD", GPUSLICE_SHIM_PATH, 1);
          execl(GPUSLICE_BENCH_CHILD, GPUSLICE_BENCH_CHILD, nullptr);
          _exit(127);
        }
      }
      for (int done = 0; done < kProcesses; ++done) {
        int status = 0;
        pid_t pid = wait(&status);
        uint64_t end = NowNs();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) state.SkipWithError("child failed");
        for (int i = 0; i < kProcesses; ++i) {
          if (pids[i] == pid) times[with_shim].push_back(double(end - start[i]) / 1e6);
        }
      }
    }
    ++round;
  }
  state.counters["direct_p50_ms"] = Percentile(times[0], 0.5);
  state.counters["shim_p50_ms"] = Percentile(times[1], 0.5);
  state.counters["direct_p99_ms"] = Percentile(times[0], 0.99);
  state.counters["shim_p99_ms"] = Percentile(times[1], 0.99);
  state.counters["added_p99_ms"] = Percentile(times[1], 0.99) - Percentile(times[0], 0.99);
}

}  // namespace

int main(int argc, char** argv) {
  // The children must not inherit our preload decisions: only BM_Init64
  // sets LD_PRELOAD, per child.
  unsetenv("LD_PRELOAD");
  if (!Setup()) return 1;
  benchmark::RegisterBenchmark("BM_Launch/direct", BM_Launch, &g_direct)->UseManualTime();
  benchmark::RegisterBenchmark("BM_Launch/shim", BM_Launch, &g_shim)->UseManualTime();
  benchmark::RegisterBenchmark("BM_AllocFree/direct", BM_AllocFree, &g_direct)->UseManualTime();
  benchmark::RegisterBenchmark("BM_AllocFree/shim", BM_AllocFree, &g_shim)->UseManualTime();
  benchmark::RegisterBenchmark("BM_Init64/direct", BM_Init64, false)
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_Init64/shim", BM_Init64, true)
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_LaunchAdded", BM_LaunchAdded)->UseManualTime();
  benchmark::RegisterBenchmark("BM_LaunchAddedShare", BM_LaunchAddedShare)->UseManualTime();
  benchmark::RegisterBenchmark("BM_AllocFreeAdded", BM_AllocFreeAdded)->UseManualTime();
  benchmark::RegisterBenchmark("BM_Init64Added", BM_Init64Added)
      ->Iterations(4)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::filesystem::remove_all(g_dir);
  return 0;
}
