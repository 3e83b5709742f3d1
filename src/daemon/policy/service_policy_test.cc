// Service policies with fakes and a hand-moved clock: quotas, live resize,
// preemption, idle reclaim and the watchdog.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/api/metrics.h"
#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

const Caller kAdmin = TestCaller(0, true);

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-policy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Start(PolicyConfig rules = {}) {
    ServiceOptions o;
    o.state_dir = dir_;
    o.kill_grace_ms = 1000;
    o.rules = rules;
    o.processes = &processes_;  // Not this machine's /proc: fake pids.
    o.idle_threshold_pct = rules.idle_threshold_pct;
    o.groups_of = [](const std::string& user, uint32_t) {
      return std::vector<std::string>{user == "u1000" || user == "u1001" ? "students" : "staff"};
    };
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }

  core::Result<JobView> Submit(core::RequestFields f, uint32_t uid = 1000,
                               bool restartable = false) {
    SubmitSpec s;
    s.fields = std::move(f);
    s.argv = {"train"};
    s.cwd = "/home/u";
    s.restartable = restartable;
    return service_->intake().Submit(TestCaller(uid), s);
  }
  static core::RequestFields Mem(const std::string& mem, const std::string& compute = "10%",
                                 const std::string& priority = "normal") {
    core::RequestFields f;
    f.mem = mem;
    f.compute = compute;
    f.priority = priority;
    return f;
  }
  static core::RequestFields Gpus(const std::string& n, const std::string& priority = "normal") {
    core::RequestFields f;
    f.gpus = n;
    f.priority = priority;
    return f;
  }
  // An elastic job that asked to grow while it runs (`submit --grow`).
  core::Result<JobView> SubmitGrowing(core::RequestFields f) {
    SubmitSpec s;
    s.fields = std::move(f);
    s.argv = {"train"};
    s.cwd = "/home/u";
    s.env = {"GPUSLICE_ELASTIC_GROW=1"};
    return service_->intake().Submit(TestCaller(1000), s);
  }
  JobView Get(uint64_t id) { return *service_->reads().Get(id); }
  core::JobState State(uint64_t id) { return Get(id).job.state; }
  bool HasEvent(uint64_t id, const std::string& kind) {
    return daemon::HasEvent(*service_, id, kind);
  }
  // Moves time in one-second steps, ticking (and sampling) each.
  void Run(int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(1000);
      service_->Tick();
    }
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  FakeProcessTable processes_;
  std::unique_ptr<Service> service_;
};

core::Quota Jobs(uint32_t n) {
  core::Quota q;
  q.jobs = n;
  return q;
}

const core::Principal kU1000{core::PrincipalKind::kUser, "u1000"};
const core::Principal kStudents{core::PrincipalKind::kGroup, "students"};

TEST_F(PolicyTest, QuotaHoldsAJobBackWithTheReasonAndLetsOthersPass) {
  Start();
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kU1000, Jobs(1)).ok());
  auto a = Submit(Mem("8GiB"));
  auto b = Submit(Mem("8GiB"));
  auto c = Submit(Mem("8GiB"), 2000);  // Another user, not held.
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(State(a->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(b->job.id), core::JobState::kQueued);
  EXPECT_EQ(State(c->job.id), core::JobState::kRunning) << "a held job blocks no one";
  EXPECT_EQ(Get(b->job.id).waiting_for,
            "quota: user u1000: 1 of 1 running jobs in use, asks 1 more");
  EXPECT_TRUE(HasEvent(b->job.id, "quota_wait"));
  launcher_.Exit(Get(a->job.id).job.pid, 0);
  service_->Tick();
  EXPECT_EQ(State(b->job.id), core::JobState::kRunning);
}

