#include "core/schedule/queue.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuslice::core {
namespace {

// A toy capacity: GPUs with integer units; a job takes `units` on one GPU
// (first fit). Counts TryPlace calls to check the planner's pruning.
class ToyModel : public CapacityModel {
 public:
  ToyModel(std::vector<int> gpus, std::map<uint64_t, int> demand)
      : capacity_(gpus), free_(std::move(gpus)), demand_(std::move(demand)) {}

  std::unique_ptr<CapacityModel> Clone() const override {
    return std::make_unique<ToyModel>(*this);
  }
  FitResult TryPlace(uint64_t id) override {
    ++*tries_;
    int units = demand_.at(id);
    bool ever = false;
    for (size_t g = 0; g < free_.size(); ++g) {
      ever = ever || capacity_[g] >= units;
      if (free_[g] >= units) {
        free_[g] -= units;
        where_[id] = g;
        return FitResult::kPlaced;
      }
    }
    return ever ? FitResult::kNotNow : FitResult::kNever;
  }
  bool Mirror(uint64_t id, const CapacityModel& source) override {
    const auto& from = static_cast<const ToyModel&>(source);
    auto it = from.where_.find(id);
    if (it == from.where_.end() || free_[it->second] < demand_.at(id)) return false;
    free_[it->second] -= demand_.at(id);
    where_[id] = it->second;
    return true;
  }
  void Release(uint64_t id) override {
    auto it = where_.find(id);
    if (it == where_.end()) return;
    free_[it->second] += demand_.at(id);
    where_.erase(it);
  }
  // Marks a job as already running on GPU `g`.
  void Run(uint64_t id, size_t g) {
    free_[g] -= demand_.at(id);
    where_[id] = g;
  }
  int tries() const { return *tries_; }

