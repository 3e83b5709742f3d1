#include "daemon/store/ledger.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/store/ledger_schema.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-ledger-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ledger.db";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static core::Job SampleJob(uint64_t id) {
    core::Job j;
    j.id = id;
    j.uid = 1000;
    j.gid = 1000;
    j.user = "alice";
    j.request.kind = core::RequestKind::kFraction;
    j.request.memory_bytes = 8 * core::kGiB;
    j.request.compute_milli = 300;
    j.request.priority = core::Priority::kHigh;
    j.request.name = "train";
    j.request.max_runtime = std::chrono::milliseconds(60000);
    j.mode = core::JobMode::kSubmit;
    j.argv = {"python", "train.py", "--lr", "0.1 \"quoted\""};
    j.cwd = "/home/alice";
    j.env = {"HOME=/home/alice", "X=a=b"};
    j.submitted_ms = 1000;
    return j;
  }

  std::string dir_;
  std::string path_;
};

uint32_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

// The ledger (every job's environment) is never 0644 for any local user.
TEST_F(LedgerTest, LedgerFilesAreReadableByTheDaemonOnly) {
  mode_t old = umask(022);
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE((*l)->SaveJob(SampleJob(1), std::nullopt, 10).ok());
    for (const char* suffix : {"", "-wal", "-shm"}) {
      ASSERT_TRUE(fs::exists(path_ + suffix)) << suffix;
      EXPECT_EQ(ModeOf(path_ + suffix), 0600u) << path_ << suffix;
    }
  }
  // An older install's files are fixed at open.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (fs::exists(path_ + suffix)) chmod((path_ + suffix).c_str(), 0644);
  }
  auto again = Ledger::Open(path_);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->SaveJob(SampleJob(2), std::nullopt, 20).ok());
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (fs::exists(path_ + suffix)) {
      EXPECT_EQ(ModeOf(path_ + suffix), 0600u) << suffix;
    }
  }
  EXPECT_EQ(umask(old), 022u) << "the umask is restored";
}

TEST_F(LedgerTest, FreshLedgerIsAtTheLatestSchema) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ((*l)->schema_version(), static_cast<int>(LedgerMigrations().size()));
  EXPECT_EQ(*(*l)->MaxJobId(), 0u);
}

TEST_F(LedgerTest, AHeldQueuedJobIsStillHeldAfterReopening) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Job user_hold = SampleJob(1);
    user_hold.hold = core::HoldKind::kUser;
    core::Job admin_hold = SampleJob(2);
    admin_hold.hold = core::HoldKind::kAdmin;
    ASSERT_TRUE((*l)->SaveJob(user_hold, std::nullopt, 10).ok());
    ASSERT_TRUE((*l)->SaveJob(admin_hold, std::nullopt, 10).ok());
    ASSERT_TRUE((*l)->SaveJob(SampleJob(3), std::nullopt, 10).ok());
  }
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto jobs = (*l)->LoadJobs(/*live_only=*/true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].hold, core::HoldKind::kUser);
  EXPECT_EQ((*jobs)[1].hold, core::HoldKind::kAdmin);
  EXPECT_EQ((*jobs)[2].hold, core::HoldKind::kNone);
}

