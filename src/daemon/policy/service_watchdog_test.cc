// The enforcement watchdog and foreign GPU use,
// over the fixture of service_watchdog_fixture.h; the audit of the arbiter's
// charge is in service_audit_test.cc.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>

#include "daemon/policy/service_watchdog_fixture.h"

namespace gpuslice::daemon {
namespace {

// A job that rewrites its region's limit to unlimited, with a process that
// skips the shim and holds 20 GiB in a 4 GiB slice, is caught: the limit is
// the daemon's, never read back from the region, and the default action is
// kill.
TEST_F(WatchdogTest, KillsByDefaultWhenNvmlIsOverTheLedgerLimitThoughTheRegionSaysUnlimited) {
  Start();
  JobView v = StartJob();
  regions_.regions[v.job.region_path].memory_bytes_per_device = ~0ull;  // The job's rewrite.
  uint32_t gpu = v.job.allocation.gpu_indices[0];
  // pid 777 unset LD_PRELOAD: not in the slice, but in the job's group.
  Process(gpu, 777, 20 * core::kGiB, 90, 1000, v.job.pid);
  Run(1);  // One sample.
  JobView after = Get(v.job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  EXPECT_EQ(after.job.reason.rfind("killed by the watchdog: its processes hold 20 GiB on GPU", 0),
            0u)
      << after.job.reason;
  ASSERT_EQ(EventsOf(v.job.id, "watchdog").size(), 1u);
  EXPECT_NE(EventsOf(v.job.id, "watchdog")[0].message.find("over its limit of 4 GiB"),
            std::string::npos);
  EXPECT_NE(Log(v).find("killed by the watchdog"), std::string::npos) << Log(v);
  EXPECT_NE(std::find(launcher_.signals.begin(), launcher_.signals.end(),
                      std::make_pair(v.job.pid, SIGKILL)),
            launcher_.signals.end());
}

// An external job (a pod's container) is owned by the device
// plugin (root) and its slice is written by the container: the watchdog must
// never signal the pids that slice names (they could be any root process);
// it holds the slice's launches instead and the job keeps running.
TEST_F(WatchdogTest, AnExternalJobOverItsLimitIsPausedAndNothingIsSignalled) {
  Start();
  SubmitSpec s;
  s.mode = core::JobMode::kExternal;
  s.fields.mem = "4GiB";
  auto v = service_->intake().Submit(TestCaller(0, /*admin=*/true), s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  regions_.pids[v->job.region_path] = {1, 888};  // What the container wrote.
  Process(v->job.allocation.gpu_indices[0], 888, 20 * core::kGiB, 90, 0);
  Run(2);
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, core::JobState::kRunning);
  EXPECT_TRUE(HasFlag(v->job.id, "paused"));
  EXPECT_TRUE(regions_.regions[v->job.region_path].launches_paused);
  EXPECT_TRUE(processes_.signals.empty());
  EXPECT_TRUE(launcher_.signals.empty());
  ASSERT_FALSE(EventsOf(v->job.id, "watchdog").empty());
  EXPECT_NE(EventsOf(v->job.id, "watchdog")[0].message.find("launches paused"), std::string::npos);
}

// A Slurm step's slice (bound to its slurmstepd) over its limit is
// ended as a launched job is: the owner's processes below the holder are
// killed, never the holder; the slice goes once they are gone.
TEST_F(WatchdogTest, ABoundExternalJobOverItsLimitHasItsStepsProcessesKilled) {
  Start();
  auto v = SubmitBoundStep();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  regions_.pids[v->job.region_path] = {888};
  Process(v->job.allocation.gpu_indices[0], 888, 20 * core::kGiB, 90, 1000);
  processes_.parents[888] = 4242;
  Run(1);
  EXPECT_NE(std::find(processes_.signals.begin(), processes_.signals.end(),
                      std::make_pair(int64_t{888}, SIGKILL)),
            processes_.signals.end());
  for (const auto& [pid, sig] : processes_.signals) EXPECT_NE(pid, 4242) << sig;
  EXPECT_FALSE(HasFlag(v->job.id, "paused"));
  // Gone: the slice ends, cancelled by the watchdog.
  processes_.parents.erase(888);
  processes_.owners.erase(888);
  inventory_.usage[v->job.allocation.gpu_indices[0]].processes.clear();
  Run(1);
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  EXPECT_NE(after.job.reason.find("watchdog"), std::string::npos) << after.job.reason;
}

// idle_action = end ends a Slurm step's slice through its
// processes (SIGTERM, then SIGKILL after the grace), not by pausing it as an
// unbound external job is; the slice goes once they are gone.
TEST_F(WatchdogTest, AnIdleBoundExternalJobIsEndedThroughItsStepsProcesses) {
  PolicyConfig rules;
  rules.idle_after_ms = 60'000;
  rules.idle_action = IdleAction::kEnd;
  rules.idle_action_always = true;
  Start(rules);
  processes_.parents[777] = 4242;  // The step's task, idle on its GPU.
  processes_.owners[777] = {1000, 1000, "u1000", {}};
  auto v = SubmitBoundStep();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  Run(63);
  EXPECT_NE(std::find(processes_.signals.begin(), processes_.signals.end(),
                      std::make_pair(int64_t{777}, SIGTERM)),
            processes_.signals.end());
  for (const auto& [pid, sig] : processes_.signals) EXPECT_NE(pid, 4242) << sig;
  EXPECT_EQ(Get(v->job.id).job.state, core::JobState::kRunning);  // Until 777 is gone.
  EXPECT_FALSE(HasFlag(v->job.id, "paused"));
  processes_.parents.erase(777);
  processes_.owners.erase(777);
  Run(1);
  JobView after = Get(v->job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  EXPECT_NE(after.job.reason.find("idle"), std::string::npos) << after.job.reason;
}

TEST_F(WatchdogTest, AProcessOfTheJobOutsideItsGroupIsKilledByPid) {
  Start();
  JobView v = StartJob();
  regions_.pids[v.job.region_path] = {888};  // setsid, shim still loaded.
  Process(v.job.allocation.gpu_indices[0], 888, 10 * core::kGiB, 0, 1000);
  Run(1);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kCancelled);
  EXPECT_NE(std::find(processes_.signals.begin(), processes_.signals.end(),
                      std::make_pair(int64_t{888}, SIGKILL)),
            processes_.signals.end());
}

TEST_F(WatchdogTest, ASliceCannotClaimAnotherUsersProcess) {
  PolicyConfig rules;
  rules.foreign = ForeignAction::kReport;
  Start(rules);
  JobView v = StartJob();
  // The job writes root's pid into its slice: the claim does not count, so
  // the job is not blamed and root's process stays foreign (and charged).
  regions_.pids[v.job.region_path] = {1};
  Process(v.job.allocation.gpu_indices[0], 1, 10 * core::kGiB, 0, 0);
  Run(2);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  ASSERT_EQ(service_->foreign().processes().size(), 1u);
  EXPECT_EQ(service_->foreign().processes()[0].pid, 1u);
}

TEST_F(WatchdogTest, AKilledJobCannotMakeTheWatchdogSignalAnotherUsersProcess) {
  Start();
  JobView v = StartJob();
  uint32_t gpu = v.job.allocation.gpu_indices[0];
  regions_.pids[v.job.region_path] = {1};  // Names root's process in its slice.
  Process(gpu, 1, 1 * core::kGiB, 0, 0);
  Process(gpu, 777, 20 * core::kGiB, 0, 1000, v.job.pid);
  Run(1);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kCancelled);
  for (const auto& [pid, sig] : processes_.signals) EXPECT_NE(pid, 1) << "signal " << sig;
}

// The allowance is per registered process, not 512 MiB per process NVML
// lists: a process the shim registered (the job's slice names it) may hold
// one context over the limit, of the size NVML shows for a bare context.
TEST_F(WatchdogTest, AProcessTheShimRegisteredMayHoldOneContextOverTheLimit) {
  Start();
  JobView v = StartJob();
  const uint32_t gpu = v.job.allocation.gpu_indices[0];
  Process(gpu, 900, 300 * core::kMiB, 0, 2000);  // Another user's bare context: its size.
  regions_.pids[v.job.region_path] = {777};
  Process(gpu, 777, 4 * core::kGiB + 300 * core::kMiB, 50, 1000, v.job.pid);
  Run(3);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog").empty());
  inventory_.usage[gpu].processes.back().used_memory = 4 * core::kGiB + 400 * core::kMiB;
  Run(1);
  JobView after = Get(v.job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  EXPECT_NE(after.job.reason.find("over its limit of 4 GiB + an allowance of 300 MiB (1 process, 1 "
                                  "registered by the shim, a context of 300 MiB each"),
            std::string::npos)
      << after.job.reason;
}

// A process without the shim is never charged anything by it, so all it
// holds over the limit is an escape.
TEST_F(WatchdogTest, AProcessWithoutTheShimGetsNoAllowance) {
  Start();
  JobView v = StartJob();
  Process(v.job.allocation.gpu_indices[0], 777, 4 * core::kGiB + 100 * core::kMiB, 50, 1000,
          v.job.pid);
  Run(1);
  JobView after = Get(v.job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  EXPECT_NE(after.job.reason.find("an allowance of 0 B (1 process, 0 registered by the shim"),
            std::string::npos)
      << after.job.reason;
}

// A 1 GiB slice running 50 processes without the shim, each with a context
// and 200 MiB, must not hold 24.4 GiB with no event. The job writes its
// slice's process slots, so naming all 50 there buys at most the ceiling.
TEST_F(WatchdogTest, SlotsAJobWritesBuyNoMoreThanTheAllowancesCeiling) {
  for (bool named : {false, true}) {
    Start();
    JobView v = StartJob("1GiB", "25%");
    const uint32_t gpu = v.job.allocation.gpu_indices[0];
    Process(gpu, 900, 300 * core::kMiB, 0, 2000);
    std::vector<int32_t> slots;
    for (uint32_t i = 0; i < 50; ++i) {
      Process(gpu, 10000 + i, 500 * core::kMiB, 0, 1000, v.job.pid);
      slots.push_back(int32_t(10000 + i));
    }
    if (named) regions_.pids[v.job.region_path] = slots;
    Run(1);
    JobView after = Get(v.job.id);
    EXPECT_EQ(after.job.state, core::JobState::kCancelled) << named;
    EXPECT_NE(after.job.reason.find("its processes hold 24.41 GiB on GPU"), std::string::npos)
        << after.job.reason;
    EXPECT_NE(after.job.reason.find(named ? "an allowance of 2 GiB (50 processes, 50 registered"
                                          : "an allowance of 0 B (50 processes, 0 registered"),
              std::string::npos)
        << after.job.reason;
  }
}

// The ceiling is the admin's (watchdog_allowance_max), and so is
// the size of a context when the learnt one does not suit a driver
// (watchdog_allowance).
TEST_F(WatchdogTest, TheAllowanceFollowsItsSettings) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kReport;
  rules.watchdog_allowance_bytes = 1 * core::kGiB;
  rules.watchdog_allowance_max_bytes = 3 * core::kGiB;
  Start(rules);
  JobView v = StartJob();
  const uint32_t gpu = v.job.allocation.gpu_indices[0];
  regions_.pids[v.job.region_path] = {777, 778, 779, 780};
  for (uint32_t pid : {777, 778, 779, 780})
    Process(gpu, pid, 1792 * core::kMiB, 0, 1000, v.job.pid);
  Run(2);  // 7 GiB: the limit + 3 GiB, the ceiling.
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog").empty());
  inventory_.usage[gpu].processes.back().used_memory += 2 * core::kMiB;
  Run(1);
  ASSERT_EQ(EventsOf(v.job.id, "watchdog").size(), 1u);
  EXPECT_NE(EventsOf(v.job.id, "watchdog")[0].message.find(
                "an allowance of 3 GiB (4 processes, 4 registered by the shim, a context of 1 GiB "
                "each, at most 3 GiB)"),
            std::string::npos)
      << EventsOf(v.job.id, "watchdog")[0].message;
}

// Memory NVML shows a job's processes hold over its limit is
// taken in placement at the sample that sees it, before the watchdog acts
// (here it only reports), so no job is placed where it is not there.
TEST_F(WatchdogTest, MemoryAJobHoldsOverItsLimitIsTakenInPlacementAtOnce) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kReport;
  Start(rules, SimulatedGpus(1, "A100", 40 * core::kGiB));
  JobView a = StartJob("4GiB", "25%");
  Process(0, 777, 30 * core::kGiB, 0, 1000, a.job.pid);  // Without the shim.
  Run(1);
  SubmitSpec s;
  s.fields.mem = "20GiB";
  s.fields.compute = "30%";
  s.argv = {"train"};
  s.cwd = "/home/u";
  auto b = service_->intake().Submit(TestCaller(2000), s);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  JobView bv = Get(b->job.id);
  EXPECT_EQ(bv.job.state, core::JobState::kQueued) << "40 GiB - 4 - 26 over the limit < 20";
  EXPECT_NE(bv.waiting_for.find("GPU 0: 26 GiB held beyond their limits by job " +
                                std::to_string(a.job.id)),
            std::string::npos)
      << bv.waiting_for;
  Run(3);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kQueued);
  // Back under its limit: the memory is free again.
  inventory_.usage[0].processes[0].used_memory = 3 * core::kGiB;
  Run(1);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kRunning);
}

