#include "daemon/jobs/service.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/jobs/service_suspend_fixture.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-service-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Restart();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A fresh Service over the same state dir, launcher and regions: what a
  // daemon restart sees.
  void Restart() {
    service_.reset();
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    o.sim_lib_dir = "/lib/sim";
    o.coord_dir = "/state/coord";
    o.kill_grace_ms = 1000;
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }

  core::Result<JobView> Submit(std::optional<std::string> mem, std::optional<std::string> gpus,
                               const std::string& priority = "normal",
                               std::optional<std::string> runtime = std::nullopt,
                               uint32_t uid = 1000) {
    SubmitSpec s;
    s.fields.mem = mem;
    if (mem) s.fields.compute = "10%";
    s.fields.gpus = gpus;
    s.fields.priority = priority;
    s.fields.max_runtime = runtime;
    s.argv = {"train"};
    s.cwd = "/home/u";
    s.env = {"PATH=/usr/bin", "LD_PRELOAD=/mine.so", "CUDA_VISIBLE_DEVICES=7",
             "GPUSLICE_COORD_DIR=/tmp/mine", "GPUSLICE_LIMITS=/tmp/mine.limits"};
    Caller c;
    c.uid = uid;
    c.gid = uid;
    c.user = "u" + std::to_string(uid);
    return service_->intake().Submit(c, s);
  }
  core::JobState State(uint64_t id) { return service_->reads().Get(id)->job.state; }
  int64_t Pid(uint64_t id) { return service_->reads().Get(id)->job.pid; }
  // The caller of shell jobs: this process's parent, as if this process were
  // the client's held shell (the attached process is the caller's child).
  static Caller ShellCaller() {
    Caller c;
    c.uid = getuid();
    c.process = std::make_shared<FakePeerProcess>(PeerIdentity{getppid(), getuid(), 1});
    c.user = "me";
    c.local = true;
    return c;
  }
  // A 4 GiB shell job of ShellCaller(), running and waiting for its client.
  core::Result<JobView> SubmitShell() {
    SubmitSpec s;
    s.fields.mem = "4GiB";
    s.mode = core::JobMode::kShell;
    s.cwd = "/";
    return service_->intake().Submit(ShellCaller(), s);
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
};

TEST_F(ServiceTest, JobStartsInItsSliceWithTheSliceEnvironment) {
  auto v = Submit("8GiB", std::nullopt);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.state, core::JobState::kRunning);
  ASSERT_EQ(launcher_.launches.size(), 1u);
  const LaunchSpec& spec = launcher_.launches.begin()->second;
  EXPECT_EQ(spec.uid, 1000u);
  EXPECT_EQ(spec.cwd, "/home/u");
  auto has = [&](const std::string& e) {
    return std::find(spec.env.begin(), spec.env.end(), e) != spec.env.end();
  };
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=" + v->job.allocation.gpu_uuids[0]));
  EXPECT_TRUE(has("LD_PRELOAD=/lib/libgpuslice.so:/mine.so"));
  EXPECT_TRUE(has("LD_LIBRARY_PATH=/lib/sim"));
  EXPECT_TRUE(has("GPUSLICE_SLICE=/fake/slice-1"));
  // The daemon's limits page, never one the caller names.
  EXPECT_TRUE(has("GPUSLICE_LIMITS=/fake/limits-1"));
  EXPECT_FALSE(has("GPUSLICE_LIMITS=/tmp/mine.limits"));
  EXPECT_FALSE(has("CUDA_VISIBLE_DEVICES=7"));
  EXPECT_TRUE(has("GPUSLICE_COORD_DIR=/state/coord")) << "slices of all users coordinate";
  EXPECT_FALSE(has("GPUSLICE_COORD_DIR=/tmp/mine"));
  ASSERT_EQ(regions_.regions.size(), 1u);
  EXPECT_EQ(regions_.regions.begin()->second.memory_bytes_per_device, 8 * core::kGiB);
}

