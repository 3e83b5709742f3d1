// End-to-end: the policies (quotas, live resize, pools, priority
// preemption, idle reclaim, the watchdog) with the real gpusliced, gpuslice,
// shim and simulated GPU. Time-driven policies use short settings (seconds,
// not minutes) and poll with generous timeouts.

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

std::string Submit(Daemon& d, std::vector<std::string> args) {
  args.insert(args.begin(), "submit");
  CliResult r = d.Cli(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Trim(r.out);
}

std::string Me() {
  struct passwd* pw = getpwuid(geteuid());
  return pw ? pw->pw_name : std::to_string(geteuid());
}

class PolicyE2E : public ::testing::Test {
 protected:
  void Start(Daemon& d) { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (HasFailure() && d_) std::cerr << "daemon log:\n" << ReadFile(d_->dir() + "/daemon.log");
  }
  Daemon* d_ = nullptr;
};

TEST_F(PolicyE2E, QuotaOnRunningJobsMakesTheNextWaitWithTheReason) {
  Daemon d;
  d_ = &d;
  Start(d);
  CliResult set = d.Cli({"quota", "set", "--user", Me(), "--jobs", "1", "--mem", "20GiB"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.out.find("memory 20 GiB, jobs 1"), std::string::npos) << set.out;
  std::string a = Submit(d, {"--mem", "4GiB", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "running"; }));
  std::string b = Submit(d, {"--mem", "4GiB", "--", "true"});
  ASSERT_TRUE(Daemon::WaitFor(
      [&] { return Job(d, b).value("waiting_for", "").find("quota") != std::string::npos; }));
  EXPECT_EQ(Job(d, b)["waiting_for"],
            "quota: user " + Me() + ": 1 of 1 running jobs in use, asks 1 more");
  CliResult ps = d.Cli({"ps"});
  EXPECT_NE(ps.out.find("1 of 1 running jobs"), std::string::npos) << ps.out;
  EXPECT_TRUE(HasEvent(d, b, "quota_wait", "1 of 1 running jobs"));
  // quota ls shows what is in use against each limit.
  CliResult ls = d.Cli({"quota", "ls"});
  EXPECT_NE(ls.out.find("4 GiB / 20 GiB"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("1 / 1"), std::string::npos) << ls.out;
  // The first ends: the second runs.
  ASSERT_EQ(d.Cli({"cancel", a}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "exited"; }));
}

TEST_F(PolicyE2E, QuotaRefusesARequestThatCouldNeverFitIt) {
  Daemon d;
  d_ = &d;
  Start(d);
  ASSERT_EQ(d.Cli({"quota", "set", "--user", Me(), "--mem", "4GiB"}).exit_code, 0);
  CliResult r = d.Cli({"submit", "--mem", "8GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("over quota, can never run: user " + Me() +
                       ": asks 8 GiB of memory, over its quota of 4 GiB"),
            std::string::npos)
      << r.err;
  // Removed: the same request runs.
  ASSERT_EQ(d.Cli({"quota", "rm", "--user", Me()}).exit_code, 0);
  EXPECT_EQ(d.Cli({"run", "--mem", "8GiB", "--", "true"}).exit_code, 0);
  CliResult gone = d.Cli({"quota", "rm", "--user", Me()});
  EXPECT_EQ(gone.exit_code, 125);
  EXPECT_NE(gone.err.find("no quota for user"), std::string::npos) << gone.err;
}

TEST_F(PolicyE2E, QuotasAreKeptAcrossADaemonRestart) {
  Daemon d;
  d_ = &d;
  Start(d);
  ASSERT_EQ(
      d.Cli({"quota", "set", "--group", "students", "--gpus", "1", "--compute", "150%"}).exit_code,
      0);
  d.Kill(SIGKILL);
  Start(d);
  CliResult ls = d.Cli({"quota", "ls", "--json"});
  json j = json::parse(ls.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << ls.out << ls.err;
  ASSERT_EQ(j["quotas"].size(), 1u);
  EXPECT_EQ(j["quotas"][0]["name"], "students");
  EXPECT_EQ(j["quotas"][0]["compute_milli"], 1500);
}

TEST_F(PolicyE2E, ResizeAppliesToTheRunningSliceAtOnce) {
  Daemon d;
  d_ = &d;
  Start(d);
  std::string go = d.dir() + "/go";
  // Holds 2 GiB, then (once told) allocates 5 GiB more: over the 4 GiB it
  // started with, within the 8 GiB it is resized to.
  std::string script = WorkerPath() + " --name hold --mem 2GiB --duty 5% --seconds 60 & " +
                       "hold=$!; while [ ! -e " + go + " ]; do sleep 0.1; done; " + WorkerPath() +
                       " --name big --mem 5GiB --duty 5% --seconds 0.2; rc=$?; kill $hold; " +
                       "exit $rc";
  std::string id = Submit(d, {"--mem", "4GiB", "--compute", "20%", "--", "sh", "-c", script});
  ASSERT_TRUE(Daemon::WaitFor(
      [&] {
        json g = json::parse(d.Cli({"gpus", "--json"}).out, nullptr, false);
        if (!g.is_object()) return false;
        for (const json& gpu : g["gpus"]) {
          for (const json& s : gpu["slices"]) {
            if (s.value("memory_used", uint64_t{0}) >= (2ull << 30)) return true;
          }
        }
        return false;
      },
      60));
  CliResult below = d.Cli({"resize", id, "--mem", "1GiB"});
  EXPECT_EQ(below.exit_code, 125);
  EXPECT_NE(below.err.find("is below that (--force"), std::string::npos) << below.err;
  CliResult ok = d.Cli({"resize", id, "--mem", "8GiB", "--compute", "50%"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("8 GiB + 50%"), std::string::npos) << ok.out;
  EXPECT_TRUE(HasEvent(d, id, "resized", "4 GiB + 20% -> 8 GiB + 50%"));
  std::ofstream(go).put('\n');
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) != "running"; }, 60));
  json j = Job(d, id);
  EXPECT_EQ(j["state"], "exited");
  EXPECT_EQ(j["exit_code"], 0) << "the 5 GiB allocation fits the new limit: "
                               << ReadFile(d.state_dir() + "/jobs/" + id + "/stderr");
}

