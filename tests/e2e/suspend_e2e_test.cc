// End-to-end: suspend and resume (docs/SUSPEND.md) with the real gpusliced,
// gpuslice, shim and the simulated GPU's checkpoint API. The worker fills its
// memory with a pattern and checks every byte when it ends
// (gpuslice-demo-worker --verify): 0 bytes may differ after any round trip.

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// A job holding `worker_mem` of a `slice_mem` slice, pattern-filled, that
// launches kernels for `seconds` and then checks its memory.
std::string SubmitVerifier(Daemon& d, const std::string& slice_mem, const std::string& worker_mem,
                           int seconds, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--mem", slice_mem, "--compute", "50%"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(),
              {"--", WorkerPath(), "--name", "verifier", "--mem", worker_mem, "--verify", "--duty",
               "50%", "--kernel-us", "1000", "--seconds", std::to_string(seconds)});
  return Submit(d, args);
}

// The GPUs as `gpuslice gpus --json` lists them.
json Gpus(Daemon& d) {
  json j = json::parse(d.Cli({"gpus", "--json"}).out, nullptr, false);
  return j.is_object() && j.contains("gpus") ? j["gpus"] : json::array();
}

// The GPU memory NVML shows in use on GPU `index`.
uint64_t GpuMemoryUsed(Daemon& d, size_t index = 0) {
  json gpus = Gpus(d);
  if (gpus.size() <= index) return ~0ull;
  return gpus[index].value("memory_used", ~0ull);
}

// Its memory is filled once the shim counts it in the slice.
bool Holds(Daemon& d, const std::string& id, uint64_t bytes) {
  json j = Job(d, id);
  return j.is_object() && j.contains("usage") &&
         j["usage"].value("memory_used_bytes", uint64_t{0}) >= bytes;
}

constexpr uint64_t kGiB = 1ull << 30;

class SuspendE2E : public ::testing::Test {
 protected:
  void Start(Daemon& d) {
    d_ = &d;
    ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  }
  void TearDown() override {
    if (HasFailure() && d_) std::cerr << "daemon log:\n" << ReadFile(d_->dir() + "/daemon.log");
  }
  // The job ended with exit 0 and its worker found every byte as it left it.
  void ExpectVerified(Daemon& d, const std::string& id) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "exited"; }, 120))
        << Job(d, id).dump();
    EXPECT_EQ(Job(d, id).value("exit_code", -1), 0) << Job(d, id).dump();
    std::string out = d.Cli({"logs", id}).out;
    EXPECT_NE(out.find(": 0 bytes differ"), std::string::npos) << out;
  }
  Daemon* d_ = nullptr;
};

TEST_F(SuspendE2E, ARoundTripFreesTheGpuForAnotherJobAndKeepsEveryByte) {
  Daemon d("1xH100-80GB");
  Start(d);
  const uint64_t idle = GpuMemoryUsed(d);
  std::string a = SubmitVerifier(d, "60GiB", "2GiB", 6);
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, 2 * kGiB); }, 60)) << Job(d, a).dump();

  CliResult s = d.Cli({"suspend", a});
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err;
  EXPECT_NE(s.out.find("suspended"), std::string::npos) << s.out;
  EXPECT_EQ(State(d, a), "suspended");
  EXPECT_TRUE(HasEvent(d, a, "suspended"));
  EXPECT_NE(d.Cli({"ps"}).out.find("suspended"), std::string::npos);
  // NVML shows the memory free again (the context went too).
  EXPECT_TRUE(Daemon::WaitFor([&] { return GpuMemoryUsed(d) <= idle; }, 30))
      << GpuMemoryUsed(d) << " > " << idle;

  // Another job uses the memory, and fills it with its own pattern.
  std::string b = SubmitVerifier(d, "70GiB", "2GiB", 1);
  ExpectVerified(d, b);

  CliResult r = d.Cli({"resume", a});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(State(d, a), "running");
  EXPECT_TRUE(HasEvent(d, a, "resumed"));
  ExpectVerified(d, a);
  json j = Job(d, a);
  EXPECT_GT(j.value("suspended_ms", int64_t{0}), 0) << j.dump();
}

