#include "core/placement/placement_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/units.h"

namespace gpuslice::core {
namespace {

Placement On(uint32_t node, std::initializer_list<uint8_t> gpus) {
  Placement p;
  p.node = node;
  for (uint8_t g : gpus) p.gpus[p.gpu_count++] = g;
  return p;
}

// Node 0: one GPU with 600 free. Node 1: one idle GPU.
ClusterState SliverAndIdle() {
  ClusterState s;
  EXPECT_TRUE(s.AddUniformNode("sliver", 32000, 64 * kGiB, 1, "A100").ok());
  EXPECT_TRUE(s.AddUniformNode("idle", 32000, 64 * kGiB, 1, "A100").ok());
  EXPECT_TRUE(s.Allocate(Demand::Fraction(400, 0), On(0, {0})).ok());
  return s;
}

TEST(Place, FragAwareAvoidsLeavingAnUnusableSliver) {
  // Every future task wants 500; a 300 task on the 600 GPU would strand 300.
  ClusterState s = SliverAndIdle();
  WorkloadProfile p = WorkloadProfile::FromShapes({{Demand::Fraction(500, 0), 1}}).value();
  Demand d = Demand::Fraction(300, 0);
  Result<Placement> ours = Place(s, d, {.policy = Policy::kFragAware, .profile = &p});
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  EXPECT_EQ(ours->node, 1u);
  // Best fit packs it onto the sliver: the fragmentation case FGD fixes.
  PlacementRng rng(1);
  Result<Placement> bf = Place(s, d, {.policy = Policy::kBestFit, .rng = &rng});
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ(bf->node, 0u);
  Result<Placement> fgd = Place(s, d, {.policy = Policy::kFgd, .profile = &p, .rng = &rng});
  ASSERT_TRUE(fgd.ok());
  EXPECT_EQ(fgd->node, 1u);
}

TEST(Place, FragAwareFillsAGapExactly) {
  // A 600 task fits the 600 GPU exactly: no fragment either way, so packing
  // breaks the tie and the idle GPU stays idle.
  ClusterState s = SliverAndIdle();
  WorkloadProfile p = WorkloadProfile::FromShapes({{Demand::Fraction(500, 0), 1}}).value();
  Result<Placement> r = Place(s, Demand::Fraction(600, 0), {.profile = &p});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node, 0u);
}

TEST(Place, MultiGpuTasksGetIdleGpusOnOneNode) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("a", 64000, 256 * kGiB, 4, "V100").ok());
  ASSERT_TRUE(s.AddUniformNode("b", 64000, 256 * kGiB, 4, "V100").ok());
  ASSERT_TRUE(s.Allocate(Demand::Fraction(100, 0), On(0, {2})).ok());
  WorkloadProfile p = WorkloadProfile::FromShapes({{Demand::WholeGpus(1), 1}}).value();
  PlacementRng rng(7);
  for (const PolicyInfo& info : AllPolicies()) {
    Result<Placement> r = Place(s, Demand::WholeGpus(4), {info.policy, &p, &rng});
    ASSERT_TRUE(r.ok()) << info.name << ": " << r.status().ToString();
    EXPECT_EQ(r->node, 1u) << info.name;
    ASSERT_EQ(r->gpu_count, 4) << info.name;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r->gpus[i], i) << info.name;
  }
}

TEST(Place, MultiGpuTasksStayOnOneIsland) {
  ClusterState s;
  ASSERT_TRUE(s.InternModel("H100").ok());
  NodeState n;
  n.name = "hgx";
  n.cpu_total = n.cpu_free = 128000;
  n.mem_total = n.mem_free = kTiB;
  for (int i = 0; i < 8; ++i) {
    GpuState g;
    g.island = static_cast<int16_t>(i / 4);
    n.gpus.push_back(g);
  }
  ASSERT_TRUE(s.AddNode(n).ok());
  ASSERT_TRUE(s.Allocate(Demand::WholeGpus(1), On(0, {0})).ok());
  Result<Placement> four = Place(s, Demand::WholeGpus(4), {.policy = Policy::kBinpack});
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->gpus[0], 4);
  EXPECT_EQ(four->gpus[3], 7);
  // Two GPUs go to the island with three idle, keeping the other whole.
  Result<Placement> two = Place(s, Demand::WholeGpus(2), {.policy = Policy::kBinpack});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->gpus[0], 1);
  EXPECT_EQ(two->gpus[1], 2);
  // Five GPUs never fit one island of four.
  EXPECT_EQ(Place(s, Demand::WholeGpus(5), {.policy = Policy::kBinpack}).status().code(),
            StatusCode::kOutOfRange);
}