TEST_F(PolicyTest, GroupQuotaCountsJobsStartedInTheSamePass) {
  Start();
  auto blocker = Submit(Gpus("2"), 3000);
  ASSERT_TRUE(blocker.ok());
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kStudents, Jobs(1)).ok());
  auto x = Submit(Mem("8GiB"), 1000);
  auto y = Submit(Mem("8GiB"), 1001);
  EXPECT_EQ(State(x->job.id), core::JobState::kQueued);
  EXPECT_EQ(State(y->job.id), core::JobState::kQueued);
  launcher_.Exit(Get(blocker->job.id).job.pid, 0);
  service_->Tick();
  EXPECT_EQ(State(x->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(y->job.id), core::JobState::kQueued);
  // It could borrow beyond the group's quota only if it could give the
  // capacity back (quota_borrowing): this daemon cannot suspend.
  EXPECT_EQ(Get(y->job.id).waiting_for,
            "quota: group students: 1 of 1 running jobs in use, asks 1 more (beyond its group's "
            "quota only a job that can give the capacity back borrows: restartable, or one the "
            "daemon can suspend)");
}

TEST_F(PolicyTest, QuotaThatCanNeverFitRefusesAtSubmit) {
  Start();
  core::Quota q;
  q.memory_bytes = 4 * core::kGiB;
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kU1000, q).ok());
  auto r = Submit(Mem("8GiB"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), core::StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message(),
            "over quota, can never run: user u1000: asks 8 GiB of memory, over its quota of 4 GiB");
}

// Pools and priorities the admin restricted are refused at
// submission, saying who may.
TEST_F(PolicyTest, RestrictedPoolsAndPrioritiesAreRefusedAtSubmit) {
  PolicyConfig rules;
  bool known = false;
  ASSERT_TRUE(ApplyAccessValue(&rules.access, "pool_groups.default", "students", &known).ok());
  ASSERT_TRUE(ApplyAccessValue(&rules.access, "max_priority", "normal", &known).ok());
  Start(rules);
  EXPECT_TRUE(Submit(Mem("1GiB")).ok()) << "u1000 is in students";
  auto high = Submit(Mem("1GiB", "10%", "high"));
  ASSERT_FALSE(high.ok());
  EXPECT_EQ(high.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(high.status().message().find("may ask at most normal"), std::string::npos)
      << high.status().message();
  auto staff = Submit(Mem("1GiB"), 1002);
  ASSERT_FALSE(staff.ok());
  EXPECT_EQ(staff.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(staff.status().message().find("pool 'default' is only for members of students"),
            std::string::npos)
      << staff.status().message();
}

TEST_F(PolicyTest, OnlyAdminsSetQuotasAndTheyOutliveARestart) {
  Start();
  EXPECT_EQ(service_->quotas().SetQuota(TestCaller(1000), kU1000, Jobs(1)).code(),
            core::StatusCode::kPermissionDenied);
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kStudents, Jobs(3)).ok());
  service_.reset();
  Start();
  auto all = service_->quotas().Quotas();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].who, kStudents);
  EXPECT_EQ(all[0].quota.jobs, 3u);
  EXPECT_EQ(service_->quotas().RemoveQuota(kAdmin, kU1000).code(), core::StatusCode::kNotFound);
  EXPECT_TRUE(service_->quotas().RemoveQuota(kAdmin, kStudents).ok());
  EXPECT_TRUE(service_->quotas().Quotas().empty());
}