TEST_F(ServiceTest, TheSliceGetsTheJobsShareAndPriorityWholeGpusToo) {
  auto fraction = Submit("8GiB", std::nullopt, "high");  // --compute 10%.
  auto whole = Submit(std::nullopt, "1", "low");
  ASSERT_TRUE(fraction.ok()) << fraction.status().ToString();
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(regions_.regions.size(), 2u);
  const SliceLimits& f = regions_.regions.at("/fake/slice-" + std::to_string(fraction->job.id));
  EXPECT_EQ(f.compute_milli, 100u);
  EXPECT_FALSE(f.work_conserving);
  EXPECT_EQ(f.priority, core::Priority::kHigh);
  const SliceLimits& w = regions_.regions.at("/fake/slice-" + std::to_string(whole->job.id));
  EXPECT_EQ(w.compute_milli, 0u) << "a whole GPU is not capped";
  EXPECT_EQ(w.priority, core::Priority::kLow);
}

// A fraction without a compute share takes turns too, with
// the smallest share, work-conserving (it yields to priority and to shares;
// alone it uses the whole GPU). Its allocation still has no share.
TEST_F(ServiceTest, AFractionWithoutAShareTakesTurnsLastAndWorkConserving) {
  SubmitSpec s;
  s.fields.mem = "8GiB";
  s.argv = {"train"};
  s.cwd = "/";
  Caller c;
  c.uid = c.gid = 1000;
  c.user = "u1000";
  auto v = service_->intake().Submit(c, s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const SliceLimits& limits = regions_.regions.at(v->job.region_path);
  EXPECT_EQ(limits.compute_milli, JobSetup::kShareOfNoShareMilli);
  EXPECT_TRUE(limits.work_conserving);
  EXPECT_EQ(v->job.allocation.compute_milli, 0u) << "no share is promised or charged";
}

TEST_F(ServiceTest, AWorkConservingRequestGivesAWorkConservingSliceAndSurvivesARestart) {
  SubmitSpec s;
  s.fields.mem = "8GiB";
  s.fields.compute = "30%";
  s.fields.compute_mode = "work-conserving";
  s.argv = {"serve"};
  s.cwd = "/";
  Caller c;
  c.uid = c.gid = 1000;
  c.user = "u1000";
  auto v = service_->intake().Submit(c, s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const SliceLimits& limits = regions_.regions.at(v->job.region_path);
  EXPECT_TRUE(limits.work_conserving);
  EXPECT_EQ(limits.compute_milli, 300u);
  Restart();
  auto back = service_->reads().Get(v->job.id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->job.request.compute_mode, core::ComputeMode::kWorkConserving);
}

TEST_F(ServiceTest, RequestThatCanNeverFitIsRefusedAtOnce) {
  auto big = Submit("81GiB", std::nullopt);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("never fit"), std::string::npos) << big.status().message();
  auto three = Submit(std::nullopt, "3");
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(service_->reads().List(true).size(), 0u);
}

TEST_F(ServiceTest, WhatDoesNotFitWaitsAndStartsWhenMemoryFrees) {
  ASSERT_TRUE(Submit(std::nullopt, "2").ok());  // Takes both GPUs.
  auto waiting = Submit("8GiB", std::nullopt);
  ASSERT_TRUE(waiting.ok());
  uint64_t id = waiting->job.id;
  EXPECT_EQ(State(id), core::JobState::kQueued);
  EXPECT_EQ(service_->reads().Get(id)->queue_position, 1);
  EXPECT_NE(service_->reads().Get(id)->waiting_for.find("first in line"), std::string::npos);
  launcher_.Exit(Pid(1), 0);
  service_->Tick();
  EXPECT_EQ(service_->reads().Get(1)->job.state, core::JobState::kExited);
  EXPECT_EQ(State(id), core::JobState::kRunning);
  EXPECT_TRUE(regions_.regions.count("/fake/slice-1") == 0) << "region removed at the end";
}

TEST_F(ServiceTest, HigherPriorityGoesFirstWhenCapacityFrees) {
  ASSERT_TRUE(Submit(std::nullopt, "2").ok());
  auto low = Submit(std::nullopt, "2", "low");
  auto high = Submit(std::nullopt, "2", "high");
  EXPECT_EQ(service_->reads().Get(high->job.id)->queue_position, 1);
  EXPECT_EQ(service_->reads().Get(low->job.id)->queue_position, 2);
  launcher_.Exit(Pid(1), 0);
  service_->Tick();
  EXPECT_EQ(State(high->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(low->job.id), core::JobState::kQueued);
}

TEST_F(ServiceTest, OnlyTheOwnerOrAnAdminMayCancel) {
  auto v = Submit("8GiB", std::nullopt);
  Caller other;
  other.uid = 2000;
  other.user = "mallory";
  core::Status s = service_->Cancel(other, v->job.id);
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("belongs to u1000"), std::string::npos);
  Caller admin;
  admin.uid = 0;
  admin.admin = true;
  ASSERT_TRUE(service_->Cancel(admin, v->job.id).ok());
  service_->Tick();
  EXPECT_EQ(State(v->job.id), core::JobState::kCancelled);
  EXPECT_EQ(launcher_.signals.front().second, SIGTERM);
}

TEST_F(ServiceTest, StubbornJobIsKilledAfterTheGracePeriod) {
  launcher_.die_on_signal = false;
  auto v = Submit("8GiB", std::nullopt);
  Caller owner;
  owner.uid = 1000;
  ASSERT_TRUE(service_->Cancel(owner, v->job.id).ok());
  service_->Tick();
  EXPECT_EQ(State(v->job.id), core::JobState::kRunning);
  clock_.Advance(1500);
  service_->Tick();
  EXPECT_EQ(launcher_.signals.back().second, SIGKILL);
  launcher_.Exit(v->job.pid, 137);
  service_->Tick();
  EXPECT_EQ(State(v->job.id), core::JobState::kCancelled);
}

TEST_F(ServiceTest, MaximumRunTimeEndsTheJob) {
  auto v = Submit("8GiB", std::nullopt, "normal", "2s");
  clock_.Advance(2500);
  service_->Tick();
  service_->Tick();
  EXPECT_EQ(State(v->job.id), core::JobState::kTimedOut);
  EXPECT_EQ(service_->reads().Get(v->job.id)->job.exit_code, 128 + SIGTERM);
}

TEST_F(ServiceTest, CommandThatCannotStartFailsWithItsReason) {
  launcher_.fail_with = core::NotFoundError("command 'trian' not found in PATH /usr/bin");
  auto v = Submit("8GiB", std::nullopt);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->job.state, core::JobState::kFailed);
  EXPECT_EQ(v->job.exit_code, 127);
  EXPECT_NE(v->job.reason.find("not found"), std::string::npos);
  // The capacity went back: a whole-machine job fits.
  launcher_.fail_with = core::Status::Ok();
  EXPECT_EQ(Submit(std::nullopt, "2")->job.state, core::JobState::kRunning);
}