TEST_F(PolicyE2E, ResizeOverTheGpuIsRefused) {
  Daemon d;
  d_ = &d;
  Start(d);
  std::string a = Submit(d, {"--mem", "40GiB", "--compute", "50%", "--", "sleep", "60"});
  std::string b = Submit(d, {"--mem", "30GiB", "--compute", "30%", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "running"; }));
  CliResult r = d.Cli({"resize", a, "--mem", "60GiB"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("does not fit there"), std::string::npos) << r.err;
  CliResult whole = d.Cli({"resize", a, "--compute", "90%"});
  EXPECT_EQ(whole.exit_code, 125) << "50% + 30% + 90% > 100%";
}

TEST_F(PolicyE2E, PoolsKeepRequestsOnTheirGpus) {
  Daemon d("2xH100-80GB", {"--set", "pool.inference=0", "--set", "default_pool=shared"});
  d_ = &d;
  Start(d);
  std::string a = Submit(d, {"--gpus", "1", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "running"; }));
  EXPECT_EQ(Job(d, a)["allocation"]["gpu_indices"][0], 1) << "the default pool is GPU 1";
  std::string b = Submit(d, {"--gpus", "1", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] {
    return Job(d, b).value("waiting_for", "").find("in pool 'shared'") != std::string::npos;
  }));
  std::string c = Submit(d, {"--pool", "inference", "--mem", "8GiB", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, c) == "running"; }));
  EXPECT_EQ(Job(d, c)["allocation"]["gpu_indices"][0], 0);
  EXPECT_EQ(Job(d, c)["request"]["pool"], "inference");
  CliResult bad = d.Cli({"submit", "--pool", "nope", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(bad.exit_code, 125);
  EXPECT_NE(bad.err.find("no pool 'nope' on this machine (pools: inference, shared)"),
            std::string::npos)
      << bad.err;
  CliResult gpus = d.Cli({"gpus"});
  EXPECT_NE(gpus.out.find("POOL"), std::string::npos) << gpus.out;
  EXPECT_NE(gpus.out.find("inference"), std::string::npos) << gpus.out;
}

TEST_F(PolicyE2E, HighPriorityPreemptsAndTheRestartableVictimIsRequeued) {
  Daemon d("1xH100-80GB", {"--set", "preemption=lower", "--set", "preemption_grace=2s"});
  d_ = &d;
  Start(d);
  std::string low = Submit(d, {"--gpus", "1", "--priority", "low", "--restartable", "--", "sh",
                               "-c", "echo run; sleep 60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, low) == "running"; }));
  std::string other = Submit(d, {"--gpus", "1", "--priority", "low", "--", "true"});
  std::string high = Submit(d, {"--gpus", "1", "--priority", "high", "--", "sleep", "1"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, high) != "queued"; }, 60));
  EXPECT_TRUE(HasEvent(d, low, "preempted", "preempted by job " + high));
  EXPECT_TRUE(HasEvent(d, low, "requeued"));
  EXPECT_TRUE(HasEvent(d, high, "preempting", "job(s) " + low));
  // The victim runs again after the high job, ahead of the later low job.
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, high) == "exited"; }, 60));
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, low) == "running"; }, 60));
  EXPECT_EQ(State(d, other), "queued");
  ASSERT_EQ(d.Cli({"cancel", low}).exit_code, 0);
}