TEST_F(PolicyTest, ResizeChangesTheSliceTheLedgerAndTheCapacity) {
  Start();
  auto a = Submit(Mem("8GiB", "30%"));
  ASSERT_TRUE(a.ok());
  uint64_t id = a->job.id;
  std::string region = Get(id).job.region_path;
  ResizeSpec spec;
  spec.mem = "20GiB";
  spec.compute = "50%";
  auto r = service_->live().Resize(TestCaller(1000), id, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.request.Describe(), "20 GiB + 50%");
  EXPECT_EQ(regions_.regions[region].memory_bytes_per_device, 20 * core::kGiB);
  EXPECT_EQ(regions_.regions[region].compute_milli, 500u);
  EXPECT_TRUE(HasEvent(id, "resized"));
  // Someone else may not; over the GPU is refused.
  EXPECT_EQ(service_->live().Resize(TestCaller(2000), id, spec).status().code(),
            core::StatusCode::kPermissionDenied);
  spec.mem = "90GiB";
  EXPECT_EQ(service_->live().Resize(TestCaller(1000), id, spec).status().code(),
            core::StatusCode::kResourceExhausted);
  // Below what it uses: only with force.
  regions_.used[region] = 12 * core::kGiB;
  spec.mem = "10GiB";
  auto below = service_->live().Resize(TestCaller(1000), id, spec);
  EXPECT_EQ(below.status().code(), core::StatusCode::kFailedPrecondition);
  spec.force = true;
  EXPECT_TRUE(service_->live().Resize(TestCaller(1000), id, spec).ok());
  EXPECT_EQ(regions_.regions[region].memory_bytes_per_device, 10 * core::kGiB);
  // A restart reads the new size back.
  service_.reset();
  Start();
  EXPECT_EQ(Get(id).job.allocation.memory_bytes_per_gpu, 10 * core::kGiB);
}

TEST_F(PolicyTest, ResizeWithinTheUsersQuota) {
  Start();
  core::Quota q;
  q.memory_bytes = 16 * core::kGiB;
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kU1000, q).ok());
  auto a = Submit(Mem("8GiB"));
  auto b = Submit(Mem("4GiB"));
  ResizeSpec spec;
  spec.mem = "13GiB";
  auto r = service_->live().Resize(TestCaller(1000), a->job.id, spec);
  EXPECT_EQ(r.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "resize to 13 GiB + 10% is over quota: user u1000: memory "
            "4 GiB of 16 GiB in use, asks 13 GiB");
  spec.mem = "12GiB";
  EXPECT_TRUE(service_->live().Resize(TestCaller(1000), a->job.id, spec).ok());
  (void)b;
}

TEST_F(PolicyTest, HighPriorityPreemptsTheCheapestLowerJobAndRequeuesIt) {
  PolicyConfig rules;
  rules.preemption = *core::ParsePreemptionPolicy("lower");
  rules.preemption_grace_ms = 5000;
  Start(rules);
  auto old_low = Submit(Gpus("1", "low"), 1000, /*restartable=*/true);
  clock_.Advance(60'000);
  auto new_low = Submit(Gpus("1", "low"), 1000, /*restartable=*/true);
  clock_.Advance(1000);
  launcher_.die_on_signal = false;  // Ignores SIGTERM: SIGKILL after the grace.
  auto high = Submit(Gpus("1", "high"), 2000);
  ASSERT_TRUE(high.ok());
  EXPECT_EQ(State(high->job.id), core::JobState::kQueued);
  int64_t victim = Get(new_low->job.id).job.pid;
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(victim, SIGTERM)) << "the younger one";
  EXPECT_TRUE(HasEvent(new_low->job.id, "preempted"));
  EXPECT_NE(
      Get(high->job.id).waiting_for.find("preempting job(s) " + std::to_string(new_low->job.id)),
      std::string::npos)
      << Get(high->job.id).waiting_for;
  Run(4);
  EXPECT_EQ(State(new_low->job.id), core::JobState::kRunning) << "still in its grace";
  Run(2);
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(victim, SIGKILL));
  launcher_.alive.erase(victim);
  launcher_.WriteStatus(victim, "signal", SIGKILL);
  service_->Tick();
  EXPECT_EQ(State(new_low->job.id), core::JobState::kQueued);
  EXPECT_TRUE(HasEvent(new_low->job.id, "requeued"));
  EXPECT_EQ(State(high->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(old_low->job.id), core::JobState::kRunning);
  // The high job ends: the victim runs again, from the start.
  launcher_.Exit(Get(high->job.id).job.pid, 0);
  service_->Tick();
  EXPECT_EQ(State(new_low->job.id), core::JobState::kRunning);
  EXPECT_NE(Get(new_low->job.id).job.pid, victim);
}

