// Slurm steps (docs/SLURM.md) against the users of the node. A
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

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

// The real uid in /proc/PID/status; -1 when there is no such process.
int64_t RealUid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Uid:", 0) == 0) return std::strtoll(line.c_str() + 4, nullptr, 10);
  }
  return -1;
}

// A root process (sleep) started so that it takes pid `target`: the next
// pid the kernel gives is ns_last_pid + 1. Another fork on the machine may
// come first; the pid is then another and the caller tries again.
pid_t ForkRootAt(pid_t target) {
  const int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const std::string last = std::to_string(target - 1);
  const bool set = write(fd, last.data(), last.size()) == ssize_t(last.size());
  close(fd);
  if (!set) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sleep", "sleep", "120", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Ends the root process the test started, whatever the test's outcome.
struct Reaped {
  pid_t pid = -1;
  ~Reaped() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// A daemon that judged a caller by who owns the caller's pid when the
// request is handled, not when it connected, would give a user who cycles
// pids (or holds up to 128 connections and waits) a slice outside Slurm,
// bound to an unrelated root process.
TEST_F(Slurm, AUsersConnectionWhosePidARootProcessTookIsRefusedNotTakenForSlurmstepd) {
  StartDaemon(DaemonOptions().Set("slurm_only=true"));
  const std::string body = R"({"mode":"external","bound_to_caller":true,"mem":"1GiB"})";
  Reaped root;
  std::string out, go;
  pid_t user_pid = -1;
  int attempt = 0;
  for (; attempt < 10 && root.pid < 0; ++attempt) {
    out = Drop("hand-over-" + std::to_string(attempt) + ".out");
    go = Drop("go-" + std::to_string(attempt));
    // The user's process connects, is answered once, hands the connection
    // to its child and exits (RunAs reaps it: its pid is free).
    ProcResult r = RunAs(&a_, {Attacker(), "hand-over", "--to", unix_ep(), "--go", go, "--out", out,
                               "--body", body});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::vector<std::string> lines = Lines(out);
    ASSERT_FALSE(lines.empty()) << r.err;
    ASSERT_EQ(lines[0].rfind("first 200 pid=", 0), 0u) << lines[0];
    user_pid = static_cast<pid_t>(std::atoi(lines[0].c_str() + 14));
    const pid_t p = ForkRootAt(user_pid);
    ASSERT_GT(p, 0) << "cannot write /proc/sys/kernel/ns_last_pid or fork";
    if (p == user_pid) {
      root.pid = p;
    } else {
      Reaped missed{p};  // Something else forked first; its child stays idle and is ended.
    }
  }
  ASSERT_GT(root.pid, 0) << "no attempt put a root process at the user's pid";
  std::cerr << "a root process has pid " << user_pid << " (attempt " << attempt << ")\n";
  // What the daemon's old check saw: a process of real uid root at the
  // caller's pid.
  ASSERT_EQ(RealUid(user_pid), 0);
  std::ofstream(go) << "go\n";
  std::string answer;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& l : Lines(out)) {
          if (l.rfind("answer ", 0) == 0) answer = l;
        }
        return !answer.empty();
      },
      20))
      << "the user's child never sent its request";
  EXPECT_EQ(answer.rfind("answer 403 ", 0), 0u) << answer;
  EXPECT_NE(answer.find("(pid " + std::to_string(user_pid) + ") has ended"), std::string::npos)
      << answer;
  json list = json::parse(Cli(nullptr, {"ps", "--all", "--json"}).out, nullptr, false);
  ASSERT_TRUE(list.is_object()) << "ps --json answered nothing";
  EXPECT_TRUE(list["jobs"].empty()) << "a slice was handed out: " << list.dump();
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