TEST_F(LedgerTest, JobRoundTripsWithAllocationAndTransitions) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Job j = SampleJob(7);
    ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, 1000).ok());
    j.state = core::JobState::kRunning;
    j.started_ms = 2000;
    j.pid = 4242;
    j.pid_start_time = 99;
    j.region_path = "/run/x/slice-7";
    j.allocation.gpu_indices = {1};
    j.allocation.gpu_uuids = {"GPU-abc"};
    j.allocation.memory_bytes_per_gpu = 8 * core::kGiB;
    j.allocation.compute_milli = 300;
    ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 2000).ok());
  }
  // Reopen: what a restarted daemon sees.
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto jobs = (*l)->LoadJobs(/*live_only=*/true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  const core::Job& j = (*jobs)[0];
  core::Job want = SampleJob(7);
  EXPECT_EQ(j.argv, want.argv);
  EXPECT_EQ(j.env, want.env);
  EXPECT_EQ(j.request.memory_bytes, want.request.memory_bytes);
  EXPECT_EQ(j.request.priority, core::Priority::kHigh);
  EXPECT_EQ(j.request.max_runtime->count(), 60000);
  EXPECT_EQ(j.state, core::JobState::kRunning);
  EXPECT_EQ(j.pid, 4242);
  EXPECT_EQ(j.pid_start_time, 99u);
  EXPECT_EQ(j.allocation.gpu_uuids, std::vector<std::string>{"GPU-abc"});
  EXPECT_EQ(*(*l)->MaxJobId(), 7u);
  auto held = (*l)->HeldAllocations();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->size(), 1u);
  auto tr = (*l)->Transitions(7);
  ASSERT_TRUE(tr.ok());
  ASSERT_EQ(tr->size(), 2u);
  EXPECT_EQ((*tr)[0].from, "");
  EXPECT_EQ((*tr)[0].to, "queued");
  EXPECT_EQ((*tr)[1].to, "running");
  EXPECT_EQ((*tr)[1].at_ms, 2000);
}

TEST_F(LedgerTest, GpuModelsAndTheIdleReclaimExemptionSurviveAReopen) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Job j = SampleJob(3);
    j.request.gpu_models = {"a100", "H100-80GB"};
    j.no_idle_reclaim = true;
    ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, 1000).ok());
    ASSERT_TRUE((*l)->SaveJob(SampleJob(4), std::nullopt, 1000).ok());
  }
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto jobs = (*l)->LoadJobs(/*live_only=*/true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].request.gpu_models, (std::vector<std::string>{"a100", "H100-80GB"}));
  EXPECT_TRUE((*jobs)[0].no_idle_reclaim);
  EXPECT_TRUE((*jobs)[1].request.gpu_models.empty());
  EXPECT_FALSE((*jobs)[1].no_idle_reclaim);
}

TEST_F(LedgerTest, TerminalJobReleasesItsAllocationOnce) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  core::Job j = SampleJob(1);
  j.state = core::JobState::kRunning;
  j.allocation.gpu_indices = {0};
  j.allocation.gpu_uuids = {"GPU-0"};
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 10).ok());
  // Saving the running job again (e.g. a pid update) must not double it.
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kRunning, 11).ok());
  EXPECT_EQ((*l)->HeldAllocations()->size(), 1u);
  j.state = core::JobState::kExited;
  j.exit_code = 0;
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kRunning, 20).ok());
  EXPECT_TRUE((*l)->HeldAllocations()->empty());
  EXPECT_TRUE((*l)->LoadJobs(true)->empty());
  auto all = (*l)->LoadJobs(false);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].allocation.gpu_uuids[0], "GPU-0");  // History kept.
  EXPECT_EQ((*l)->Transitions(1)->size(), 2u);            // queued->running, running->exited.
}

TEST_F(LedgerTest, QuotasRoundTripAndRemove) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Quota q;
    q.memory_bytes = 20 * core::kGiB;
    q.jobs = 2;
    ASSERT_TRUE((*l)->SaveQuota({core::PrincipalKind::kUser, "alice"}, q, 10).ok());
    core::Quota g;
    g.compute_milli = 2500;
    ASSERT_TRUE((*l)->SaveQuota({core::PrincipalKind::kGroup, "students"}, g, 10).ok());
    q.jobs = 3;  // Replaces.
    ASSERT_TRUE((*l)->SaveQuota({core::PrincipalKind::kUser, "alice"}, q, 11).ok());
  }
  auto l = Ledger::Open(path_);
  auto all = (*l)->LoadQuotas();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].first.ToString(), "group students");
  EXPECT_EQ((*all)[0].second.compute_milli, 2500u);
  EXPECT_FALSE((*all)[0].second.memory_bytes);
  EXPECT_EQ((*all)[1].second.jobs, 3u);
  EXPECT_EQ((*all)[1].second.memory_bytes, 20 * core::kGiB);
  EXPECT_TRUE((*l)->RemoveQuota({core::PrincipalKind::kUser, "alice"}).ok());
  EXPECT_EQ((*l)->RemoveQuota({core::PrincipalKind::kUser, "alice"}).code(),
            core::StatusCode::kNotFound);
  EXPECT_EQ((*l)->LoadQuotas()->size(), 1u);
}

