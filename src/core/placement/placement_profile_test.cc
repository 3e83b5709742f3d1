#include "core/placement/placement_profile.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::core {
namespace {

WorkloadProfile OnlyShape(const Demand& d) {
  return WorkloadProfile::FromShapes({{d, 1.0}}).value();
}

// One node, two GPUs with `free0` and `free1` milli free.
ClusterState TwoGpuNode(uint32_t free0, uint32_t free1, uint64_t cpu = 16000) {
  ClusterState s;
  EXPECT_TRUE(s.AddUniformNode("n", cpu, 1 << 30, 2, "T4").ok());
  Placement p;
  p.gpu_count = 1;
  if (free0 < 1000) {
    p.gpus[0] = 0;
    EXPECT_TRUE(s.Allocate(Demand::Fraction(1000 - free0, 0), p).ok());
  }
  if (free1 < 1000) {
    p.gpus[0] = 1;
    EXPECT_TRUE(s.Allocate(Demand::Fraction(1000 - free1, 0), p).ok());
  }
  return s;
}

TEST(WorkloadProfile, FromDemandsKeepsTheMostFrequentShapes) {
  std::vector<Demand> demands;
  for (int i = 0; i < 90; ++i) demands.push_back(Demand::Fraction(500, 0, 1000));
  for (int i = 0; i < 9; ++i) demands.push_back(Demand::WholeGpus(1, 2000));
  demands.push_back(Demand::WholeGpus(8, 3000));
  Result<WorkloadProfile> p = WorkloadProfile::FromDemands(demands, {.coverage = 0.95});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->shapes().size(), 2u);  // The single 8-GPU task is dropped.
  EXPECT_EQ(p->shapes()[0].demand.gpu_milli, 500u);
  EXPECT_NEAR(p->shapes()[0].weight, 90.0 / 99.0, 1e-12);
  EXPECT_NEAR(p->shapes()[1].weight, 9.0 / 99.0, 1e-12);
}

TEST(WorkloadProfile, FromDemandsMergesMemoryUnlessAsked) {
  std::vector<Demand> demands = {Demand::CpuOnly(1000, 1), Demand::CpuOnly(1000, 2)};
  EXPECT_EQ(WorkloadProfile::FromDemands(demands)->shapes().size(), 1u);
  EXPECT_EQ(WorkloadProfile::FromDemands(demands, {.with_memory = true})->shapes().size(), 2u);
}

TEST(WorkloadProfile, RejectsEmptyInputAndBadCoverage) {
  EXPECT_EQ(WorkloadProfile::FromDemands({}).status().code(), StatusCode::kInvalidArgument);
  std::vector<Demand> one = {Demand::WholeGpus(1)};
  EXPECT_EQ(WorkloadProfile::FromDemands(one, {.coverage = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WorkloadProfile::FromShapes({{Demand::WholeGpus(1), 0.0}}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(NodeFragmentation, CountsGpusTooFullForTheShape) {
  WorkloadProfile p = OnlyShape(Demand::Fraction(500, 0));
  ClusterState s = TwoGpuNode(1000, 300);
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0)), 300);
}

TEST(NodeFragmentation, DeltaShowsTheEffectOfAPlacement) {
  WorkloadProfile p = OnlyShape(Demand::Fraction(500, 0));
  ClusterState s = TwoGpuNode(1000, 300);
  uint8_t gpu0 = 0;
  // 200 on the idle GPU leaves 800: still usable.
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0), DeltaOf(Demand::Fraction(200, 0), &gpu0, 1)),
                   300);
  // 600 leaves 400: now both GPUs are slivers.
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0), DeltaOf(Demand::Fraction(600, 0), &gpu0, 1)),
                   700);
}

TEST(NodeFragmentation, ANodeShortOfCpuIsAllFragment) {
  WorkloadProfile p = OnlyShape(Demand::Fraction(100, 0, 8000));
  ClusterState s = TwoGpuNode(1000, 1000, 4000);
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0)), 2000);
}

TEST(NodeFragmentation, WholeGpuShapesCannotUsePartlyUsedGpus) {
  WorkloadProfile p = OnlyShape(Demand::WholeGpus(1));
  ClusterState s = TwoGpuNode(1000, 900);
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0)), 900);
  WorkloadProfile two = OnlyShape(Demand::WholeGpus(2));
  EXPECT_DOUBLE_EQ(NodeFragmentation(two, s.node(0)), 1900);
}

TEST(NodeFragmentation, IsWeightedByShapeFrequency) {
  WorkloadProfile p =
      WorkloadProfile::FromShapes({{Demand::Fraction(500, 0), 3}, {Demand::CpuOnly(1, 0), 1}})
          .value();
  ClusterState s = TwoGpuNode(1000, 300);
  // 3/4 * 300 (the sliver) + 1/4 * 1300 (a CPU task uses no GPU).
  EXPECT_DOUBLE_EQ(NodeFragmentation(p, s.node(0)), 0.75 * 300 + 0.25 * 1300);
}

TEST(NodeFragmentation, OtherModelsAreFragment) {
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("t4", 1000, 1 << 20, 2, "T4").ok());
  Demand d = Demand::WholeGpus(1);
  d.model_mask = s.ModelMask("A100").value();
  EXPECT_DOUBLE_EQ(NodeFragmentation(OnlyShape(d), s.node(0)), 2000);
}

