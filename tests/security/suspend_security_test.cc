// Suspension (docs/SUSPEND.md) against its own user: a job suspended by the
// daemon (here, so that another user's job could have its memory) is undone
// by its user through the driver's restore + unlock, which any process of the
// same uid may call. The daemon must see the process back on the GPU and end
// it, so that the GPU it gave away is not shared behind its back. And the
// victim's job, placed in the freed room, keeps running with its memory.

#include <signal.h>

#include <string>

#include "fixture.h"

namespace gpuslice::security {
namespace {

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

}  // namespace
}  // namespace gpuslice::security
