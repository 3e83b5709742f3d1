// Suspension (docs/SUSPEND.md) against its own user: a job suspended by the
// daemon (here, so that another user's job could have its memory) is undone
// by its user through the driver's restore + unlock, which any process of the
// same uid may call. The daemon must see the process back on the GPU and end
// it, so that the GPU it gave away is not shared behind its back. And the
// victim's job, placed in the freed room, keeps running with its memory.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <tuple>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

bool HasPrefix(const std::string& path, const std::string& prefix) {
  return FirstAt(path, prefix).has_value();
}

class Suspend : public SecurityTest {};

TEST_F(Suspend, AUserWhoRestoresTheirSuspendedJobThroughTheDriverLosesThatProcess) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());  // One 80 GB GPU.
  const std::string held = Drop("held.out");
  std::string a = Submit(&a_, {"--mem", "60GiB", "--name", "to-suspend", "--", Attacker(), "alloc",
                               "--bytes", "2GiB", "--hold", "120", "--out", held});
  ASSERT_FALSE(a.empty());
  ASSERT_TRUE(WaitFor([&] { return HasPrefix(held, "alloc ok"); }, 60)) << ReadFile(held);
  ProcResult s = Cli(&a_, {"suspend", a});
  ASSERT_EQ(s.exit_code, 0) << s.out << s.err << DaemonLog();
  ASSERT_EQ(State(a), "suspended");

  // Another user's job takes the room.
  const std::string victim = Drop("victim.out");
  std::string b = Submit(&b_, {"--mem", "60GiB", "--name", "victim", "--", Attacker(), "alloc",
                               "--bytes", "2GiB", "--hold", "120", "--out", victim});
  ASSERT_FALSE(b.empty());
  ASSERT_TRUE(WaitFor([&] { return HasPrefix(victim, "alloc ok"); }, 60)) << ReadFile(victim);

  // The attack: a_ restores and unlocks its own process itself.
  const std::string line = Lines(held).empty() ? "" : Lines(held).front();
  const size_t at = line.find("pid=");
  ASSERT_NE(at, std::string::npos) << ReadFile(held);
  const std::string pid = std::to_string(std::stol(line.substr(at + 4)));
  const std::string attack = Drop("unsuspend.out");
  ProcResult r = Attack(&a_, {"unsuspend", "--pid", pid, "--out", attack}, ForeignEnv());
  // The simulator lets the same uid do it, as the real driver does: the
  // daemon, not the driver, is the boundary.
  ASSERT_EQ(r.exit_code, 0) << ReadFile(attack) << r.err;

  // Ended within a few samples, with an event naming it.
  EXPECT_TRUE(WaitFor([&] { return !Events(a, "suspend_violation").empty(); }, 10)) << DaemonLog();
  EXPECT_TRUE(WaitFor([&] { return kill(std::stoi(pid), 0) != 0; }, 10))
      << "process " << pid << " still alive";
  // The victim's job was never disturbed: still running, still holding.
  EXPECT_EQ(State(b), "running") << Job(b).dump();
  EXPECT_FALSE(HasPrefix(victim, "done")) << ReadFile(victim);
}

