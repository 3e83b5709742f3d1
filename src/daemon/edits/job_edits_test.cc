#include "daemon/edits/job_edits.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/table/job_transitions_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;
using core::Status;

Caller CallerOf(const std::string& user, uint32_t uid, bool admin = false) {
  Caller c;
  c.user = user;
  c.uid = uid;
  c.admin = admin;
  return c;
}

class JobEditsTest : public ::testing::Test {
 protected:
  JobEditsTest()
      : dependencies_(JobDependencies::Jobs{
            .find = [this](uint64_t id) { return table_.Find(id); },
            .load = [](uint64_t) -> core::Result<std::optional<Job>> {
              return std::optional<Job>();
            },
            .cancel = [](uint64_t, std::string) {},
            .released = [](uint64_t) {},
        }),
        edits_(
            table_, transitions_, holds_, dependencies_,
            JobEdits::Jobs{
                .health = [this] { return health_; },
                .view =
                    [](const Job& job) {
                      JobView v;
                      v.job = job;
                      return v;
                    },
                .could_ever_fit = [](const core::ResourceRequest&) { return Status::Ok(); },
                .set_demand = [](uint64_t, const core::ResourceRequest&) { return Status::Ok(); },
                .check_quota =
                    [this](const Job& job) {
                      quota_checked_.push_back(job.request.priority);
                      return quota_;
                    },
                .enqueue = [this](const Job& job) { enqueued_.push_back(job.id); },
                .update_slice =
                    [this](const Job& job) {
                      slice_priority_ = job.request.priority;
                      return slice_;
                    },
            }) {}

  // A queued job of alice's asking for 4 GiB of one GPU.
  Job& AddQueued(uint64_t id) {
    Job job;
    job.id = id;
    job.user = "alice";
    job.uid = 1000;
    job.state = JobState::kQueued;
    job.submitted_ms = 1234;
    job.request.kind = core::RequestKind::kFraction;
    job.request.memory_bytes = 4ull << 30;
    return table_.Add(job);
  }

  JobTable table_;
  FakeTransitions transitions_;
  JobHolds holds_;
  JobDependencies dependencies_;
  JobEdits::Health health_;
  Status quota_ = Status::Ok();
  Status slice_ = Status::Ok();
  std::vector<core::Priority> quota_checked_;
  std::vector<uint64_t> enqueued_;
  std::optional<core::Priority> slice_priority_;
  JobEdits edits_;
};

TEST_F(JobEditsTest, TheOwnerHoldsAQueuedJobAndReleasesIt) {
  AddQueued(1);
  auto held = edits_.Hold(CallerOf("alice", 1000), 1);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(held->job.hold, core::HoldKind::kUser);
  EXPECT_TRUE(holds_.Holds(1));
  ASSERT_TRUE(edits_.Release(CallerOf("alice", 1000), 1).ok());
  EXPECT_FALSE(holds_.Holds(1));
  EXPECT_EQ(table_.jobs().at(1).hold, core::HoldKind::kNone);
  EXPECT_EQ(transitions_.EventTexts(),
            (std::vector<std::string>{"held: held by alice", "released: released by alice"}));
  EXPECT_EQ(transitions_.persisted.size(), 2u);
  EXPECT_EQ(transitions_.plans(), 2);
}

