#include "daemon/watch/watchdog.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

// A Watchdog over a fake region store, recording what it asks of the
// daemon, and one running job: 4 GiB and a 20% hard share of GPU 0.
class WatchdogComponentTest : public ::testing::Test {
 protected:
  WatchdogComponentTest() {
    job_.id = 7;
    job_.user = "alice";
    job_.state = core::JobState::kRunning;
    job_.region_path = "/fake/slice-7";
    job_.allocation.gpu_indices = {0};
    job_.allocation.memory_bytes_per_gpu = 4 * core::kGiB;
    job_.allocation.compute_milli = 200;
    rules_.watchdog_allowance_bytes = 0;  // No context allowance: the limit alone.
  }

  Watchdog& Make() {
    watchdog_ = std::make_unique<Watchdog>(
        rules_, 1000, regions_,
        Watchdog::Hooks{
            .kill = [this](
                        const core::Job& job, const std::string& kind,
                        const std::string&) { calls_.push_back("kill " + kind + " " + Id(job)); },
            .stop = [this](const core::Job& job) { calls_.push_back("stop " + Id(job)); },
            .resume = [this](const core::Job& job) { calls_.push_back("continue " + Id(job)); },
            .record = [this](const std::string& kind, const core::Job& job,
                             const std::string&) { calls_.push_back(kind + " " + Id(job)); },
            .tell = [this](const core::Job& job,
                           const std::string&) { calls_.push_back("tell " + Id(job)); },
            .context_size = [](uint32_t) { return std::optional<uint64_t>(); },
            .elastic = [](const core::Job& job) { return job.request.gpus_max > 1; },
        });
    return *watchdog_;
  }
  static std::string Id(const core::Job& job) { return std::to_string(job.id); }

  // A sample at `at_ms`: NVML's memory and SM use of the job's processes on
  // GPU 0.
  static JobUsage Use(int64_t at_ms, uint64_t memory, double sm_pct) {
    JobUsage u;
    u.sampled_ms = at_ms;
    u.nvml_memory_by_gpu[0] = memory;
    u.processes_by_gpu[0] = 1;
    u.sm_pct_by_gpu[0] = sm_pct;
    return u;
  }
  std::vector<std::string> Flags(const Watchdog& w) const {
    std::vector<std::string> flags;
    w.AppendFlags(job_.id, &flags);
    return flags;
  }

  core::Job job_;
  PolicyConfig rules_;
  FakeRegionStore regions_;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::string> calls_;
};

TEST_F(WatchdogComponentTest, AJobOverItsMemoryLimitIsKilled) {
  Watchdog& w = Make();
  EXPECT_FALSE(w.Watch(job_, Use(1000, 4 * core::kGiB, 10)));
  EXPECT_TRUE(calls_.empty());
  EXPECT_TRUE(w.Watch(job_, Use(2000, 5 * core::kGiB, 10)));
  EXPECT_EQ(calls_, std::vector<std::string>{"kill watchdog 7"});
  EXPECT_EQ(Flags(w), std::vector<std::string>{"over_limit"});
}

TEST_F(WatchdogComponentTest, AStoppedJobIsContinuedOnceBackUnderItsLimit) {
  rules_.watchdog = WatchdogAction::kStop;
  Watchdog& w = Make();
  EXPECT_FALSE(w.Watch(job_, Use(1000, 5 * core::kGiB, 10)));
  EXPECT_FALSE(w.Watch(job_, Use(2000, 5 * core::kGiB, 10)));
  EXPECT_TRUE(w.Stopped(job_.id));
  EXPECT_EQ(Flags(w), (std::vector<std::string>{"over_limit", "stopped"}));
  EXPECT_EQ(calls_, (std::vector<std::string>{"stop 7", "watchdog 7", "tell 7"})) << "stopped once";
  calls_.clear();
  EXPECT_FALSE(w.Watch(job_, Use(3000, 3 * core::kGiB, 10)));
  EXPECT_FALSE(w.Stopped(job_.id));
  EXPECT_TRUE(Flags(w).empty());
  EXPECT_EQ(calls_, (std::vector<std::string>{"continue 7", "watchdog 7", "tell 7"}));
}

TEST_F(WatchdogComponentTest, AStoppedJobBeingEndedIsContinuedToTakeItsSignal) {
  rules_.watchdog = WatchdogAction::kStop;
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 5 * core::kGiB, 10));
  calls_.clear();
  w.LetEnd(job_);
  EXPECT_EQ(calls_, std::vector<std::string>{"continue 7"});
  EXPECT_FALSE(w.Stopped(job_.id));
  w.LetEnd(job_);
  EXPECT_EQ(calls_.size(), 1u) << "continued once";
}