TEST_F(ServiceTest, RestartReadoptsRunningJobsWithoutLosingOrDoublingAllocations) {
  auto a = Submit(std::nullopt, "1");
  auto b = Submit("60GiB", std::nullopt);
  auto c = Submit("60GiB", std::nullopt);  // Waits: 20 GiB left on GPU 1.
  ASSERT_EQ(State(c->job.id), core::JobState::kQueued);
  Restart();
  EXPECT_EQ(State(a->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(b->job.id), core::JobState::kRunning);
  EXPECT_EQ(State(c->job.id), core::JobState::kQueued);
  EXPECT_EQ(service_->table().running_count(), 2u);
  // Nothing doubled: a new whole GPU does not fit, a 20 GiB slice does.
  EXPECT_EQ(Submit(std::nullopt, "1")->job.state, core::JobState::kQueued);
  // A job that ended while the daemon was down is finished with its code.
  launcher_.Exit(b->job.pid, 4);
  Restart();
  EXPECT_EQ(service_->reads().Get(b->job.id)->job.state, core::JobState::kExited);
  EXPECT_EQ(service_->reads().Get(b->job.id)->job.exit_code, 4);
  EXPECT_EQ(State(c->job.id), core::JobState::kRunning);
}

TEST_F(ServiceTest, UnreadableLedgerMakesTheServiceDegradedButReadable) {
  service_.reset();
  fs::remove(dir_ + "/ledger.db");
  fs::remove(dir_ + "/ledger.db-wal");
  fs::remove(dir_ + "/ledger.db-shm");
  std::ofstream(dir_ + "/ledger.db") << std::string(4096, 'x');
  ServiceOptions o;
  o.state_dir = dir_;
  service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
  ASSERT_TRUE(service_->Start().ok());
  EXPECT_TRUE(service_->degraded_mode().degraded());
  EXPECT_NE(service_->degraded_mode().reason().find("ledger"), std::string::npos);
  auto v = Submit("8GiB", std::nullopt);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), core::StatusCode::kUnavailable);
  EXPECT_TRUE(service_->reads().List(true).empty());  // Reads still work.
  EXPECT_EQ(service_->inventory().gpus.size(), 2u);
}

