// End-to-end: the watchdog and foreign GPU use, with the real gpusliced,
// gpuslice and the simulated GPU (its NVML reports each process's memory): a
// process that skips the shim is killed by default, and GPU memory held by
// processes outside gpuslice is charged in placement and shown.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

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

// The demo worker started outside the daemon over the daemon's simulated
// GPU (same state file), without the shim: a foreign process.
pid_t StartForeign(Daemon& d, const std::string& mem, const std::string& visible) {
  std::vector<std::string> env = d.Env();
  env.push_back(std::string("LD_LIBRARY_PATH=") + GPUSLICE_E2E_SIM_DIR);
  env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv, envp;
    std::string worker = WorkerPath();
    std::vector<std::string> args = {worker, "--name", "foreign", "--mem", mem, "--duty", "5%",
                                      "--seconds", "120"};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    execve(worker.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

json Gpus(Daemon& d) {
  CliResult r = d.Cli({"gpus", "--json"});
  return json::parse(r.out, nullptr, false);
}

class WatchdogE2E : public ::testing::Test {
 protected:
  void Start(Daemon& d) { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (foreign_ > 0) {
      kill(foreign_, SIGKILL);
      waitpid(foreign_, nullptr, 0);
    }
    if (HasFailure() && d_) std::cerr << "daemon log:\n" << ReadFile(d_->dir() + "/daemon.log");
  }
  Daemon* d_ = nullptr;
  pid_t foreign_ = -1;
};

// With the default settings a process that skips the shim (`env -u
// LD_PRELOAD`, or GPUSLICE_DISABLE=1) cannot hold 20 GiB in a 4 GiB slice
// for as long as it likes: it is killed within 2 s of allocating, and
// the job's log and events say why.
TEST_F(WatchdogE2E, AProcessThatSkipsTheShimIsKilledWithin2sByDefault) {
  Daemon d("1xA100-80GB");
  d_ = &d;
  Start(d);
  for (const char* escape : {"env -u LD_PRELOAD", "env GPUSLICE_DISABLE=1"}) {
    SCOPED_TRACE(escape);
    // The time before the worker starts (so before it allocates), in ms.
    std::string script = "date +%s%3N; exec " + std::string(escape) + " " + WorkerPath() +
                         " --name escaped --mem 20GiB --duty 5% --seconds 60";
    std::string id = Submit(d, {"--mem", "4GiB", "--compute", "20%", "--", "sh", "-c", script});
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }, 60))
        << Job(d, id).dump();
    json j = Job(d, id);
    EXPECT_EQ(j.value("reason", "").rfind("killed by the watchdog: its processes hold", 0), 0u)
        << j.dump();
    std::ifstream out(d.state_dir() + "/jobs/" + id + "/stdout");
    long long before_ms = 0;
    out >> before_ms;
    ASSERT_GT(before_ms, 0);
    long long latency = j.value("ended_ms", 0LL) - before_ms;
    // An upper bound of allocation -> killed and seen gone: it includes the
    // worker's start.
    std::cout << "[ measured ] " << escape << ": start of the worker -> job ended: " << latency
              << " ms\n";
    EXPECT_LE(latency, 2000);
    EXPECT_TRUE(HasEvent(d, id, "watchdog", "over its limit of 4 GiB"));
    CliResult logs = d.Cli({"logs", id});
    EXPECT_NE((logs.out + logs.err).find("killed by the watchdog"), std::string::npos)
        << logs.out << logs.err;
  }
}