TEST_F(PolicyE2E, ANonRestartableVictimEndsCancelledWithTheReason) {
  Daemon d("1xH100-80GB", {"--set", "preemption=lower", "--set", "preemption_grace=1s"});
  d_ = &d;
  Start(d);
  std::string low = Submit(d, {"--mem", "60GiB", "--priority", "low", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, low) == "running"; }));
  std::string high = Submit(d, {"--mem", "40GiB", "--priority", "high", "--", "true"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, high) == "exited"; }, 60));
  json j = Job(d, low);
  EXPECT_EQ(j["state"], "cancelled");
  EXPECT_NE(j.value("reason", "").find("preempted by job " + high), std::string::npos) << j.dump();
}

TEST_F(PolicyE2E, NoPreemptionByDefault) {
  Daemon d;
  d_ = &d;
  Start(d);
  std::string low = Submit(d, {"--gpus", "1", "--priority", "low", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, low) == "running"; }));
  std::string high = Submit(d, {"--gpus", "1", "--priority", "high", "--", "true"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return !Job(d, high).value("waiting_for", "").empty(); }));
  EXPECT_EQ(State(d, low), "running");
  EXPECT_FALSE(HasEvent(d, low, "preempted"));
}

TEST_F(PolicyE2E, IdleJobIsEndedWhenConfiguredToAlways) {
  Daemon d("1xH100-80GB", {"--set", "idle_after=2s", "--set", "idle_action=end", "--set",
                           "idle_action_always=true"});
  d_ = &d;
  Start(d);
  // Holds a slice and never touches the GPU.
  std::string id = Submit(d, {"--mem", "4GiB", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }, 60));
  json j = Job(d, id);
  EXPECT_EQ(j.value("reason", "").rfind("idle: GPU use under 30% for", 0), 0u) << j.dump();
  EXPECT_TRUE(HasEvent(d, id, "idle_flagged"));
  EXPECT_TRUE(HasEvent(d, id, "idle_action", "ended"));
  EXPECT_NE(ReadFile(d.state_dir() + "/jobs/" + id + "/stderr")
                .find("gpuslice: job " + id + " ended: GPU use under"),
            std::string::npos);
}