// With the default (kill), the job is ended at that same sample;
// its processes' memory stays taken until NVML shows it gone, so the job
// waiting for it does not start into memory a dying process still holds.
TEST_F(WatchdogTest, AJobKilledOverItsLimitKeepsItsExcessTakenUntilNvmlShowsItGone) {
  Start({}, SimulatedGpus(1, "A100", 40 * core::kGiB));
  launcher_.die_on_signal = false;  // Its processes take their time to die.
  JobView a = StartJob("4GiB", "25%");
  Process(0, 777, 30 * core::kGiB, 0, 1000, a.job.pid);
  Run(1);
  ASSERT_EQ(Get(a.job.id).job.state, core::JobState::kRunning) << "ending, not yet ended";
  SubmitSpec s;
  s.fields.mem = "20GiB";
  s.fields.compute = "30%";
  s.argv = {"train"};
  s.cwd = "/home/u";
  auto b = service_->intake().Submit(TestCaller(2000), s);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Run(2);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kQueued);
  inventory_.usage[0].processes.clear();  // Gone.
  launcher_.alive.erase(a.job.pid);
  launcher_.WriteStatus(a.job.pid, "signal", SIGKILL);
  Run(2);
  EXPECT_EQ(Get(a.job.id).job.state, core::JobState::kCancelled);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kRunning);
}