TEST_F(LedgerTest, ResizeClosesTheOldStretchAndOpensANewOne) {
  auto l = Ledger::Open(path_);
  core::Job j = SampleJob(1);
  j.state = core::JobState::kRunning;
  j.allocation = {{0}, {"GPU-0"}, 8 * core::kGiB, 300};
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 10).ok());
  j.request.memory_bytes = 12 * core::kGiB;
  j.allocation.memory_bytes_per_gpu = 12 * core::kGiB;
  ASSERT_TRUE((*l)->SaveResize(j, 20).ok());
  auto rows = (*l)->UsageRows(0, 100);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].memory_bytes + (*rows)[1].memory_bytes, 20 * core::kGiB);
  EXPECT_EQ((*l)->HeldAllocations()->size(), 1u);
  auto live = (*l)->LoadJobs(true);
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].request.memory_bytes, 12 * core::kGiB);
  EXPECT_EQ((*live)[0].allocation.memory_bytes_per_gpu, 12 * core::kGiB);
  EXPECT_EQ((*live)[0].allocation.gpu_indices, std::vector<uint32_t>{0});
}

TEST_F(LedgerTest, RequeuedJobReleasesAndMayHoldTheSameGpuAgain) {
  auto l = Ledger::Open(path_);
  core::Job j = SampleJob(1);
  j.restartable = true;
  j.request.pool = "inference";
  j.state = core::JobState::kRunning;
  j.allocation = {{0}, {"GPU-0"}, 8 * core::kGiB, 300};
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 10).ok());
  j.state = core::JobState::kQueued;
  j.allocation = core::Allocation();
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kRunning, 20).ok());
  EXPECT_TRUE((*l)->HeldAllocations()->empty());
  auto queued = (*l)->LoadJobs(true);
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_TRUE((*queued)[0].allocation.empty());
  EXPECT_TRUE((*queued)[0].restartable);
  EXPECT_EQ((*queued)[0].request.pool, "inference");
  j.state = core::JobState::kRunning;
  j.allocation = {{0}, {"GPU-0"}, 8 * core::kGiB, 300};
  ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 30).ok());
  EXPECT_EQ((*l)->HeldAllocations()->size(), 1u);
  EXPECT_EQ((*l)->UsageRows(0, 100)->size(), 2u) << "both stretches kept";
  EXPECT_EQ((*l)->Transitions(1)->size(), 3u);
}

TEST_F(LedgerTest, MigrationThreeKeepsVersionTwoAllocations) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::string sql = "PRAGMA application_id=" + std::to_string(kLedgerApplicationId) +
                      "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      " INSERT INTO schema_version VALUES (2);";
    auto m = LedgerMigrations();
    sql += m[0];
    sql += m[1];
    sql +=
        "INSERT INTO jobs (id, uid, gid, user, kind, priority, mode, argv, cwd, env, state,"
        " submitted_ms) VALUES (5, 1, 1, 'bob', 'gpus', 'normal', 'submit', '[]', '/', '[]',"
        " 'running', 1);"
        "INSERT INTO allocations VALUES (5, 1, 'GPU-1', 80, 1000, 7, NULL);";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto held = (*l)->HeldAllocations();
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0], std::make_pair(uint64_t{5}, uint32_t{1}));
  auto jobs = (*l)->LoadJobs(true);
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].allocation.gpu_uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_FALSE((*jobs)[0].restartable);
  EXPECT_EQ((*jobs)[0].request.pool, "");
}