TEST(Place, DistinguishesNotNowFromNever) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("a", 64000, 256 * kGiB, 8, "A100", 80 * kGiB).ok());
  const PlaceOptions binpack{.policy = Policy::kBinpack};
  EXPECT_EQ(Place(s, Demand::WholeGpus(9), binpack).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Place(s, Demand::Fraction(100, 90 * kGiB), binpack).status().code(),
            StatusCode::kOutOfRange);
  Demand h100 = Demand::WholeGpus(1);
  h100.model_mask = s.ModelMask("H100").value();
  EXPECT_EQ(Place(s, h100, binpack).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Place(s, Demand::CpuOnly(65000, 0), binpack).status().code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(s.Allocate(Demand::WholeGpus(4), On(0, {0, 1, 2, 3})).ok());
  Status now = Place(s, Demand::WholeGpus(5), binpack).status();
  EXPECT_EQ(now.code(), StatusCode::kResourceExhausted) << now.ToString();
}

TEST(Place, HonoursModelConstraints) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("t4", 64000, 256 * kGiB, 2, "T4").ok());
  ASSERT_TRUE(s.AddUniformNode("v100", 64000, 256 * kGiB, 2, "V100M32").ok());
  Demand d = Demand::Fraction(500, 0);
  d.model_mask = s.ModelMask("V100M16|V100M32").value();
  PlacementRng rng(3);
  WorkloadProfile p = WorkloadProfile::FromShapes({{d, 1}}).value();
  for (const PolicyInfo& info : AllPolicies()) {
    Result<Placement> r = Place(s, d, {info.policy, &p, &rng});
    ASSERT_TRUE(r.ok()) << info.name;
    EXPECT_EQ(r->node, 1u) << info.name;
  }
}

// One T4 node, then two G2 nodes, alike in everything but the model. Demand:
// 40% T4 only, 40% G2 only, 20% either. T4 is scarce: its tied demand (40%)
// exceeds its share of capacity (1/3).
struct ScarceModelCase {
  ClusterState cluster;
  WorkloadProfile profile;
  Demand t4_only, g2_only, either;
};
ScarceModelCase ScarceT4() {
  ScarceModelCase c{
      ClusterState(), WorkloadProfile::FromShapes({{Demand::CpuOnly(1, 0), 1}}).value(),
      Demand::WholeGpus(1, 4000, 0), Demand::WholeGpus(1, 4000, 0), Demand::WholeGpus(1, 4000, 0)};
  EXPECT_TRUE(c.cluster.AddUniformNode("t4", 32000, 64 * kGiB, 1, "T4").ok());
  EXPECT_TRUE(c.cluster.AddUniformNode("g2a", 32000, 64 * kGiB, 1, "G2").ok());
  EXPECT_TRUE(c.cluster.AddUniformNode("g2b", 32000, 64 * kGiB, 1, "G2").ok());
  c.t4_only.model_mask = c.cluster.ModelMask("T4").value();
  c.g2_only.model_mask = c.cluster.ModelMask("G2").value();
  c.profile =
      WorkloadProfile::FromShapes({{c.t4_only, 0.4}, {c.g2_only, 0.4}, {c.either, 0.2}}).value();
  return c;
}

TEST(Place, FragAwareKeepsAScarceModelForTheTasksTiedToIt) {
  ScarceModelCase c = ScarceT4();
  // Every node loses the same fragmentation (the other model's tied shape),
  // so FGD takes the first node, T4, from the tasks that can only use T4.
  Result<Placement> fgd =
      Place(c.cluster, c.either, {.policy = Policy::kFgd, .profile = &c.profile});
  ASSERT_TRUE(fgd.ok());
  EXPECT_EQ(fgd->node, 0u);
  Result<Placement> ours = Place(c.cluster, c.either, {.profile = &c.profile});
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(ours->node, 1u);
  // A task tied to T4 still gets it: the price is the same on every option.
  Result<Placement> tied = Place(c.cluster, c.t4_only, {.profile = &c.profile});
  ASSERT_TRUE(tied.ok());
  EXPECT_EQ(tied->node, 0u);
}

TEST(Place, FragAwareUsesAModelThatIsNoLongerScarce) {
  ScarceModelCase c = ScarceT4();
  // Both G2 GPUs taken: T4 is all the free capacity left, so its pressure
  // (0.4 of demand / 1.0 of free capacity) is below 1, and the flexible task
  // gets it rather than failing.
  ASSERT_TRUE(c.cluster.Allocate(c.either, On(1, {0})).ok());
  ASSERT_TRUE(c.cluster.Allocate(c.either, On(2, {0})).ok());
  Result<Placement> ours = Place(c.cluster, c.either, {.profile = &c.profile});
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(ours->node, 0u);
}

