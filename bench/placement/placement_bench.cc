// Decision time of core::Place on a cluster shaped like the openb trace
// (1,213 nodes, 6,212 GPUs: the node counts per model of
// openb_node_list_gpu_node.csv), pre-filled to a given share of its GPUs.
// Reports the median and p99 of single decisions as counters; figures go to
// docs/PLACEMENT.md and docs/PERFORMANCE.md.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/placement/placement_policy.h"
#include "core/units.h"

namespace gpuslice::core {
namespace {

struct NodeKind {
  int count;
  uint64_t cpu_milli;
  uint64_t mem_gib;
  uint32_t gpus;
  const char* model;
};

// Node mix of the openb trace (count, CPU, memory, GPUs, model).
constexpr NodeKind kOpenbNodes[] = {
    {549, 96000, 384, 8, "G2"},  {39, 96000, 384, 8, "G3"},    {387, 96000, 384, 2, "T4"},
    {17, 96000, 384, 4, "T4"},   {131, 64000, 256, 2, "P100"}, {3, 64000, 256, 1, "P100"},
    {28, 96000, 384, 4, "V100M16"}, {8, 96000, 384, 8, "V100M16"}, {19, 64000, 256, 1, "V100M16"},
    {9, 96000, 384, 4, "V100M32"}, {21, 96000, 384, 8, "V100M32"}, {2, 64000, 256, 1, "A10"}};

// The most common task shapes of the trace (CPU milli, memory, GPUs, milli).
std::vector<Demand> Workload() {
  constexpr uint64_t G = kGiB;
  return {Demand::Fraction(810, 0, 3152, 6 * G),   Demand::WholeGpus(1, 11300, 48 * G),
          Demand::WholeGpus(1, 11400, 47 * G),     Demand::WholeGpus(1, 3152, 6 * G),
          Demand::Fraction(470, 0, 11908, 46 * G), Demand::CpuOnly(12500, 32 * G),
          Demand::Fraction(470, 0, 8000, 32 * G),  Demand::WholeGpus(1, 12000, 24 * G),
          Demand::CpuOnly(32000, 64 * G),          Demand::Fraction(650, 0, 11908, 46 * G),
          Demand::Fraction(320, 0, 4000, 15 * G),  Demand::WholeGpus(2, 16000, 64 * G),
          Demand::WholeGpus(8, 88000, 320 * G)};
}

ClusterState OpenbShapedCluster() {
  ClusterState s;
  int id = 0;
  for (const NodeKind& k : kOpenbNodes) {
    for (int i = 0; i < k.count; ++i) {
      (void)s.AddUniformNode("node-" + std::to_string(id++), k.cpu_milli, k.mem_gib * kGiB, k.gpus,
                             k.model);
    }
  }
  return s;
}

void BM_Place(benchmark::State& state, Policy policy) {
  const double fill = static_cast<double>(state.range(0)) / 100.0;
  ClusterState cluster = OpenbShapedCluster();
  const std::vector<Demand> work = Workload();
  WorkloadProfile profile = WorkloadProfile::FromDemands(work).value();
  PlacementRng rng(42);
  // Fill with frag-aware (a realistic state), then time the policy under test.
  const PlaceOptions filler{Policy::kFragAware, &profile, &rng};
  for (size_t i = 0; cluster.FreeGpuMilli() > (1 - fill) * cluster.TotalGpuMilli(); ++i) {
    const Demand& d = work[i % work.size()];
    Result<Placement> p = Place(cluster, d, filler);
    if (p.ok()) (void)cluster.Allocate(d, *p);
    if (i > 100000) break;
  }
  const PlaceOptions options{policy, &profile, &rng};
  std::vector<double> us;
  size_t i = 0;
  for (auto _ : state) {
    const Demand& d = work[i++ % work.size()];
    auto t0 = std::chrono::steady_clock::now();
    Result<Placement> p = Place(cluster, d, options);
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(p);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["gpus"] = cluster.TotalGpus();
}

BENCHMARK_CAPTURE(BM_Place, frag_aware, Policy::kFragAware)->Arg(50)->Arg(90)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Place, fgd, Policy::kFgd)->Arg(50)->Arg(90)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Place, best_fit, Policy::kBestFit)->Arg(50)->Arg(90)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Place, binpack, Policy::kBinpack)->Arg(50)->Arg(90)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpuslice::core

BENCHMARK_MAIN();
