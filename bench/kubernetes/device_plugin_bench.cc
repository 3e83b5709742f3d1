// The device plugin's Allocate latency (figures in docs/PERFORMANCE.md):
//
//   BM_AllocateMemorySlice   one Allocate of gpuslice.dev/gpu-memory (1-4 GiB
//                            on one GPU) over the plugin's unix socket, as
//                            the kubelet sends it: the plugin creates the
//                            external job in a real gpusliced on 4 simulated
//                            H100s and reads its container answer. Jobs are
//                            released between iterations, untimed. Reports
//                            p50/p99 wall-clock latency, and the same
//                            measured inside the plugin (from its log).
//   BM_AllocateWholeGpu      the same for gpuslice.dev/gpu (one GPU).
//
// Target: p99 <= 20 ms.

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "client/client.h"
#include "fake_kubelet.h"
#include "harness.h"
#include "kubernetes/device_plugin/base/devices.h"

namespace {

using Clock = std::chrono::steady_clock;
using gpuslice::kubernetes::testing::FakeKubelet;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// gpusliced, the plugin and a fake kubelet, for one benchmark.
struct Stack {
  gpuslice::e2e::Daemon daemon{"4xH100-80GB", {"--log-level", "warn"}};
  std::unique_ptr<FakeKubelet> kubelet;
  std::vector<std::string> uuids;
  pid_t plugin = -1;

  bool Start() {
    if (!daemon.Start()) return false;
    std::string dir = daemon.dir() + "/device-plugins";
    std::filesystem::create_directories(dir);
    kubelet = std::make_unique<FakeKubelet>(dir, daemon.dir() + "/pod-resources.sock");
    if (!kubelet->Start()) return false;
    plugin = fork();
    if (plugin == 0) {
      int fd = open((daemon.dir() + "/plugin.log").c_str(), O_WRONLY | O_CREAT, 0644);
      dup2(fd, 2);
      execl(GPUSLICE_E2E_DEVICE_PLUGIN, GPUSLICE_E2E_DEVICE_PLUGIN, "--socket",
            daemon.socket().c_str(), "--device-plugin-dir", dir.c_str(), "--pod-resources-socket",
            (daemon.dir() + "/pod-resources.sock").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (const char* r : {"gpuslice.dev/gpu", "gpuslice.dev/gpu-memory"}) {
      if (!kubelet->WaitRegistered(r, std::chrono::seconds(60))) return false;
    }
    gpuslice::client::Client c(daemon.socket());
    auto gpus = c.Call("GET", "/v1/gpus");
    if (!gpus.ok()) return false;
    for (const auto& g : (*gpus)["gpus"]) uuids.push_back(g["uuid"].get<std::string>());
    return true;
  }
  ~Stack() {
    if (plugin > 0) {
      kill(plugin, SIGTERM);
      waitpid(plugin, nullptr, 0);
    }
  }
};

void CancelAll(gpuslice::client::Client& c) {
  auto jobs = c.Call("GET", "/v1/jobs?limit=0");
  if (!jobs.ok()) return;
  for (const auto& j : (*jobs)["jobs"]) {
    (void)c.Call("POST", "/v1/jobs/" + std::to_string(j["id"].get<uint64_t>()) + "/cancel");
  }
}

void RunAllocate(benchmark::State& state, const std::string& resource, bool memory) {
  Stack s;
  if (!s.Start()) {
    state.SkipWithError("the daemon, the fake kubelet or the plugin did not start");
    return;
  }
  auto stub = s.kubelet->Dial(resource);
  gpuslice::client::Client http(s.daemon.socket());
  std::vector<double> us;
  uint64_t i = 0;
  for (auto _ : state) {
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    const std::string& gpu = s.uuids[i % s.uuids.size()];
    if (memory) {
      // IDs not handed out in the last rounds, as the kubelet would pick
      // them: an ID given again makes the plugin release its old job first.
      uint32_t gib = 1 + static_cast<uint32_t>(i % 4);
      uint32_t base = static_cast<uint32_t>((i / s.uuids.size()) * 4 % 76);
      for (uint32_t k = base; k < base + gib; ++k) {
        c->add_devices_ids(gpuslice::kubernetes::FractionId(
            gpuslice::kubernetes::ResourceKind::kGpuMemory, gpu, k));
      }
    } else {
      c->add_devices_ids(gpu);
    }
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    auto t1 = Clock::now();
    if (!st.ok() || resp.container_responses_size() != 1) {
      state.SkipWithError(("Allocate failed: " + st.error_message()).c_str());
      return;
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    state.PauseTiming();
    // Free the GPU for the next round, as a deleted pod would.
    if (++i % s.uuids.size() == 0) CancelAll(http);
    state.ResumeTiming();
  }
  // The plugin logs how long each Allocate took inside it (the daemon's two
  // calls and its own work): the rest is gRPC and scheduling.
  std::vector<double> inside;
  std::ifstream log(s.daemon.dir() + "/plugin.log");
  for (std::string line; std::getline(log, line);) {
    size_t at = line.rfind(" (");
    if (line.find(": Allocate ") == std::string::npos || at == std::string::npos) continue;
    inside.push_back(std::atof(line.c_str() + at + 2) * 1000);
  }
  state.counters["in_plugin_p50_ms"] = Percentile(inside, 0.50) / 1000;
  state.counters["in_plugin_p99_ms"] = Percentile(inside, 0.99) / 1000;
  state.counters["p50_ms"] = Percentile(us, 0.50) / 1000;
  state.counters["p99_ms"] = Percentile(us, 0.99) / 1000;
  state.counters["max_ms"] = Percentile(us, 1.0) / 1000;
}

void BM_AllocateMemorySlice(benchmark::State& state) {
  RunAllocate(state, "gpuslice.dev/gpu-memory", true);
}
BENCHMARK(BM_AllocateMemorySlice)->Iterations(400)->Unit(benchmark::kMillisecond);

void BM_AllocateWholeGpu(benchmark::State& state) { RunAllocate(state, "gpuslice.dev/gpu", false); }
BENCHMARK(BM_AllocateWholeGpu)->Iterations(200)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