TEST_F(WatchdogTest, MemoryOnAGpuTheJobWasNotGivenIsOverItsLimit) {
  Start();
  JobView v = StartJob();
  uint32_t other = 1 - v.job.allocation.gpu_indices[0];
  // CUDA_VISIBLE_DEVICES unset too: it reached the other GPU.
  Process(other, 777, 2 * core::kGiB, 0, 1000, v.job.pid);
  Run(1);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kCancelled);
  EXPECT_NE(Get(v.job.id).job.reason.find("(not its GPU)"), std::string::npos);
}

TEST_F(WatchdogTest, ReportOnlyFlagsOnceAndClearsWhenBackUnder) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kReport;
  Start(rules);
  JobView v = StartJob();
  uint32_t gpu = v.job.allocation.gpu_indices[0];
  Process(gpu, 777, 8 * core::kGiB, 50, 1000, v.job.pid);
  Run(3);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  EXPECT_EQ(EventsOf(v.job.id, "watchdog").size(), 1u) << "once per episode";
  EXPECT_TRUE(HasFlag(v.job.id, "over_limit"));
  EXPECT_NE(Log(v).find("warning: job"), std::string::npos);
  inventory_.usage[gpu].processes[0].used_memory = 3 * core::kGiB;
  Run(1);
  EXPECT_FALSE(HasFlag(v.job.id, "over_limit"));
}