TEST_F(LedgerTest, GarbageFileIsRefusedWithAClearError) {
  std::ofstream(path_) << "this is not a database, just some text that is long enough to matter"
                          " for sqlite's header check............................................";
  auto l = Ledger::Open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(path_), std::string::npos) << l.status().ToString();
}

TEST_F(LedgerTest, AnotherApplicationsDatabaseIsRefused) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto l = Ledger::Open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("not a gpuslice ledger"), std::string::npos);
}

TEST_F(LedgerTest, NewerSchemaIsRefused) {
  ASSERT_TRUE(Ledger::Open(path_).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto l = Ledger::Open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("newer"), std::string::npos);
}

TEST_F(LedgerTest, PathThatIsADirectoryIsAnError) {
  fs::create_directory(path_);
  auto l = Ledger::Open(path_);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find(path_), std::string::npos) << l.status().ToString();
}

TEST_F(LedgerTest, VersionOneLedgerIsMigratedKeepingItsJobs) {
  // A ledger as the first release wrote it: migration 1 only.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  std::string v1 = std::string("PRAGMA application_id=") + std::to_string(kLedgerApplicationId) +
                   "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                   " INSERT INTO schema_version VALUES (1);" +
                   LedgerMigrations()[0] +
                   "INSERT INTO jobs (id, uid, gid, user, kind, priority, mode, argv, cwd, env,"
                   " state, submitted_ms) VALUES (5, 1000, 1000, 'bob', 'gpus', 'normal',"
                   " 'submit', '[\"x\"]', '/', '[]', 'exited', 10);";
  ASSERT_EQ(sqlite3_exec(db, v1.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ((*l)->schema_version(), static_cast<int>(LedgerMigrations().size()));
  auto jobs = (*l)->LoadJobs(false);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].user, "bob");
  EXPECT_EQ((*jobs)[0].idle_ms, 0);
  EXPECT_TRUE((*l)->AddEvent({0, 20, "submitted", 5, "bob", ""}).ok());
}

TEST_F(LedgerTest, IdleTimeRoundTrips) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  core::Job j = SampleJob(3);
  j.idle_ms = 123456;
  ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, 1000).ok());
  auto back = (*l)->LoadJob(3);
  ASSERT_TRUE(back.ok() && back->has_value());
  EXPECT_EQ((*back)->idle_ms, 123456);
}

TEST_F(LedgerTest, DependenciesRoundTrip) {
  const std::vector<core::Dependency> after = {{3, core::DependencyKind::kAny},
                                               {4, core::DependencyKind::kOk}};
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Job j = SampleJob(5);
    j.after = after;
    ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, 1000).ok());
    ASSERT_TRUE((*l)->SaveJob(SampleJob(6), std::nullopt, 1000).ok());
  }
  // Reopened, as a restarted daemon reads its queue back.
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto jobs = (*l)->LoadJobs(/*live_only=*/true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].after, after);
  EXPECT_TRUE((*jobs)[1].after.empty());
}

TEST_F(LedgerTest, LoadJobFindsOneJobWithItsLatestAllocation) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  for (uint64_t id : {1, 2, 3}) {
    core::Job j = SampleJob(id);
    j.state = core::JobState::kRunning;
    j.allocation = {{static_cast<uint32_t>(id)}, {"GPU-" + std::to_string(id)}, core::kGiB, 0};
    ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, 100).ok());
  }
  auto two = (*l)->LoadJob(2);
  ASSERT_TRUE(two.ok() && two->has_value()) << two.status().ToString();
  EXPECT_EQ((*two)->id, 2u);
  EXPECT_EQ((*two)->allocation.gpu_uuids, std::vector<std::string>{"GPU-2"});
  auto none = (*l)->LoadJob(9);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