TEST_F(ServiceTest, ShellJobIsAttachedAndEndsWhenTheClientReportsIt) {
  const Caller c = ShellCaller();
  auto v = SubmitShell();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->job.state, core::JobState::kRunning);
  EXPECT_TRUE(launcher_.launches.empty());  // The client starts the shell.
  ASSERT_TRUE(service_->shells().Attach(c, v->job.id, getpid()).ok());
  ASSERT_TRUE(service_->shells().ReportExit(c, v->job.id, 0).ok());
  EXPECT_EQ(State(v->job.id), core::JobState::kExited);
}

// The parent check reads the caller pinned at accept, not whoever has its
// pid when the request comes.
TEST_F(ServiceTest, AttachIsRefusedOnceTheProcessThatConnectedHasEnded) {
  auto v = SubmitShell();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  Caller c = ShellCaller();
  auto ended = std::make_shared<FakePeerProcess>(PeerIdentity{getppid(), getuid(), 1});
  ended->ended = true;
  c.process = ended;
  core::Status s = service_->shells().Attach(c, v->job.id, getpid());
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("has ended"), std::string::npos) << s.message();
  c.process = nullptr;  // A peer whose pid the daemon cannot see.
  EXPECT_EQ(service_->shells().Attach(c, v->job.id, getpid()).code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(Pid(v->job.id), 0) << "nothing attached";
  EXPECT_TRUE(service_->shells().Attach(ShellCaller(), v->job.id, getpid()).ok());
}

// Regression (CI, stop 32): the shell ended, the daemon saw it gone before
// the client's report arrived, and the job kept exit code -1 ("the shell
// ended") while the client said 4.
TEST_F(ServiceTest, ShellJobKeepsTheExitStatusReportedJustAfterItsProcessEnded) {
  for (bool cgroups : {false, true}) {
    SCOPED_TRACE(cgroups ? "in a cgroup" : "the process alone");
    launcher_.cgroups = cgroups;
    const Caller c = ShellCaller();
    auto v = SubmitShell();
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ASSERT_TRUE(service_->shells().Attach(c, v->job.id, getpid()).ok());
    // The fake launcher says whether the attached process (group) lives.
    launcher_.alive.insert(getpid());
    service_->Tick();
    EXPECT_EQ(State(v->job.id), core::JobState::kRunning);
    launcher_.alive.erase(getpid());
    service_->Tick();  // Gone, not reported yet: the daemon waits...
    clock_.Advance(300);
    service_->Tick();
    EXPECT_EQ(State(v->job.id), core::JobState::kRunning);
    ASSERT_TRUE(service_->shells().ReportExit(c, v->job.id, 4).ok());  // ...for this.
    EXPECT_EQ(State(v->job.id), core::JobState::kExited);
    EXPECT_EQ(service_->reads().Get(v->job.id)->job.exit_code, 4);
  }
}