// A 40 GiB job must not be placed on a GPU where a process outside gpuslice
// holds 70 GiB: it would fail with out of memory (measured). Here a
// foreign process holds 30 GiB of GPU 0 (40 GiB): a 25 GiB job goes to GPU
// 1; a 20 GiB job then fits nowhere and waits, saying why; when the foreign
// process ends it starts on GPU 0.
TEST_F(WatchdogE2E, ForeignMemoryMakesAJobGoElsewhereOrWaitAndShowsInGpus) {
  Daemon d("2xA100-40GB");
  d_ = &d;
  Start(d);
  foreign_ = StartForeign(d, "30GiB", "0");
  auto foreign_listed = [&] {
    json g = Gpus(d);
    if (!g.is_object()) return false;
    for (const json& p : g["gpus"][0].value("foreign_processes", json::array())) {
      if (p.value("pid", 0) == foreign_) return true;
    }
    return false;
  };
  ASSERT_TRUE(Daemon::WaitFor(foreign_listed, 30)) << Gpus(d).dump();
  EXPECT_GE(Gpus(d)["gpus"][0].value("foreign_memory", uint64_t{0}), 30ull << 30);
  CliResult table = d.Cli({"gpus"});
  EXPECT_NE(table.out.find(std::to_string(foreign_)), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("outside gpuslice"), std::string::npos) << table.out;

  std::string a = Submit(d, {"--mem", "25GiB", "--compute", "20%", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "running"; }));
  EXPECT_EQ(Job(d, a)["allocation"]["gpu_indices"], json::array({1})) << Job(d, a).dump();
  std::string b = Submit(d, {"--mem", "20GiB", "--compute", "20%", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] {
    return Job(d, b).value("waiting_for", "").find("held by processes outside gpuslice") !=
           std::string::npos;
  })) << Job(d, b).dump();
  EXPECT_NE(Job(d, b)["waiting_for"].get<std::string>().find("(pid " + std::to_string(foreign_)),
            std::string::npos)
      << Job(d, b).dump();
  EXPECT_EQ(State(d, b), "queued");
  ASSERT_TRUE(Daemon::WaitFor([&] { return HasEvent(d, "", "foreign_process", "outside gpuslice"); }));

  kill(foreign_, SIGKILL);
  waitpid(foreign_, nullptr, 0);
  foreign_ = -1;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "running"; })) << Job(d, b).dump();
  EXPECT_EQ(Job(d, b)["allocation"]["gpu_indices"], json::array({0}));
  ASSERT_EQ(d.Cli({"cancel", a}).exit_code, 0);
  ASSERT_EQ(d.Cli({"cancel", b}).exit_code, 0);
}

// On a GPU in MIG mode: a process outside gpuslice in a MIG
// instance (NVML lists it on the GPU with that instance's ids) takes the
// instance: a job asking for that profile gets the other one, the next
// waits, and gets the instance once the foreign process ends.
TEST_F(WatchdogE2E, AForeignProcessInAMigInstanceKeepsJobsOffIt) {
  Daemon d("1xA100-40GB:mig=1g.5gb*2");
  d_ = &d;
  Start(d);
  json gpus = Gpus(d);
  ASSERT_TRUE(gpus.is_object() && gpus["gpus"][0]["mig"].size() == 2) << gpus.dump();
  const std::string busy = gpus["gpus"][0]["mig"][0]["uuid"];
  const std::string other = gpus["gpus"][0]["mig"][1]["uuid"];
  foreign_ = StartForeign(d, "1GiB", busy);
  auto foreign_in_busy = [&] {
    json g = Gpus(d);
    if (!g.is_object()) return false;
    for (const json& m : g["gpus"][0]["mig"]) {
      if (m.value("uuid", "") != busy) continue;
      for (const json& p : m.value("foreign_processes", json::array())) {
        if (p.value("pid", 0) == foreign_) return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(Daemon::WaitFor(foreign_in_busy, 30)) << Gpus(d).dump();
  EXPECT_EQ(Gpus(d)["gpus"][0]["foreign_processes"][0].value("mig_uuid", ""), busy);

  std::string a = Submit(d, {"--mig", "1g.5gb", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "running"; })) << Job(d, a).dump();
  EXPECT_EQ(Job(d, a)["allocation"]["gpu_uuids"], json::array({other})) << Job(d, a).dump();
  std::string b = Submit(d, {"--mig", "1g.5gb", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] {
    return Job(d, b)
               .value("waiting_for", "")
               .find("held by processes outside gpuslice (pid " + std::to_string(foreign_)) !=
           std::string::npos;
  })) << Job(d, b).dump();
  EXPECT_EQ(State(d, b), "queued");

  kill(foreign_, SIGKILL);
  waitpid(foreign_, nullptr, 0);
  foreign_ = -1;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "running"; })) << Job(d, b).dump();
  EXPECT_EQ(Job(d, b)["allocation"]["gpu_uuids"], json::array({busy}));
  ASSERT_EQ(d.Cli({"cancel", a}).exit_code, 0);
  ASSERT_EQ(d.Cli({"cancel", b}).exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::e2e
