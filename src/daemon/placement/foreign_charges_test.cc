#include "daemon/placement/foreign_charges.h"

#include <gtest/gtest.h>

#include "core/units.h"
#include "daemon/placement/flat_gpu.h"

namespace gpuslice::daemon {
namespace {

using Part = ForeignCharges::Part;

// One node of `gpus` GPUs of 40 GiB each.
core::ClusterState State(int gpus) {
  core::ClusterState state;
  EXPECT_TRUE(state.InternModel("A100").ok());
  core::NodeState node;
  node.name = "n";
  node.cpu_total = node.cpu_free = 1;
  node.mem_total = node.mem_free = 1;
  for (int i = 0; i < gpus; ++i) {
    core::GpuState g;
    g.mem_total = g.mem_free = 40 * core::kGiB;
    node.gpus.push_back(g);
  }
  EXPECT_TRUE(state.AddNode(std::move(node)).ok());
  return state;
}

const core::GpuState& Gpu(const core::ClusterState& state, size_t flat) {
  const core::Placement p = FlatPlacement(flat);
  return state.node(p.node).gpus[p.gpus[0]];
}

TEST(ForeignCharges, AChargeTakesMemoryAndKeepsTheGpuFromBeingIdle) {
  core::ClusterState state = State(2);
  ForeignCharges charges;
  EXPECT_TRUE(charges.Set(state, 1, 7, Part::kForeign, 5 * core::kGiB, "pid 1"));
  EXPECT_EQ(Gpu(state, 1).mem_free, 35 * core::kGiB);
  EXPECT_FALSE(Gpu(state, 1).IsIdle());
  EXPECT_TRUE(Gpu(state, 0).IsIdle());
  EXPECT_EQ(charges.Charged(7), 5 * core::kGiB);
  EXPECT_EQ(charges.ChargedAt(1), 5 * core::kGiB);
  EXPECT_EQ(charges.Charged(0), 0u);
}

TEST(ForeignCharges, BothPartsAreChargedTogetherAndClearedApart) {
  core::ClusterState state = State(1);
  ForeignCharges charges;
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kForeign, 2 * core::kGiB, "pid 1"));
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kOverLimit, 3 * core::kGiB, "job 12"));
  EXPECT_EQ(charges.Charged(0), 5 * core::kGiB);
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kForeign, 0, ""));
  EXPECT_EQ(charges.Charged(0), 3 * core::kGiB);
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kOverLimit, 0, ""));
  EXPECT_EQ(charges.Charged(0), 0u);
  EXPECT_TRUE(Gpu(state, 0).IsIdle()) << "all of it was given back";
}

TEST(ForeignCharges, SettingTheSameChargeAgainChangesNothing) {
  core::ClusterState state = State(1);
  ForeignCharges charges;
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kForeign, 2 * core::kGiB, "pid 1"));
  EXPECT_FALSE(charges.Set(state, 0, 0, Part::kForeign, 2 * core::kGiB, "pid 1, pid 2"));
  EXPECT_EQ(charges.Describe([](size_t) { return true; }),
            "; GPU 0: 2 GiB held by processes outside gpuslice (pid 1, pid 2)")
      << "who is named as last set";
  EXPECT_FALSE(charges.Set(state, 0, 0, Part::kOverLimit, 0, "")) << "nothing to clear";
}

TEST(ForeignCharges, OnlyWhatIsFreeIsChargedAndTheRestOnceMemoryIsGivenBack) {
  core::ClusterState state = State(1);
  const core::Demand job = core::Demand::Fraction(500, 30 * core::kGiB);
  ASSERT_TRUE(state.Allocate(job, FlatPlacement(0)).ok());
  ForeignCharges charges;
  EXPECT_TRUE(charges.Set(state, 0, 0, Part::kForeign, 20 * core::kGiB, "pid 1"));
  EXPECT_EQ(charges.Charged(0), 10 * core::kGiB) << "the job keeps what it holds";
  (void)charges.Recharge(state);
  EXPECT_EQ(charges.Charged(0), 10 * core::kGiB) << "nothing was given back yet";
  ASSERT_TRUE(state.Release(job, FlatPlacement(0)).ok());
  EXPECT_TRUE(charges.Recharge(state));
  EXPECT_EQ(charges.Charged(0), 20 * core::kGiB);
  EXPECT_EQ(Gpu(state, 0).mem_free, 20 * core::kGiB);
}

TEST(ForeignCharges, DescribeNamesBothPartsOfTheGpusAskedAbout) {
  core::ClusterState state = State(2);
  ForeignCharges charges;
  EXPECT_TRUE(charges.Set(state, 0, 4, Part::kForeign, 1 * core::kGiB, "pid 9, user bob"));
  EXPECT_TRUE(charges.Set(state, 1, 5, Part::kOverLimit, 2 * core::kGiB, "job 12"));
  EXPECT_EQ(charges.Describe([](size_t) { return true; }),
            "; GPU 4: 1 GiB held by processes outside gpuslice (pid 9, user bob)"
            "; GPU 5: 2 GiB held beyond their limits by job 12");
  EXPECT_EQ(charges.Describe([](size_t flat) { return flat == 1; }),
            "; GPU 5: 2 GiB held beyond their limits by job 12");
}

}  // namespace
}  // namespace gpuslice::daemon