TEST_F(WatchdogTest, StopFreezesTheJobUntilItIsBackUnderThenContinuesIt) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kStop;
  Start(rules);
  launcher_.die_on_signal = false;
  JobView v = StartJob();
  uint32_t gpu = v.job.allocation.gpu_indices[0];
  regions_.pids[v.job.region_path] = {888};  // Outside the group: stopped by pid.
  Process(gpu, 777, 8 * core::kGiB, 50, 1000, v.job.pid);
  Process(gpu, 888, 1 * core::kGiB, 0, 1000);
  Run(1);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  EXPECT_TRUE(HasFlag(v.job.id, "stopped"));
  // The whole job is frozen through the launcher (its cgroup's freezer).
  EXPECT_EQ(launcher_.stopped.count(v.job.pid), 1u);
  EXPECT_NE(std::find(processes_.signals.begin(), processes_.signals.end(),
                      std::make_pair(int64_t{888}, SIGSTOP)),
            processes_.signals.end());
  EXPECT_NE(Log(v).find("stopped by the watchdog"), std::string::npos) << Log(v);
  Run(2);
  EXPECT_EQ(std::count(processes_.signals.begin(), processes_.signals.end(),
                       std::make_pair(int64_t{888}, SIGSTOP)),
            1)
      << "stopped once";
  // The user ends the offending process: the job is back under.
  inventory_.usage[gpu].processes.erase(inventory_.usage[gpu].processes.begin());
  Run(1);
  EXPECT_FALSE(HasFlag(v.job.id, "stopped"));
  EXPECT_EQ(launcher_.stopped.count(v.job.pid), 0u) << "continued";
  EXPECT_NE(Log(v).find("continued"), std::string::npos);
  EXPECT_EQ(EventsOf(v.job.id, "watchdog").size(), 2u);
}

TEST_F(WatchdogTest, AStoppedJobThatIsCancelledIsContinuedToTakeItsSignal) {
  PolicyConfig rules;
  rules.watchdog = WatchdogAction::kStop;
  Start(rules);
  launcher_.die_on_signal = false;
  JobView v = StartJob();
  Process(v.job.allocation.gpu_indices[0], 777, 8 * core::kGiB, 50, 1000, v.job.pid);
  Run(1);
  ASSERT_TRUE(HasFlag(v.job.id, "stopped"));
  ASSERT_EQ(launcher_.stopped.count(v.job.pid), 1u);
  ASSERT_TRUE(service_->Cancel(TestCaller(1000), v.job.id).ok());
  Run(1);
  EXPECT_EQ(launcher_.stopped.count(v.job.pid), 0u) << "continued to take its signal";
}

TEST_F(WatchdogTest, ComputeFarOverItsShareForAWindowIsReportedWhenConfigured) {
  PolicyConfig rules;
  rules.watchdog_compute = WatchdogAction::kReport;
  rules.watchdog_compute_window_ms = 10'000;
  Start(rules);
  JobView v = StartJob("4GiB", "25%");
  uint32_t gpu = v.job.allocation.gpu_indices[0];
  Process(gpu, 777, 1 * core::kGiB, 95, 1000, v.job.pid);
  Run(5);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty()) << "not before a whole window";
  Run(6);
  auto events = EventsOf(v.job.id, "watchdog_compute");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].message.find("far over its share of 25%"), std::string::npos)
      << events[0].message;
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  EXPECT_TRUE(HasFlag(v.job.id, "over_share"));
}

