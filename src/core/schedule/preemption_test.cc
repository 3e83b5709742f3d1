#include "core/schedule/preemption.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuslice::core {
namespace {

// GPUs with integer units; a job takes `units` on one GPU. Running jobs are
// pinned to a GPU with Run(), so fragmentation is what the test says it is.
class UnitsModel : public CapacityModel {
 public:
  UnitsModel(std::vector<int> gpus, std::map<uint64_t, int> demand)
      : free_(std::move(gpus)), demand_(std::move(demand)) {}
  std::unique_ptr<CapacityModel> Clone() const override {
    return std::make_unique<UnitsModel>(*this);
  }
  FitResult TryPlace(uint64_t id) override {
    for (size_t g = 0; g < free_.size(); ++g) {
      if (free_[g] >= demand_.at(id)) {
        free_[g] -= demand_.at(id);
        where_[id] = g;
        return FitResult::kPlaced;
      }
    }
    return FitResult::kNotNow;
  }
  void Release(uint64_t id) override {
    auto it = where_.find(id);
    if (it == where_.end()) return;
    free_[it->second] += demand_.at(id);
    where_.erase(it);
  }
  bool Mirror(uint64_t, const CapacityModel&) override { return false; }
  void Run(uint64_t id, size_t g) {
    free_[g] -= demand_.at(id);
    where_[id] = g;
  }

 private:
  std::vector<int> free_;
  std::map<uint64_t, int> demand_;
  std::map<uint64_t, size_t> where_;
};

PreemptCandidate C(uint64_t id, Priority p, int64_t started_ms, double weight = 1.0,
                   bool restartable = false) {
  return {id, p, started_ms, restartable, weight};
}

const PreemptionPolicy kLower{PreemptionMode::kLower, {}};
constexpr uint64_t kAsk = 100;

TEST(PreemptionPolicy, ParsesAndPrints) {
  EXPECT_EQ(ParsePreemptionPolicy("never")->mode, PreemptionMode::kNever);
  EXPECT_EQ(ParsePreemptionPolicy("lower")->mode, PreemptionMode::kLower);
  auto p = ParsePreemptionPolicy("lower-after:10m");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->min_runtime, std::chrono::minutes(10));
  EXPECT_EQ(p->ToString(), "lower-after:10m");
  EXPECT_FALSE(ParsePreemptionPolicy("lower-after:").ok());
  auto bad = ParsePreemptionPolicy("always");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'always'"), std::string::npos);
}

TEST(PlanPreemption, OffMeansNoVictims) {
  UnitsModel m({4}, {{1, 4}, {kAsk, 4}});
  m.Run(1, 0);
  auto plan = PlanPreemption(kAsk, Priority::kHigh, {C(1, Priority::kLow, 0)}, {}, 1000, m);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("off"), std::string::npos);
}

TEST(PlanPreemption, NeverEqualOrHigherPriority) {
  UnitsModel m({4}, {{1, 4}, {kAsk, 4}});
  m.Run(1, 0);
  auto plan =
      PlanPreemption(kAsk, Priority::kNormal, {C(1, Priority::kNormal, 0)}, kLower, 1000, m);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "no running job has a priority below normal");
}