TEST_F(WatchdogComponentTest, AReportedMemoryBreachIsReportedOncePerEpisode) {
  rules_.watchdog = WatchdogAction::kReport;
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 5 * core::kGiB, 10));
  w.Watch(job_, Use(2000, 5 * core::kGiB, 10));
  EXPECT_EQ(calls_, (std::vector<std::string>{"watchdog 7", "tell 7"}));
  w.Watch(job_, Use(3000, 1 * core::kGiB, 10));
  w.Watch(job_, Use(4000, 5 * core::kGiB, 10));
  EXPECT_EQ(calls_.size(), 4u) << "a new episode is reported again";
}

TEST_F(WatchdogComponentTest, MemoryOnAGpuNotGivenIsABreachExceptForAnElasticJob) {
  JobUsage use = Use(1000, 1 * core::kGiB, 10);
  use.nvml_memory_by_gpu[1] = 1 * core::kGiB;
  EXPECT_TRUE(Make().Watch(job_, use));
  calls_.clear();
  job_.request.kind = core::RequestKind::kWholeGpus;
  job_.request.gpus_min = 1;
  job_.request.gpus_max = 2;
  EXPECT_FALSE(Make().Watch(job_, use)) << "its workers keep a given-back GPU until they restart";
  EXPECT_TRUE(calls_.empty());
}

TEST_F(WatchdogComponentTest, TheMemoryLimitIsTheAllocationOnItsOwnGpusOnlyAndNoneWhileSuspended) {
  EXPECT_EQ(Watchdog::MemoryLimitOn(job_, 0), 4 * core::kGiB);
  EXPECT_EQ(Watchdog::MemoryLimitOn(job_, 1), 0u);
  job_.state = core::JobState::kSuspended;
  EXPECT_EQ(Watchdog::MemoryLimitOn(job_, 0), 0u);
}

TEST_F(WatchdogComponentTest, UseFarOverTheShareForAWholeWindowIsABreach) {
  rules_.watchdog_compute = WatchdogAction::kReport;
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 0, 90));
  EXPECT_TRUE(calls_.empty()) << "not a whole window yet";
  w.Watch(job_, Use(2000, 0, 90));
  EXPECT_EQ(calls_, (std::vector<std::string>{"watchdog_compute 7", "tell 7"}));
  EXPECT_EQ(Flags(w), std::vector<std::string>{"over_share"});
}

TEST_F(WatchdogComponentTest, UseWithinTheShareAndItsMarginIsNoBreach) {
  Watchdog& w = Make();
  for (int64_t t = 1000; t <= 5000; t += 1000) EXPECT_FALSE(w.Watch(job_, Use(t, 0, 40)));
  EXPECT_TRUE(calls_.empty());
}

TEST_F(WatchdogComponentTest, ANewShareStartsANewWindow) {
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 0, 90));
  job_.allocation.compute_milli = 800;  // A live resize.
  EXPECT_FALSE(w.Watch(job_, Use(2000, 0, 90)));
  EXPECT_TRUE(calls_.empty());
}

TEST_F(WatchdogComponentTest, AChargeShortOfNvmlAtTwoAuditsInARowIsDistrustedOnce) {
  job_.allocation.compute_milli = 500;  // 50% used is within its share.
  regions_.charged[job_.region_path] = 0;
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 0, 50));
  w.Watch(job_, Use(2000, 0, 50));
  EXPECT_TRUE(regions_.distrusted.empty()) << "one short audit is forgiven";
  w.Watch(job_, Use(3000, 0, 50));
  EXPECT_EQ(regions_.distrusted, std::vector<std::string>{job_.region_path});
  EXPECT_EQ(calls_, (std::vector<std::string>{"compute_audit 7", "tell 7"}));
  EXPECT_EQ(Flags(w), std::vector<std::string>{"under_reported"});
  w.Watch(job_, Use(4000, 0, 50));
  EXPECT_EQ(regions_.distrusted.size(), 1u);
}

TEST_F(WatchdogComponentTest, AChargeThatKeepsUpWithNvmlIsTrusted) {
  job_.allocation.compute_milli = 500;
  Watchdog& w = Make();
  for (int64_t t = 1000; t <= 5000; t += 1000) {
    regions_.charged[job_.region_path] = uint64_t(t) * 500'000;  // 50% of each second, in ns.
    w.Watch(job_, Use(t, 0, 50));
  }
  EXPECT_TRUE(regions_.distrusted.empty());
  EXPECT_TRUE(Flags(w).empty());
}

TEST_F(WatchdogComponentTest, AForgottenJobHasNoFlags) {
  rules_.watchdog = WatchdogAction::kStop;
  Watchdog& w = Make();
  w.Watch(job_, Use(1000, 5 * core::kGiB, 10));
  w.Forget(job_.id);
  EXPECT_FALSE(w.Stopped(job_.id));
  EXPECT_TRUE(Flags(w).empty());
}

}  // namespace
}  // namespace gpuslice::daemon