// Compute through a private copy of the driver (dlmopen) can take 62.9%
// from a 20% slice; reporting it after 10 s is not enough. By default a
// bypass confirmed over a 2 s window ends the job at the sample that
// completes the window.
TEST_F(WatchdogTest, ComputeFarOverItsShareForTwoSecondsIsKilledByDefault) {
  Start();
  JobView v = StartJob("4GiB", "20%");
  Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 63, 1000, v.job.pid);
  Run(1);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning) << "not before a whole window";
  Run(1);
  JobView after = Get(v.job.id);
  EXPECT_EQ(after.job.state, core::JobState::kCancelled);
  ASSERT_EQ(EventsOf(v.job.id, "watchdog_compute").size(), 1u);
  EXPECT_NE(after.job.reason.find("used 63% of GPU"), std::string::npos) << after.job.reason;
  EXPECT_NE(Log(v).find("bypasses its turns"), std::string::npos) << Log(v);
}

// A live resize changes the share a slice is held to: use under the old
// share is no breach of the new one (80% of a 60% slice is within its
// margin; averaged with 20% under a 20% share it would read 50%).
TEST_F(WatchdogTest, ALiveShareChangeStartsANewComputeWindow) {
  Start();
  JobView v = StartJob("4GiB", "60%");
  const uint32_t gpu = v.job.allocation.gpu_indices[0];
  Process(gpu, 777, 1 * core::kGiB, 80, 1000, v.job.pid);
  Run(5);
  ResizeSpec spec;
  spec.compute = "20%";
  ASSERT_TRUE(service_->live().Resize(TestCaller(1000), v.job.id, spec).ok());
  inventory_.usage[gpu].processes[0].sm_util_pct = 20;
  Run(5);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty());
  // The new window holds it to the new share.
  inventory_.usage[gpu].processes[0].sm_util_pct = 80;
  Run(2);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kCancelled);
}

TEST_F(WatchdogTest, ComputeWithinTheMarginIsLeftAlone) {
  Start();
  JobView v = StartJob("4GiB", "25%");
  Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 45, 1000, v.job.pid);
  Run(15);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty()) << "45% < 25% + 25% margin";
}

TEST_F(WatchdogTest, ComputeKillWhenConfigured) {
  PolicyConfig rules;
  rules.watchdog_compute = WatchdogAction::kKill;
  rules.watchdog_compute_window_ms = 5000;
  Start(rules);
  JobView v = StartJob("4GiB", "10%");
  Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 100, 1000, v.job.pid);
  Run(6);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kCancelled);
  EXPECT_EQ(EventsOf(v.job.id, "watchdog_compute").size(), 1u);
  EXPECT_NE(Log(v).find("bypasses its turns"), std::string::npos);
}

// A work-conserving slice may use what others leave, but unwatched, a
// process of it that bypasses the shim would take the GPU from slices that
// wait for their turns. So it is held to its share for
// the part of the window in which the arbiter saw others waiting.
TEST_F(WatchdogTest, WorkConservingFarOverItsShareWhileOthersWaitIsReported) {
  PolicyConfig rules;
  rules.watchdog_compute = WatchdogAction::kReport;
  rules.watchdog_compute_window_ms = 10'000;
  Start(rules);
  SubmitSpec s;
  s.fields.mem = "4GiB";
  s.fields.compute = "25%";
  s.fields.compute_mode = "work-conserving";
  s.argv = {"serve"};
  s.cwd = "/home/u";
  auto submitted = service_->intake().Submit(TestCaller(1000), s);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  JobView v = Get(submitted->job.id);
  std::ofstream(launcher_.launches[v.job.pid].stderr_path);
  Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 95, 1000, v.job.pid);
  // Alone (nobody waits): 95% is what a work-conserving slice may take.
  Run(15);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty());
  // Others wait 90% of the time from now on (with 10 s windows it may take
  // 25% of the GPU for the contended part, 100% for the rest, + 25% margin).
  auto contend = [&](int seconds) {
    for (int i = 0; i < seconds; ++i) {
      regions_.contended[v.job.region_path] += 900'000'000;
      Run(1);
    }
  };
  contend(3);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty()) << "27% contended: 105% allowed";
  contend(12);
  auto events = EventsOf(v.job.id, "watchdog_compute");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].message.find("while other slices waited for the GPU"), std::string::npos)
      << events[0].message;
  EXPECT_TRUE(HasFlag(v.job.id, "over_share"));
}

