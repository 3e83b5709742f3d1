#include "daemon/waits/dependencies.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpuslice::daemon {
namespace {

using core::Dependency;
using core::DependencyKind;
using core::Job;
using core::JobState;

// A job table in a map, and what the component asked of it.
class JobDependenciesTest : public ::testing::Test {
 protected:
  JobDependencies::Jobs Table() {
    return {
        .find = [this](uint64_t id) -> const Job* {
          auto it = jobs_.find(id);
          return it == jobs_.end() ? nullptr : &it->second;
        },
        .load = [this](uint64_t id) -> core::Result<std::optional<Job>> {
          if (!ledger_readable_) return core::UnavailableError("ledger unavailable");
          auto it = ledger_.find(id);
          if (it == ledger_.end()) return std::optional<Job>();
          return std::optional<Job>(it->second);
        },
        .cancel =
            [this](uint64_t id, std::string reason) {
              cancelled_.emplace_back(id, reason);
              End(id, JobState::kCancelled, -1);
            },
        .released = [this](uint64_t id) { released_.push_back(id); },
    };
  }
  Job& Add(uint64_t id, JobState state, std::vector<Dependency> after = {}) {
    Job& j = jobs_[id];
    j.id = id;
    j.state = state;
    j.after = std::move(after);
    return j;
  }
  // Job `id` ends as the daemon tells it: its state, then Release.
  void End(uint64_t id, JobState state, int exit_code) {
    jobs_[id].state = state;
    jobs_[id].exit_code = exit_code;
    deps_.Release(id);
  }

  std::map<uint64_t, Job> jobs_;
  std::map<uint64_t, Job> ledger_;
  bool ledger_readable_ = true;
  std::vector<std::pair<uint64_t, std::string>> cancelled_;
  std::vector<uint64_t> released_;
  JobDependencies deps_{Table()};
};

TEST_F(JobDependenciesTest, AJobWaitsUntilTheLastJobItWaitsForEnds) {
  Add(1, JobState::kRunning);
  Add(2, JobState::kQueued);
  Add(3, JobState::kQueued, {{1, DependencyKind::kAny}, {2, DependencyKind::kAny}});
  auto pending = deps_.Check(jobs_[3].after);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  EXPECT_EQ(*pending, (std::vector<uint64_t>{1, 2}));
  deps_.WaitFor(3, *pending);
  EXPECT_TRUE(deps_.Waits(3));
  EXPECT_EQ(deps_.WaitingText(jobs_[3]), "after job 1 (running), job 2 (queued)");

  End(1, JobState::kExited, 1);
  EXPECT_TRUE(deps_.Waits(3));
  EXPECT_TRUE(released_.empty());
  End(2, JobState::kExited, 0);
  EXPECT_FALSE(deps_.Waits(3));
  EXPECT_FALSE(deps_.AnyWaits());
  EXPECT_EQ(released_, (std::vector<uint64_t>{3}));
  EXPECT_TRUE(cancelled_.empty());
}

TEST_F(JobDependenciesTest, ABrokenDependencyCancelsTheWholeChainInOrder) {
  // 2 waits for 1 to succeed; 3 for 2 to succeed; 4 for 3 to end at all.
  Add(1, JobState::kRunning);
  Add(2, JobState::kQueued, {{1, DependencyKind::kOk}});
  Add(3, JobState::kQueued, {{2, DependencyKind::kOk}});
  Add(4, JobState::kQueued, {{3, DependencyKind::kAny}});
  for (uint64_t id : {2, 3, 4}) deps_.WaitFor(id, {id - 1});

  End(1, JobState::kExited, 7);
  ASSERT_EQ(cancelled_.size(), 2u);
  EXPECT_EQ(cancelled_[0].first, 2u);
  EXPECT_EQ(cancelled_[1].first, 3u);
  EXPECT_EQ(jobs_[3].state, JobState::kCancelled);
  // 4 asked only that 3 end: it may start.
  EXPECT_EQ(released_, (std::vector<uint64_t>{4}));
  EXPECT_FALSE(deps_.AnyWaits());
}

TEST_F(JobDependenciesTest, WaitForReplacesWhatAJobWaitedFor) {
  Add(1, JobState::kRunning);
  Add(2, JobState::kRunning);
  Add(3, JobState::kQueued, {{1, DependencyKind::kOk}});
  deps_.WaitFor(3, {1});
  jobs_[3].after = {{2, DependencyKind::kAny}};
  deps_.WaitFor(3, {2});
  End(1, JobState::kFailed, -1);  // No longer its dependency: nothing breaks.
  EXPECT_TRUE(cancelled_.empty());
  EXPECT_TRUE(deps_.Waits(3));
  deps_.WaitFor(3, {});
  EXPECT_FALSE(deps_.Waits(3));
}

TEST_F(JobDependenciesTest, CheckReadsJobsNoLongerInMemoryFromTheLedger) {
  Job old;
  old.id = 5;
  old.state = JobState::kExited;
  old.exit_code = 1;
  ledger_[5] = old;
  auto any = deps_.Check({{5, DependencyKind::kAny}});
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_TRUE(any->empty());
  auto ok = deps_.Check({{5, DependencyKind::kOk}});
  ASSERT_FALSE(ok.ok());
  EXPECT_EQ(ok.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(ok.status().message().find("could never start"), std::string::npos)
      << ok.status().message();
  auto missing = deps_.Check({{6, DependencyKind::kAny}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no job 6"), std::string::npos)
      << missing.status().message();
  ledger_readable_ = false;
  EXPECT_EQ(deps_.Check({{5, DependencyKind::kAny}}).status().code(),
            core::StatusCode::kUnavailable);
}

TEST_F(JobDependenciesTest, RewaitAfterARestartWaitsForLiveJobsAndNamesABrokenOne) {
  Add(1, JobState::kRunning);
  Add(2, JobState::kFailed).exit_code = -1;
  Add(3, JobState::kQueued, {{1, DependencyKind::kAny}});
  Add(4, JobState::kQueued, {{2, DependencyKind::kOk}});
  EXPECT_EQ(deps_.Rewait(jobs_[3]), std::nullopt);
  EXPECT_TRUE(deps_.Waits(3));
  auto broken = deps_.Rewait(jobs_[4]);
  ASSERT_TRUE(broken.has_value());
  EXPECT_FALSE(deps_.Waits(4));
  std::vector<DependencyView> views = deps_.ViewsOf(jobs_[4]);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].state, JobState::kFailed);
}

}  // namespace
}  // namespace gpuslice::daemon
