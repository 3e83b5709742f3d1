// filter + prioritize of the scheduler extender on a 1,000-node cluster
// (8 GPUs each, mixed load), as kube-scheduler asks them: one pod, filter
// over every node, then prioritize over the nodes that passed. Target: p99
// <= 5 ms. Reports p50/p99 of the pair as counters:
//   decisions   Extender::Filter + Prioritize (the snapshot's view built),
//               pods cycling through five shapes (replicas of a few
//               workloads: pods that ask the same share one evaluation)
//   unique_shapes  every pod a shape never seen before: no reuse at all
//   node_names  the same through the HTTP handler with JSON bodies in the
//               NodeNames form (nodeCacheCapable: true)
//   node_list   the same with a NodeList of small Node objects (name and
//               InternalIP only; real ones are several KiB each)
//   new_view    a new snapshot before each pair (the poller publishes one
//               a second; it builds the view on its own thread, untimed)
//   BM_Publish  what building that view costs the poller's thread

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/units.h"
#include "kubernetes/extender/placement/extender.h"
#include "kubernetes/extender/server/extender_http.h"

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;
constexpr int kNodes = 1000;
constexpr int kGpusPerNode = 8;

int64_t g_now = 1'000'000;

std::shared_ptr<Snapshot> MixedCluster(uint64_t generation) {
  std::mt19937 rng(42);
  auto snap = std::make_shared<Snapshot>();
  snap->generation = generation;
  for (int n = 0; n < kNodes; ++n) {
    NodeEntry& e = snap->nodes["node-" + std::to_string(n)];
    e.has_report = true;
    e.received_ms = g_now;
    for (int g = 0; g < kGpusPerNode; ++g) {
      GpuReport r;
      r.uuid = "GPU-" + std::to_string(n) + "-" + std::to_string(g);
      r.model = "H100";
      r.memory_total = 80 * core::kGiB;
      const int kind = int(rng() % 10);
      if (kind < 4) {
        // Idle.
      } else if (kind < 6) {
        r.whole = true;
      } else {
        r.compute_allocated_milli = 100 * (1 + rng() % 9);
        r.memory_allocated = core::kGiB * (8 * (1 + rng() % 9));
      }
      e.report.gpus.push_back(r);
    }
  }
  return snap;
}

std::vector<std::string> NodeNames() {
  std::vector<std::string> names;
  for (int n = 0; n < kNodes; ++n) names.push_back("node-" + std::to_string(n));
  return names;
}