// A 40 GiB job must not be placed on a GPU where a foreign process holds
// 70 GiB (measured). Here: 30 GiB foreign on GPU 0 of two 40 GiB GPUs.
TEST_F(WatchdogTest, ForeignMemoryIsChargedInPlacementAndReportedOnce) {
  Start();
  Process(0, 4242, 30 * core::kGiB, 0, 2000);
  Run(2);
  auto foreign = service_->foreign().processes();
  ASSERT_EQ(foreign.size(), 1u);
  EXPECT_EQ(foreign[0].user, "u2000");
  EXPECT_EQ(foreign[0].used_memory, 30 * core::kGiB);
  JobView a = StartJob("25GiB", "30%");
  EXPECT_EQ(a.job.allocation.gpu_indices, std::vector<uint32_t>{1}) << "not beside the 30 GiB";
  // A 20 GiB job fits nowhere now (10 GiB free on GPU 0, 15 on GPU 1): it
  // waits and says why.
  SubmitSpec s;
  s.fields.mem = "20GiB";
  s.fields.compute = "30%";
  s.argv = {"train"};
  s.cwd = "/home/u";
  auto b = service_->intake().Submit(TestCaller(1000), s);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  JobView bv = Get(b->job.id);
  EXPECT_EQ(bv.job.state, core::JobState::kQueued);
  EXPECT_NE(bv.waiting_for.find("GPU 0: 30 GiB held by processes outside gpuslice (pid 4242, "
                                "user u2000)"),
            std::string::npos)
      << bv.waiting_for;
  Run(3);
  std::vector<Event> events = EventsOf(0, "foreign_process");
  ASSERT_EQ(events.size(), 1u) << "once per process";
  EXPECT_NE(events[0].message.find("pid 4242 (user u2000) holds 30 GiB on GPU 0"),
            std::string::npos)
      << events[0].message;
  EXPECT_TRUE(processes_.signals.empty())
      << "foreign = protect by default: it takes no memory a job was promised";
  // The foreign process ends: the waiting job starts there.
  inventory_.usage[0].processes.clear();
  Run(1);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kRunning);
  EXPECT_EQ(Get(b->job.id).job.allocation.gpu_indices, std::vector<uint32_t>{0});
}

TEST_F(WatchdogTest, ForeignKillSparesRootAndAllowedGroups) {
  PolicyConfig rules;
  rules.foreign = ForeignAction::kKill;
  rules.foreign_allowed_groups = {"render"};
  Start(rules);
  Process(0, 100, 1 * core::kGiB, 0, 0);                             // root
  Process(0, 200, 1 * core::kGiB, 0, 2000, 0, {"u2000", "render"});  // allowed group
  Process(1, 300, 1 * core::kGiB, 0, 3000, 0, {"u3000"});            // anyone else
  Run(1);
  EXPECT_TRUE(processes_.signals.empty()) << "not at the first sighting";
  Run(1);
  ASSERT_EQ(processes_.signals.size(), 1u);
  EXPECT_EQ(processes_.signals[0], std::make_pair(int64_t{300}, SIGKILL));
  std::vector<Event> events = EventsOf(0, "foreign_process");
  ASSERT_EQ(events.size(), 3u);
  int spared = 0, killed = 0;
  for (const Event& e : events) {
    spared += e.message.find("spared") != std::string::npos;
    killed += e.message.find("killed") != std::string::npos;
  }
  EXPECT_EQ(spared, 2);
  EXPECT_EQ(killed, 1);
}

// A GPU program started outside gpuslice by an ordinary user can make a
// running job fail inside its own limit (foreign = report). By
// default a foreign process that takes memory a job was promised is ended
// at its second sample, the largest first, until the rest fits.
TEST_F(WatchdogTest, AForeignProcessThatTakesMemoryAJobWasPromisedIsKilledByDefault) {
  Start({}, SimulatedGpus(1, "A100", 40 * core::kGiB));
  JobView a = StartJob("30GiB", "50%");
  Process(0, 777, 1 * core::kGiB, 0, 1000, a.job.pid);
  Process(0, 4242, 20 * core::kGiB, 0, 2000);  // 10 GiB is free beside the job's 30.
  Process(0, 4343, 2 * core::kGiB, 0, 3000);
  Run(1);
  EXPECT_TRUE(processes_.signals.empty()) << "not at the first sighting";
  Run(1);
  ASSERT_EQ(processes_.signals.size(), 1u);
  EXPECT_EQ(processes_.signals[0], std::make_pair(int64_t{4242}, SIGKILL));
  std::vector<Event> events = EventsOf(0, "foreign_process");
  ASSERT_EQ(events.size(), 2u);
  std::string killed;
  for (const Event& e : events) {
    if (e.message.find("pid 4242") != std::string::npos) killed = e.message;
  }
  EXPECT_NE(killed.find("killed: it takes memory promised to jobs on GPU 0 (10 GiB of it is free "
                        "for use outside them) (foreign = protect)"),
            std::string::npos)
      << killed;
  EXPECT_EQ(Get(a.job.id).job.state, core::JobState::kRunning);
  // A reported process that later takes promised memory is ended then.
  inventory_.usage[0].processes.erase(inventory_.usage[0].processes.begin() + 1);  // 4242 gone.
  Run(2);
  EXPECT_EQ(processes_.signals.size(), 1u) << "2 GiB fits beside the job";
  inventory_.usage[0].processes.back().used_memory = 12 * core::kGiB;
  Run(1);
  ASSERT_EQ(processes_.signals.size(), 2u);
  EXPECT_EQ(processes_.signals[1], std::make_pair(int64_t{4343}, SIGKILL));
  EXPECT_EQ(EventsOf(0, "foreign_process").size(), 3u);
}