TEST(PlanPreemption, TakesTheJobThatLostLeastWork) {
  // Two GPUs, each fully held by one low job; either would make room.
  UnitsModel m({4, 4}, {{1, 4}, {2, 4}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(2, 1);
  // Job 1 ran 100 s on a whole GPU, job 2 ran 50 s.
  auto plan =
      PlanPreemption(kAsk, Priority::kHigh, {C(1, Priority::kLow, 0), C(2, Priority::kLow, 50'000)},
                     kLower, 100'000, m);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->victims, std::vector<uint64_t>{2});
  EXPECT_DOUBLE_EQ(plan->lost_gpu_seconds, 50.0);
}

TEST(PlanPreemption, LowerPriorityGoesBeforeCheaperNormal) {
  UnitsModel m({4, 4}, {{1, 4}, {2, 4}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(2, 1);
  auto plan = PlanPreemption(kAsk, Priority::kHigh,
                             {C(1, Priority::kLow, 0), C(2, Priority::kNormal, 99'000)}, kLower,
                             100'000, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->victims, std::vector<uint64_t>{1});
}

TEST(PlanPreemption, SparesCheapVictimsOnTheWrongGpu) {
  // GPU 0: job 1 (2 units, cheap) + job 2 (1 unit, cheapest); GPU 1: job 3
  // (4 units, expensive). The request needs 3 units on one GPU: ending jobs
  // 2 then 1 frees GPU 0 (3 units). Job 3 is never needed.
  UnitsModel m({3, 4}, {{1, 2}, {2, 1}, {3, 4}, {kAsk, 3}});
  m.Run(1, 0);
  m.Run(2, 0);
  m.Run(3, 1);
  auto plan = PlanPreemption(
      kAsk, Priority::kHigh,
      {C(1, Priority::kLow, 90'000), C(2, Priority::kLow, 95'000), C(3, Priority::kLow, 0)}, kLower,
      100'000, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->victims, (std::vector<uint64_t>{2, 1}));
}

TEST(PlanPreemption, MinimalSetDropsVictimsThatDidNotHelp) {
  // GPU 0 holds cheap job 1 (1 unit) beside high job 3 (2 units): ending job
  // 1 leaves 2 free, not the 4 asked. GPU 1 holds job 2 (4 units).
  // Cheapest-first takes 1 then 2; only 2 is needed.
  UnitsModel m({4, 4}, {{1, 1}, {2, 4}, {3, 2}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(3, 0);
  m.Run(2, 1);
  auto plan = PlanPreemption(
      kAsk, Priority::kHigh,
      {C(1, Priority::kLow, 99'000), C(2, Priority::kLow, 0), C(3, Priority::kHigh, 0)}, kLower,
      100'000, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->victims, std::vector<uint64_t>{2});
}

TEST(PlanPreemption, RestartableBeforeNotOnEqualWork) {
  UnitsModel m({4, 4}, {{1, 4}, {2, 4}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(2, 1);
  auto plan =
      PlanPreemption(kAsk, Priority::kHigh,
                     {C(1, Priority::kLow, 0, 1.0, false), C(2, Priority::kLow, 0, 1.0, true)},
                     kLower, 100'000, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->victims, std::vector<uint64_t>{2});
}

TEST(PlanPreemption, GpuWeightScalesTheWorkLost) {
  // Job 1: a 30% fraction for 100 s (30 GPU-seconds); job 2: a whole GPU for
  // 50 s (50 GPU-seconds). Either frees enough.
  UnitsModel m({4, 4}, {{1, 4}, {2, 4}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(2, 1);
  auto plan = PlanPreemption(kAsk, Priority::kHigh,
                             {C(1, Priority::kLow, 0, 0.3), C(2, Priority::kLow, 50'000, 1.0)},
                             kLower, 100'000, m);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->victims, std::vector<uint64_t>{1});
  EXPECT_NEAR(plan->lost_gpu_seconds, 30.0, 1e-9);
}

TEST(PlanPreemption, MinimumRuntimeProtectsYoungJobs) {
  UnitsModel m({4}, {{1, 4}, {kAsk, 4}});
  m.Run(1, 0);
  PreemptionPolicy after{PreemptionMode::kLowerAfterMinRuntime, std::chrono::minutes(10)};
  auto young =
      PlanPreemption(kAsk, Priority::kHigh, {C(1, Priority::kLow, 0)}, after, 9 * 60'000, m);
  ASSERT_FALSE(young.ok());
  EXPECT_EQ(young.status().message(),
            "the lower-priority jobs (1) have run less than the minimum of 10m");
  auto old =
      PlanPreemption(kAsk, Priority::kHigh, {C(1, Priority::kLow, 0)}, after, 10 * 60'000, m);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->victims, std::vector<uint64_t>{1});
}

TEST(PlanPreemption, SaysWhenEvenAllVictimsAreNotEnough) {
  // The request needs 4 units; GPU 0 has a normal job besides the low one.
  UnitsModel m({4}, {{1, 2}, {2, 2}, {kAsk, 4}});
  m.Run(1, 0);
  m.Run(2, 0);
  auto plan = PlanPreemption(kAsk, Priority::kHigh,
                             {C(1, Priority::kLow, 0), C(2, Priority::kHigh, 0)}, kLower, 1000, m);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "even ending all 1 lower-priority job(s) would not make room");
}

TEST(PlanPreemption, LeavesTheCallersModelUnchanged) {
  UnitsModel m({4}, {{1, 4}, {kAsk, 4}});
  m.Run(1, 0);
  ASSERT_TRUE(
      PlanPreemption(kAsk, Priority::kHigh, {C(1, Priority::kLow, 0)}, kLower, 1000, m).ok());
  EXPECT_EQ(m.TryPlace(kAsk), FitResult::kNotNow);
}

}  // namespace
}  // namespace gpuslice::core