TEST_F(ServiceTest, ShellJobWhoseClientNeverReportsEndsWithoutAStatusAfterTheGrace) {
  const Caller c = ShellCaller();
  auto v = SubmitShell();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(service_->shells().Attach(c, v->job.id, getpid()).ok());
  service_->Tick();  // Not in the fake's live set: gone at once.
  EXPECT_EQ(State(v->job.id), core::JobState::kRunning);
  clock_.Advance(2'500);
  service_->Tick();
  ASSERT_EQ(State(v->job.id), core::JobState::kExited);
  EXPECT_EQ(service_->reads().Get(v->job.id)->job.exit_code, -1);
  EXPECT_EQ(service_->reads().Get(v->job.id)->job.reason, "the shell ended");
}

TEST_F(ServiceTest, SubmissionsStartsAndEndsAreEvents) {
  auto v = Submit("8GiB", std::nullopt);
  ASSERT_TRUE(v.ok());
  clock_.Advance(500);
  launcher_.Exit(v->job.pid, 3);
  service_->Tick();
  ASSERT_EQ(State(v->job.id), core::JobState::kExited);
  EventQuery q;
  q.job_id = v->job.id;
  auto events = service_->events().Query(q);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].kind, "submitted");
  EXPECT_EQ((*events)[1].kind, "started");
  EXPECT_EQ((*events)[2].kind, "exited");
  EXPECT_EQ((*events)[2].message, "exit 3");
  EXPECT_EQ((*events)[2].user, "u1000");
  EXPECT_EQ(service_->events().Counts().at("exited"), 1u);
  // Counts survive a restart (read back from the ledger).
  Restart();
  EXPECT_EQ(service_->events().Counts().at("submitted"), 1u);
}