// Protect never ends root's processes, the admin group's or an
// allowed group's; what they hold is not the others' to take.
TEST_F(WatchdogTest, ProtectSparesRootTheAdminGroupAndAllowedGroups) {
  PolicyConfig rules;
  rules.foreign_allowed_groups = {"render"};
  admin_gid_ = 0;  // The group named "root".
  Start(rules, SimulatedGpus(1, "A100", 40 * core::kGiB));
  JobView a = StartJob("30GiB", "50%");
  Process(0, 100, 3 * core::kGiB, 0, 0);                             // root
  Process(0, 200, 3 * core::kGiB, 0, 2000, 0, {"u2000", "root"});    // the admin group
  Process(0, 300, 3 * core::kGiB, 0, 3000, 0, {"u3000", "render"});  // an allowed group
  Process(0, 400, 2 * core::kGiB, 0, 4000, 0, {"u4000"});            // 10 - 9 = 1 GiB left
  Run(2);
  ASSERT_EQ(processes_.signals.size(), 1u);
  EXPECT_EQ(processes_.signals[0], std::make_pair(int64_t{400}, SIGKILL));
  int spared = 0;
  for (const Event& e : EventsOf(0, "foreign_process")) {
    spared += e.message.find("spared (") != std::string::npos;
  }
  EXPECT_EQ(spared, 3);
  EXPECT_EQ(Get(a.job.id).job.state, core::JobState::kRunning);
}

// A pod's containers run as uids nobody knows in advance, so the processes
// a root-owned external job's slice names are not the job's (foreign, and
// charged), but only the slice's own group can write those slots: protect
// must not end a pod's process for using the slice it was given.
TEST_F(WatchdogTest, ProtectNeverEndsTheProcessesAnExternalSliceNames) {
  external_gid_base_ = 2'000'000'000;
  Start({}, SimulatedGpus(1, "A100", 40 * core::kGiB));
  JobView a = StartJob("10GiB", "50%");
  SubmitSpec s;
  s.mode = core::JobMode::kExternal;
  s.fields.mem = "30GiB";
  auto pod = service_->intake().Submit(TestCaller(0, /*admin=*/true), s);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  regions_.pids[pod->job.region_path] = {888};
  Process(0, 888, 25 * core::kGiB, 0, 1000);  // The container, as uid 1000.
  Run(3);
  EXPECT_TRUE(processes_.signals.empty());
  std::vector<Event> events = EventsOf(0, "foreign_process");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].message.find("spared (a container of external job " +
                                   std::to_string(pod->job.id) + ")"),
            std::string::npos)
      << events[0].message;
  EXPECT_EQ(Get(a.job.id).job.state, core::JobState::kRunning);
}

TEST_F(WatchdogTest, AJobsOwnProcessesAreNotForeign) {
  PolicyConfig rules;
  rules.foreign = ForeignAction::kKill;
  Start(rules);
  JobView v = StartJob();
  regions_.pids[v.job.region_path] = {901};
  Process(v.job.allocation.gpu_indices[0], 900, 1 * core::kGiB, 0, 1000, v.job.pid);
  Process(v.job.allocation.gpu_indices[0], 901, 1 * core::kGiB, 0, 1000);
  Run(3);
  EXPECT_TRUE(service_->foreign().processes().empty());
  EXPECT_TRUE(processes_.signals.empty());
}

// One H100 in MIG mode with two 1g.10gb instances (GPU instances 7 and 8).
InventorySnapshot OneMigGpu() {
  InventorySnapshot s = SimulatedGpus(1, "H100", 80 * core::kGiB);
  s.gpus[0].mig_enabled = true;
  for (uint32_t i = 0; i < 2; ++i) {
    MigInstance m;
    m.uuid = "MIG-" + std::to_string(i);
    m.profile = "1g.10gb";
    m.memory_total = 10 * core::kGiB;
    m.gpu_instance_id = 7 + i;
    m.compute_instance_id = 0;
    s.gpus[0].mig.push_back(m);
  }
  return s;
}

// On a GPU in MIG mode, a MIG instance a process outside gpuslice runs in is
// charged, so it is not handed to a job.
TEST_F(WatchdogTest, AForeignProcessInAMigInstanceKeepsJobsOffItUntilItEnds) {
  Start({}, OneMigGpu());
  MigProcess(0, 4242, 3 * core::kGiB, 2000, /*gpu_instance=*/7);
  Run(2);
  auto foreign = service_->foreign().processes();
  ASSERT_EQ(foreign.size(), 1u);
  EXPECT_EQ(foreign[0].mig_uuid, "MIG-0");
  auto a = SubmitMig("1g.10gb");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Get(a->job.id).job.state, core::JobState::kRunning);
  EXPECT_EQ(Get(a->job.id).job.allocation.gpu_uuids, std::vector<std::string>{"MIG-1"})
      << "not in the instance the foreign process runs in";
  auto b = SubmitMig("1g.10gb");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  JobView bv = Get(b->job.id);
  EXPECT_EQ(bv.job.state, core::JobState::kQueued);
  EXPECT_NE(bv.waiting_for.find("MIG-0 (GPU 0): 3 GiB held by processes outside gpuslice (pid "
                                "4242, user u2000)"),
            std::string::npos)
      << bv.waiting_for;
  std::vector<Event> events = EventsOf(0, "foreign_process");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].message.find("on GPU 0 (MIG MIG-0)"), std::string::npos) << events[0].message;
  // The foreign process ends: the waiting job gets the instance.
  inventory_.usage[0].processes.clear();
  Run(1);
  EXPECT_EQ(Get(b->job.id).job.state, core::JobState::kRunning);
  EXPECT_EQ(Get(b->job.id).job.allocation.gpu_uuids, std::vector<std::string>{"MIG-0"});
}