// Migrations 6 (job dependencies) and 7 (container jobs): a version-5
// ledger's jobs wait for nothing and are host jobs.
TEST_F(LedgerTest, MigrationsSixAndSevenGiveOlderJobsNoDependenciesAndNoImage) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::string sql = "PRAGMA application_id=" + std::to_string(kLedgerApplicationId) +
                      "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      " INSERT INTO schema_version VALUES (5);";
    auto m = LedgerMigrations();
    for (int i = 0; i < 5; ++i) sql += m[i];
    sql +=
        "INSERT INTO jobs (id, uid, gid, user, kind, priority, mode, argv, cwd, env, state,"
        " submitted_ms) VALUES (5, 1, 1, 'bob', 'gpus', 'normal', 'submit', '[]', '/', '[]',"
        " 'queued', 1);";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ((*l)->schema_version(), static_cast<int>(LedgerMigrations().size()));
  auto jobs = (*l)->LoadJobs(true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_TRUE((*jobs)[0].after.empty());
  EXPECT_EQ((*jobs)[0].image, "");
  EXPECT_EQ((*jobs)[0].engine, "");
  EXPECT_TRUE((*jobs)[0].labels.empty());  // Migration 8.
}

// Migration 8: an external job's mode and labels survive a restart.
TEST_F(LedgerTest, ExternalJobsKeepTheirLabels) {
  {
    auto l = Ledger::Open(path_);
    ASSERT_TRUE(l.ok());
    core::Job j = SampleJob(9);
    j.mode = core::JobMode::kExternal;
    j.argv.clear();
    j.labels = {{"namespace", "ml"}, {"pod", "infer-0"}, {"container", "server"}};
    ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, 1).ok());
  }
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto jobs = (*l)->LoadJobs(true);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].mode, core::JobMode::kExternal);
  EXPECT_EQ((*jobs)[0].labels.at("pod"), "infer-0");
  EXPECT_EQ((*jobs)[0].labels.size(), 3u);
}

TEST_F(LedgerTest, EventsAreFilteredAndTheNewestAreReturnedInOrder) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  for (int i = 1; i <= 10; ++i) {
    Event e;
    e.at_ms = 1000 * i;
    e.kind = i % 2 ? "started" : "exited";
    e.job_id = static_cast<uint64_t>(i % 3);
    e.user = "alice";
    e.message = "m" + std::to_string(i);
    auto id = (*l)->AddEvent(e);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(*id, static_cast<uint64_t>(i));
  }
  EventQuery q;
  q.limit = 3;
  auto newest = (*l)->Events(q);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->size(), 3u);
  EXPECT_EQ((*newest)[0].message, "m8");
  EXPECT_EQ((*newest)[2].message, "m10");
  q = EventQuery{};
  q.job_id = 1;  // Events 1, 4, 7, 10.
  q.since_ms = 4000;
  auto job1 = (*l)->Events(q);
  ASSERT_TRUE(job1.ok());
  ASSERT_EQ(job1->size(), 3u);
  EXPECT_EQ((*job1)[0].message, "m4");
  auto counts = (*l)->EventCountsByKind();
  ASSERT_TRUE(counts.ok());
  ASSERT_EQ(counts->size(), 2u);
  EXPECT_EQ((*counts)[0], (std::pair<std::string, uint64_t>{"exited", 5}));
  EXPECT_EQ((*counts)[1], (std::pair<std::string, uint64_t>{"started", 5}));
}

