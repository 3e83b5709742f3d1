#include "daemon/intake/job_intake.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "daemon/launch/launcher_fake.h"
#include "daemon/table/job_transitions_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;
using core::StatusCode;

Caller User(uint32_t uid) {
  Caller c;
  c.uid = c.gid = uid;
  c.user = "u" + std::to_string(uid);
  return c;
}

SubmitSpec Spec(const std::string& mem) {
  SubmitSpec s;
  s.fields.mem = mem;
  s.argv = {"train"};
  s.cwd = "/home/u";
  s.env = {"HOME=/home/u"};
  return s;
}

// A JobIntake over its own job table, two 40 GiB GPUs, the real quota,
// dependency, container and external components, and fakes of the slices,
// the launcher, the clock and the transitions; the queue is the table's.
class JobIntakeTest : public ::testing::Test {
 protected:
  JobIntakeTest() {
    for (uint32_t i = 0; i < 2; ++i) {
      GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.model = "A100";
      g.memory_total = 40 * core::kGiB;
      gpus_.push_back(g);
    }
    auto capacity = NodeCapacity::Create(gpus_, core::Policy::kBinpack);
    EXPECT_TRUE(capacity.ok());
    capacity_ = std::move(*capacity);
    quotas_.NoteGpuMemory(40 * core::kGiB);
    options_.max_queued_jobs_per_user = 2;
    options_.max_env_bytes = 1024;
    options_.max_argv_bytes = 1024;
  }

  JobIntake& Intake() {
    intake_ = std::make_unique<JobIntake>(
        options_,
        JobIntake::Hooks{
            .capacity = [this]() -> NodeCapacity& { return *capacity_; },
            .enqueue =
                [this](const Job& job) {
                  core::QueuedJob q;
                  q.id = q.seq = job.id;
                  table_.Enqueue(q, job.uid);
                  enqueued_.push_back(job.id);
                },
            .start =
                [this](Job& job) {
                  job.state = JobState::kRunning;
                  started_.push_back(job.id);
                },
            .view =
                [](const Job& job) {
                  JobView v;
                  v.job = job;
                  return v;
                },
        },
        table_, transitions_, degraded_, containers_, external_, dependencies_, quotas_, setup_,
        regions_, clock_);
    return *intake_;
  }

  static ContainerJobs::Options NoEngines() { return {}; }

  std::vector<GpuInfo> gpus_;
  std::unique_ptr<NodeCapacity> capacity_;
  JobIntake::Options options_;
  JobTable table_;
  FakeTransitions transitions_;
  FakeClock clock_;
  FakeRegionStore regions_;
  FakeLauncher launcher_;
  FakeProcessTable procs_;
  InventorySnapshot inventory_;
  std::vector<std::string> job_env_;
  DegradedMode degraded_{DegradedMode::Hooks{
                             .now_ms = [this] { return clock_.NowMs(); },
                             .free_bytes = [] { return uint64_t{0}; },
                             .save_job = nullptr,
                             .write_events = [] { return true; },
                             .check_room = [] { return core::Status::Ok(); },
                             .record = [](const std::string&, const std::string&) {},
                             .room_again = [] {},
                         },
                         1000};
  ContainerJobs containers_{
      NoEngines(),
      ContainerJobs::Jobs{
          .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
          .job_env = [this]() -> const std::vector<std::string>& { return job_env_; },
          .shared_gid = [](const Job&) { return uint32_t{0}; },
          .gpus_file = [](const Job&) { return std::string(); },
          .limits_path = [](const std::string&) { return std::string(); },
          .gids_of = [](const std::string&, uint32_t gid) { return std::vector<uint32_t>{gid}; },
          .for_each_running = [](const std::function<void(const Job&)>&) {},
      },
      launcher_};
  ExternalJobs external_{0,
                         ExternalJobs::Jobs{
                             .for_each_running = [](const std::function<void(const Job&)>&) {},
                             .processes = [this]() -> ProcessTable& { return procs_; },
                             .finish = [](Job&, JobState, int, std::string) {},
                         },
                         launcher_};
  JobDependencies dependencies_{JobDependencies::Jobs{
      .find = [this](uint64_t id) { return table_.Find(id); },
      .load = [](uint64_t) -> core::Result<std::optional<Job>> { return std::optional<Job>(); },
      .cancel = [](uint64_t, std::string) {},
      .released = [](uint64_t) {},
  }};
  QuotaKeeper quotas_{
      QuotaKeeper::Jobs{
          .for_each_charged = [](const std::function<void(const Job&)>&) {},
          .job = [this](uint64_t id) -> const Job& { return table_.jobs().at(id); },
          .placed = [](uint64_t) { return std::optional<core::Allocation>(); },
          .borrowable = [](const Job&) { return false; },
          .groups_of = [](const std::string&, uint32_t) { return std::vector<std::string>{}; },
      },
      /*borrowing=*/false};
  JobSetup setup_{{.jobs_dir = "/state/jobs",
                   .shim_path = "",
                   .sim_lib_dir = "",
                   .coord_dir = "",
                   .resume_on_demand = false},
                  JobSetup::Hooks{
                      .job_env = [this]() -> const std::vector<std::string>& { return job_env_; },
                      .simulated = [] { return true; },
                  },
                  table_,
                  regions_,
                  external_,
                  containers_,
                  launcher_};
  std::unique_ptr<JobIntake> intake_;
  std::vector<uint64_t> enqueued_;
  std::vector<uint64_t> started_;
};