 private:
  std::vector<int> capacity_;
  std::vector<int> free_;
  std::map<uint64_t, int> demand_;
  std::map<uint64_t, size_t> where_;
  std::shared_ptr<int> tries_ = std::make_shared<int>(0);
};

// A queued job whose shape is its toy demand in units (so pruning is sound).
QueuedJob Q(uint64_t id, int units, Priority p = Priority::kNormal,
            std::optional<int64_t> runtime_ms = {}) {
  QueuedJob j;
  j.id = id;
  j.priority = p;
  j.seq = id;
  if (runtime_ms) j.max_runtime = std::chrono::milliseconds(*runtime_ms);
  j.shape.mem = static_cast<uint64_t>(units);
  return j;
}

std::vector<QueuedJob> Sorted(std::vector<QueuedJob> q) {
  std::sort(q.begin(), q.end(), QueueBefore);
  return q;
}

TEST(QueueBefore, HigherPriorityFirstThenArrival) {
  EXPECT_TRUE(QueueBefore(Q(5, 1, Priority::kHigh), Q(1, 1, Priority::kNormal)));
  EXPECT_TRUE(QueueBefore(Q(1, 1), Q(2, 1)));
  EXPECT_FALSE(QueueBefore(Q(2, 1), Q(1, 1)));
  EXPECT_TRUE(QueueBefore(Q(9, 1, Priority::kNormal), Q(3, 1, Priority::kLow)));
}

TEST(PlanQueue, StartsEverythingThatFitsInQueueOrder) {
  ToyModel m({10}, {{1, 3}, {2, 3}, {3, 3}});
  QueuePlan p = PlanQueue(Sorted({Q(1, 3), Q(2, 3), Q(3, 3)}), {}, 0, m);
  EXPECT_EQ(p.start, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(p.waiting.empty());
  EXPECT_EQ(p.head, 0u);
}

TEST(PlanQueue, HighPriorityArrivalGoesAheadOfOlderJobs) {
  ToyModel m({10}, {{1, 8}, {2, 8}});
  QueuePlan p = PlanQueue(Sorted({Q(1, 8), Q(2, 8, Priority::kHigh)}), {}, 0, m);
  EXPECT_EQ(p.start, (std::vector<uint64_t>{2}));
  ASSERT_EQ(p.waiting.size(), 1u);
  EXPECT_EQ(p.waiting[0].id, 1u);
  EXPECT_EQ(p.waiting[0].reason, WaitReason::kHead);
}

TEST(PlanQueue, HeldJobsWaitWithoutBlockingAndStartedOnesAreCounted) {
  // A hold that admits one job of "user A" (jobs 1-3) per pass, as a quota
  // of one running job would; job 4 is someone else's.
  ToyModel m({10}, {{1, 2}, {2, 2}, {3, 2}, {4, 2}});
  int a_started = 0;
  std::vector<uint64_t> seen;
  PlanOptions opt;
  opt.held = [&](uint64_t id) { return id <= 3 && a_started >= 1; };
  opt.started = [&](uint64_t id) {
    seen.push_back(id);
    if (id <= 3) ++a_started;
  };
  QueuePlan p = PlanQueue(Sorted({Q(1, 2), Q(2, 2), Q(3, 2), Q(4, 2)}), {}, 0, m, opt);
  EXPECT_EQ(p.start, (std::vector<uint64_t>{1, 4}));
  EXPECT_EQ(seen, p.start);
  ASSERT_EQ(p.waiting.size(), 2u);
  EXPECT_EQ(p.waiting[0].reason, WaitReason::kHeld);
  EXPECT_EQ(p.waiting[1].reason, WaitReason::kHeld);
  EXPECT_EQ(p.head, 0u) << "a held job is never the head";
  EXPECT_EQ(WaitReasonName(WaitReason::kHeld), "held");
}

// Table of backfill cases on one GPU of 10 units where job 100 (running, 6
// units) blocks the head (job 1, 8 units) and a candidate (job 2) arrives.
struct BackfillCase {
  const char* name;
  std::optional<int64_t> running_end;   // Of job 100.
  int candidate_units;
  std::optional<int64_t> candidate_runtime;
  bool starts;
  WaitReason reason;  // When it does not start.
};

TEST(PlanQueue, BackfillTable) {
  const BackfillCase cases[] = {
      // Rule (b): 2 units leave 8 for the head once job 100 ends.
      {"small job that leaves room for the head starts", std::nullopt, 2, std::nullopt, true,
       WaitReason::kHead},
      // 3 units would leave only 7: the head could not start when 100 ends.
      {"job that would take the head's room waits", std::nullopt, 3, std::nullopt, false,
       WaitReason::kWouldDelayHead},
      // Rule (a): ends (t=50) before the head's reservation (t=100).
      {"job ending before the reservation starts", 100, 3, 50, true, WaitReason::kHead},
      {"job ending after the reservation waits", 100, 3, 150, false, WaitReason::kWouldDelayHead},
      {"job without runtime waits when it takes the head's room", 100, 3, std::nullopt, false,
       WaitReason::kWouldDelayHead},
      {"job that does not fit now waits behind the head", std::nullopt, 5, std::nullopt, false,
       WaitReason::kBehindHead},
  };
  for (const BackfillCase& c : cases) {
    SCOPED_TRACE(c.name);
    ToyModel m({10}, {{100, 6}, {1, 8}, {2, c.candidate_units}});
    m.Run(100, 0);
    std::vector<RunningJob> running = {{100, c.running_end}};
    QueuePlan p = PlanQueue(Sorted({Q(1, 8), Q(2, c.candidate_units, Priority::kNormal, c.candidate_runtime)}), running,
                            0, m);
    EXPECT_EQ(p.head, 1u);
    if (c.starts) {
      EXPECT_EQ(p.start, (std::vector<uint64_t>{2}));
      ASSERT_EQ(p.waiting.size(), 1u);
    } else {
      EXPECT_TRUE(p.start.empty());
      ASSERT_EQ(p.waiting.size(), 2u);
      EXPECT_EQ(p.waiting[1].id, 2u);
      EXPECT_EQ(p.waiting[1].reason, c.reason);
      EXPECT_EQ(p.waiting[1].position, 2);
    }
    EXPECT_EQ(p.waiting[0].position, 1);
    EXPECT_EQ(p.waiting[0].reason, WaitReason::kHead);
  }
}

TEST(PlanQueue, ReservationIsTheEarliestEndThatLetsTheHeadFit) {
  // Two GPUs of 10; jobs 100 (ends 30) and 101 (ends 70) each hold 9 on one.
  ToyModel m({10, 10}, {{100, 9}, {101, 9}, {102, 9}, {1, 10}});
  m.Run(100, 0);
  m.Run(101, 1);
  QueuePlan p = PlanQueue({Q(1, 10)}, {{101, 70}, {100, 30}}, 0, m);
  ASSERT_TRUE(p.head_reservation_ms.has_value());
  EXPECT_EQ(*p.head_reservation_ms, 30);
}

TEST(PlanQueue, ReservationIsUnknownWhenItNeedsAJobWithoutRuntime) {
  ToyModel m({10}, {{100, 9}, {1, 10}});
  m.Run(100, 0);
  QueuePlan p = PlanQueue({Q(1, 10)}, {{100, std::nullopt}}, 0, m);
  EXPECT_EQ(p.head, 1u);
  EXPECT_FALSE(p.head_reservation_ms.has_value());
}

TEST(PlanQueue, RequestThatCanNeverFitIsReportedNotQueued) {
  ToyModel m({10}, {{1, 11}, {2, 4}});
  QueuePlan p = PlanQueue(Sorted({Q(1, 11), Q(2, 4)}), {}, 0, m);
  EXPECT_EQ(p.never_fit, (std::vector<uint64_t>{1}));
  EXPECT_EQ(p.start, (std::vector<uint64_t>{2}));
  EXPECT_TRUE(p.waiting.empty());
}

TEST(PlanQueue, PositionsCountOnlyWaitingJobs) {
  ToyModel m({10}, {{1, 4}, {2, 9}, {3, 9}, {4, 9}});
  QueuePlan p = PlanQueue(Sorted({Q(1, 4), Q(2, 9), Q(3, 9), Q(4, 9)}), {}, 0, m);
  EXPECT_EQ(p.start, (std::vector<uint64_t>{1}));
  ASSERT_EQ(p.waiting.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.waiting[i].position, i + 1);
  EXPECT_EQ(p.waiting[0].id, 2u);
}

TEST(PlanQueue, SkipsShapesDominatingOneThatDidNotFit) {
  std::map<uint64_t, int> demand = {{5000, 10}};
  std::vector<QueuedJob> q;
  for (uint64_t id = 1; id <= 1000; ++id) {
    demand[id] = 5;
    q.push_back(Q(id, 5));
  }
  ToyModel m({10}, demand);
  m.Run(5000, 0);
  QueuePlan p = PlanQueue(q, {{5000, std::nullopt}}, 0, m);
  EXPECT_EQ(p.waiting.size(), 1000u);
  // The head's probes plus nothing per candidate: all 999 are pruned.
  EXPECT_LT(m.tries(), 10);
}

TEST(PlanQueue, StopsCheckingBackfillPastTheLimit) {
  std::map<uint64_t, int> demand = {{100, 6}, {1, 8}};
  std::vector<QueuedJob> q = {Q(1, 8)};
  for (uint64_t id = 2; id <= 5; ++id) {
    // Each fits now but would leave the head (8) too little once 100 ends.
    demand[id] = 3;
    QueuedJob j = Q(id, 3);
    j.shape.milli = static_cast<uint32_t>(10 - id);  // Distinct shapes: no pruning.
    q.push_back(j);
  }
  ToyModel m({10}, demand);
  m.Run(100, 0);
  PlanOptions opt;
  opt.max_backfill_checks = 2;
  QueuePlan p = PlanQueue(q, {{100, std::nullopt}}, 0, m, opt);
  ASSERT_EQ(p.waiting.size(), 5u);
  EXPECT_EQ(p.waiting[1].reason, WaitReason::kWouldDelayHead);
  EXPECT_EQ(p.waiting[2].reason, WaitReason::kWouldDelayHead);
  EXPECT_EQ(p.waiting[3].reason, WaitReason::kNotConsidered);
}

TEST(PlanQueue, NoBackfillWhenDisabled) {
  ToyModel m({10}, {{100, 6}, {1, 8}, {2, 1}});
  m.Run(100, 0);
  PlanOptions opt;
  opt.backfill = false;
  QueuePlan p = PlanQueue({Q(1, 8), Q(2, 1)}, {{100, std::nullopt}}, 0, m, opt);
  EXPECT_TRUE(p.start.empty());
  EXPECT_EQ(p.waiting[1].reason, WaitReason::kBehindHead);
}

// The all-on starvation: two half-full GPUs, a head that needs one of them
// whole, and a stream of small jobs without run times.
TEST(PlanQueue, AnEstimatedEndGivesTheHeadAReservationBackfillRespects) {
  std::map<uint64_t, int> demand = {{100, 6}, {101, 6}, {1, 8}, {2, 4}};
  auto plan = [&](std::optional<int64_t> estimate) {
    ToyModel m({10, 10}, demand);
    m.Run(100, 0);
    m.Run(101, 1);
    RunningJob a{100, std::nullopt, estimate};
    RunningJob b{101, std::nullopt, std::nullopt};
    return PlanQueue({Q(1, 8), Q(2, 4)}, {a, b}, 0, m);
  };
  // Without an estimate nothing has an end: the head's reservation is
  // unknown and the small job starts where the head will need room.
  QueuePlan blind = plan(std::nullopt);
  EXPECT_EQ(blind.start, (std::vector<uint64_t>{2}));
  EXPECT_FALSE(blind.head_reservation_ms.has_value());
  // With job 100 expected to end at t=1000, the head is due on GPU 0 then;
  // job 2 would take room there and waits.
  QueuePlan seen = plan(1000);
  EXPECT_TRUE(seen.start.empty());
  ASSERT_TRUE(seen.head_reservation_ms.has_value());
  EXPECT_EQ(*seen.head_reservation_ms, 1000);
  EXPECT_TRUE(seen.reservation_estimated);
  ASSERT_EQ(seen.waiting.size(), 2u);
  EXPECT_EQ(seen.waiting[1].reason, WaitReason::kWouldDelayHead);
}

TEST(PlanQueue, AnEstimateNeverAdmitsACandidateByItsOwnEnd) {
  // Job 2 is expected to take 10 ms and the head is due at 1000, but an
  // estimate is not a deadline: only rule (b) may admit it, and it fails.
  ToyModel m({10}, {{100, 6}, {1, 8}, {2, 4}});
  m.Run(100, 0);
  QueuedJob small = Q(2, 4);
  small.estimate = std::chrono::milliseconds(10);
  QueuePlan p = PlanQueue({Q(1, 8), small}, {{100, 1000, std::nullopt}}, 0, m);
  EXPECT_TRUE(p.start.empty());
  EXPECT_FALSE(p.reservation_estimated);
  // With a deadline as short, rule (a) admits it.
  ToyModel m2({10}, {{100, 6}, {1, 8}, {2, 4}});
  m2.Run(100, 0);
  QueuePlan q =
      PlanQueue({Q(1, 8), Q(2, 4, Priority::kNormal, 10)}, {{100, 1000, std::nullopt}}, 0, m2);
  EXPECT_EQ(q.start, (std::vector<uint64_t>{2}));
}

TEST(QueueBefore, RankOrdersWithinAPriorityAndNeverAcrossOne) {
  QueuedJob early = Q(1, 1), late = Q(2, 1), urgent = Q(3, 1, Priority::kHigh);
  late.rank = 0.9;
  early.rank = 0.2;
  urgent.rank = 0.0;
  EXPECT_TRUE(QueueBefore(late, early));
  EXPECT_TRUE(QueueBefore(urgent, late));
  early.rank = late.rank;  // Equal ranks: arrival.
  EXPECT_TRUE(QueueBefore(early, late));
}

TEST(PlanQueue, AnOpportunisticJobThatDoesNotFitIsNeverTheHead) {
  ToyModel m({10}, {{100, 6}, {1, 8}, {2, 4}});
  m.Run(100, 0);
  PlanOptions opt;
  opt.opportunistic = [](uint64_t id) { return id == 1; };
  QueuePlan p = PlanQueue({Q(1, 8), Q(2, 4)}, {{100, std::nullopt}}, 0, m, opt);
  EXPECT_EQ(p.head, 0u);
  EXPECT_EQ(p.start, (std::vector<uint64_t>{2}));
  ASSERT_EQ(p.waiting.size(), 1u);
  EXPECT_EQ(p.waiting[0].reason, WaitReason::kBorrowWait);
}

TEST(PlanQueue, AnOpportunisticJobBehindTheHeadDelaysItNoMoreThanBackfill) {
  ToyModel m({10, 10}, {{100, 6}, {101, 6}, {1, 8}, {2, 4}});
  m.Run(100, 0);
  m.Run(101, 1);
  PlanOptions opt;
  opt.opportunistic = [](uint64_t id) { return id == 2; };
  QueuePlan p =
      PlanQueue({Q(1, 8), Q(2, 4)}, {{100, std::nullopt, 1000}, {101, std::nullopt, std::nullopt}},
                0, m, opt);
  EXPECT_TRUE(p.start.empty());
  EXPECT_EQ(p.head, 1u);
  EXPECT_EQ(p.waiting[1].reason, WaitReason::kWouldDelayHead);
}

}  // namespace
}  // namespace gpuslice::core
