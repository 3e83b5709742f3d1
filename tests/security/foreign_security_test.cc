// Foreign GPU use (issue 13: escape 5 of the list, item 5). A process that
// belongs to no job (a local user outside the socket group, using the GPU
// directly) holds 70 GiB of an 80 GiB GPU: placement must charge it, so a
// 40 GiB job is never placed where NVML says it cannot fit, and the daemon
// shows the process with its pid and user.

#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

bool Terminal(const std::string& state) {
  return state == "exited" || state == "cancelled" || state == "failed" || state == "timed_out";
}

class Foreign : public SecurityTest {
 protected:
  // Starts the foreign process on CUDA device `device` and waits until it
  // holds its memory and the daemon has had time to sample NVML (it samples
  // once a second; two samples).
  pid_t HoldForeign(const std::string& bytes, int device) {
    const std::string out = Drop("foreign.out");
    pid_t pid = SpawnAs(&c_,
                        {Attacker(), "alloc", "--bytes", bytes, "--hold", "120", "--device",
                         std::to_string(device), "--out", out},
                        ForeignEnv(), "foreign");
    EXPECT_GT(pid, 0);
    EXPECT_TRUE(WaitFor([&] { return FirstAt(out, "alloc ok").has_value(); }, 30)) << ReadFile(out);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    return pid;
  }
};

// Issue 13, escape 5: "a 40 GiB job was placed on a GPU where a foreign
// process held 70 GiB and failed with out of memory, with no event".
TEST_F(Foreign, AJobIsNotPlacedWhereAForeignProcessHolds70GiB) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());  // One 80 GB GPU.
  pid_t foreign = HoldForeign("70GiB", 0);
  const std::string out = Drop("job.out");
  std::string id = Submit(&a_, {"--mem", "40GiB", "--name", "after-foreign", "--", Attacker(),
                                "alloc", "--bytes", "36GiB", "--hold", "0.5", "--out", out});
  ASSERT_FALSE(id.empty());
  bool placed = WaitFor([&] { return State(id) != "queued"; }, 3);
  EXPECT_FALSE(placed) << "placed beside a foreign process holding 70 GiB of 80: " << Job(id).dump()
                       << "\n"
                       << ReadFile(out);
  // Once the foreign process is gone the job runs, and gets its memory.
  kill(-foreign, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return Terminal(State(id)); }, 40)) << Job(id).dump();
  json j = Job(id);
  EXPECT_EQ(j.value("exit_code", -1), 0) << j.dump() << "\n" << ReadFile(out);
  EXPECT_TRUE(FirstAt(out, "alloc ok").has_value()) << ReadFile(out);
}

// Issue 13, item 5: with two GPUs the job goes to the other one.
TEST_F(Foreign, ForeignMemoryIsChargedToItsGpuSoAJobGoesToTheOtherOne) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions().Gpus("2xH100-80GB")));
  json gpus = Gpus();
  ASSERT_TRUE(gpus.contains("gpus") && gpus["gpus"].size() == 2) << gpus.dump();
  const std::string busy_uuid = gpus["gpus"][0].value("uuid", "");
  HoldForeign("70GiB", 0);
  const std::string out = Drop("job.out");
  std::string id = Submit(&a_, {"--mem", "40GiB", "--name", "beside-foreign", "--", Attacker(),
                                "alloc", "--bytes", "36GiB", "--hold", "0.5", "--out", out});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return Terminal(State(id)); }, 40)) << Job(id).dump();
  json j = Job(id);
  EXPECT_EQ(j.value("exit_code", -1), 0) << "the job failed (out of memory?): " << j.dump() << "\n"
                                         << ReadFile(out);
  ASSERT_TRUE(j.contains("allocation")) << j.dump();
  for (const json& u : j["allocation"]["gpu_uuids"]) {
    EXPECT_NE(u.get<std::string>(), busy_uuid) << "placed on the GPU the foreign process fills";
  }
}

// Issue 13, item 5: "shown in gpus and top with their pid and user".
TEST_F(Foreign, AForeignProcessIsShownInGpusWithItsPidAndUser) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  HoldForeign("10GiB", 0);
  pid_t pid = 0;
  for (const auto& l : Lines(Drop("foreign.out"))) {
    if (l.rfind("start pid=", 0) == 0) pid = std::atoi(l.c_str() + 10);
  }
  ASSERT_GT(pid, 0);
  ProcResult text = Cli(nullptr, {"gpus"});
  EXPECT_NE(text.out.find(std::to_string(pid)), std::string::npos)
      << "gpuslice gpus does not show the foreign process's pid:\n"
      << text.out;
  EXPECT_NE(text.out.find(c_.name), std::string::npos)
      << "gpuslice gpus does not show the foreign process's user:\n"
      << text.out;
}

}  // namespace
}  // namespace gpuslice::security
