// A tenant for the compute-share tests (compute_e2e_test) and harness
// (bench/compute): a CUDA program (against cuda.h, run over the simulated
// driver) that keeps the GPU busy with `sim_sleep_us` kernels, like a
// training loop, or serves periodic requests,
// like an inference service.
//
//   compute_worker --seconds S [--kernel-us N] [--graph K | --launch-ex | --cooperative]
//                  [--sync-every M] [--pace PCT] [--request-us W --period-ms P [--open-loop]]
//                  [--duty PCT]
//
// Busy mode: launches kernels of N us (or graphs of K such kernels; or
// through cuLaunchKernelEx or cuLaunchCooperativeKernel) back to back, synchronising about every 20
// ms of work (a training step; --sync-every M: after every M launches, 1 being
// a launch-then-synchronise loop, as a small-batch inference service runs; --pace PCT: it
// keeps the kernel time it launched at PCT% of the wall time since its start, sleeping
// before a step that would go over, as a process that keeps itself to a share of the GPU
// without any gpuslice). Request mode: every P ms, launches W us of kernels and
// synchronises; the latency of each request (launch of the first kernel to the end of the
// synchronisation) is recorded; requests that fall behind go back to back.
// Open loop (--open-loop, with request mode): request i arrives at start +
// i x P whatever happened to the ones before it, as requests reach a server
// from its clients; the process serves them one at a time, in order, and a
// request's latency runs from its arrival (not from when the server got to
// it) to its completion, so every wait for the GPU shows in it. Requests
// still unserved at the end count with the latency they had by then. Also
// reports the requests offered (arrived before the end) and served, and the
// served fraction of the offered work ("delivered").
// Duty (--duty PCT): closed loop, one kernel then a synchronisation, then
// idle for as long as the kernel took x (100 - PCT) / PCT (a step that
// waited for the GPU idles longer, so every wait lowers its demand).
// Prints one JSON line: {"pid":..,"launches":..,"requests":..,"p50_us":..,"p99_us":..}.

#include <cuda.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_program.h"