TEST_F(SuspendE2E, ResumeWaitsForRoomAndAJobWithoutCudaIsNotSuspended) {
  Daemon d("1xH100-80GB");
  Start(d);
  std::string sleeper = Submit(d, {"--mem", "1GiB", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, sleeper) == "running"; }));
  CliResult no = d.Cli({"suspend", sleeper});
  EXPECT_NE(no.exit_code, 0);
  EXPECT_NE(no.err.find("no CUDA process"), std::string::npos) << no.err;
  EXPECT_EQ(State(d, sleeper), "running");
  ASSERT_EQ(d.Cli({"cancel", sleeper}).exit_code, 0);

  std::string a = SubmitVerifier(d, "60GiB", "1GiB", 4);
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, kGiB); }, 60));
  ASSERT_EQ(d.Cli({"suspend", a}).exit_code, 0);
  std::string b = Submit(d, {"--mem", "60GiB", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "running"; }));
  CliResult r = d.Cli({"resume", a});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("lack room"), std::string::npos) << r.err;
  EXPECT_EQ(State(d, a), "suspended");
  ASSERT_EQ(d.Cli({"cancel", b}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, b) == "cancelled"; }));
  ASSERT_EQ(d.Cli({"resume", a}).exit_code, 0);
  ExpectVerified(d, a);
}

TEST_F(SuspendE2E, PreemptionSuspendsTheVictimAndResumesItAfterwards) {
  Daemon d("1xH100-80GB", {"--set", "preemption=lower", "--set", "preemption_grace=2s"});
  Start(d);
  std::string low = SubmitVerifier(d, "60GiB", "2GiB", 6, {"--priority", "low"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, low, 2 * kGiB); }, 60));
  std::string high = SubmitVerifier(d, "60GiB", "4GiB", 1, {"--priority", "high"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, low) == "suspended"; }, 60))
      << Job(d, low).dump();
  ExpectVerified(d, high);
  // Back by itself once the high-priority job is gone, with nothing lost.
  ExpectVerified(d, low);
  EXPECT_TRUE(HasEvent(d, low, "preempted"));
  EXPECT_TRUE(HasEvent(d, low, "resumed"));
}

TEST_F(SuspendE2E, ADaemonRestartWhileSuspendedLosesNothing) {
  Daemon d("1xH100-80GB");
  Start(d);
  std::string a = SubmitVerifier(d, "40GiB", "2GiB", 4);
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, 2 * kGiB); }, 60));
  ASSERT_EQ(d.Cli({"suspend", a}).exit_code, 0);
  d.Kill(SIGKILL);
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  EXPECT_EQ(State(d, a), "suspended");
  ASSERT_EQ(d.Cli({"resume", a}).exit_code, 0);
  ExpectVerified(d, a);
}

// `gpuslice move`: the job's memory goes with it to the other GPU, its
// slice's compute gate follows it to that GPU's board, and it goes on
// launching and finds every byte as it left it.
TEST_F(SuspendE2E, AMovedJobRunsOnTheOtherGpuWithEveryByteAndItsShare) {
  Daemon d("2xH100-80GB");
  Start(d);
  const uint64_t idle = GpuMemoryUsed(d, 1);
  // Its shim says where its compute gate is (info level, on its stderr).
  // 15 s: it must still run when the move comes, after its 2 GiB are filled
  // and the waits below, on a loaded machine too (8 s failed once in CI).
  CliResult sub = d.CliWithInput(
      {"submit", "--mem", "60GiB", "--compute", "50%", "--", WorkerPath(), "--name", "verifier",
       "--mem", "2GiB", "--verify", "--duty", "50%", "--kernel-us", "1000", "--seconds", "15"},
      "", {"GPUSLICE_LOG_LEVEL=info"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  const std::string a = Trim(sub.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, 2 * kGiB); }, 60)) << Job(d, a).dump();
  // Its compute gate is on its first GPU's board before it moves.
  auto logs = [&] {
    const CliResult r = d.Cli({"logs", a});  // The job's stderr on ours.
    return r.out + r.err;
  };
  ASSERT_TRUE(Daemon::WaitFor([&] { return logs().find("compute gate on") != std::string::npos; }))
      << logs();
  const json gpus = Gpus(d);
  ASSERT_EQ(gpus.size(), 2u);
  const std::string from = Job(d, a)["allocation"]["gpu_uuids"][0];
  const size_t to_index = gpus[0]["uuid"] == from ? 1 : 0;
  const std::string to = gpus[to_index]["uuid"];
  const uint64_t idle_to = GpuMemoryUsed(d, to_index);

  CliResult m = d.Cli({"move", a, "--gpu", to});
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  EXPECT_NE(m.out.find("moved"), std::string::npos) << m.out;
  EXPECT_EQ(State(d, a), "running");
  EXPECT_EQ(Job(d, a)["allocation"]["gpu_uuids"][0], to) << Job(d, a).dump();
  EXPECT_TRUE(HasEvent(d, a, "moved"));
  // NVML: its memory is on the new GPU, the old one is as before it came.
  EXPECT_TRUE(
      Daemon::WaitFor([&] { return GpuMemoryUsed(d, to_index) >= idle_to + 2 * kGiB; }, 30));
  EXPECT_TRUE(Daemon::WaitFor([&] { return GpuMemoryUsed(d, 1 - to_index) <= idle; }, 30))
      << GpuMemoryUsed(d, 1 - to_index) << " > " << idle;
  // Moving it onto the GPU it is on is refused, naming why.
  CliResult again = d.Cli({"move", a, "--gpu", to});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("already"), std::string::npos) << again.err;
  ExpectVerified(d, a);
  EXPECT_NE(logs().find("the slice moved to " + to), std::string::npos) << logs();
}