TEST(Place, FragAwareWithoutTiedDemandBehavesAsBefore) {
  // Same cluster, a profile of flexible tasks only: no model is scarce, the
  // nodes tie, and the first node wins as for every policy.
  ScarceModelCase c = ScarceT4();
  WorkloadProfile flexible = WorkloadProfile::FromShapes({{c.either, 1}}).value();
  Result<Placement> ours = Place(c.cluster, c.either, {.profile = &flexible});
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(ours->node, 0u);
}

// A CPU-only task: "cpu-rich" can spare the cores, "cpu-poor" would be left
// unable to feed its GPUs at the profile's 2 CPU milli per GPU milli;
// "full" has too few cores for the task and only raises the allocation.
TEST(Place, FragAwareGuardsCpuForGpusOnlyOnceTheClusterIsHalfAllocated) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("cpu-rich", 8000, 64 * kGiB, 2, "A100").ok());
  ASSERT_TRUE(s.AddUniformNode("cpu-poor", 4000, 64 * kGiB, 2, "A100").ok());
  ASSERT_TRUE(s.AddUniformNode("full", 1000, 64 * kGiB, 8, "A100").ok());
  WorkloadProfile p = WorkloadProfile::FromShapes({{Demand::Fraction(500, 0, 1000), 1}}).value();
  const Demand d = Demand::CpuOnly(2000, 0);
  // 0% allocated: no fragmentation either way, so packing picks the smaller.
  Result<Placement> early = Place(s, d, {.policy = Policy::kFragAware, .profile = &p});
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(early->node, 1u);
  // 8 of 12 GPUs allocated: keep the CPU-poor node's cores for its GPUs.
  ASSERT_TRUE(s.Allocate(Demand::WholeGpus(8), On(2, {0, 1, 2, 3, 4, 5, 6, 7})).ok());
  Result<Placement> late = Place(s, d, {.policy = Policy::kFragAware, .profile = &p});
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->node, 0u);
}

TEST(Place, BinpackFillsAndSpreadSpreads) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("a", 64000, 256 * kGiB, 2, "A100").ok());
  ASSERT_TRUE(s.AddUniformNode("b", 64000, 256 * kGiB, 2, "A100").ok());
  ASSERT_TRUE(s.Allocate(Demand::Fraction(500, 0), On(1, {1})).ok());
  Demand d = Demand::Fraction(200, 0);
  EXPECT_EQ(Place(s, d, {.policy = Policy::kBinpack})->node, 1u);
  EXPECT_EQ(Place(s, d, {.policy = Policy::kBinpack})->gpus[0], 1);
  EXPECT_EQ(Place(s, d, {.policy = Policy::kSpread})->node, 0u);
}

