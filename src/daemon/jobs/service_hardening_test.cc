// The daemon's own hardening (state permissions, request
// and queue limits, crash-safe launching, recovery from a full disk).

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

uint32_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

// Opens the launch's ledger from a second connection at the moment the
// process would start, and keeps a copy of the ledger files as they are
// then: what a daemon SIGKILLed during the launch would find.
class SnapshotLauncher : public FakeLauncher {
 public:
  core::Result<ProcessRef> Launch(const LaunchSpec& spec) override {
    if (!snapshot_dir.empty()) {
      fs::create_directories(snapshot_dir);
      for (const char* suffix : {"", "-wal", "-shm"}) {
        std::string from = state_dir + "/ledger.db" + suffix;
        if (fs::exists(from)) {
          fs::copy_file(from, snapshot_dir + "/ledger.db" + suffix,
                        fs::copy_options::overwrite_existing);
        }
      }
      snapshot_dir.clear();
    }
    return FakeLauncher::Launch(spec);
  }
  std::string state_dir;
  std::string snapshot_dir;  // Taken once, at the next launch.
};

class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-harden-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    state_ = dir_ + "/state";
    launcher_.state_dir = state_;
    Restart();
  }
  void TearDown() override {
    service_.reset();
    if (mounted_) umount2(mount_.c_str(), MNT_DETACH);
    fs::remove_all(dir_);
  }

  void Restart(const std::string& state = "") {
    service_.reset();
    ServiceOptions o;
    o.state_dir = state.empty() ? state_ : state;
    o.kill_grace_ms = 1000;
    o.max_queued_jobs_per_user = 3;
    o.max_env_bytes = 4096;
    o.max_argv_bytes = 4096;
    o.ledger_retry_ms = 1000;
    o.find_job_groups = [this](const core::Job& job) {
      return found_.count(job.id) ? std::vector<int64_t>{found_[job.id]} : std::vector<int64_t>{};
    };
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }

  core::Result<JobView> Submit(const std::string& gpus, uint32_t uid = 1000,
                               std::vector<std::string> env = {"PATH=/usr/bin"},
                               std::vector<std::string> argv = {"train"}) {
    SubmitSpec s;
    s.fields.gpus = gpus;
    s.argv = std::move(argv);
    s.cwd = "/home/u";
    s.env = std::move(env);
    return service_->intake().Submit(TestCaller(uid), s);
  }

  std::string dir_, state_, mount_;
  bool mounted_ = false;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2)};
  SnapshotLauncher launcher_;
  FakeRegionStore regions_;
  std::map<uint64_t, int64_t> found_;  // What find_job_groups finds.
  std::unique_ptr<Service> service_;
};

// The ledger (every job's environment) must not be 0644 in a 0755 state
// directory; an older install that left it so is fixed at start.
TEST_F(HardeningTest, StateDirectoryIsTraversableButNotListableAndTheLedgerPrivate) {
  ASSERT_TRUE(Submit("1").ok());
  EXPECT_EQ(ModeOf(state_), 0711u);
  EXPECT_EQ(ModeOf(state_ + "/jobs"), 0700u);
  EXPECT_EQ(ModeOf(state_ + "/jobs/1"), 0700u);
  EXPECT_EQ(ModeOf(state_ + "/ledger.db"), 0600u);
  EXPECT_EQ(ModeOf(state_ + "/ledger.db-wal"), 0600u);
  service_.reset();
  chmod(state_.c_str(), 0755);
  chmod((state_ + "/jobs").c_str(), 0755);
  chmod((state_ + "/jobs/1").c_str(), 0755);
  chmod((state_ + "/ledger.db").c_str(), 0644);
  Restart();
  EXPECT_EQ(ModeOf(state_), 0711u);
  EXPECT_EQ(ModeOf(state_ + "/jobs"), 0700u);
  EXPECT_EQ(ModeOf(state_ + "/jobs/1"), 0700u);
  EXPECT_EQ(ModeOf(state_ + "/ledger.db"), 0600u);
}

// One user may not queue 10,000 jobs: the queue limit refuses them.
TEST_F(HardeningTest, QueuedJobsPerUserAreCappedWithAClearError) {
  ASSERT_TRUE(Submit("2").ok());  // Runs: the GPUs are full from here on.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit("2").ok()) << i;
  auto over = Submit("2");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_queued_jobs_per_user = 3"), std::string::npos)
      << over.status().message();
  EXPECT_TRUE(Submit("2", 2000).ok()) << "another user's queue is their own";
  ASSERT_TRUE(service_->Cancel(TestCaller(1000), 2).ok());
  EXPECT_TRUE(Submit("2").ok()) << "a cancelled job frees its place";
  Restart();
  EXPECT_FALSE(Submit("2").ok()) << "the count is rebuilt from the ledger";
}

