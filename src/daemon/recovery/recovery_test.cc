#include "daemon/recovery/recovery.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/launch/launcher_fake.h"
#include "daemon/node/inventory.h"
#include "daemon/table/job_transitions_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

// A pid far above any a test machine hands out: the interrupted launch's
// process group, when the test says its processes are found.
constexpr int64_t kGroup = 3'900'000;

// A Recovery over a job table of its own, two GPUs, a state directory in
// /tmp and the fakes of the launcher and the slices: what Service gives it,
// without Service.
class RecoveryTest : public ::testing::Test {
 protected:
  RecoveryTest() {
    char tmpl[] = "/tmp/recovery_test.XXXXXX";
    root_ = mkdtemp(tmpl);
    state_dir_ = root_ + "/state";
    for (uint32_t i = 0; i < 2; ++i) {
      GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.model = "A100";
      g.memory_total = 40 * core::kGiB;
      gpus_.push_back(g);
    }
    auto capacity = NodeCapacity::Create(gpus_, core::Policy::kBinpack);
    capacity_ = std::move(*capacity);
    recovery_ = std::make_unique<Recovery>(
        Recovery::Options{.state_dir = state_dir_,
                          .history = 100,
                          .keep_ended_ms = 0,
                          .find_job_groups = [this](const Job&) { return found_; }},
        Recovery::Hooks{
            .capacity = [this]() -> NodeCapacity& { return *capacity_; },
            .forget_start =
                [this](Job& job) {
                  forgotten_.push_back(job.id);
                  job.region_path.clear();
                  job.allocation = {};
                  job.started_ms = 0;
                },
            .enqueue = [this](const Job& job) { enqueued_.push_back(job.id); },
            .rewait = [](const Job&) { return std::optional<std::string>(); },
            .hold = [this](uint64_t id) { held_.insert(id); },
            .recover_suspension = [this](Job& job) { suspensions_.push_back(job.id); },
            .outside_pool_text = [](const Job&) { return std::string("outside"); },
            .job_dir = [this](uint64_t id) { return JobDir(id); },
        },
        table_, transitions_, launcher_, regions_, clock_);
  }
  ~RecoveryTest() override { (void)!system(("rm -rf " + root_).c_str()); }

  std::string JobDir(uint64_t id) const { return state_dir_ + "/jobs/" + std::to_string(id); }

  // A job of alice's on one whole GPU, recorded running with no pid: the
  // daemon stopped between its launch intent and its pid.
  Job Interrupted(uint64_t id) {
    Job job;
    job.id = id;
    job.uid = 1000;
    job.user = "alice";
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.gpus_min = job.request.gpus_max = 1;
    EXPECT_TRUE(capacity_->SetDemand(id, job.request).ok());
    EXPECT_TRUE(capacity_->PlaceOn(id, {"GPU-0"}).ok());
    job.allocation = *capacity_->AllocationOf(id);
    capacity_->Release(id);
    job.region_path = "/fake/slice-" + std::to_string(id);
    job.started_ms = clock_.NowMs();
    return job;
  }

  // The launch began: its log files were opened before the supervisor forked.
  void Began(uint64_t id) {
    ASSERT_EQ(mkdir(JobDir(id).c_str(), 0700), 0);
    std::ofstream(JobDir(id) + "/stdout") << "";
  }

  bool HasEvent(const std::string& kind, uint64_t id) const {
    for (const FakeTransitions::Event& e : transitions_.events) {
      if (e.kind == kind && e.job_id == id) return true;
    }
    return false;
  }

  std::string root_;
  std::string state_dir_;
  std::vector<GpuInfo> gpus_;
  std::unique_ptr<NodeCapacity> capacity_;
  JobTable table_;
  FakeTransitions transitions_;
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  FakeClock clock_;
  std::vector<int64_t> found_;
  std::vector<uint64_t> forgotten_;
  std::vector<uint64_t> enqueued_;
  std::set<uint64_t> held_;
  std::vector<uint64_t> suspensions_;
  std::unique_ptr<Recovery> recovery_;
};

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST_F(RecoveryTest, SecureStateDirCreatesTheStateDirectoryTraversableAndJobsPrivate) {
  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  EXPECT_EQ(ModeOf(state_dir_), 0711u);
  EXPECT_EQ(ModeOf(state_dir_ + "/jobs"), 0700u);
}