TEST(Place, RejectsMissingProfileOrRng) {
  ClusterState s = SliverAndIdle();
  EXPECT_EQ(Place(s, Demand::WholeGpus(1), {.policy = Policy::kFgd}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Place(s, Demand::WholeGpus(1), {.policy = Policy::kRandomFit}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Place, RandomFitIsDeterministicForASeed) {
  ClusterState s;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(s.AddUniformNode("n" + std::to_string(i), 64000, 64 * kGiB, 4, "T4").ok());
  }
  auto run = [&](uint64_t seed) {
    PlacementRng rng(seed);
    std::vector<uint32_t> nodes;
    for (int i = 0; i < 10; ++i) {
      nodes.push_back(
          Place(s, Demand::Fraction(100, 0), {Policy::kRandomFit, nullptr, &rng})->node);
    }
    return nodes;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

// The invariants, for every policy: whatever Place returns, Allocate accepts
// (so nothing is ever over-allocated), and the books balance.
TEST(Place, EveryPolicyKeepsTheInvariantsUnderRandomLoad) {
  ClusterState base;
  ASSERT_TRUE(base.AddUniformNode("g8", 96000, 384 * kGiB, 8, "G2").ok());
  ASSERT_TRUE(base.AddUniformNode("t4", 104000, 512 * kGiB, 2, "T4").ok());
  ASSERT_TRUE(base.AddUniformNode("v4", 64000, 256 * kGiB, 4, "V100M32").ok());
  ASSERT_TRUE(base.AddUniformNode("cpu", 32000, 64 * kGiB, 0, "").ok());
  const uint64_t t4 = base.ModelMask("T4").value();
  std::vector<Demand> menu = {
      Demand::Fraction(250, 0, 4000, 8 * kGiB), Demand::Fraction(810, 0, 3152, 4 * kGiB),
      Demand::WholeGpus(1, 11300, 32 * kGiB),   Demand::WholeGpus(2, 16000, 64 * kGiB),
      Demand::WholeGpus(8, 88000, 128 * kGiB),  Demand::CpuOnly(12500, 16 * kGiB)};
  menu.push_back(Demand::Fraction(460, 0, 6000, 12 * kGiB));
  menu.back().model_mask = t4;
  WorkloadProfile profile = WorkloadProfile::FromDemands(menu).value();
  for (const PolicyInfo& info : AllPolicies()) {
    ClusterState s = base;
    PlacementRng rng(11);
    PlacementRng pick(5);
    int placed = 0;
    for (int i = 0; i < 300; ++i) {
      const Demand& d = menu[pick.Uniform(static_cast<uint32_t>(menu.size()))];
      Result<Placement> r = Place(s, d, {info.policy, &profile, &rng});
      if (!r.ok()) {
        ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << info.name;
        continue;
      }
      ASSERT_TRUE(s.Allocate(d, *r).ok()) << info.name << ": " << d.Describe();
      ++placed;
    }
    uint64_t free = 0;
    for (const NodeState& n : s.nodes()) {
      ASSERT_LE(n.cpu_free, n.cpu_total);
      ASSERT_LE(n.mem_free, n.mem_total);
      for (const GpuState& g : n.gpus) ASSERT_LE(g.milli_free, g.milli_total);
      free += n.GpuMilliFree();
    }
    EXPECT_EQ(free, s.FreeGpuMilli()) << info.name;
    EXPECT_GT(placed, 5) << info.name;
  }
}

TEST(ParsePolicy, KnowsEveryNameAndListsThemOnError) {
  for (const PolicyInfo& info : AllPolicies()) {
    EXPECT_EQ(ParsePolicy(info.name).value(), info.policy);
  }
  Status s = ParsePolicy("tetris").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("frag-aware"), std::string::npos) << s.message();
  EXPECT_EQ(PolicyName(kDefaultPolicy), "frag-aware");
}

// ScoreNodes is Place's view of every node: the node Place picks is the
// first with the highest score, with the same GPUs, at every step of a
// random fill, and a node without room is marked as such.
TEST(ScoreNodes, AgreesWithPlaceAtEveryStepOfARandomFill) {
  ClusterState s;
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        s.AddUniformNode("n" + std::to_string(i), 64000, 256 * kGiB, 4, "A100", 80 * kGiB).ok());
  }
  std::vector<Demand> menu = {Demand::Fraction(250, 10 * kGiB), Demand::Fraction(500, 20 * kGiB),
                              Demand::Fraction(300, 40 * kGiB), Demand::WholeGpus(1),
                              Demand::WholeGpus(2)};
  WorkloadProfile profile = WorkloadProfile::FromDemands(menu).value();
  std::vector<NodeOption> out(s.size());
  PlacementRng pick(3);
  for (Policy policy : {Policy::kFragAware, Policy::kFgd, Policy::kBestFit, Policy::kBinpack}) {
    ClusterState state = s;
    for (int step = 0; step < 60; ++step) {
      const Demand& d = menu[pick.Uniform(static_cast<uint32_t>(menu.size()))];
      const PlaceOptions o{.policy = policy, .profile = &profile};
      ASSERT_TRUE(ScoreNodes(state, d, o, out).ok());
      Result<Placement> placed = Place(state, d, o);
      int best = -1;
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i].fits && (best < 0 || out[i].score > out[best].score)) best = int(i);
      }
      if (!placed.ok()) {
        EXPECT_EQ(best, -1) << PolicyName(policy);
        continue;
      }
      ASSERT_EQ(best, int(placed->node)) << PolicyName(policy) << " step " << step;
      EXPECT_EQ(out[best].placement, *placed);
      ASSERT_TRUE(state.Allocate(d, *placed).ok());
    }
  }
}

TEST(ScoreNodes, RefusesAnOutputOfTheWrongSizeAndAMissingProfile) {
  ClusterState s = SliverAndIdle();
  std::vector<NodeOption> out(1);
  EXPECT_EQ(ScoreNodes(s, Demand::Fraction(300, 0), {.policy = Policy::kBinpack}, out).code(),
            StatusCode::kInvalidArgument);
  out.resize(2);
  EXPECT_EQ(ScoreNodes(s, Demand::Fraction(300, 0), {.policy = Policy::kFragAware}, out).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(ScoreNodes(s, Demand::Fraction(700, 0), {.policy = Policy::kBinpack}, out).ok());
  EXPECT_FALSE(out[0].fits) << "600 free: no room for 700";
  EXPECT_TRUE(out[1].fits);
}

}  // namespace
}  // namespace gpuslice::core
