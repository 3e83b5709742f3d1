#include "core/placement/move_proposal.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::core {
namespace {

Placement On(uint32_t node, uint8_t gpu) {
  Placement p;
  p.node = node;
  p.gpu_count = 1;
  p.gpus[0] = gpu;
  return p;
}

class MoveProposalTest : public ::testing::Test {
 protected:
  // One node of two GPUs (memory untracked, as in the openb trace), or two.
  void SetUp() override {
    ASSERT_TRUE(state_.AddUniformNode("n0", 64000, 256ull << 30, 2, "V100").ok());
  }
  void Run(uint64_t id, uint32_t milli, Placement at, bool movable = true) {
    PlacedTask t;
    t.id = id;
    t.demand = Demand::Fraction(milli, 0, 1000, 1ull << 30);
    t.placement = at;
    t.movable = movable;
    ASSERT_TRUE(state_.Allocate(t.demand, at).ok());
    tasks_.push_back(t);
  }
  std::optional<MoveProposal> Propose(const Demand& head) {
    options_.policy = Policy::kBestFit;
    // The head does not fit as things are: that is when a move is asked for.
    EXPECT_FALSE(Place(state_, head, options_).ok());
    const uint64_t free = state_.FreeGpuMilli();
    auto r = ProposeMove(state_, head, tasks_, options_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(state_.FreeGpuMilli(), free) << "the state was changed";
    return r.ok() ? *r : std::nullopt;
  }
  ClusterState state_;
  std::vector<PlacedTask> tasks_;
  PlaceOptions options_;
};

TEST_F(MoveProposalTest, TwoSmallTasksOnTwoGpusMakeWayForAWholeGpu) {
  Run(1, 300, On(0, 0));
  Run(2, 300, On(0, 1));
  auto p = Propose(Demand::WholeGpus(1, 1000, 1ull << 30));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->task_id, 1u);
  EXPECT_EQ(p->from, On(0, 0));
  EXPECT_EQ(p->to, On(0, 1));
  EXPECT_EQ(p->head.gpu_count, 1);
  EXPECT_EQ(p->head.gpus[0], 0);
}

TEST_F(MoveProposalTest, AFractionGetsRoomFromTheCheapestTaskThatFitsElsewhere) {
  Run(1, 500, On(0, 0));
  Run(2, 200, On(0, 0));  // GPU 0: 300 free.
  Run(3, 600, On(0, 1));  // GPU 1: 400 free.
  auto p = Propose(Demand::Fraction(500, 0, 1000, 1ull << 30));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->task_id, 2u);
  EXPECT_EQ(p->to, On(0, 1));
  EXPECT_EQ(p->head, On(0, 0));
}

TEST_F(MoveProposalTest, NothingIsProposedWhenNoSingleMoveMakesRoom) {
  Run(1, 600, On(0, 0));
  Run(2, 600, On(0, 1));
  EXPECT_FALSE(Propose(Demand::Fraction(500, 0, 1000, 1ull << 30)).has_value());
  // Nor for a whole GPU when neither task fits beside the other.
  EXPECT_FALSE(Propose(Demand::WholeGpus(1, 1000, 1ull << 30)).has_value());
}

TEST_F(MoveProposalTest, ATaskThatMayNotMoveIsNeverProposed) {
  Run(1, 300, On(0, 0), /*movable=*/false);
  Run(2, 300, On(0, 1), /*movable=*/false);
  EXPECT_FALSE(Propose(Demand::WholeGpus(1, 1000, 1ull << 30)).has_value());
}

TEST_F(MoveProposalTest, TheHeadsModelAndTheMovedTasksOwnAreRespected) {
  ASSERT_TRUE(state_.AddUniformNode("n1", 64000, 256ull << 30, 1, "T4").ok());
  Run(1, 300, On(0, 0));
  Run(2, 300, On(0, 1));
  Run(3, 300, On(1, 0));
  // A whole V100: room made on node 0, never by emptying the T4.
  Demand v100 = Demand::WholeGpus(1, 1000, 1ull << 30);
  v100.model_mask = 1ull << state_.FindModel("V100");
  auto p = Propose(v100);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->head.node, 0u);
  // A whole T4: its one task could move to a V100, so the T4 frees up.
  Demand t4 = Demand::WholeGpus(1, 1000, 1ull << 30);
  t4.model_mask = 1ull << state_.FindModel("T4");
  p = Propose(t4);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->task_id, 3u);
  EXPECT_EQ(p->to.node, 0u);
  EXPECT_EQ(p->head, On(1, 0));
}

TEST_F(MoveProposalTest, ATaskPlacedOnAGpuTheClusterLacksIsAnError) {
  PlacedTask bad;
  bad.id = 9;
  bad.demand = Demand::Fraction(100, 0);
  bad.placement = On(3, 0);
  std::vector<PlacedTask> tasks = {bad};
  options_.policy = Policy::kBestFit;
  EXPECT_EQ(ProposeMove(state_, Demand::WholeGpus(1), tasks, options_).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpuslice::core