// MIG devices of one GPU instance share its memory (one per compute
// instance): a foreign process in one takes them all.
TEST_F(WatchdogTest, AForeignProcessTakesEveryMigDeviceOfItsGpuInstance) {
  InventorySnapshot gpus = OneMigGpu();
  gpus.gpus[0].mig[1].gpu_instance_id = 7;  // Two compute instances of GPU instance 7.
  gpus.gpus[0].mig[1].compute_instance_id = 1;
  Start({}, gpus);
  MigProcess(0, 4242, 1 * core::kGiB, 2000, /*gpu_instance=*/7, /*compute_instance=*/1);
  Run(1);
  ASSERT_EQ(service_->foreign().processes().size(), 1u);
  EXPECT_EQ(service_->foreign().processes()[0].mig_uuid, "MIG-1");
  auto a = SubmitMig("1g.10gb");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Get(a->job.id).job.state, core::JobState::kQueued);
  inventory_.usage[0].processes.clear();
  Run(1);
  EXPECT_EQ(Get(a->job.id).job.state, core::JobState::kRunning);
}

// On a GPU in MIG mode, a foreign process in the instance a job
// holds takes the job's memory; one in a free instance takes nobody's.
TEST_F(WatchdogTest, AForeignProcessInAMigInstanceAJobHoldsIsKilledByDefault) {
  Start({}, OneMigGpu());
  auto a = SubmitMig("1g.10gb");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(Get(a->job.id).job.allocation.gpu_uuids.size(), 1u);
  const bool first = Get(a->job.id).job.allocation.gpu_uuids[0] == "MIG-0";
  MigProcess(0, 4242, 1 * core::kGiB, 2000, first ? 7 : 8);  // In the job's instance.
  MigProcess(0, 4343, 1 * core::kGiB, 2000, first ? 8 : 7);  // In the free one.
  Run(2);
  ASSERT_EQ(processes_.signals.size(), 1u);
  EXPECT_EQ(processes_.signals[0], std::make_pair(int64_t{4242}, SIGKILL));
  EXPECT_EQ(Get(a->job.id).job.state, core::JobState::kRunning);
}

// A MIG job must not read 0% (NVML has no per-process figure on MIG devices)
// and be ended by idle reclaim while 100% busy. Its use is its GPU instance's
// activity (NVML's GPM), and where NVML gives no figure (no GPM, as on an A100)
// the job is never idle for it.
TEST_F(WatchdogTest, AMigJobIsIdleByItsInstancesActivityAndNeverForNoFigure) {
  PolicyConfig rules;
  rules.idle_after_ms = 60'000;
  rules.idle_action = IdleAction::kEnd;
  rules.idle_action_always = true;
  Start(rules, OneMigGpu());
  auto busy = SubmitMig("1g.10gb");
  auto idle = SubmitMig("1g.10gb");
  ASSERT_TRUE(busy.ok() && idle.ok());
  ASSERT_EQ(Get(busy->job.id).job.allocation.gpu_uuids, std::vector<std::string>{"MIG-0"});
  inventory_.usage[0].utilization_known = false;
  inventory_.usage[0].mig = {{7, 95.0}, {8, 2.0}};
  Run(63);
  EXPECT_EQ(Get(busy->job.id).job.state, core::JobState::kRunning);
  EXPECT_EQ(Get(idle->job.id).job.state, core::JobState::kCancelled) << "the control";
  std::optional<JobUsage> u = service_->usage().Of(busy->job.id);
  ASSERT_TRUE(u.has_value());
  EXPECT_TRUE(u->gpu_util_known);
  EXPECT_DOUBLE_EQ(u->gpu_util_pct, 95.0);

  // No figure for the instance (an A100 has no GPM): never idle for it.
  auto unmeasured = SubmitMig("1g.10gb");
  ASSERT_TRUE(unmeasured.ok());
  ASSERT_EQ(Get(unmeasured->job.id).job.allocation.gpu_uuids, std::vector<std::string>{"MIG-1"});
  inventory_.usage[0].mig = {{7, 95.0}, {8, -1}};
  Run(120);
  EXPECT_EQ(Get(unmeasured->job.id).job.state, core::JobState::kRunning);
  u = service_->usage().Of(unmeasured->job.id);
  ASSERT_TRUE(u.has_value());
  EXPECT_FALSE(u->gpu_util_known);
  EXPECT_EQ(u->low_use_ms, 0);
  EXPECT_EQ(Get(unmeasured->job.id).job.idle_ms, 0) << "no figure is not idle time";
}

}  // namespace
}  // namespace gpuslice::daemon