// A MIG job must not read 0% and be ended by idle reclaim while 100% busy.
// On an H100 in MIG mode the daemon reads each instance's
// activity from NVML's GPM (the simulator models it): the busy job keeps
// running and shows its use, the idle one beside it is ended.
TEST_F(PolicyE2E, ABusyMigJobIsNotEndedAsIdleAndShowsItsInstancesUse) {
  Daemon d("1xH100-80GB:mig=3g.40gb+1g.10gb",
           {"--set", "idle_after=3s", "--set", "idle_action=end", "--set",
            "idle_action_always=true"});
  d_ = &d;
  Start(d);
  std::string busy = Submit(d, {"--mig", "3g.40gb", "--", WorkerPath(), "--mem", "256MiB",
                                "--duty", "100%", "--seconds", "10", "--kernel-us", "1000"});
  std::string idle = Submit(d, {"--mig", "1g.10gb", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, idle) == "cancelled"; }, 60)) << "the control";
  EXPECT_EQ(Job(d, idle).value("reason", "").rfind("idle: GPU use under 30% for", 0), 0u);
  // Its use while it runs: in ps, gpus and the metrics.
  double use = -1;
  ASSERT_TRUE(Daemon::WaitFor([&] {
    json j = Job(d, busy);
    if (j.value("state", "") != "running" || !j.contains("usage")) return false;
    use = j["usage"].value("gpu_util_pct", -1.0);
    return use > 0;
  })) << Job(d, busy).dump();
  std::cerr << "the busy MIG job's use: " << use << "%\n";
  EXPECT_GE(use, 30.0) << "a busy MIG job reads as busy";
  json gpus = json::parse(d.Cli({"gpus", "--json"}).out, nullptr, false);
  ASSERT_TRUE(gpus.is_object()) << d.Cli({"gpus", "--json"}).out;
  bool instance_figure = false;
  for (const json& m : gpus["gpus"][0]["mig"]) {
    instance_figure = instance_figure || m.contains("utilization_pct");
  }
  EXPECT_TRUE(instance_figure) << gpus.dump();
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, busy) != "running"; }, 60));
  EXPECT_EQ(State(d, busy), "exited") << Job(d, busy).dump();
  EXPECT_EQ(Job(d, busy).value("exit_code", -1), 0);
  EXPECT_FALSE(HasEvent(d, busy, "idle_flagged"));
}

// An A100 has no GPM: NVML gives no figure for its MIG instances. No figure
// is not idleness: the job is never ended as idle, and every view says n/a
// instead of 0%.
TEST_F(PolicyE2E, AMigJobWithoutAFigureIsNeverIdleAndShowsNotAvailable) {
  Daemon d("1xA100-40GB:mig=1g.5gb*2", {"--set", "idle_after=2s", "--set", "idle_action=end",
                                         "--set", "idle_action_always=true"});
  d_ = &d;
  Start(d);
  std::string id = Submit(d, {"--mig", "1g.5gb", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_EQ(State(d, id), "running");
  EXPECT_FALSE(HasEvent(d, id, "idle_flagged"));
  json j = Job(d, id);
  ASSERT_TRUE(j.contains("usage")) << j.dump();
  EXPECT_FALSE(j["usage"].contains("gpu_util_pct")) << j.dump();
  EXPECT_NE(d.Cli({"show", id}).out.find("GPU use"), std::string::npos);
  EXPECT_NE(d.Cli({"show", id}).out.find("n/a"), std::string::npos) << d.Cli({"show", id}).out;
  json gpus = json::parse(d.Cli({"gpus", "--json"}).out, nullptr, false);
  ASSERT_TRUE(gpus.is_object());
  EXPECT_FALSE(gpus["gpus"][0].contains("utilization_pct")) << gpus.dump();
  EXPECT_NE(d.Cli({"gpus"}).out.find("n/a"), std::string::npos) << d.Cli({"gpus"}).out;
  EXPECT_EQ(d.Cli({"cancel", id}).exit_code, 0);
}

TEST_F(PolicyE2E, IdleJobIsPausedWhileAnotherWaitsAndResumedByItsOwner) {
  Daemon d("1xH100-80GB", {"--set", "idle_after=2s", "--set", "idle_action=pause"});
  d_ = &d;
  Start(d);
  std::string idle = Submit(d, {"--gpus", "1", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, idle) == "running"; }));
  auto flags = [&] {
    json j = Job(d, idle);
    return j.contains("flags") ? j["flags"].dump() : std::string();
  };
  ASSERT_TRUE(Daemon::WaitFor([&] { return flags().find("idle") != std::string::npos; }, 60));
  EXPECT_EQ(flags().find("paused"), std::string::npos) << "nothing waits: only flagged";
  std::string waiting = Submit(d, {"--gpus", "1", "--", "true"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return flags().find("paused") != std::string::npos; }, 60));
  EXPECT_TRUE(HasEvent(d, idle, "idle_action", "paused"));
  CliResult ps = d.Cli({"ps"});
  EXPECT_NE(ps.out.find("idle,paused"), std::string::npos) << ps.out;
  CliResult r = d.Cli({"resume", idle});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(flags().find("paused"), std::string::npos);
  EXPECT_TRUE(HasEvent(d, idle, "resumed"));
  CliResult again = d.Cli({"resume", idle});
  EXPECT_EQ(again.exit_code, 125);
  EXPECT_NE(again.err.find("is not paused"), std::string::npos) << again.err;
  ASSERT_EQ(d.Cli({"cancel", idle}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, waiting) == "exited"; }, 60));
}