TEST_F(PolicyTest, NonRestartableVictimEndsCancelledAsPreempted) {
  PolicyConfig rules;
  rules.preemption = *core::ParsePreemptionPolicy("lower");
  Start(rules);
  auto low = Submit(Gpus("2", "low"));
  auto high = Submit(Gpus("1", "high"), 2000);
  service_->Tick();
  EXPECT_EQ(State(low->job.id), core::JobState::kCancelled);
  EXPECT_EQ(
      Get(low->job.id).job.reason.rfind("preempted by job " + std::to_string(high->job.id), 0), 0u)
      << Get(low->job.id).job.reason;
  EXPECT_EQ(State(high->job.id), core::JobState::kRunning);
}

TEST_F(PolicyTest, MinimumRuntimeDelaysPreemption) {
  PolicyConfig rules;
  rules.preemption = *core::ParsePreemptionPolicy("lower-after:10m");
  Start(rules);
  auto low = Submit(Gpus("2", "low"));
  clock_.Advance(60'000);
  auto high = Submit(Gpus("1", "high"), 2000);
  EXPECT_EQ(State(low->job.id), core::JobState::kRunning);
  EXPECT_NE(Get(high->job.id).waiting_for.find("run less than the minimum of 10m"),
            std::string::npos)
      << Get(high->job.id).waiting_for;
  clock_.Advance(9 * 60'000);
  service_->Tick();
  service_->Tick();
  EXPECT_EQ(State(low->job.id), core::JobState::kCancelled);
  EXPECT_EQ(State(high->job.id), core::JobState::kRunning);
}

TEST_F(PolicyTest, EqualPriorityIsNeverPreempted) {
  PolicyConfig rules;
  rules.preemption = *core::ParsePreemptionPolicy("lower");
  Start(rules);
  auto a = Submit(Gpus("2", "high"));
  auto b = Submit(Gpus("1", "high"), 2000);
  service_->Tick();
  EXPECT_EQ(State(a->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(b->job.id), core::JobState::kQueued);
}

TEST_F(PolicyTest, IdleJobIsFlaggedThenPausedWhenSomethingWaits) {
  PolicyConfig rules;
  rules.idle_after_ms = 5 * 60'000;
  rules.idle_action = IdleAction::kPause;
  Start(rules);
  auto idle = Submit(Gpus("2"));
  std::string region = Get(idle->job.id).job.region_path;
  Run(5 * 60 + 2);
  JobView v = Get(idle->job.id);
  EXPECT_NE(std::find(v.flags.begin(), v.flags.end(), "idle"), v.flags.end());
  EXPECT_TRUE(HasEvent(idle->job.id, "idle_flagged"));
  EXPECT_FALSE(regions_.regions[region].launches_paused) << "nothing waits: no action";
  auto waiting = Submit(Gpus("1"), 2000);
  Run(2);
  EXPECT_TRUE(regions_.regions[region].launches_paused);
  EXPECT_TRUE(HasEvent(idle->job.id, "idle_action"));
  v = Get(idle->job.id);
  EXPECT_NE(std::find(v.flags.begin(), v.flags.end(), "paused"), v.flags.end());
  // ... and say so in the metrics.
  auto paused_metric = [&] {
    const std::string m = RenderMetrics(*service_, MetricsOptions{});
    const std::string key =
        "gpuslice_job_launches_paused{job_id=\"" + std::to_string(idle->job.id) + "\",";
    const size_t at = m.find(key);
    if (at == std::string::npos) return std::string("absent");
    return m.substr(m.find(' ', at) + 1, 1);
  };
  EXPECT_EQ(paused_metric(), "1");
  // Paused jobs stay paused until resumed.
  EXPECT_EQ(service_->live().Resume(TestCaller(2000), idle->job.id).code(),
            core::StatusCode::kPermissionDenied);
  ASSERT_TRUE(service_->live().Resume(TestCaller(1000), idle->job.id).ok());
  EXPECT_FALSE(regions_.regions[region].launches_paused);
  EXPECT_EQ(paused_metric(), "0");
  Run(60);
  EXPECT_FALSE(regions_.regions[region].launches_paused) << "idle time counts afresh";
  (void)waiting;
}

TEST_F(PolicyTest, IdleEndActionCancelsWithReasonIdle) {
  PolicyConfig rules;
  rules.idle_after_ms = 60'000;
  rules.idle_action = IdleAction::kEnd;
  rules.idle_action_always = true;
  Start(rules);
  auto idle = Submit(Mem("8GiB"));
  Run(63);
  EXPECT_EQ(State(idle->job.id), core::JobState::kCancelled);
  EXPECT_EQ(Get(idle->job.id).job.reason.rfind("idle: GPU use under 30% for 1m", 0), 0u)
      << Get(idle->job.id).job.reason;
}

TEST_F(PolicyTest, BusyJobIsNotIdle) {
  PolicyConfig rules;
  rules.idle_after_ms = 60'000;
  rules.idle_action = IdleAction::kEnd;
  rules.idle_action_always = true;
  Start(rules);
  // Busy within its share (80% of a 10% slice is a bypass the compute
  // watchdog ends).
  auto busy = Submit(Mem("8GiB", "90%"));
  std::string region = Get(busy->job.id).job.region_path;
  regions_.pids[region] = {4242};
  GpuUsage g0;
  g0.index = Get(busy->job.id).job.allocation.gpu_indices[0];
  g0.processes.push_back({4242, 1 * core::kGiB, 80});
  GpuUsage g1;
  g1.index = 1 - g0.index;
  inventory_.usage = {g0.index == 0 ? g0 : g1, g0.index == 0 ? g1 : g0};
  Run(120);
  EXPECT_EQ(State(busy->job.id), core::JobState::kRunning);
}

// A high-priority slice starved by others' turns shows little GPU use, and
// idle reclaim must not flag and pause it for that. Time the arbiter
// saw it wait for its turn counts as use.
TEST_F(PolicyTest, ASliceThatWaitsForItsTurnIsNotIdle) {
  PolicyConfig rules;
  rules.idle_after_ms = 60'000;
  rules.idle_action = IdleAction::kEnd;
  rules.idle_action_always = true;
  Start(rules);
  auto waiting = Submit(Mem("8GiB"));
  auto idle = Submit(Mem("8GiB"));
  const std::string region = Get(waiting->job.id).job.region_path;
  // No GPU use in NVML for either; the first waits 90% of every second.
  for (int i = 0; i < 120; ++i) {
    regions_.waited[region] += 900'000'000;
    Run(1);
  }
  EXPECT_EQ(State(waiting->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(idle->job.id), core::JobState::kCancelled) << "the control";
}

TEST_F(PolicyTest, WatchdogReportsAndKillsAJobOverItsLimitInNvml) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kKill;
  rules.watchdog_allowance_bytes = 512 * core::kMiB;  // A context's size, not learnt here.
  Start(rules);
  auto job = Submit(Mem("4GiB"));
  JobView v = Get(job->job.id);
  regions_.pids[v.job.region_path] = {777};
  GpuUsage g;
  g.index = v.job.allocation.gpu_indices[0];
  // 4 GiB limit + 512 MiB context allowance for one process: 5 GiB is over.
  g.processes.push_back({777, 5 * core::kGiB, 5});
  GpuUsage other;
  other.index = 1 - g.index;
  inventory_.usage = {g.index == 0 ? g : other, g.index == 0 ? other : g};
  Run(2);
  EXPECT_TRUE(HasEvent(job->job.id, "watchdog"));
  EXPECT_EQ(State(job->job.id), core::JobState::kCancelled);
  EXPECT_EQ(Get(job->job.id).job.reason.rfind("killed by the watchdog", 0), 0u);
}

TEST_F(PolicyTest, WatchdogReportOnlyFlagsTheJob) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kReport;
  rules.watchdog_allowance_bytes = 512 * core::kMiB;  // A context's size, not learnt here.
  Start(rules);
  auto job = Submit(Mem("4GiB"));
  JobView v = Get(job->job.id);
  regions_.pids[v.job.region_path] = {777};
  GpuUsage g;
  g.index = v.job.allocation.gpu_indices[0];
  g.processes.push_back({777, 4 * core::kGiB + 256 * core::kMiB, 5});  // Within the allowance.
  GpuUsage other;
  other.index = 1 - g.index;
  inventory_.usage = {g.index == 0 ? g : other, g.index == 0 ? other : g};
  Run(2);
  EXPECT_FALSE(HasEvent(job->job.id, "watchdog"));
  inventory_.usage[g.index].processes[0].used_memory = 6 * core::kGiB;
  Run(2);
  EXPECT_TRUE(HasEvent(job->job.id, "watchdog"));
  v = Get(job->job.id);
  EXPECT_EQ(v.job.state, core::JobState::kRunning);
  EXPECT_NE(std::find(v.flags.begin(), v.flags.end(), "over_limit"), v.flags.end());
}

TEST_F(PolicyTest, ElasticJobShrinksForAWaitingJobAndGrowsBackAfterTheCooldown) {
  PolicyConfig rules;
  rules.elastic_cooldown_ms = 30'000;
  Start(rules);
  auto elastic = SubmitGrowing(Gpus("1-2"));
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  uint64_t id = elastic->job.id;
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 2u) << "both GPUs were idle";
  std::string gpus_file = dir_ + "/jobs/" + std::to_string(id) + "/gpus";
  EXPECT_EQ(ReadAll(gpus_file), "GPU-0\nGPU-1\n");
  const LaunchSpec& spec = launcher_.launches.begin()->second;
  EXPECT_NE(std::find(spec.env.begin(), spec.env.end(), "GPUSLICE_GPUS_FILE=" + gpus_file),
            spec.env.end());
  int64_t pid = Get(id).job.pid;
  launcher_.die_on_signal = false;  // The job handles SIGUSR1 (it must).
  auto other = Submit(Gpus("1"), 2000);
  EXPECT_EQ(State(other->job.id), core::JobState::kQueued);
  service_->Tick();
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 1u);
  EXPECT_EQ(State(other->job.id), core::JobState::kRunning);
  EXPECT_EQ(ReadAll(gpus_file).size(), std::string("GPU-0\n").size());
  EXPECT_EQ(launcher_.signals.back(), std::make_pair(pid, SIGUSR1));
  EXPECT_TRUE(HasEvent(id, "elastic_shrink"));
  // The running processes' (old) region closed the given-back GPU to new
  // allocations before the new region replaced it.
  ASSERT_FALSE(regions_.updates.empty());
  EXPECT_EQ(regions_.updates.back().first, Get(id).job.region_path);
  EXPECT_EQ(regions_.updates.back().second.uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(regions_.updates.back().second.memory_bytes_per_device, 0u);
  const size_t updates_after_shrink = regions_.updates.size();
  // The other job ends: a GPU is idle and nothing waits, but the cool-down
  // (30 s since the shrink) holds the growth back.
  launcher_.Exit(Get(other->job.id).job.pid, 0);
  Run(10);
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 1u);
  Run(25);
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 2u);
  EXPECT_TRUE(HasEvent(id, "elastic_grow"));
  EXPECT_EQ(regions_.updates.size(), updates_after_shrink) << "growing gives nothing back";
  EXPECT_EQ(ReadAll(gpus_file), "GPU-0\nGPU-1\n");
  // A restart re-adopts it with both GPUs.
  service_.reset();
  Start(rules);
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 2u);
  auto third = Submit(Gpus("1"), 2000);
  service_->Tick();
  EXPECT_EQ(State(third->job.id), core::JobState::kRunning);
}