TEST(WorkloadProfile, WithRarityBoostsShapesFewNodesCanHold) {
  // One 128-core node and three 32-core nodes, 8 GPUs each: only the big
  // node (a quarter of the GPUs) can hold 8 GPUs with 120 cores.
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("big", 128000, 1 << 30, 8, "G3").ok());
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(s.AddUniformNode(name, 32000, 1 << 30, 8, "G2").ok());
  }
  Demand big = Demand::WholeGpus(8, 120000, 0);
  Demand small = Demand::WholeGpus(1, 4000, 0);
  Demand g3_small = small;
  g3_small.model_mask = s.ModelMask("G3").value();
  WorkloadProfile p = WorkloadProfile::FromShapes(
                          {{big, 1}, {small, 1}, {g3_small, 1}, {Demand::CpuOnly(1000, 0), 1}})
                          .value();
  WorkloadProfile r = p.WithRarity(s, 20);
  ASSERT_EQ(r.shapes().size(), 4u);
  for (size_t i = 0; i < r.shapes().size(); ++i) {
    const TaskShape& shape = r.shapes()[i];
    EXPECT_DOUBLE_EQ(shape.weight, p.shapes()[i].weight);  // The mix is unchanged.
    const bool only_big_node = shape.demand.cpu_milli == 120000 || shape.demand.model_mask != 0;
    EXPECT_DOUBLE_EQ(shape.rarity, only_big_node ? 4.0 : 1.0) << shape.demand.Describe();
  }
  // The cap applies.
  const WorkloadProfile capped = p.WithRarity(s, 2);
  for (const TaskShape& shape : capped.shapes()) EXPECT_LE(shape.rarity, 2.0);
  // On the big node, the fragment the 120-core shape sees counts four times.
  const NodeState& node = s.node(0);
  NodeDelta cpu_task;
  cpu_task.cpu_milli = 16000;  // Leaves 112 cores: the big shape no longer fits.
  const double plain = NodeFragmentation(p, node, cpu_task) - NodeFragmentation(p, node);
  const double rare = NodeFragmentation(r, node, cpu_task) - NodeFragmentation(r, node);
  EXPECT_DOUBLE_EQ(plain, 0.25 * 8000);
  EXPECT_DOUBLE_EQ(rare, 4 * 0.25 * 8000);
}

TEST(StrandedGpuMilli, CountsOnlyCapacityNoShapeCanUse) {
  WorkloadProfile p =
      WorkloadProfile::FromShapes({{Demand::Fraction(500, 0), 1}, {Demand::WholeGpus(2), 1}})
          .value();
  ClusterState s = TwoGpuNode(1000, 300);
  EXPECT_EQ(StrandedGpuMilli(p, s.node(0)), 300u);
  ClusterState starved = TwoGpuNode(1000, 300, 1000);
  WorkloadProfile cpu_hungry = OnlyShape(Demand::Fraction(100, 0, 2000));
  EXPECT_EQ(StrandedGpuMilli(cpu_hungry, starved.node(0)), 1300u);
}

// Shapes that differ only in host demand share one GPU scan; the sum must
// still be each shape's own term, in profile order, bit for bit.
TEST(NodeFragmentation, ShapesSharingGpuDemandAreSummedExactlyPerShape) {
  WorkloadProfile p = WorkloadProfile::FromShapes({{Demand::Fraction(500, 0, 1000), 0.3},
                                                   {Demand::Fraction(500, 0, 12000), 0.2},
                                                   {Demand::Fraction(500, 0, 40000), 0.1},
                                                   {Demand::WholeGpus(1, 4000), 0.25},
                                                   {Demand::CpuOnly(2000, 0), 0.15}})
                          .value();
  ClusterState s = TwoGpuNode(1000, 300);  // 16 cores, 1300 milli free.
  // Every GPU shape the host can feed leaves GPU 1's 300 milli (too little
  // for 500, not idle for a whole GPU); the rest leave all 1300.
  double reference = 0;
  for (const TaskShape& shape : p.shapes()) {
    const Demand& d = shape.demand;
    uint32_t left = 1300;
    if (d.gpus > 0 && d.cpu_milli <= 16000) left = 300;
    reference += shape.weight * shape.rarity * left;
  }
  EXPECT_EQ(NodeFragmentation(p, s.node(0)), reference);
}

TEST(FragmentationCache, RecomputesOnlyNodesThatChanged) {
  WorkloadProfile p = OnlyShape(Demand::Fraction(500, 0));
  ClusterState s;
  ASSERT_TRUE(s.AddUniformNode("a", 16000, 1 << 30, 2, "T4").ok());
  ASSERT_TRUE(s.AddUniformNode("b", 16000, 1 << 30, 2, "T4").ok());
  FragmentationCache cache;
  EXPECT_EQ(cache.Get(p, 0, s.node(0)), 0);
  EXPECT_EQ(cache.Get(p, 1, s.node(1)), 0);
  Placement at;
  at.node = 1;
  at.gpu_count = 1;
  ASSERT_TRUE(s.Allocate(Demand::Fraction(700, 0), at).ok());
  EXPECT_EQ(cache.Get(p, 1, s.node(1)), 300);  // GPU 0 has 300 left: too little.
  EXPECT_EQ(cache.Get(p, 1, s.node(1)), NodeFragmentation(p, s.node(1)));
  EXPECT_EQ(cache.Get(p, 0, s.node(0)), 0);
  // Another profile resets it.
  WorkloadProfile whole = OnlyShape(Demand::WholeGpus(2));
  EXPECT_EQ(cache.Get(whole, 1, s.node(1)), 1300);
}

}  // namespace
}  // namespace gpuslice::core
