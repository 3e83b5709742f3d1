#include "daemon/placement/free_bounds.h"

#include <gtest/gtest.h>

#include "core/units.h"
#include "daemon/placement/flat_gpu.h"

namespace gpuslice::daemon {
namespace {

core::ClusterState TwoGpus() {
  core::ClusterState state;
  EXPECT_TRUE(state.InternModel("A100").ok());
  core::NodeState node;
  node.name = "n";
  node.cpu_total = node.cpu_free = 1;
  node.mem_total = node.mem_free = 1;
  for (int i = 0; i < 2; ++i) {
    core::GpuState g;
    g.mem_total = g.mem_free = 40 * core::kGiB;
    node.gpus.push_back(g);
  }
  EXPECT_TRUE(state.AddNode(std::move(node)).ok());
  return state;
}

TEST(FreeBounds, BoundsAreTheMostFreeOnOneGpuAndTheIdleCount) {
  core::ClusterState state = TwoGpus();
  ASSERT_TRUE(state.Allocate(core::Demand::Fraction(300, 10 * core::kGiB), FlatPlacement(0)).ok());
  ASSERT_TRUE(state.Allocate(core::Demand::Fraction(600, 5 * core::kGiB), FlatPlacement(1)).ok());
  FreeBounds bounds;
  const FreeBounds::Bounds& b = bounds.Of(state);
  EXPECT_EQ(b.max_mem_free, 35 * core::kGiB);
  EXPECT_EQ(b.max_milli_free, 700u);
  EXPECT_EQ(b.idle_gpus, 0u);
}

TEST(FreeBounds, TheyAreRecomputedOnlyAfterInvalidate) {
  core::ClusterState state = TwoGpus();
  FreeBounds bounds;
  EXPECT_EQ(bounds.Of(state).idle_gpus, 2u);
  const core::Demand d = core::Demand::Fraction(100, 1 * core::kGiB);
  ASSERT_TRUE(state.Allocate(d, FlatPlacement(1)).ok());
  EXPECT_EQ(bounds.Of(state).idle_gpus, 2u) << "cached until told";
  bounds.Invalidate();
  EXPECT_EQ(bounds.Of(state).idle_gpus, 1u);
}

}  // namespace
}  // namespace gpuslice::daemon