// A job that did not ask to grow (submit --grow) keeps what
// it started with, so one that does not catch SIGUSR1 is not ended by it.
TEST_F(PolicyTest, ElasticJobGrowsOnlyIfItAskedTo) {
  PolicyConfig rules;
  rules.elastic_cooldown_ms = 1000;
  Start(rules);
  auto first = Submit(Gpus("1"), 2000);
  auto plain = Submit(Gpus("1-2"));
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(Get(plain->job.id).job.allocation.gpu_indices.size(), 1u);
  launcher_.Exit(Get(first->job.id).job.pid, 0);
  Run(5);
  EXPECT_EQ(Get(plain->job.id).job.allocation.gpu_indices.size(), 1u) << "it did not ask to grow";
  EXPECT_FALSE(HasEvent(plain->job.id, "elastic_grow"));
  EXPECT_EQ(State(plain->job.id), core::JobState::kRunning);
}

// A user may ask a running elastic job for more or fewer GPUs.
TEST_F(PolicyTest, ResizeGpusChangesARunningElasticJobWithinItsRange) {
  Start();
  auto first = Submit(Gpus("1"), 2000);
  auto elastic = Submit(Gpus("1-2"));
  ASSERT_TRUE(elastic.ok()) << elastic.status().ToString();
  const uint64_t id = elastic->job.id;
  launcher_.die_on_signal = false;  // It handles SIGUSR1.
  ResizeSpec two;
  two.gpus = "2";
  auto busy = service_->live().Resize(TestCaller(1000), id, two);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_NE(busy.status().message().find("1 more are not idle"), std::string::npos)
      << busy.status().message();
  launcher_.Exit(Get(first->job.id).job.pid, 0);
  Run(1);
  auto grown = service_->live().Resize(TestCaller(1000), id, two);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 2u);
  EXPECT_TRUE(HasEvent(id, "elastic_grow"));
  ResizeSpec one;
  one.gpus = "1";
  ASSERT_TRUE(service_->live().Resize(TestCaller(1000), id, one).ok());
  EXPECT_EQ(Get(id).job.allocation.gpu_indices.size(), 1u);
  ResizeSpec three;
  three.gpus = "3";
  auto out = service_->live().Resize(TestCaller(1000), id, three);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("runs on 1 to 2 GPUs"), std::string::npos)
      << out.status().message();
  auto fixed = Submit(Gpus("1"));
  ASSERT_TRUE(fixed.ok());
  auto not_elastic = service_->live().Resize(TestCaller(1000), fixed->job.id, one);
  ASSERT_FALSE(not_elastic.ok());
  EXPECT_EQ(not_elastic.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(service_->live().Resize(TestCaller(2000), id, two).ok()) << "not the owner";
}