// A 7.4 MB environment per job would take the daemon to 907 MiB; refused.
TEST_F(HardeningTest, EnvironmentAndCommandLineSizesAreLimited) {
  auto env = Submit("1", 1000, {"BIG=" + std::string(5000, 'x')});
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("max_env_bytes"), std::string::npos);
  EXPECT_NE(env.status().message().find("over the limit of 4 KiB"), std::string::npos)
      << env.status().message();
  auto argv = Submit("1", 1000, {}, {"x", std::string(5000, 'y')});
  ASSERT_FALSE(argv.ok());
  EXPECT_NE(argv.status().message().find("max_argv_bytes"), std::string::npos);
  EXPECT_TRUE(Submit("1", 1000, {"OK=" + std::string(3000, 'x')}).ok());
}

// A failure reason is public; the PATH it names is the owner's, so hidden.
TEST_F(HardeningTest, FailureReasonsDoNotShowTheOwnersEnvironment) {
  launcher_.fail_with =
      core::NotFoundError("command 'nope' not found in PATH /home/alice/secret-bin:/usr/bin");
  auto v = Submit("1", 1000, {"PATH=/home/alice/secret-bin:/usr/bin"});
  ASSERT_TRUE(v.ok());
  auto job = service_->reads().Get(1);
  EXPECT_EQ(job->job.state, core::JobState::kFailed);
  EXPECT_EQ(job->job.reason.find("secret-bin"), std::string::npos) << job->job.reason;
  EXPECT_NE(job->job.reason.find("$PATH"), std::string::npos) << job->job.reason;
  auto events = service_->events().Query({});
  for (const Event& e : *events) EXPECT_EQ(e.message.find("secret-bin"), std::string::npos);
  EXPECT_EQ(RedactEnvironment("x /a/very/long y", {"V=/a/very/long", "S=1"}), "x $V y");
}

// A job launched before it is recorded as running would run twice after a
// SIGKILL at a bad moment (6 of 204 jobs did). The snapshot is the
// ledger as a daemon killed at the moment of launch leaves it.
TEST_F(HardeningTest, JobKilledDuringItsLaunchIsAdoptedNotStartedAgain) {
  const std::string snap = dir_ + "/snap";
  launcher_.snapshot_dir = snap;
  ASSERT_TRUE(Submit("1").ok());
  ASSERT_EQ(launcher_.launches.size(), 1u);
  const int64_t pid = launcher_.launches.begin()->first;
  // The process found by its identity is adopted.
  found_[1] = pid;
  Restart(snap);
  auto v = service_->reads().Get(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->job.state, core::JobState::kRunning);
  EXPECT_EQ(v->job.pid, pid);
  EXPECT_EQ(launcher_.launches.size(), 1u) << "never launched twice";
  bool adopted = false;
  auto events = service_->events().Query({});
  ASSERT_TRUE(events.ok());
  for (const Event& e : *events) adopted = adopted || e.kind == "adopted";
  EXPECT_TRUE(adopted);
  // And recorded: a second restart keeps it.
  Restart(snap);
  EXPECT_EQ(service_->reads().Get(1)->job.pid, pid);
  EXPECT_EQ(launcher_.launches.size(), 1u);
}

TEST_F(HardeningTest, LaunchThatLeftNoTraceIsQueuedAgainOneThatBeganIsNot) {
  const std::string snap = dir_ + "/snap";
  launcher_.snapshot_dir = snap;
  ASSERT_TRUE(Submit("1").ok());
  fs::copy(snap, dir_ + "/snap2");
  // No process, no log file: the launch never began; it runs once, now.
  Restart(snap);
  EXPECT_EQ(launcher_.launches.size(), 2u);
  EXPECT_EQ(service_->reads().Get(1)->job.state, core::JobState::kRunning);
  // No process, but its log file exists: it may have run; never again.
  fs::create_directories(dir_ + "/snap2/jobs/1");
  std::ofstream(dir_ + "/snap2/jobs/1/stdout") << "";
  Restart(dir_ + "/snap2");
  EXPECT_EQ(launcher_.launches.size(), 2u);
  auto v = service_->reads().Get(1);
  EXPECT_EQ(v->job.state, core::JobState::kFailed);
  EXPECT_NE(v->job.reason.find("never run twice"), std::string::npos) << v->job.reason;
}