TEST_F(RecoveryTest, SecureStateDirFixesTheModesAnOlderInstallLeft) {
  ASSERT_EQ(mkdir(state_dir_.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((state_dir_ + "/jobs").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((state_dir_ + "/jobs/7").c_str(), 0755), 0);
  ASSERT_EQ(chmod(state_dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod((state_dir_ + "/jobs").c_str(), 0755), 0);
  ASSERT_EQ(chmod((state_dir_ + "/jobs/7").c_str(), 0755), 0);
  std::ofstream(state_dir_ + "/ledger.db") << "";
  ASSERT_EQ(chmod((state_dir_ + "/ledger.db").c_str(), 0644), 0);

  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  EXPECT_EQ(ModeOf(state_dir_), 0711u);
  EXPECT_EQ(ModeOf(state_dir_ + "/jobs"), 0700u);
  EXPECT_EQ(ModeOf(state_dir_ + "/jobs/7"), 0700u);
  EXPECT_EQ(ModeOf(state_dir_ + "/ledger.db") & 077, 0u);
}

TEST_F(RecoveryTest, AnInterruptedLaunchThatLeftNoLogIsQueuedAgain) {
  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  recovery_->Recover({Interrupted(1)});

  const Job& job = table_.jobs().at(1);
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.reason, "the daemon stopped before starting it; queued again");
  EXPECT_TRUE(job.region_path.empty());
  EXPECT_EQ(forgotten_, std::vector<uint64_t>{1});
  EXPECT_EQ(enqueued_, std::vector<uint64_t>{1});
  EXPECT_TRUE(HasEvent("requeued", 1));
  EXPECT_EQ(table_.live().count(1), 0u);
}

TEST_F(RecoveryTest, AnInterruptedLaunchWhoseSupervisorLeftAnExitStatusEndsWithIt) {
  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  Began(2);
  std::ofstream(JobDir(2) + "/status") << "exit 3\n";
  recovery_->Recover({Interrupted(2)});

  const Job& job = table_.jobs().at(2);
  EXPECT_EQ(job.state, JobState::kExited);
  EXPECT_EQ(job.exit_code, 3);
  EXPECT_EQ(job.reason, "ran while the daemon was down (its start was not recorded)");
  EXPECT_TRUE(enqueued_.empty());
  EXPECT_TRUE(forgotten_.empty());
  EXPECT_EQ(table_.live().count(2), 0u);
}

TEST_F(RecoveryTest, AnInterruptedLaunchWhoseProcessesAreFoundIsAdopted) {
  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  Began(3);
  found_ = {kGroup};
  launcher_.alive.insert(kGroup);
  Job job = Interrupted(3);
  regions_.regions[job.region_path] = SliceLimits{};
  recovery_->Recover({std::move(job)});

  const Job& adopted = table_.jobs().at(3);
  EXPECT_EQ(adopted.state, JobState::kRunning);
  EXPECT_EQ(adopted.pid, kGroup);
  EXPECT_TRUE(HasEvent("adopted", 3));
  EXPECT_EQ(transitions_.PersistedIds(), std::vector<uint64_t>{3});
  EXPECT_EQ(table_.live().count(3), 1u);
  EXPECT_EQ(suspensions_, std::vector<uint64_t>{3});
  EXPECT_EQ(capacity_->AllocationOf(3)->gpu_uuids, std::vector<std::string>{"GPU-0"});
  EXPECT_EQ(launcher_.strays_kept, std::vector<uint64_t>{3});
}

TEST_F(RecoveryTest, AnInterruptedLaunchThatBeganAndLeftNothingFails) {
  ASSERT_TRUE(recovery_->SecureStateDir().ok());
  Began(4);
  recovery_->Recover({Interrupted(4)});

  const Job& job = table_.jobs().at(4);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_NE(job.reason.find("so that it can never run twice"), std::string::npos) << job.reason;
  EXPECT_TRUE(enqueued_.empty());
}

TEST_F(RecoveryTest, AQueuedJobHeldByItsOwnerIsQueuedAndHeldAgain) {
  Job job;
  job.id = 5;
  job.user = "alice";
  job.state = JobState::kQueued;
  job.hold = core::HoldKind::kUser;
  job.request.kind = core::RequestKind::kWholeGpus;
  job.request.gpus_min = job.request.gpus_max = 1;
  recovery_->Recover({std::move(job)});

  EXPECT_EQ(enqueued_, std::vector<uint64_t>{5});
  EXPECT_EQ(held_.count(5), 1u);
  EXPECT_EQ(table_.jobs().at(5).state, JobState::kQueued);
}

}  // namespace
}  // namespace gpuslice::daemon