namespace {

using gpuslice::test::Check;
using gpuslice::test::NowNs;
constexpr const char* kPtx = gpuslice::test::kSleepKernelPtx;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  unsigned kernel_us = 100;
  int graph = 0;
  bool launch_ex = false;
  bool cooperative = false;
  unsigned request_us = 0;
  double period_ms = 0;
  unsigned sync_every = 0;  // 0: about every 20 ms of work.
  double pace_pct = 0;      // 0: not paced.
  bool open_loop = false;
  double duty_pct = 0;  // 0: not a duty loop.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "compute_worker: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds")
      seconds = std::atof(next());
    else if (a == "--kernel-us")
      kernel_us = unsigned(std::atoi(next()));
    else if (a == "--graph")
      graph = std::atoi(next());
    else if (a == "--launch-ex")
      launch_ex = true;
    else if (a == "--cooperative")
      cooperative = true;
    else if (a == "--request-us")
      request_us = unsigned(std::atoi(next()));
    else if (a == "--period-ms")
      period_ms = std::atof(next());
    else if (a == "--sync-every")
      sync_every = unsigned(std::atoi(next()));
    else if (a == "--pace")
      pace_pct = std::atof(next());
    else if (a == "--open-loop")
      open_loop = true;
    else if (a == "--duty")
      duty_pct = std::atof(next());
    else {
      std::fprintf(stderr, "compute_worker: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (seconds <= 0 || (request_us > 0 && period_ms <= 0) || pace_pct < 0 || pace_pct > 100 ||
      (pace_pct > 0 && request_us > 0) || (open_loop && request_us == 0) || duty_pct < 0 ||
      duty_pct > 100 || (duty_pct > 0 && (request_us > 0 || pace_pct > 0))) {
    std::fprintf(stderr, "compute_worker: bad arguments\n");
    return 2;
  }
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  Check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
  CUfunction fn;
  Check(cuModuleGetFunction(&fn, mod, "sim_sleep_us"), "cuModuleGetFunction");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  void* params[] = {&kernel_us};

  CUgraphExec exec = nullptr;
  if (graph > 0) {
    Check(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture");
    for (int k = 0; k < graph; ++k) {
      Check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "capture launch");
    }
    CUgraph g;
    Check(cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
    Check(cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiate");
  }
  // --kernel-us 0: empty kernels (no GPU time on the simulator); counted as
  // 1 us where a count of launches per amount of work is needed.
  const unsigned per_launch_us = std::max(1u, graph > 0 ? kernel_us * unsigned(graph) : kernel_us);
  auto launch = [&]() {
    if (exec != nullptr) {
      Check(cuGraphLaunch(exec, stream), "cuGraphLaunch");
    } else if (launch_ex) {
      CUlaunchConfig cfg{};
      cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = 32;
      cfg.blockDimY = cfg.blockDimZ = 1;
      cfg.hStream = stream;
      Check(cuLaunchKernelEx(&cfg, fn, params, nullptr), "cuLaunchKernelEx");
    } else if (cooperative) {
      Check(cuLaunchCooperativeKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params),
            "cuLaunchCooperativeKernel");
    } else {
      Check(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
    }
  };

  uint64_t launches = 0;
  std::vector<double> latencies_us;
  uint64_t offered = 0;  // Open loop: requests that arrived before the end.
  const uint64_t start = NowNs();
  const uint64_t end = start + uint64_t(seconds * 1e9);
  auto sleep_until = [](uint64_t at) {
    const uint64_t now = NowNs();
    if (at <= now) return;
    timespec ts{time_t((at - now) / 1000000000ull), long((at - now) % 1000000000ull)};
    nanosleep(&ts, nullptr);
  };
  if (duty_pct > 0) {
    while (NowNs() < end) {
      const uint64_t t0 = NowNs();
      launch();
      ++launches;
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
      const uint64_t took = NowNs() - t0;
      latencies_us.push_back(double(took) / 1e3);
      sleep_until(NowNs() + uint64_t(double(took) * (100 - duty_pct) / duty_pct));
    }
  } else if (open_loop) {
    const unsigned count = std::max(1u, request_us / per_launch_us);
    const uint64_t period = uint64_t(period_ms * 1e6);
    for (uint64_t i = 0;; ++i) {
      const uint64_t arrival = start + i * period;
      if (arrival >= end) break;
      sleep_until(arrival);
      if (NowNs() >= end) {
        // Still unserved at the end: it counts with the wait it had so far.
        for (uint64_t k = i; start + k * period < end; ++k) {
          ++offered;
          latencies_us.push_back(double(end - (start + k * period)) / 1e3);
        }
        break;
      }
      ++offered;
      for (unsigned k = 0; k < count; ++k, ++launches) launch();
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
      latencies_us.push_back(double(NowNs() - arrival) / 1e3);
    }
    const size_t served = size_t(launches / count);
    std::printf(
        "{\"pid\":%d,\"launches\":%llu,\"requests\":%zu,\"offered\":%llu,"
        "\"delivered\":%.4f,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
        int(getpid()), static_cast<unsigned long long>(launches), served,
        static_cast<unsigned long long>(offered),
        offered > 0 ? double(served) / double(offered) : 0.0, Percentile(latencies_us, 0.5),
        Percentile(latencies_us, 0.99));
    return 0;
  } else if (request_us == 0) {
    const unsigned step = sync_every > 0 ? sync_every : std::max(1u, 20000u / per_launch_us);
    while (NowNs() < end) {
      if (pace_pct > 0) {
        // When the kernel time launched so far is PCT% of the time since the
        // start; a step waits for it.
        const uint64_t due =
            start + uint64_t(double(launches) * per_launch_us * 1e3 * 100 / pace_pct);
        const uint64_t now = NowNs();
        if (due > now) {
          timespec ts{time_t((due - now) / 1000000000ull), long((due - now) % 1000000000ull)};
          nanosleep(&ts, nullptr);
          continue;
        }
      }
      for (unsigned k = 0; k < step; ++k, ++launches) launch();
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    }
  } else {
    const unsigned count = std::max(1u, request_us / per_launch_us);
    uint64_t next = start;
    // Stops at the deadline even when requests fall behind their period, so
    // the number served measures the throughput a tenant kept.
    while (next < end && NowNs() < end) {
      const uint64_t t0 = NowNs();
      for (unsigned k = 0; k < count; ++k, ++launches) launch();
      Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
      latencies_us.push_back(double(NowNs() - t0) / 1e3);
      next += uint64_t(period_ms * 1e6);
      const uint64_t now = NowNs();
      if (next > now) {
        timespec ts{time_t((next - now) / 1000000000ull), long((next - now) % 1000000000ull)};
        nanosleep(&ts, nullptr);
      }
    }
  }
  std::printf("{\"pid\":%d,\"launches\":%llu,\"requests\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
              int(getpid()), static_cast<unsigned long long>(launches), latencies_us.size(),
              Percentile(latencies_us, 0.5), Percentile(latencies_us, 0.99));
  return 0;
}