TEST_F(PolicyTest, ElasticJobStartsWithItsMinimumWhenThatIsAllThereIs) {
  Start();
  auto first = Submit(Gpus("1"));
  auto elastic = Submit(Gpus("1-4"));
  ASSERT_TRUE(elastic.ok());
  EXPECT_EQ(Get(elastic->job.id).job.allocation.gpu_indices.size(), 1u);
  auto never = Submit(Gpus("3-4"));
  EXPECT_FALSE(never.ok()) << "more than the machine has at its minimum";
  (void)first;
}

TEST_F(PolicyTest, ElasticJobsStayWithinTheOwnersGpuQuota) {
  PolicyConfig rules;
  rules.elastic_cooldown_ms = 1000;
  Start(rules);
  core::Quota q;
  q.gpus = 1;
  ASSERT_TRUE(service_->quotas().SetQuota(kAdmin, kU1000, q).ok());
  auto elastic = SubmitGrowing(Gpus("1-2"));
  ASSERT_TRUE(elastic.ok());
  EXPECT_EQ(Get(elastic->job.id).job.allocation.gpu_indices.size(), 1u) << "quota: 1 GPU";
  Run(5);
  EXPECT_EQ(Get(elastic->job.id).job.allocation.gpu_indices.size(), 1u) << "no growth past it";
  EXPECT_FALSE(HasEvent(elastic->job.id, "elastic_grow"));
}

}  // namespace
}  // namespace gpuslice::daemon