TEST_F(JobEditsTest, AnAdminsHoldOnAnothersJobOnlyAnAdminReleases) {
  AddQueued(1);
  ASSERT_TRUE(edits_.Hold(CallerOf("root", 0, /*admin=*/true), 1).ok());
  EXPECT_EQ(table_.jobs().at(1).hold, core::HoldKind::kAdmin);
  EXPECT_EQ(transitions_.EventTexts().back(),
            "held: held by root (an admin's hold: only an admin releases it)");
  // The owner's own hold does not weaken it.
  ASSERT_TRUE(edits_.Hold(CallerOf("alice", 1000), 1).ok());
  EXPECT_EQ(table_.jobs().at(1).hold, core::HoldKind::kAdmin);
  auto refused = edits_.Release(CallerOf("alice", 1000), 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_TRUE(edits_.Release(CallerOf("root", 0, true), 1).ok());
}

TEST_F(JobEditsTest, OnlyAQueuedJobIsHeldAndOnlyByItsOwnerOrAnAdmin) {
  Job& running = AddQueued(1);
  running.state = JobState::kRunning;
  EXPECT_EQ(edits_.Hold(CallerOf("alice", 1000), 1).status().code(),
            core::StatusCode::kFailedPrecondition);
  AddQueued(2);
  EXPECT_EQ(edits_.Hold(CallerOf("bob", 1001), 2).status().code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(edits_.Hold(CallerOf("alice", 1000), 9).status().message(), "no job 9");
  EXPECT_EQ(edits_.Release(CallerOf("alice", 1000), 2).status().message(),
            "job 2 is not held (queued)");
  EXPECT_TRUE(transitions_.events.empty());
}

TEST_F(JobEditsTest, AHoldThatCannotBeWrittenIsUndoneAndSaysWhy) {
  AddQueued(1);
  transitions_.persist_ok = false;
  health_.reason = "ledger write failed: disk full";
  auto held = edits_.Hold(CallerOf("alice", 1000), 1);
  ASSERT_FALSE(held.ok());
  EXPECT_EQ(held.status().message(),
            "daemon degraded (ledger write failed: disk full): hold not recorded");
  EXPECT_EQ(table_.jobs().at(1).hold, core::HoldKind::kNone);
  EXPECT_FALSE(holds_.Holds(1));
  health_.ledger = false;
  EXPECT_EQ(edits_.Hold(CallerOf("alice", 1000), 1).status().message(),
            "daemon degraded (ledger write failed: disk full): cannot record a hold");
}

TEST_F(JobEditsTest, UpdateKeepsIdAndArrivalAndChecksQuotaWithTheNewRequest) {
  AddQueued(1);
  UpdateSpec spec;
  spec.mem = "8GiB";
  spec.priority = "high";
  auto updated = edits_.Update(CallerOf("alice", 1000), 1, spec);
  ASSERT_TRUE(updated.ok()) << updated.status().message();
  const Job& job = table_.jobs().at(1);
  EXPECT_EQ(job.id, 1u);
  EXPECT_EQ(job.submitted_ms, 1234);
  EXPECT_EQ(job.request.memory_bytes, 8ull << 30);
  EXPECT_EQ(quota_checked_, (std::vector<core::Priority>{core::Priority::kHigh}));
  EXPECT_EQ(enqueued_, (std::vector<uint64_t>{1}));  // Its place follows the new priority.
  ASSERT_EQ(transitions_.events.size(), 1u);
  EXPECT_EQ(transitions_.EventTexts()[0].rfind("updated: ", 0), 0u);
  EXPECT_NE(transitions_.EventTexts()[0].find("priority normal -> high by alice"),
            std::string::npos);
  EXPECT_EQ(transitions_.plans(), 1);
}

TEST_F(JobEditsTest, AnUpdateTheQuotasOrPriorityLimitsRefuseChangesNothing) {
  AddQueued(1);
  quota_ = core::PermissionDeniedError("priority high is not allowed in pool default");
  UpdateSpec spec;
  spec.priority = "high";
  auto refused = edits_.Update(CallerOf("alice", 1000), 1, spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "priority high is not allowed in pool default");
  EXPECT_EQ(table_.jobs().at(1).request.priority, core::Priority::kNormal);
  EXPECT_TRUE(enqueued_.empty());
  EXPECT_TRUE(transitions_.persisted.empty());
  EXPECT_TRUE(transitions_.events.empty());
}

TEST_F(JobEditsTest, UpdateRefusesARunningJobAndADegradedDaemon) {
  Job& job = AddQueued(1);
  UpdateSpec spec;
  spec.mem = "8GiB";
  health_ = {.degraded = true, .ledger = true, .reason = "no GPUs"};
  EXPECT_EQ(edits_.Update(CallerOf("alice", 1000), 1, spec).status().message(),
            "daemon degraded (no GPUs): not updating");
  health_ = {};
  job.state = JobState::kRunning;
  EXPECT_EQ(edits_.Update(CallerOf("alice", 1000), 1, spec).status().code(),
            core::StatusCode::kFailedPrecondition);
  job.state = JobState::kQueued;
  EXPECT_EQ(edits_.Update(CallerOf("alice", 1000), 1, UpdateSpec{}).status().code(),
            core::StatusCode::kInvalidArgument);
  UpdateSpec later;
  later.after = "1";  // Only jobs submitted before it.
  EXPECT_EQ(edits_.Update(CallerOf("alice", 1000), 1, later).status().code(),
            core::StatusCode::kInvalidArgument);
}

TEST_F(JobEditsTest, LabelsArePersistedAndEventedOnlyWhenTheyChange) {
  AddQueued(1);
  auto v = edits_.SetLabels(CallerOf("alice", 1000), 1, {{"team", "vision"}});
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v->job.labels.at("team"), "vision");
  ASSERT_EQ(transitions_.persisted.size(), 1u);
  EXPECT_EQ(transitions_.persisted[0].second, JobState::kQueued);
  ASSERT_EQ(transitions_.events.size(), 1u);
  EXPECT_EQ(transitions_.EventTexts()[0].rfind("labelled: ", 0), 0u);
  ASSERT_TRUE(edits_.SetLabels(CallerOf("alice", 1000), 1, {{"team", "vision"}}).ok());
  EXPECT_EQ(transitions_.events.size(), 1u);  // The same labels: nothing to record.
  ASSERT_TRUE(edits_.SetLabels(CallerOf("alice", 1000), 1, {}).ok());
  EXPECT_EQ(transitions_.EventTexts().back(), "labelled: no labels");
}

TEST_F(JobEditsTest, LabelsOfAnEndedJobOrAnothersAreRefused) {
  Job& job = AddQueued(1);
  EXPECT_EQ(edits_.SetLabels(CallerOf("bob", 1001), 1, {{"a", "b"}}).status().code(),
            core::StatusCode::kPermissionDenied);
  job.state = JobState::kExited;
  EXPECT_EQ(edits_.SetLabels(CallerOf("alice", 1000), 1, {{"a", "b"}}).status().message(),
            "job 1 has already ended (exited)");
  EXPECT_TRUE(transitions_.persisted.empty());
}

TEST_F(JobEditsTest, APriorityChangeReachesTheSliceOrIsUndone) {
  Job& job = AddQueued(1);
  job.state = JobState::kRunning;
  ASSERT_TRUE(edits_.ChangePriority(CallerOf("alice", 1000), job, core::Priority::kHigh).ok());
  EXPECT_EQ(slice_priority_, core::Priority::kHigh);
  EXPECT_EQ(transitions_.EventTexts().back(), "resized: priority normal -> high by alice");
  slice_ = core::UnavailableError("limits page gone");
  Status s = edits_.ChangePriority(CallerOf("alice", 1000), job, core::Priority::kLow);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(job.request.priority, core::Priority::kHigh);
  EXPECT_EQ(transitions_.events.size(), 1u);
  // The same priority: nothing to do, not even the slice.
  slice_priority_.reset();
  EXPECT_TRUE(edits_.ChangePriority(CallerOf("alice", 1000), job, core::Priority::kHigh).ok());
  EXPECT_FALSE(slice_priority_.has_value());
}

}  // namespace
}  // namespace gpuslice::daemon