// A job runs 1000-2000, is suspended 2000-8000, runs 8000-9000, is
// suspended again from 9000 on; another is suspended 1000-12000 and
// cancelled while suspended. The window is 3000-10000.
TEST_F(LedgerTest, TimeSuspendedInTheWindowComesFromTheTransitions) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto step = [&](core::Job& j, core::JobState to, int64_t at) {
    const core::JobState from = j.state;
    j.state = to;
    ASSERT_TRUE((*l)->SaveJob(j, from, at).ok());
  };
  core::Job a = SampleJob(1);
  ASSERT_TRUE((*l)->SaveJob(a, std::nullopt, 1000).ok());
  a.started_ms = 1000;
  a.allocation = {{1}, {"GPU-1"}, 8 * core::kGiB, 300};
  step(a, core::JobState::kRunning, 1000);
  step(a, core::JobState::kSuspended, 2000);
  step(a, core::JobState::kRunning, 8000);
  step(a, core::JobState::kSuspended, 9000);
  core::Job b = SampleJob(2);
  ASSERT_TRUE((*l)->SaveJob(b, std::nullopt, 500).ok());
  b.started_ms = 500;
  b.allocation = {{0}, {"GPU-0"}, 8 * core::kGiB, 300};
  step(b, core::JobState::kRunning, 500);
  step(b, core::JobState::kSuspended, 1000);
  step(b, core::JobState::kCancelled, 12000);
  auto suspended = (*l)->SuspendedInWindow(3000, 10000);
  ASSERT_TRUE(suspended.ok()) << suspended.status().ToString();
  EXPECT_EQ(suspended->at(1), 5000 + 1000);  // 3000-8000 and 9000-10000.
  EXPECT_EQ(suspended->at(2), 7000);         // 3000-10000.
  auto rows = (*l)->UsageRows(3000, 10000);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  // Job 1's stretch 8000-9000 overlaps; job 2 held nothing in the window.
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].job_id, 1u);
  EXPECT_FALSE((*rows)[0].suspension_only);
  EXPECT_EQ((*rows)[0].suspended_in_window_ms, 6000);
  EXPECT_EQ((*rows)[1].job_id, 2u);
  EXPECT_TRUE((*rows)[1].suspension_only);
  EXPECT_EQ((*rows)[1].suspended_in_window_ms, 7000);
  EXPECT_EQ((*rows)[1].user, "alice");
}

TEST_F(LedgerTest, UsageRowsAreTheAllocationsOverlappingTheWindow) {
  auto l = Ledger::Open(path_);
  ASSERT_TRUE(l.ok());
  auto run = [&](uint64_t id, int64_t from, int64_t to) {
    core::Job j = SampleJob(id);
    ASSERT_TRUE((*l)->SaveJob(j, std::nullopt, from).ok());
    j.state = core::JobState::kRunning;
    j.started_ms = from;
    j.allocation = {{1}, {"GPU-1"}, 8 * core::kGiB, 300};
    ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kQueued, from).ok());
    if (to > 0) {
      j.state = core::JobState::kExited;
      j.ended_ms = to;
      j.idle_ms = 7;
      ASSERT_TRUE((*l)->SaveJob(j, core::JobState::kRunning, to).ok());
    }
  };
  run(1, 1000, 2000);    // Before the window.
  run(2, 1500, 5000);    // Overlaps its start.
  run(3, 6000, 0);       // Still held.
  run(4, 20000, 30000);  // After the window.
  auto rows = (*l)->UsageRows(3000, 10000);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].job_id, 2u);
  EXPECT_EQ((*rows)[0].released_ms, 5000);
  EXPECT_EQ((*rows)[0].job_idle_ms, 7);
  EXPECT_EQ((*rows)[0].memory_bytes, 8 * core::kGiB);
  EXPECT_EQ((*rows)[0].compute_milli, 300u);
  EXPECT_FALSE((*rows)[0].whole_gpu);
  EXPECT_EQ((*rows)[1].job_id, 3u);
  EXPECT_EQ((*rows)[1].released_ms, 0);
  EXPECT_EQ((*rows)[1].user, "alice");
}

}  // namespace
}  // namespace gpuslice::daemon