// A full state disk must not leave the daemon degraded until a restart.
TEST_F(HardeningTest, LedgerRecoversOnItsOwnOnceTheDiskHasRoomAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  service_.reset();
  mount_ = dir_ + "/small";
  fs::create_directories(mount_);
  ASSERT_EQ(mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=2m"), 0) << strerror(errno);
  mounted_ = true;
  state_ = mount_ + "/state";
  Restart();
  auto first = Submit("1");
  ASSERT_TRUE(first.ok());
  const int64_t pid = first->job.pid;
  {
    // Fill the disk.
    std::ofstream fill(mount_ + "/fill");
    std::string block(64 << 10, 'x');
    while (fill.write(block.data(), block.size())) {
    }
  }
  // Writes fail now: a job's end, then new work.
  launcher_.Exit(pid, 0);
  service_->Tick();
  for (int i = 0; i < 200 && !service_->degraded_mode().degraded(); ++i) {
    (void)Submit("1", 1000 + i, {"PAD=" + std::string(3000, 'p')});
  }
  ASSERT_TRUE(service_->degraded_mode().degraded());
  EXPECT_NE(service_->degraded_mode().reason().find("ledger write failed"), std::string::npos);
  EXPECT_FALSE(Submit("1").ok());
  // Still full: retried every ledger_retry_ms, not on every call.
  service_->MaintainLedger();
  EXPECT_TRUE(service_->degraded_mode().degraded()) << "not before the retry interval";
  clock_.Advance(1000);
  service_->MaintainLedger();
  EXPECT_TRUE(service_->degraded_mode().degraded()) << "the disk is still full";
  // Room again is seen on the next call, not the next interval (a daemon
  // with no job running would take up to ledger_retry, 2 s, to notice).
  clock_.Advance(10);
  fs::remove(mount_ + "/fill");
  service_->MaintainLedger();
  EXPECT_FALSE(service_->degraded_mode().degraded()) << service_->degraded_mode().reason();
  bool degraded_event = false, recovered_event = false;
  auto events = service_->events().Query({.limit = 1000});
  ASSERT_TRUE(events.ok());
  for (const Event& e : *events) {
    degraded_event = degraded_event || e.kind == "degraded";
    recovered_event = recovered_event || e.kind == "recovered";
  }
  EXPECT_TRUE(degraded_event);
  EXPECT_TRUE(recovered_event);
  EXPECT_TRUE(Submit("1", 3000).ok());
  // What happened while the disk was full reached the ledger.
  Restart();
  EXPECT_EQ(service_->reads().Get(1)->job.state, core::JobState::kExited);
}

// With the state disk full, making a starting job's slice must not crash
// the daemon: the job waits queued (never lost), the daemon is
// degraded with a reason naming the full disk, running jobs go on, and it
// recovers by itself once a slice fits again.
TEST_F(HardeningTest, AJobWhoseSliceFindsNoRoomWaitsQueuedAndStartsOnceThereIsRoom) {
  auto running = Submit("1");
  ASSERT_TRUE(running.ok());
  ASSERT_EQ(service_->reads().Get(running->job.id)->job.state, core::JobState::kRunning);
  regions_.room = core::ResourceExhaustedError(
      "create slice region /s/slices/job-2/region: allocate /s/slices/job-2/region.tmp: No space "
      "left on device");
  auto waiting = Submit("1", 1001);
  ASSERT_TRUE(waiting.ok()) << waiting.status().ToString();
  const uint64_t id = waiting->job.id;
  const size_t launches = launcher_.launches.size();
  EXPECT_EQ(service_->reads().Get(id)->job.state, core::JobState::kQueued);
  ASSERT_TRUE(service_->degraded_mode().degraded());
  EXPECT_NE(service_->degraded_mode().reason().find("No space left on device"), std::string::npos)
      << service_->degraded_mode().reason();
  auto refused = Submit("1", 1002);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("no room for job slices on the state disk"),
            std::string::npos)
      << refused.status().message();
  // Still no room: nothing starts, nothing is lost, the running job runs on.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(1000);
    service_->Tick();
    service_->MaintainLedger();
  }
  EXPECT_TRUE(service_->degraded_mode().degraded());
  EXPECT_EQ(service_->reads().Get(id)->job.state, core::JobState::kQueued);
  EXPECT_EQ(service_->reads().Get(running->job.id)->job.state, core::JobState::kRunning);
  EXPECT_EQ(launcher_.launches.size(), launches);
  // Room again: the next maintenance sees it, the job starts.
  regions_.room = core::Status::Ok();
  service_->MaintainLedger();
  EXPECT_FALSE(service_->degraded_mode().degraded()) << service_->degraded_mode().reason();
  service_->Flush();
  service_->Tick();
  EXPECT_EQ(service_->reads().Get(id)->job.state, core::JobState::kRunning);
  EXPECT_EQ(launcher_.launches.size(), launches + 1);
  bool degraded_event = false, recovered_event = false;
  auto events = service_->events().Query({.limit = 1000});
  ASSERT_TRUE(events.ok());
  for (const Event& e : *events) {
    degraded_event =
        degraded_event ||
        (e.kind == "degraded" && e.message.find("no room for job slices") != std::string::npos);
    recovered_event = recovered_event || (e.kind == "recovered" &&
                                          e.message.find("room for slices") != std::string::npos);
  }
  EXPECT_TRUE(degraded_event);
  EXPECT_TRUE(recovered_event);
}

}  // namespace
}  // namespace gpuslice::daemon
