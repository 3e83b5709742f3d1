// Slurm steps (issue 15, docs/SLURM.md) against the users of the node. A
// step's slice is asked for by slurmstepd with its effective ids dropped to
// the job's user (the SPANK plugin's user_init): the slice is that user's.
// It is bound to the calling process only (no pid is taken from a request),
// and the processes the daemon may signal for it are those below that
// process that run as the slice's owner: never the holder (root's
// slurmstepd), never another user's process. On a node with `slurm_only`,
// a user gets a slice through slurmstepd alone: their own processes (real
// uid theirs) are refused whatever they ask for.
//
// fake_stepd.py stands in for slurmstepd (a root process acting for a user);
// tests/slurm runs the real one.

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

using Slurm = SecurityTest;

// Ended: no such process, or a zombie nobody reaped yet.
bool Gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return true;
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() &&
         (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

// The stepd's output line, once there.
json ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return json();
  return json::parse(line, nullptr, false);
}

TEST_F(Slurm, OnASlurmOnlyNodeAUserGetsASliceThroughSlurmstepdAlone) {
  StartDaemon(DaemonOptions().Set("slurm_only=true"));
  // The user's own process asks for the very request slurmstepd makes.
  ProcResult own = RunAs(&a_, {"/usr/bin/curl", "-sS", "--unix-socket", socket_path(), "-X", "POST",
                               "-H", "Content-Type: application/json", "-d",
                               R"({"mode":"external","bound_to_caller":true,"mem":"1GiB"})",
                               "http://gpuslice/v1/jobs"});
  EXPECT_NE(own.out.find("slurm_only"), std::string::npos) << own.out << own.err;
  ProcResult submit = Cli(&a_, {"submit", "--mem", "1GiB", "--", "true"});
  EXPECT_NE(submit.exit_code, 0);
  EXPECT_NE(submit.err.find("Slurm"), std::string::npos) << submit.err;
  // slurmstepd (real uid root, effective uid the user's) gets it, as the user.
  SpawnAs(nullptr,
          {"/bin/sh", "-c", "sleep 600 | /usr/bin/python3 \"$@\"", "sh", GPUSLICE_SEC_FAKE_STEPD,
           socket_path(), std::to_string(a_.uid), std::to_string(a_.gid)},
          {}, "stepd");
  json line;
  ASSERT_TRUE(WaitFor([&] { return !(line = ReadLine(SpawnLog("stepd") + ".out")).is_null(); }, 20))
      << ReadLine(SpawnLog("stepd") + ".err");
  EXPECT_EQ(line["status"], 201) << line.dump();
  EXPECT_EQ(line["job"]["user"], a_.name) << line.dump();
  EXPECT_EQ(line["job"]["holder_pid"], line["holder"]) << line.dump();
}

TEST_F(Slurm, ABoundSliceNeverSignalsItsHolderNorAnotherUsersProcess) {
  StartDaemon();
  SpawnAs(nullptr,
          {"/bin/sh", "-c", "sleep 600 | /usr/bin/python3 \"$@\"", "sh", GPUSLICE_SEC_FAKE_STEPD,
           socket_path(), std::to_string(a_.uid), std::to_string(a_.gid), std::to_string(a_.uid),
           std::to_string(b_.uid)},
          {}, "stepd");
  json line;
  ASSERT_TRUE(WaitFor([&] { return !(line = ReadLine(SpawnLog("stepd") + ".out")).is_null(); }, 20))
      << ReadLine(SpawnLog("stepd") + ".err");
  ASSERT_EQ(line["status"], 201) << line.dump();
  const pid_t holder = line["holder"].get<pid_t>();
  const pid_t mine = line["tasks"][std::to_string(a_.uid)].get<pid_t>();
  const pid_t others = line["tasks"][std::to_string(b_.uid)].get<pid_t>();
  const std::string id = std::to_string(line["job"]["id"].get<uint64_t>());
  // User B cannot end it (nor anything under it).
  EXPECT_NE(Cli(&b_, {"cancel", id}).exit_code, 0);
  EXPECT_EQ(State(id), "running");
  // An admin's cancel ends the owner's process below the holder, then the slice.
  ASSERT_EQ(Cli(nullptr, {"cancel", id}).exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return State(id) == "cancelled"; }, 10)) << State(id);
  EXPECT_TRUE(Gone(mine)) << "the owner's task under the holder is still running";
  EXPECT_FALSE(Gone(holder)) << "the holder (slurmstepd) was signalled";
  EXPECT_FALSE(Gone(others)) << "another user's process under the holder was signalled";
  kill(others, SIGKILL);
}

}  // namespace
}  // namespace gpuslice::security