// A process that unsets LD_PRELOAD escapes the shim: the simulated NVML still
// sees what it holds, and the watchdog acts on that.
TEST_F(PolicyE2E, WatchdogKillsAJobThatEscapedTheShimAndWentOverItsLimit) {
  Daemon d("1xH100-80GB", {"--set", "watchdog=kill"});
  d_ = &d;
  Start(d);
  std::string id =
      Submit(d, {"--mem", "4GiB", "--compute", "20%", "--", "env", "-u", "LD_PRELOAD", WorkerPath(),
                 "--name", "escaped", "--mem", "6GiB", "--duty", "5%", "--seconds", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }, 60));
  json j = Job(d, id);
  EXPECT_EQ(j.value("reason", "").rfind("killed by the watchdog: its processes hold", 0), 0u)
      << j.dump();
  EXPECT_TRUE(HasEvent(d, id, "watchdog", "over its limit of 4 GiB"));
}

TEST_F(PolicyE2E, WatchdogReportsWithoutKillingWhenSetToReport) {
  Daemon d("1xH100-80GB", {"--set", "watchdog=report"});
  d_ = &d;
  Start(d);
  std::string id =
      Submit(d, {"--mem", "4GiB", "--compute", "20%", "--", "env", "-u", "LD_PRELOAD", WorkerPath(),
                 "--name", "escaped", "--mem", "6GiB", "--duty", "5%", "--seconds", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return HasEvent(d, id, "watchdog"); }, 60));
  json j = Job(d, id);
  EXPECT_EQ(j["state"], "running");
  EXPECT_NE(j["flags"].dump().find("over_limit"), std::string::npos) << j.dump();
  // Within the shim, the same program is refused the memory instead.
  CliResult in = d.Cli({"run", "--mem", "4GiB", "--compute", "20%", "--", WorkerPath(), "--name",
                        "inside", "--mem", "6GiB", "--seconds", "0.2"});
  EXPECT_EQ(in.exit_code, 3) << in.err;
  ASSERT_EQ(d.Cli({"cancel", id}).exit_code, 0);
}

// An elastic job learns its GPUs from GPUSLICE_GPUS_FILE at start and from
// the same file when SIGUSR1 says it changed (a launcher would restart its
// workers there).
TEST_F(PolicyE2E, ElasticJobShrinksForAWaitingJobAndGrowsBack) {
  Daemon d("2xH100-80GB", {"--set", "elastic_cooldown=1s"});
  d_ = &d;
  Start(d);
  std::string script =
      "trap 'echo rescale $(wc -l < \"$GPUSLICE_GPUS_FILE\")' USR1; "
      "echo start $(wc -l < \"$GPUSLICE_GPUS_FILE\") $CUDA_VISIBLE_DEVICES; "
      "while true; do sleep 0.2; done";
  std::string id = Submit(d, {"--gpus", "1-2", "--grow", "--", "sh", "-c", script});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  auto out = [&] { return d.Cli({"logs", id}).out; };
  ASSERT_TRUE(Daemon::WaitFor([&] { return out().find("start 2 GPU-") != std::string::npos; }))
      << out();
  EXPECT_EQ(Job(d, id)["allocation"]["gpu_indices"].size(), 2u);
  std::string other = Submit(d, {"--gpus", "1", "--", "true"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, other) == "exited"; }, 60));
  EXPECT_TRUE(HasEvent(d, id, "elastic_shrink", "2 -> 1 GPUs"));
  ASSERT_TRUE(Daemon::WaitFor([&] { return out().find("rescale 1") != std::string::npos; }))
      << out();
  // Nothing waits any more: it grows back after the cool-down.
  ASSERT_TRUE(Daemon::WaitFor([&] { return HasEvent(d, id, "elastic_grow", "1 -> 2 GPUs"); }, 60));
  ASSERT_TRUE(Daemon::WaitFor([&] { return out().find("rescale 2") != std::string::npos; }))
      << out();
  EXPECT_EQ(Job(d, id)["allocation"]["gpu_indices"].size(), 2u);
  EXPECT_EQ(State(d, id), "running");
  ASSERT_EQ(d.Cli({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::e2e
