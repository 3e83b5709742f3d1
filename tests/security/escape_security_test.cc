// Jobs tracked by cgroup. A job's
// child leaves its session and process group (setsid; with LD_PRELOAD unset
// and a double fork, as a daemon would) and keeps GPU memory after the
// job's leader exited. The job must stay running, its allocation must not be
// handed to anyone else, and cancel must end the escapee.

#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

bool Terminal(const std::string& state) {
  return state == "exited" || state == "cancelled" || state == "failed" || state == "timed_out";
}

// Gone, or a zombie nobody reaped yet (it holds nothing).
bool Dead(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = s.rfind(')');
  return paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] == 'Z';
}

class Escape : public SecurityTest {
 protected:
  void EscapeAndHold(const std::vector<std::string>& how) {
    ASSERT_NO_FATAL_FAILURE(StartDaemon());  // 1 x 80 GB.
    const std::string esc = Drop("escapee.out"), other = Drop("other.out");
    std::vector<std::string> args = {"--mem",    "40GiB",       "--name",  "escaper", "--",
                                     Attacker(), "setsid-hold", "--bytes", "30GiB",   "--hold",
                                     "90",       "--out",       esc};
    args.insert(args.end(), how.begin(), how.end());
    std::string id = Submit(&a_, args);
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(WaitFor([&] { return FirstAt(esc, "leader exits").has_value(); }, 30))
        << ReadFile(esc);
    ASSERT_TRUE(FirstAt(esc, "alloc ok").has_value()) << "the escapee got no memory:\n"
                                                      << ReadFile(esc);
    pid_t escapee = 0;
    for (const auto& l : Lines(esc)) {
      if (l.rfind("start pid=", 0) == 0) escapee = std::atoi(l.c_str() + 10);
    }
    ASSERT_GT(escapee, 0);
    // The leader is gone; the escapee is still the job's.
    WaitFor([&] { return Terminal(State(id)); }, 3);
    EXPECT_EQ(State(id), "running")
        << "the job was recorded as ended while its escaped child holds "
           "30 GiB: "
        << Job(id).dump();

    // Another user's job that fits only in the memory the escapee's job holds
    // must wait, not start and fail with out of memory.
    std::string id_b = Submit(&b_, {"--mem", "55GiB", "--name", "victim", "--", Attacker(), "alloc",
                                    "--bytes", "50GiB", "--hold", "0.5", "--out", other});
    ASSERT_FALSE(id_b.empty());
    bool started = WaitFor([&] { return State(id_b) != "queued"; }, 3);
    EXPECT_FALSE(started) << "the escaper's allocation was handed out while its escapee holds it: "
                          << Job(id_b).dump() << "\n"
                          << ReadFile(other);

    // cancel ends the escapee too (kill_grace is 1 s).
    ProcResult c = Cli(&a_, {"cancel", id});
    EXPECT_TRUE(c.exit_code == 0 || Terminal(State(id))) << c.err;
    EXPECT_TRUE(WaitFor([&] { return Dead(escapee); }, 6))
        << "cancel left the escapee (pid " << escapee << ") holding its memory";
    // Then the other job runs and gets its memory: nobody got out of memory.
    ASSERT_TRUE(WaitFor([&] { return Terminal(State(id_b)); }, 40)) << Job(id_b).dump();
    json jb = Job(id_b);
    EXPECT_EQ(jb.value("exit_code", -1), 0) << jb.dump() << "\n" << ReadFile(other);
    EXPECT_TRUE(FirstAt(other, "alloc ok").has_value()) << ReadFile(other);
    if (!Dead(escapee)) kill(escapee, SIGKILL);
  }
};

// A job's child that calls setsid must not leave the job.
TEST_F(Escape, AChildThatCallsSetsidStaysInTheJobAndCancelEndsIt) { EscapeAndHold({}); }

// The same with LD_PRELOAD unset, daemonised (double fork) for good
// measure.
TEST_F(Escape, ADaemonisedChildWithoutTheShimStaysInTheJobAndCancelEndsIt) {
  EscapeAndHold({"--unset-preload", "--double-fork"});
}

}  // namespace
}  // namespace gpuslice::security