TEST_F(ServiceTest, QueueWaitsAreObservedInTheHistogram) {
  auto a = Submit(std::nullopt, "2");
  auto b = Submit(std::nullopt, "1");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(State(b->job.id), core::JobState::kQueued);
  clock_.Advance(42'000);
  launcher_.Exit(a->job.pid, 0);
  service_->Tick();
  ASSERT_EQ(State(b->job.id), core::JobState::kRunning);
  const WaitHistogram& h = service_->usage().queue_waits();
  EXPECT_EQ(h.count, 2u);
  EXPECT_DOUBLE_EQ(h.sum_s, 42.0);
  ASSERT_EQ(h.bounds_s.size(), h.cumulative.size());
  for (size_t i = 0; i < h.bounds_s.size(); ++i) {
    uint64_t expect = (h.bounds_s[i] >= 42.0 ? 2 : 1);
    EXPECT_EQ(h.cumulative[i], expect) << "bound " << h.bounds_s[i];
  }
}

TEST_F(ServiceTest, SamplerAttributesGpuUseAndCountsIdleTime) {
  auto busy = Submit(std::nullopt, "1");
  auto idle = Submit(std::nullopt, "1");
  ASSERT_TRUE(busy.ok() && idle.ok());
  const core::Job bj = busy->job;
  const core::Job ij = idle->job;
  ASSERT_NE(bj.allocation.gpu_indices[0], ij.allocation.gpu_indices[0]);
  regions_.pids[bj.region_path] = {4242};
  regions_.pids[ij.region_path] = {4343};
  regions_.used[bj.region_path] = 3 * core::kGiB;
  auto set_use = [&](uint32_t busy_sm, uint32_t idle_sm) {
    inventory_.usage.clear();
    for (uint32_t g = 0; g < 2; ++g) {
      GpuUsage u;
      u.index = g;
      u.memory_total = 80 * core::kGiB;
      if (g == bj.allocation.gpu_indices[0]) u.processes.push_back({4242, 5 * core::kGiB, busy_sm});
      if (g == ij.allocation.gpu_indices[0]) u.processes.push_back({4343, 1 * core::kGiB, idle_sm});
      // A process of nobody's job is ignored.
      u.processes.push_back({999999, 1 * core::kGiB, 50});
      inventory_.usage.push_back(u);
    }
  };
  set_use(90, 2);
  service_->Sample();
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(1000);
    service_->Sample();
  }
  auto b = service_->usage().Of(bj.id);
  auto d = service_->usage().Of(ij.id);
  ASSERT_TRUE(b && d);
  EXPECT_DOUBLE_EQ(b->gpu_util_pct, 90);
  EXPECT_EQ(b->memory_used_bytes, 3 * core::kGiB);
  EXPECT_EQ(b->memory_limit_bytes, 80 * core::kGiB) << "a whole GPU's slice is its memory";
  EXPECT_EQ(b->nvml_memory_bytes, 5 * core::kGiB);
  EXPECT_EQ(b->low_use_ms, 0);
  EXPECT_DOUBLE_EQ(d->gpu_util_pct, 2);
  EXPECT_EQ(d->low_use_ms, 5000);
  EXPECT_EQ(d->idle_ms_total, 5000);
  EXPECT_EQ(service_->reads().Get(ij.id)->usage->low_use_ms, 5000) << "the job view carries it";
  // Use comes back: the low-use streak restarts, the total stays.
  set_use(90, 60);
  clock_.Advance(1000);
  service_->Sample();
  EXPECT_EQ(service_->usage().Of(ij.id)->low_use_ms, 0);
  EXPECT_EQ(service_->usage().Of(ij.id)->idle_ms_total, 5000);
  // A long stall of the daemon counts as one interval, not as idle time.
  set_use(90, 1);
  clock_.Advance(3'600'000);
  service_->Sample();
  EXPECT_EQ(service_->usage().Of(ij.id)->idle_ms_total, 6000);
  // The idle time is in the ledger once the job ends.
  launcher_.Exit(ij.pid, 0);
  service_->Tick();
  EXPECT_FALSE(service_->usage().Of(ij.id).has_value());
  Restart();
  auto ended = service_->reads().Get(ij.id);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->job.idle_ms, 6000);
}

// Job state changes (Service::ChangeState): each one a job goes through is
// one transition in the ledger and one event, in the same order.

// "from>to" for each transition of job `id` in the ledger, oldest first.
std::vector<std::string> Transitions(Service& service, uint64_t id) {
  std::vector<std::string> out;
  auto history = service.reads().History(id);
  EXPECT_TRUE(history.ok()) << history.status().ToString();
  if (!history.ok()) return out;
  for (const Transition& t : *history) out.push_back(t.from + ">" + t.to);
  return out;
}

// The event that tells each transition (submitted, started, ...).
std::string EventOf(const std::string& transition) {
  static const std::vector<std::pair<std::string, std::string>> kTable = {
      {">queued", "submitted"},           {"queued>running", "started"},
      {"running>suspended", "suspended"}, {"suspended>running", "resumed"},
      {"running>queued", "requeued"},
  };
  for (const auto& [t, kind] : kTable) {
    if (t == transition) return kind;
  }
  // An end: the event kind is the end state.
  return transition.substr(transition.find('>') + 1);
}