TEST_F(JobIntakeTest, ASubmissionIsRecordedToldOfQueuedAndPlannedSoon) {
  auto v = Intake().Submit(User(1000), Spec("8GiB"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const uint64_t id = v->job.id;
  EXPECT_EQ(v->job.uid, 1000u) << "owned by the caller's credentials";
  EXPECT_EQ(v->job.user, "u1000");
  EXPECT_EQ(v->job.state, JobState::kQueued);
  EXPECT_EQ(v->job.argv, std::vector<std::string>{"train"});
  ASSERT_NE(table_.Find(id), nullptr);
  EXPECT_EQ(transitions_.PersistedIds(), std::vector<uint64_t>{id});
  EXPECT_FALSE(transitions_.persisted[0].second.has_value())
      << "a new job has no state to come from";
  ASSERT_EQ(transitions_.events.size(), 1u);
  EXPECT_EQ(transitions_.events[0].kind, "submitted");
  EXPECT_EQ(transitions_.events[0].job_id, id);
  EXPECT_EQ(transitions_.events[0].user, "u1000");
  EXPECT_EQ(enqueued_, std::vector<uint64_t>{id});
  EXPECT_EQ(transitions_.requested, 1) << "batched until the next Flush";
  EXPECT_EQ(transitions_.schedules, 0);
  EXPECT_TRUE(started_.empty());
}

TEST_F(JobIntakeTest, AUserAtTheQueueCapIsRefusedAnotherUserIsNot) {
  JobIntake& intake = Intake();
  ASSERT_TRUE(intake.Submit(User(1000), Spec("1GiB")).ok());
  ASSERT_TRUE(intake.Submit(User(1000), Spec("1GiB")).ok());
  auto third = intake.Submit(User(1000), Spec("1GiB"));
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("user u1000 already has 2 queued jobs"),
            std::string::npos)
      << third.status().message();
  EXPECT_NE(third.status().message().find("max_queued_jobs_per_user = 2"), std::string::npos);
  EXPECT_TRUE(intake.Submit(User(1001), Spec("1GiB")).ok()) << "the cap is per user";
  EXPECT_EQ(enqueued_.size(), 3u);
}

TEST_F(JobIntakeTest, AnEnvironmentOrCommandLineOverItsLimitIsRefused) {
  JobIntake& intake = Intake();
  SubmitSpec big_env = Spec("1GiB");
  big_env.env.push_back("DATA=" + std::string(2000, 'x'));
  auto env = intake.Submit(User(1000), big_env);
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(env.status().message().find("max_env_bytes"), std::string::npos);

  SubmitSpec big_argv = Spec("1GiB");
  big_argv.argv.push_back(std::string(2000, 'y'));
  auto argv = intake.Submit(User(1000), big_argv);
  EXPECT_EQ(argv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(argv.status().message().find("max_argv_bytes"), std::string::npos);

  EXPECT_TRUE(transitions_.persisted.empty());
  EXPECT_TRUE(table_.jobs().empty());
}

TEST_F(JobIntakeTest, ADegradedDaemonRefusesNewJobsSayingWhy) {
  degraded_.Degrade("cannot open the ledger");
  auto v = Intake().Submit(User(1000), Spec("1GiB"));
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(v.status().message(),
            "daemon degraded (cannot open the ledger): not accepting new jobs");
  EXPECT_TRUE(table_.jobs().empty());
}

TEST_F(JobIntakeTest, AJobItsQuotaCanNeverHoldIsRefusedAndItsDemandForgotten) {
  core::Quota q;
  q.memory_bytes = 4 * core::kGiB;
  quotas_.Set({core::PrincipalKind::kUser, "u1000"}, q);
  JobIntake& intake = Intake();
  auto v = intake.Submit(User(1000), Spec("8GiB"));
  EXPECT_EQ(v.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(v.status().message().find("over quota, can never run"), std::string::npos);
  EXPECT_TRUE(transitions_.persisted.empty());
  EXPECT_TRUE(enqueued_.empty());
  EXPECT_FALSE(capacity_->AllocationOf(table_.next_id()).has_value());
  EXPECT_TRUE(intake.Submit(User(1000), Spec("2GiB")).ok()) << "within it";
}

TEST_F(JobIntakeTest, ThePrioritiesTheAdminRestrictedAreCheckedAtSubmitAndUpdate) {
  options_.access.max_priority = core::Priority::kNormal;
  JobIntake& intake = Intake();
  SubmitSpec high = Spec("1GiB");
  high.fields.priority = "high";
  EXPECT_EQ(intake.Submit(User(1000), high).status().code(), StatusCode::kPermissionDenied);

  Job job;
  job.uid = job.gid = 1000;
  job.user = "u1000";
  job.request.kind = core::RequestKind::kFraction;
  job.request.memory_bytes = core::kGiB;
  job.request.priority = core::Priority::kHigh;
  EXPECT_EQ(intake.CheckQuotaAtSubmit(job).code(), StatusCode::kPermissionDenied);
  job.request.priority = core::Priority::kNormal;
  EXPECT_TRUE(intake.CheckQuotaAtSubmit(job).ok());
}

TEST_F(JobIntakeTest, OnlyALocalCallerSubmitsAndAFailedLedgerWriteAcceptsNothing) {
  JobIntake& intake = Intake();
  Caller remote = User(1000);
  remote.local = false;
  EXPECT_EQ(intake.Submit(remote, Spec("1GiB")).status().code(), StatusCode::kPermissionDenied);

  transitions_.persist_ok = false;
  auto v = intake.Submit(User(1000), Spec("1GiB"));
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("job not accepted"), std::string::npos);
  EXPECT_TRUE(table_.jobs().empty());
  EXPECT_TRUE(enqueued_.empty());
  EXPECT_TRUE(transitions_.events.empty());
}

TEST_F(JobIntakeTest, AnExternalJobIsPlacedAndStartedAtOnceNeverQueued) {
  JobIntake& intake = Intake();
  SubmitSpec external;
  external.mode = core::JobMode::kExternal;
  external.fields.mem = "8GiB";
  external.gpu_uuids = {"GPU-1"};
  auto v = intake.Submit(User(1000), external);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.state, JobState::kRunning);
  EXPECT_EQ(started_, std::vector<uint64_t>{v->job.id});
  EXPECT_TRUE(enqueued_.empty());
  auto placed = capacity_->AllocationOf(v->job.id);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(placed->gpu_uuids, std::vector<std::string>{"GPU-1"});
  ASSERT_EQ(transitions_.events.size(), 1u);
  EXPECT_NE(transitions_.events[0].message.find(", external"), std::string::npos);

  SubmitSpec with_command = external;
  with_command.argv = {"train"};
  EXPECT_EQ(intake.Submit(User(1000), with_command).status().code(), StatusCode::kInvalidArgument)
      << "an external job runs nothing";
}

}  // namespace
}  // namespace gpuslice::daemon