// The job's process is killed while its GPU memory is in host memory: the
// job ends, nothing of it stays on the GPU or in the queue's books.
TEST_F(SuspendE2E, AJobWhoseProcessIsKilledWhileSuspendedEndsAndLeavesNothing) {
  Daemon d("1xH100-80GB");
  Start(d);
  const uint64_t idle = GpuMemoryUsed(d);
  std::string a = SubmitVerifier(d, "60GiB", "2GiB", 60);
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, 2 * kGiB); }, 60));
  ASSERT_EQ(d.Cli({"suspend", a}).exit_code, 0);
  const int pid = Job(d, a).value("pid", 0);
  ASSERT_GT(pid, 1);
  ASSERT_EQ(kill(-pid, SIGKILL), 0);  // Its process group: the worker.
  ASSERT_TRUE(Daemon::WaitFor(
      [&] {
        const std::string st = State(d, a);
        return st != "suspended" && st != "running";
      },
      60))
      << Job(d, a).dump();
  EXPECT_NE(Job(d, a).value("exit_code", 0), 0) << Job(d, a).dump();  // Killed, not done.
  EXPECT_TRUE(Daemon::WaitFor([&] { return GpuMemoryUsed(d) <= idle; }, 30));
  // Its room is the queue's again.
  std::string b = SubmitVerifier(d, "70GiB", "2GiB", 1);
  ExpectVerified(d, b);
}

// While a job is suspended, a CUDA process it starts gets nothing on the
// GPU (its slice is closed), and the suspended one loses nothing.
TEST_F(SuspendE2E, AProcessTheJobStartsWhileSuspendedGetsNoGpuMemory) {
  Daemon d("1xH100-80GB");
  Start(d);
  const std::string go = d.dir() + "/go";
  const std::string w = WorkerPath();
  const std::string script = w + " --name first --mem 1GiB --verify --duty 50% --kernel-us 1000" +
                             " --seconds 6 & while [ ! -e " + go + " ]; do sleep 0.1; done; " + w +
                             " --name second --mem 1GiB --seconds 1; echo second=$?; wait $!";
  std::string a = Submit(d, {"--mem", "40GiB", "--compute", "50%", "--", "sh", "-c", script});
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, kGiB); }, 60)) << Job(d, a).dump();
  ASSERT_EQ(d.Cli({"suspend", a}).exit_code, 0);
  ASSERT_EQ(State(d, a), "suspended");
  {
    FILE* f = std::fopen(go.c_str(), "w");  // The second process starts now.
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  auto logs = [&] {
    const CliResult r = d.Cli({"logs", a});
    return r.out + r.err;
  };
  ASSERT_TRUE(Daemon::WaitFor([&] { return logs().find("second=") != std::string::npos; }, 60))
      << logs();
  EXPECT_EQ(logs().find("second=0"), std::string::npos) << logs();
  // Not even a context: the slice grants no memory while suspended.
  EXPECT_NE(logs().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << logs();
  EXPECT_EQ(State(d, a), "suspended");
  ASSERT_EQ(d.Cli({"resume", a}).exit_code, 0);
  ExpectVerified(d, a);
}

TEST_F(SuspendE2E, IdleReclaimSuspendsAndACancelledSuspendedJobFreesEverything) {
  Daemon d("1xH100-80GB", {"--set", "idle_after=2s", "--set", "idle_action=suspend", "--set",
                           "idle_action_always=true"});
  Start(d);
  const uint64_t idle = GpuMemoryUsed(d);
  // 5% busy: idle by the default 30% threshold.
  std::string a = Submit(d, {"--mem", "20GiB", "--", WorkerPath(), "--mem", "1GiB", "--verify",
                             "--duty", "5%", "--seconds", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "suspended"; }, 60)) << Job(d, a).dump();
  EXPECT_NE(Job(d, a).value("reason", "").find("idle reclaim"), std::string::npos);
  ASSERT_EQ(d.Cli({"cancel", a}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, a) == "cancelled"; }, 60));
  EXPECT_TRUE(Daemon::WaitFor([&] { return GpuMemoryUsed(d) <= idle; }, 30));
}

}  // namespace
}  // namespace gpuslice::e2e