// The events of job `id` that tell a change of its state, oldest first.
std::vector<std::string> StateEvents(Service& service, uint64_t id) {
  static const std::vector<std::string> kKinds = {"submitted", "started",   "suspended",
                                                  "resumed",   "requeued",  "exited",
                                                  "failed",    "cancelled", "timed_out"};
  EventQuery q;
  q.job_id = id;
  auto events = service.events().Query(q);
  EXPECT_TRUE(events.ok()) << events.status().ToString();
  std::vector<std::string> out;
  if (!events.ok()) return out;
  for (const Event& e : *events) {
    if (std::find(kKinds.begin(), kKinds.end(), e.kind) != kKinds.end()) out.push_back(e.kind);
  }
  return out;
}

std::vector<std::string> EventsOf(const std::vector<std::string>& transitions) {
  std::vector<std::string> out;
  for (const std::string& t : transitions) out.push_back(EventOf(t));
  return out;
}

using JobStatesTest = SuspendTest;

TEST_F(JobStatesTest, EveryTransitionOfARunIsOneLedgerRowAndOneEventInOrder) {
  uint64_t a = StartJob();
  ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), a).ok());
  Settle(a);
  ASSERT_EQ(State(a), JobState::kSuspended);
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  ASSERT_EQ(State(a), JobState::kRunning);
  EndProcesses(a);
  ASSERT_EQ(State(a), JobState::kExited);

  const std::vector<std::string> transitions = Transitions(*service_, a);
  EXPECT_EQ(transitions, (std::vector<std::string>{">queued", "queued>running", "running>suspended",
                                                   "suspended>running", "running>exited"}));
  EXPECT_EQ(StateEvents(*service_, a), EventsOf(transitions));
  // And so after a restart, read back from the ledger.
  Restart();
  EXPECT_EQ(Transitions(*service_, a), transitions);
  EXPECT_EQ(StateEvents(*service_, a), EventsOf(transitions));
}

TEST_F(JobStatesTest, APreemptedRestartableJobsRequeueIsOneLedgerRowAndOneEvent) {
  options_.checkpointer = nullptr;  // Ended and requeued, not suspended.
  options_.rules.preemption = *core::ParsePreemptionPolicy("lower");
  options_.rules.preemption_grace_ms = 1000;
  Restart();
  SubmitSpec low;
  low.fields.gpus = "1";
  low.fields.priority = "low";
  low.argv = {"train"};
  low.cwd = "/home/u";
  low.restartable = true;
  auto victim = service_->intake().Submit(TestCaller(kUser), low);
  ASSERT_TRUE(victim.ok()) << victim.status().ToString();
  ASSERT_EQ(victim->job.state, JobState::kRunning);
  SubmitSpec high = low;
  high.fields.priority = "high";
  high.restartable = false;
  auto head = service_->intake().Submit(TestCaller(kUser + 1), high);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  service_->Tick();  // The fake launcher's processes end at the SIGTERM.
  ASSERT_EQ(State(victim->job.id), JobState::kQueued);

  const std::vector<std::string> transitions = Transitions(*service_, victim->job.id);
  EXPECT_EQ(transitions, (std::vector<std::string>{">queued", "queued>running", "running>queued"}));
  EXPECT_EQ(StateEvents(*service_, victim->job.id), EventsOf(transitions));
}

TEST_F(JobStatesTest, AJobWhoseSliceCannotBeMadeFailsFromTheQueueWithoutAStartItNeverMade) {
  regions_.room = core::InternalError("slice store broken");
  auto v = Submit("8GiB");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(State(v->job.id), JobState::kFailed);
  EXPECT_NE(Get(v->job.id).job.reason.find("cannot create the slice"), std::string::npos)
      << Get(v->job.id).job.reason;

  const std::vector<std::string> transitions = Transitions(*service_, v->job.id);
  EXPECT_EQ(transitions, (std::vector<std::string>{">queued", "queued>failed"}));
  EXPECT_EQ(StateEvents(*service_, v->job.id), EventsOf(transitions));
}

}  // namespace
}  // namespace gpuslice::daemon