// Resume on demand ("the request to the daemon must be one a job
// can make without new privileges and that cannot be abused to resume
// someone else's job or to jump the queue"). a_'s suspended job asks for
// its resume from every thread it has, as fast as it can, with its own
// suspension's id, with the id of b_'s suspended job (read from b_'s limits
// page, which anyone who guesses its path can read) and with noise, into
// every region it can write. b_'s job stays suspended; a_'s job is queued
// once, behind the job of b_'s that was waiting before it asked, and
// resumes once, when its turn comes; the daemon keeps answering meanwhile.
TEST_F(Suspend, AJobAskingToResumeGetsOnlyItsOwnResumeInItsTurnHoweverOftenItAsks) {
  // One 80 GB GPU. Fair share off: it would rank a_ (less use) before b_
  // whatever a_ asks; the queue here is arrival order, so that a place
  // gained by asking would show.
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions().Set("fair_share=off")));
  auto start_suspended = [&](User* u, const std::string& name,
                             const std::vector<std::string>& then) {
    const std::string out = Drop(name + ".out");
    std::vector<std::string> args = {"--mem",    "60GiB", "--name",  name,   "--",
                                     Attacker(), "alloc", "--bytes", "1GiB", "--hold",
                                     "600",      "--out", out};
    args.insert(args.end(), then.begin(), then.end());
    std::string id = Submit(u, args);
    EXPECT_FALSE(id.empty());
    EXPECT_TRUE(WaitFor([&] { return HasPrefix(out, "alloc ok"); }, 60)) << ReadFile(out);
    ProcResult s = Cli(u, {"suspend", id});
    EXPECT_EQ(s.exit_code, 0) << s.out << s.err << DaemonLog();
    EXPECT_EQ(State(id), "suspended");
    return id;
  };
  // b_'s job, suspended by b_, whose process makes no call: it wants to stay so.
  const std::string victim = start_suspended(&b_, "victim", {});
  // a_'s job, whose process makes a CUDA call on `go`.
  const std::string go = Drop("go");
  const std::string own_out = Drop("asker.out");
  const std::string asker =
      start_suspended(&a_, "asker", {"--then-wait-file", go, "--then-bytes", "1MiB"});
  ASSERT_FALSE(victim.empty() || asker.empty());
  // b_'s jobs: one takes the room, one waits for it (before a_ asks).
  const std::string room = Submit(&b_, {"--mem", "60GiB", "--", "sleep", "600"});
  ASSERT_TRUE(WaitFor([&] { return State(room) == "running"; }, 30));
  const std::string next = Submit(&b_, {"--mem", "60GiB", "--", "sleep", "600"});
  ASSERT_TRUE(WaitFor([&] { return Job(next).value("queue_position", 0) == 1; }, 30));

  auto latency = [&](const std::string& tag) {
    ProcResult r = Attack(&b_, {"latency", "--to", unix_ep(), "--path", "/v1/jobs", "--count",
                                "100", "--timeout-ms", "2000"});
    int n = 0, ok = 0;
    double p50 = 0, p99 = 0, max = 0;
    std::sscanf(r.out.c_str(), "n %d ok %d p50 %lf p99 %lf max %lf", &n, &ok, &p50, &p99, &max);
    std::cerr << tag << ": " << r.out;
    return std::make_tuple(ok, p99);
  };
  // The attack, from a_'s own slice (its environment, as its job's
  // processes have it), while its own process asks too.
  const json a = Job(asker);
  const std::string region = a.value("slice", "");
  ASSERT_FALSE(region.empty()) << a.dump();
  const std::string limits = region.substr(0, region.rfind('/')) + "/limits";

  // The baseline under the same load on the CPUs: the same attacker, threads
  // and writes, into its own memory, so that what the bound below compares
  // is what the requests cost the daemon, not four spinning threads on a
  // small machine.
  const std::string dry = Drop("dry.out");
  pid_t spinner = SpawnAs(&a_,
                          {Attacker(), "ask-resume", "--state", state_dir(), "--threads", "4",
                           "--seconds", "8", "--private", "--out", dry},
                          {"GPUSLICE_SLICE=" + region, "GPUSLICE_LIMITS=" + limits}, "dry");
  ASSERT_GT(spinner, 0);
  ASSERT_TRUE(
      WaitFor([&] { return ReadFile(dry).find("private words=") != std::string::npos; }, 30))
      << ReadFile(SpawnLog("dry") + ".err");
  auto [ok_base, p99_base] = latency("baseline (the same threads writing their own memory)");
  ASSERT_EQ(ok_base, 100) << "the baseline itself failed";
  ASSERT_TRUE(WaitFor([&] { return ReadFile(dry).find("writes n=") != std::string::npos; }, 60))
      << ReadFile(SpawnLog("dry") + ".err");
  EXPECT_TRUE(Events(victim, "resume_asked").empty()) << "the private writes asked for no one";
  const std::string flood = Drop("ask.out");
  pid_t attacker = SpawnAs(&a_,
                           {Attacker(), "ask-resume", "--state", state_dir(), "--threads", "4",
                            "--seconds", "8", "--out", flood},
                           {"GPUSLICE_SLICE=" + region, "GPUSLICE_LIMITS=" + limits}, "ask");
  ASSERT_GT(attacker, 0);
  {
    FILE* f = std::fopen(go.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  ASSERT_TRUE(WaitFor([&] { return !Events(asker, "resume_asked").empty(); }, 30)) << DaemonLog();
  auto [ok_flood, p99_flood] = latency("under the flood of requests");
  ASSERT_TRUE(WaitFor([&] { return ReadFile(flood).find("writes n=") != std::string::npos; }, 60))
      << ReadFile(SpawnLog("ask") + ".err");
  std::cerr << "ask-resume: " << ReadFile(flood);
  // It read b_'s suspension id, and could not write b_'s region.
  EXPECT_NE(ReadFile(flood).find("id path=" + state_dir() + "/slices/job-" + victim + "/limits"),
            std::string::npos)
      << ReadFile(flood);
  EXPECT_NE(
      ReadFile(flood).find("refused path=" + state_dir() + "/slices/job-" + victim + "/region"),
      std::string::npos)
      << ReadFile(flood);
  EXPECT_EQ(ok_flood, 100) << "the daemon stopped answering";
  EXPECT_LE(p99_flood, std::max(50.0, 3 * p99_base)) << "baseline p99 " << p99_base << " ms";

  // Queued once, behind the job that was waiting first.
  EXPECT_EQ(Events(asker, "resume_asked").size(), 1u);
  EXPECT_EQ(Job(asker).value("queue_position", 0), 2) << Job(asker).dump();
  EXPECT_EQ(State(victim), "suspended");
  EXPECT_TRUE(Events(victim, "resume_asked").empty());
  EXPECT_FALSE(HasPrefix(own_out, "again")) << "its call waits for its turn";
  ASSERT_EQ(Cli(&b_, {"cancel", room}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State(next) == "running"; }, 30)) << Job(asker).dump();
  EXPECT_EQ(State(asker), "suspended");
  ASSERT_EQ(Cli(&b_, {"cancel", next}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return HasPrefix(own_out, "again ok"); }, 60))
      << ReadFile(own_out) << DaemonLog();
  // Its call returns once its processes are restored; the daemon records
  // the job running when its resume's worker reports back, just after.
  EXPECT_TRUE(WaitFor([&] { return State(asker) == "running"; }, 10)) << Job(asker).dump();
  EXPECT_EQ(Events(asker, "resumed").size(), 1u);
  EXPECT_EQ(State(victim), "suspended") << "never resumed by another user's requests";
  EXPECT_TRUE(Events(victim, "resumed").empty());
  kill(-attacker, SIGKILL);
}

}  // namespace
}  // namespace gpuslice::security
