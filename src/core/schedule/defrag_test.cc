#include "core/schedule/defrag.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpuslice::core {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

Placement On(uint8_t gpu) {
  Placement p;
  p.gpu_count = 1;
  p.gpus[0] = gpu;
  return p;
}

// One node of three 80 GiB GPUs, as the daemon models a 3 x H100 machine
// (a fraction without a compute share takes 1 per-mille).
class DefragTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(state_.AddUniformNode("n0", 1, 1, 3, "H100", 80 * kGiB).ok());
    options_.policy = Policy::kBinpack;
  }
  void Run(uint64_t id, uint64_t gib, uint8_t gpu, bool movable = true) {
    PlacedTask t;
    t.id = id;
    t.demand = Demand::Fraction(1, gib * kGiB);
    t.placement = On(gpu);
    t.movable = movable;
    ASSERT_TRUE(state_.Allocate(t.demand, t.placement).ok());
    tasks_.push_back(t);
  }
  std::optional<DefragPlan> Plan(const Demand& head, DefragOptions opt = {}) {
    EXPECT_FALSE(Place(state_, head, options_).ok()) << "the head fits without moves";
    const uint64_t free = state_.FreeGpuMilli();
    auto r = PlanDefrag(state_, head, tasks_, options_, opt);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(state_.FreeGpuMilli(), free) << "the state was changed";
    return r.ok() ? *r : std::nullopt;
  }
  // Applies `plan` to the state: every move, then the head, all must fit.
  void Apply(const DefragPlan& plan, const Demand& head) {
    for (const MoveProposal& m : plan.moves) {
      const PlacedTask* t = nullptr;
      for (const PlacedTask& x : tasks_) t = x.id == m.task_id ? &x : t;
      ASSERT_NE(t, nullptr);
      ASSERT_TRUE(state_.Release(t->demand, m.from).ok());
      ASSERT_TRUE(state_.Allocate(t->demand, m.to).ok());
    }
    ASSERT_TRUE(state_.Allocate(head, plan.head).ok());
  }
  ClusterState state_;
  std::vector<PlacedTask> tasks_;
  PlaceOptions options_;
};

TEST_F(DefragTest, OneMoveLetsTwoWholeGpusStartBesideTwoSpreadFractions) {
  Run(1, 20, 0);  // A notebook on GPU 0 ...
  Run(2, 20, 1);  // ... and an inference slice on GPU 1: one GPU idle.
  const Demand head = Demand::WholeGpus(2);
  auto plan = Plan(head);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->head.gpu_count, 2);
  Apply(*plan, head);
}

TEST_F(DefragTest, TwoMovesWhenOneIsNotEnoughAndNoneBeyondTheLimit) {
  Run(1, 20, 0);
  Run(2, 20, 1);
  Run(3, 20, 2);
  const Demand head = Demand::WholeGpus(2);
  EXPECT_FALSE(Plan(head, {.max_moves = 1}).has_value());
  auto plan = Plan(head, {.max_moves = 2});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->moves.size(), 2u);
  Apply(*plan, head);
}

TEST_F(DefragTest, ATaskThatCannotMoveIsNeverMoved) {
  Run(1, 20, 0, /*movable=*/false);
  Run(2, 20, 1, /*movable=*/false);
  EXPECT_FALSE(Plan(Demand::WholeGpus(2)).has_value());
}

TEST_F(DefragTest, TheMovableTaskMovesOntoTheGpuOfTheOneThatCannot) {
  Run(1, 20, 0, /*movable=*/false);
  Run(2, 20, 1);
  const Demand head = Demand::WholeGpus(2);
  auto plan = Plan(head);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].task_id, 2u);
  EXPECT_EQ(plan->moves[0].to, On(0));
  Apply(*plan, head);
}

TEST_F(DefragTest, AFractionGetsRoomWhenALargeTaskMovesAway) {
  Run(1, 20, 0);  // GPU 0: 60 GiB free.
  Run(2, 50, 1);  // GPU 1: 30 GiB free.
  Run(3, 50, 2);  // GPU 2: 30 GiB free.
  const Demand head = Demand::Fraction(1, 70 * kGiB);
  auto plan = Plan(head);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].task_id, 1u);
  EXPECT_EQ(plan->head, On(0));
  Apply(*plan, head);
}

TEST_F(DefragTest, NothingWhenTheMovedTasksFitNowhereElse) {
  Run(1, 50, 0);
  Run(2, 50, 1);
  Run(3, 50, 2);
  EXPECT_FALSE(Plan(Demand::WholeGpus(1)).has_value());
}

TEST_F(DefragTest, CapacityNoTaskAccountsForIsNeverFreed) {
  // GPU 0 holds memory no task explains (foreign use): it cannot be freed.
  ASSERT_TRUE(state_.Allocate(Demand::Fraction(1, 10 * kGiB), On(0)).ok());
  Run(2, 20, 1);
  Run(3, 20, 2);
  const Demand head = Demand::WholeGpus(2);
  auto plan = Plan(head);
  ASSERT_TRUE(plan.has_value());
  // GPU 0 is never one of those freed (the tasks may join it there).
  ASSERT_EQ(plan->head.gpu_count, 2);
  EXPECT_NE(plan->head.gpus[0], 0);
  EXPECT_NE(plan->head.gpus[1], 0);
  Apply(*plan, head);
}

TEST_F(DefragTest, ATaskOnAGpuTheClusterLacksIsAnError) {
  Run(1, 20, 0);
  PlacedTask ghost;
  ghost.id = 9;
  ghost.demand = Demand::Fraction(1, kGiB);
  ghost.placement = On(7);
  tasks_.push_back(ghost);
  auto r = PlanDefrag(state_, Demand::WholeGpus(3), tasks_, options_);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace gpuslice::core