// Pod i: one of five common shapes, or with `unique` a shape no earlier pod
// had (memory 1-60 GiB, share 1-99%), so nothing is reused between pods.
json PodJson(int i, bool unique = false) {
  static const int kShapes[][2] = {{10, 20}, {20, 30}, {40, 50}, {8, 10}, {16, 25}};
  int mem = kShapes[i % 5][0], share = kShapes[i % 5][1];
  if (unique) {
    mem = 1 + i % 60;
    share = 1 + (i / 60) % 99;
  }
  json limits = {{"gpuslice.dev/gpu-memory", std::to_string(mem)},
                 {"gpuslice.dev/gpu-share", std::to_string(share)}};
  return {{"metadata",
           {{"name", "pod-" + std::to_string(i)},
            {"namespace", "ml"},
            {"uid", "uid-" + std::to_string(i)}}},
          {"spec", {{"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}}}};
}

// This thread's CPU time: on a shared machine the wall-clock tail is mostly
// time spent waiting for a core, so both are reported.
double CpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

struct Samples {
  std::vector<double> wall, cpu;
};

void Report(benchmark::State& state, Samples& s) {
  for (auto* v : {&s.wall, &s.cpu}) std::sort(v->begin(), v->end());
  auto at = [](const std::vector<double>& v, size_t pct) {
    return v[std::min(v.size() - 1, v.size() * pct / 100)];
  };
  state.counters["p50_us"] = at(s.wall, 50);
  state.counters["p99_us"] = at(s.wall, 99);
  state.counters["cpu_p50_us"] = at(s.cpu, 50);
  state.counters["cpu_p99_us"] = at(s.cpu, 99);
  state.counters["nodes"] = kNodes;
}

void BM_Decisions(benchmark::State& state, bool new_view, bool unique) {
  Extender ex(
      ExtenderOptions{}, [] { return g_now; }, nullptr);
  uint64_t gen = 1;
  auto snap = MixedCluster(gen);
  ex.Publish(snap);
  const std::vector<std::string> names = NodeNames();
  Samples us;
  int i = 0;
  for (auto _ : state) {
    if (new_view) {
      auto next = std::make_shared<Snapshot>(*snap);
      next->generation = ++gen;
      ex.Publish(next);
    }
    auto pod = ParsePod(PodJson(i++, unique));
    const double c0 = CpuUs();
    auto t0 = std::chrono::steady_clock::now();
    FilterAnswer f = ex.Filter(*pod, names);
    std::vector<std::string> passed;
    for (size_t k = 0; k < names.size(); ++k) {
      if (f.pass[k]) passed.push_back(names[k]);
    }
    std::vector<int64_t> s = ex.Prioritize(*pod, passed);
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(s);
    us.cpu.push_back(CpuUs() - c0);
    us.wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Report(state, us);
}

void BM_Http(benchmark::State& state, bool node_list) {
  Extender ex(
      ExtenderOptions{}, [] { return g_now; }, nullptr);
  ex.Publish(MixedCluster(1));
  const std::vector<std::string> names = NodeNames();
  json nodes = json::array();
  for (const std::string& n : names) {
    nodes.push_back(
        {{"metadata", {{"name", n}}},
         {"status", {{"addresses", {{{"type", "InternalIP"}, {"address", "10.0.0.1"}}}}}}});
  }
  Samples us;
  int i = 0;
  for (auto _ : state) {
    json args = {{"Pod", PodJson(i++)}};
    if (node_list) {
      args["Nodes"] = {{"items", nodes}};
    } else {
      args["NodeNames"] = names;
    }
    const std::string body = args.dump();
    // The extender's side only: kube-scheduler's encoding of the bodies
    // and decoding of the answers are not timed.
    const double c0 = CpuUs();
    auto t0 = std::chrono::steady_clock::now();
    HttpAnswer f = HandleExtenderRequest(ex, nullptr, "POST", "/filter", body);
    auto t1 = std::chrono::steady_clock::now();
    const double c1 = CpuUs();
    state.PauseTiming();
    json fr = json::parse(f.body);
    json pargs = {{"Pod", args["Pod"]}};
    if (node_list) {
      pargs["Nodes"] = fr["Nodes"];
    } else {
      pargs["NodeNames"] = fr["NodeNames"];
    }
    const std::string pbody = pargs.dump();
    state.ResumeTiming();
    const double c2 = CpuUs();
    auto t2 = std::chrono::steady_clock::now();
    HttpAnswer p = HandleExtenderRequest(ex, nullptr, "POST", "/prioritize", pbody);
    auto t3 = std::chrono::steady_clock::now();
    us.cpu.push_back(CpuUs() - c2 + (c1 - c0));
    benchmark::DoNotOptimize(p);
    us.wall.push_back(std::chrono::duration<double, std::micro>((t1 - t0) + (t3 - t2)).count());
  }
  Report(state, us);
}

// What a new snapshot costs the poller's thread (the view built and every
// node's fragmentation computed), once a second.
void BM_Publish(benchmark::State& state) {
  Extender ex(
      ExtenderOptions{}, [] { return g_now; }, nullptr);
  auto snap = MixedCluster(1);
  ex.Publish(snap);
  auto pod = ParsePod(PodJson(0));
  (void)ex.Filter(*pod, NodeNames());  // A profile to warm the cache with.
  uint64_t gen = 1;
  Samples us;
  for (auto _ : state) {
    auto next = std::make_shared<Snapshot>(*snap);
    next->generation = ++gen;
    const double c0 = CpuUs();
    auto t0 = std::chrono::steady_clock::now();
    ex.Publish(next);
    auto t1 = std::chrono::steady_clock::now();
    us.cpu.push_back(CpuUs() - c0);
    us.wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  Report(state, us);
}

BENCHMARK(BM_Publish)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decisions, decisions, false, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decisions, unique_shapes, false, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decisions, new_view, true, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Decisions, new_view_unique_shapes, true, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Http, node_names, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Http, node_list, true)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpuslice::kubernetes

BENCHMARK_MAIN();
