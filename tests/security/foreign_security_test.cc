// Foreign GPU use. A process that
// belongs to no job (a local user outside the socket group, using the GPU
// directly) holds 70 GiB of an 80 GiB GPU: placement must charge it, so a
// 40 GiB job is never placed where NVML says it cannot fit, and the daemon
// shows the process with its pid and user.

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
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

// A 40 GiB job must not be placed on a GPU where a foreign process holds
// 70 GiB, to fail with out of memory and no event.
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
  // It takes no memory a job was promised: the default (foreign = protect)
  // leaves it running.
  EXPECT_EQ(kill(foreign, 0), 0) << "a foreign process that took nothing promised was ended";
  // Once the foreign process is gone the job runs, and gets its memory.
  kill(-foreign, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return Terminal(State(id)); }, 40)) << Job(id).dump();
  json j = Job(id);
  EXPECT_EQ(j.value("exit_code", -1), 0) << j.dump() << "\n" << ReadFile(out);
  EXPECT_TRUE(FirstAt(out, "alloc ok").has_value()) << ReadFile(out);
}

// With two GPUs the job goes to the other one.
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

// A GPU program started outside gpuslice by an ordinary user can make a
// running job fail inside its own limit (foreign = report). By
// default such a process is ended once it takes memory a job was promised,
// within two samples, and the job then gets all of its limit.
TEST_F(Foreign, AnOrdinaryUsersProgramThatTakesPromisedMemoryIsEndedAndTheJobGetsItsLimit) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());  // One 80 GB GPU; defaults.
  const std::string go = Drop("go"), out = Drop("job.out"), theirs = Drop("foreign.out");
  // The job runs, holding little until the test says go, then 55 of its 60 GiB.
  std::string id = Submit(&a_, {"--mem", "60GiB", "--name", "promised", "--", "sh", "-c",
                                "while [ ! -e " + go + " ]; do sleep 0.1; done; exec " +
                                    Attacker() + " alloc --bytes 55GiB --hold 1 --out " + out});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 30)) << Job(id).dump();
  // gsattack_c, outside gpuslice, takes 40 GiB: 20 of them were promised to the job.
  pid_t foreign =
      SpawnAs(&c_, {Attacker(), "alloc", "--bytes", "40GiB", "--hold", "60", "--out", theirs},
              ForeignEnv(), "foreign");
  ASSERT_GT(foreign, 0);
  ASSERT_TRUE(WaitFor([&] { return FirstAt(theirs, "alloc ok").has_value(); }, 30))
      << ReadFile(theirs);
  const int64_t got = *FirstAt(theirs, "alloc ok");
  ASSERT_TRUE(WaitFor([&] { return waitpid(foreign, nullptr, WNOHANG) == foreign; }, 10))
      << "the foreign process that took promised memory was not ended";
  const int64_t held = LastAt(theirs, "alive").value_or(got) - got;
  std::cerr << "the foreign process held 40 GiB for " << held << " ms\n";
  // Two samples (it is ended from its second, so that a job's process seen
  // once after its job ended is never taken for foreign), and the slack of a
  // busy machine.
  EXPECT_LE(held, 2 * 1000 + 750);
  const std::string events = Cli(nullptr, {"events", "--json"}).out;
  EXPECT_NE(events.find("killed: it takes memory promised to jobs"), std::string::npos)
      << "no foreign_process event says why it was ended:\n"
      << events;
  // The job, inside its limit, gets its memory.
  std::ofstream(go) << "go\n";
  ASSERT_TRUE(WaitFor([&] { return Terminal(State(id)); }, 30)) << Job(id).dump();
  json j = Job(id);
  EXPECT_EQ(j.value("exit_code", -1), 0) << j.dump() << "\n" << ReadFile(out);
  EXPECT_TRUE(FirstAt(out, "alloc ok").has_value()) << ReadFile(out);
}

// Foreign processes are shown in gpus and top with their pid and user.
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
