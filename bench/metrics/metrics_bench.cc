// The cost of one scrape of GET /metrics (docs/MONITORING.md):
//
//   BM_RenderMetrics/N   RenderMetrics for a daemon with N running jobs
//                        (1 GiB + 10% slices on 16 simulated-size GPUs, every
//                        job sampled), over fakes: no socket, no NVML, the
//                        same work a scrape does. Reports the exposition's
//                        size and the time per render (CPU time of this
//                        thread, so a busy machine does not inflate it).
//
// Target: a 1,000-job node renders in well under the 1 s sample period
// (Prometheus's default scrape timeout is 10 s).

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>

#include "daemon/api/metrics.h"
#include "daemon/jobs/service.h"
#include "daemon/launch/launcher_fake.h"

namespace gd = gpuslice::daemon;

namespace {

gd::InventorySnapshot Gpus(uint32_t n) {
  gd::InventorySnapshot s;
  s.source = "simulated";
  for (uint32_t i = 0; i < n; ++i) {
    gd::GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(10000000 + i);
    g.model = "NVIDIA H100 80GB HBM3";
    g.memory_total = 80 * gpuslice::core::kGiB;
    s.gpus.push_back(g);
  }
  return s;
}

void BM_RenderMetrics(benchmark::State& state) {
  const int jobs = int(state.range(0));
  char tmpl[] = "/tmp/gpuslice-metrics-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  {
    gd::FakeClock clock;
    gd::FakeInventory inventory(Gpus(16));
    gd::FakeLauncher launcher;
    gd::FakeRegionStore regions;
    gd::ServiceOptions o;
    o.state_dir = tmpl;
    gd::Service service(o, clock, inventory, launcher, regions);
    if (!service.Start().ok()) {
      state.SkipWithError("service did not start");
      return;
    }
    gd::Caller c;
    c.uid = 1000;
    c.gid = 1000;
    c.user = "bench";
    for (int i = 0; i < jobs; ++i) {
      gd::SubmitSpec s;
      s.fields.mem = "1GiB";
      s.fields.compute = "1%";
      s.fields.name = "job-" + std::to_string(i);
      s.argv = {"train"};
      s.cwd = "/tmp";
      c.user = "user" + std::to_string(i % 20);
      if (!service.intake().Submit(c, s).ok()) {
        state.SkipWithError("submit failed");
        return;
      }
    }
    service.Flush();
    service.Sample();
    if (service.table().running_count() != size_t(jobs)) {
      state.SkipWithError("not every job runs");
      return;
    }
    gd::MetricsOptions mo;
    mo.hostname = "bench-node";
    mo.version = "bench";
    size_t bytes = 0;
    for (auto _ : state) {
      std::string text = gd::RenderMetrics(service, mo);
      bytes = text.size();
      benchmark::DoNotOptimize(text);
    }
    state.counters["bytes"] = double(bytes);
    state.counters["jobs"] = jobs;
  }
  std::filesystem::remove_all(tmpl);
}
BENCHMARK(BM_RenderMetrics)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
