// End-to-end: scheduling a team can trust with the real
// gpusliced, gpuslice, shim and three simulated H100s: the whole-GPU job
// that starved behind an array of slices, automatic defragmentation (moves
// the daemon makes through the simulated driver's checkpoint API), over-quota
// borrowing and its reclaim, daemon restarts in the middle of both, GPU
// models, and the idle-reclaim exemptions. Jobs that hold GPU memory run the
// demo worker with --verify: it fills its memory with a pattern and checks
// every byte when it ends, so a move or a suspension that lost data shows.

#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kThreeH100[] = "3xH100-80GB";

std::string Submit(Daemon& d, std::vector<std::string> args, int uid = -1) {
  args.insert(args.begin(), "submit");
  CliResult r = d.Cli(args, uid);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Trim(r.out);
}

// A job whose CUDA process holds `mem` (pattern-filled, checked at its end)
// in a slice of `slice`, busy 10% of the time for `seconds`.
std::vector<std::string> Worker(const std::string& slice, const std::string& mem, int seconds,
                                std::vector<std::string> request = {}) {
  std::vector<std::string> args =
      request.empty() ? std::vector<std::string>{"--mem", slice} : std::move(request);
  args.insert(args.end(), {"--", WorkerPath(), "--name", "w", "--mem", mem, "--verify", "--duty",
                           "10%", "--kernel-us", "1000", "--seconds", std::to_string(seconds)});
  return args;
}

// Its CUDA process has registered in its slice and filled its memory.
bool Holds(Daemon& d, const std::string& id, uint64_t bytes) {
  json j = Job(d, id);
  return j.is_object() && j.value("state", "") == "running" && j.contains("usage") &&
         j["usage"].value("memory_used_bytes", uint64_t{0}) >= bytes;
}

std::vector<std::string> GpusOf(Daemon& d, const std::string& id) {
  json j = Job(d, id);
  if (!j.is_object() || !j.contains("allocation")) return {};
  return j["allocation"]["gpu_uuids"].get<std::vector<std::string>>();
}

int CountEvents(Daemon& d, const std::string& id, const std::string& kind) {
  json j =
      json::parse(d.Cli({"events", "--job", id, "--json", "--limit", "1000"}).out, nullptr, false);
  int n = 0;
  if (!j.is_object() || !j.contains("events")) return -1;
  for (const json& e : j["events"]) n += e.value("kind", "") == kind ? 1 : 0;
  return n;
}

bool HasFlag(Daemon& d, const std::string& id, const std::string& flag) {
  json j = Job(d, id);
  if (!j.is_object() || !j.contains("flags")) return false;
  for (const json& f : j["flags"]) {
    if (f == flag) return true;
  }
  return false;
}

constexpr uint64_t kGiB = 1ull << 30;

class SchedulingE2E : public ::testing::Test {
 protected:
  void Start(Daemon& d) { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  // Job `id` ended exit 0, ran once, and its worker found every byte it
  // wrote.
  void ExpectVerifiedOnce(Daemon& d, const std::string& id) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "exited"; }, 180))
        << Job(d, id).dump();
    EXPECT_EQ(Job(d, id).value("exit_code", -1), 0) << Job(d, id).dump();
    std::string out = d.Cli({"logs", id}).out;
    EXPECT_NE(out.find(": 0 bytes differ"), std::string::npos) << out;
    EXPECT_EQ(CountEvents(d, id, "started"), 1) << "job " << id << " ran more than once";
  }
};

// Declared right after a test's Daemon, so destroyed before it: prints the
// daemon's log when the test failed, while its directory still exists.
struct LogOnFailure {
  explicit LogOnFailure(Daemon& d) : log(d.dir() + "/daemon.log") {}
  ~LogOnFailure() {
    if (::testing::Test::HasFailure()) std::cerr << "daemon log:\n" << ReadFile(log);
  }
  std::string log;
};

// The starvation: a notebook and an inference slice spread over two
// GPUs, a 2-GPU training job first in line, then a 5-job array of 20 GiB
// slices. The daemon moves one slice beside the other, the training job
// starts, and the array takes only what it leaves.
TEST_F(SchedulingE2E, ATwoGpuHeadStartsBehindAnArrayOfSlicesByAnAutomaticMove) {
  // spread: the two fractions land on two GPUs, as frag-aware put them in
  // the run before any whole-GPU job was known.
  Daemon d(kThreeH100, {"--set", "policy=spread"});
  LogOnFailure log_on_failure(d);
  Start(d);
  const std::string notebook = Submit(d, Worker("20GiB", "1GiB", 45));
  const std::string inference = Submit(d, Worker("20GiB", "1GiB", 45));
  ASSERT_TRUE(
      Daemon::WaitFor([&] { return Holds(d, notebook, kGiB) && Holds(d, inference, kGiB); }, 60));
  ASSERT_NE(GpusOf(d, notebook), GpusOf(d, inference)) << "spread puts them on two GPUs";

  const auto t0 = Clock::now();
  const std::string head = Submit(d, {"--gpus", "2", "--", "sleep", "30"});
  CliResult array = d.Cli({"submit", "--mem", "20GiB", "--array", "1-5", "--", "sleep", "60"});
  ASSERT_EQ(array.exit_code, 0) << array.err;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, head) == "running"; }, 90))
      << Job(d, head).dump() << d.Cli({"ps"}).out;
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  // Bounded by the move (a checkpoint and a restore of 1 GiB), not by the
  // notebook's 45 s: generous for a loaded machine.
  EXPECT_LT(waited, 60.0);
  EXPECT_TRUE(HasEvent(d, head, "defragmenting")) << d.Cli({"events"}).out;
  // The head may start as soon as the moved slice's checkpoint freed its
  // GPU; `moved` comes once it is restored on the other one.
  auto moved = [&] {
    return CountEvents(d, notebook, "moved") + CountEvents(d, inference, "moved");
  };
  EXPECT_TRUE(Daemon::WaitFor([&] { return moved() >= 1; }, 60)) << d.Cli({"events"}).out;
  EXPECT_EQ(moved(), 1) << d.Cli({"events"}).out;
  // The moved slice says why.
  EXPECT_TRUE(HasEvent(d, notebook, "moved", "to let job " + head) ||
              HasEvent(d, inference, "moved", "to let job " + head));
  // Both fractions share one GPU now; the head holds the other two.
  EXPECT_EQ(GpusOf(d, notebook), GpusOf(d, inference));
  for (const std::string& g : GpusOf(d, head)) EXPECT_NE(g, GpusOf(d, notebook)[0]);
  // Nothing was lost in the move; nothing ran twice.
  ASSERT_EQ(d.Cli({"cancel", head}).exit_code, 0);
  ASSERT_EQ(d.Cli({"cancel", "--state", "queued"}).exit_code, 0);
  ExpectVerifiedOnce(d, notebook);
  ExpectVerifiedOnce(d, inference);
}

// Without moves (defragment = off) the head's reservation keeps the array
// off the GPUs it will need: it starts as soon as the notebook ends,
// whatever the array does. The notebook's maximum run time is what tells
// the daemon it ends first (every other job has the same 1 h estimate, so
// any GPU would do for the reservation).
TEST_F(SchedulingE2E, WithoutMovesTheHeadsReservationHoldsTheArrayBack) {
  Daemon d(kThreeH100, {"--set", "policy=spread", "--set", "defragment=off"});
  LogOnFailure log_on_failure(d);
  Start(d);
  const std::string notebook =
      Submit(d, {"--mem", "20GiB", "--max-runtime", "2m", "--", "sleep", "8"});
  const std::string inference = Submit(d, {"--mem", "20GiB", "--", "sleep", "300"});
  ASSERT_TRUE(Daemon::WaitFor(
      [&] { return State(d, notebook) == "running" && State(d, inference) == "running"; }));
  const std::string head = Submit(d, {"--gpus", "2", "--", "sleep", "30"});
  CliResult array = d.Cli({"submit", "--mem", "20GiB", "--array", "1-5", "--", "sleep", "300"});
  ASSERT_EQ(array.exit_code, 0) << array.err;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, head) == "queued"; }));
  // The head says when it expects to start.
  ASSERT_TRUE(Daemon::WaitFor([&] {
    return Job(d, head).value("waiting_for", "").find("expected to start in about") !=
           std::string::npos;
  }));
  EXPECT_TRUE(Job(d, head).contains("expected_start_ms")) << Job(d, head).dump();
  // Fair share is shown beside the reason and by `show`.
  // (Factors are computed at most once a second.)
  EXPECT_TRUE(Daemon::WaitFor(
      [&] { return d.Cli({"ps"}).out.find("fair share ") != std::string::npos; }, 10))
      << d.Cli({"ps"}).out;
  const std::string shown = d.Cli({"show", head}).out;
  EXPECT_NE(shown.find("fair share"), std::string::npos) << shown;
  EXPECT_NE(shown.find("expected start"), std::string::npos) << shown;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, notebook) == "exited"; }, 60));
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, head) == "running"; }, 30))
      << Job(d, head).dump() << d.Cli({"ps"}).out;
  EXPECT_FALSE(HasEvent(d, head, "defragmenting"));
  ASSERT_EQ(d.Cli({"cancel", "--state", "queued"}).exit_code, 0);
}

// A job the driver cannot suspend (no CUDA process) is never moved: the
// head waits, and no move is made or tried.
TEST_F(SchedulingE2E, AJobThatCannotBeSuspendedIsNeverMoved) {
  Daemon d(kThreeH100, {"--set", "policy=spread"});
  LogOnFailure log_on_failure(d);
  Start(d);
  const std::string a = Submit(d, {"--mem", "20GiB", "--", "sleep", "300"});
  const std::string b = Submit(d, {"--mem", "20GiB", "--", "sleep", "300"});
  ASSERT_TRUE(
      Daemon::WaitFor([&] { return State(d, a) == "running" && State(d, b) == "running"; }));
  const std::string head = Submit(d, {"--gpus", "2", "--", "sleep", "30"});
  // Several planning passes (one a second at most) go by.
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_EQ(State(d, head), "queued");
  EXPECT_EQ(CountEvents(d, a, "moved") + CountEvents(d, b, "moved"), 0);
  EXPECT_FALSE(HasEvent(d, a, "suspended"));
  EXPECT_FALSE(HasEvent(d, b, "suspended"));
  EXPECT_FALSE(HasEvent(d, head, "defragmenting"));
  ASSERT_EQ(d.Cli({"cancel", a, b, head}).exit_code, 0);
}

// A restart in the middle of an automatic move loses no job and runs none
// twice: the moved job comes back by itself (on its new GPU or its old
// one) and keeps every byte.
TEST_F(SchedulingE2E, ARestartInTheMiddleOfAMoveLosesNoJobAndRunsNoneTwice) {
  Daemon d(kThreeH100, {"--set", "policy=spread"});
  LogOnFailure log_on_failure(d);
  Start(d);
  const std::string a = Submit(d, Worker("20GiB", "2GiB", 40));
  const std::string b = Submit(d, Worker("20GiB", "2GiB", 40));
  ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, a, 2 * kGiB) && Holds(d, b, 2 * kGiB); }, 60));
  const std::string head = Submit(d, {"--gpus", "2", "--", "sleep", "20"});
  // Killed as soon as a move began (its suspension under way or done).
  ASSERT_TRUE(Daemon::WaitFor([&] { return HasEvent(d, head, "defragmenting"); }, 60));
  d.Kill(SIGKILL);
  Start(d);
  // Everything comes back: the moved job running again, the head started.
  ASSERT_TRUE(
      Daemon::WaitFor([&] { return State(d, a) == "running" && State(d, b) == "running"; }, 60))
      << Job(d, a).dump() << Job(d, b).dump();
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, head) != "queued"; }, 90)) << d.Cli({"ps"}).out;
  ExpectVerifiedOnce(d, a);
  ExpectVerifiedOnce(d, b);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, head) == "exited"; }, 60));
  EXPECT_EQ(CountEvents(d, head, "started"), 1);
}

// Two users, one GPU of guarantee each (group quotas); the other user's
// restartable-or-suspendable jobs borrow the idle GPUs beyond its quota and
// are suspended when root's group needs its guarantee back, resumed (every
// byte kept) when it is done; a restart in the middle of the borrow loses
// nothing and runs nothing twice.
class BorrowE2E : public SchedulingE2E {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the two-user test needs root (CI runs as root)";
    if (getpwnam("gpuslice-e2e") == nullptr &&
        system("useradd --no-create-home --shell /bin/sh gpuslice-e2e >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "cannot create user gpuslice-e2e (useradd failed)";
    }
    other_ = static_cast<int>(getpwnam("gpuslice-e2e")->pw_uid);
  }
  int other_ = -1;
};

TEST_F(BorrowE2E, ABorrowerIsSuspendedWhenTheOwnersGroupNeedsItsQuotaBackAcrossARestart) {
  Daemon d(kThreeH100, {"--socket-group", "gpuslice-e2e"});
  LogOnFailure log_on_failure(d);
  Start(d);
  struct group* g = getgrgid(static_cast<gid_t>(other_));
  ASSERT_NE(g, nullptr);
  const std::string other_group = g->gr_name;
  ASSERT_EQ(d.Cli({"quota", "set", "--group", other_group, "--gpus", "1"}).exit_code, 0);
  ASSERT_EQ(d.Cli({"quota", "set", "--group", "root", "--gpus", "2"}).exit_code, 0);
  // Three whole GPUs for a group guaranteed one: two borrow.
  std::vector<std::string> theirs;
  for (int i = 0; i < 3; ++i) {
    theirs.push_back(Submit(d, Worker("", "1GiB", 60, {"--gpus", "1"}), other_));
  }
  for (const std::string& id : theirs) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return Holds(d, id, kGiB); }, 60)) << Job(d, id).dump();
  }
  int borrowing = 0;
  for (const std::string& id : theirs) borrowing += HasFlag(d, id, "borrowing") ? 1 : 0;
  EXPECT_EQ(borrowing, 2) << d.Cli({"ps"}).out;

  // Root's group is within its guarantee: a borrower gives its GPU back.
  const std::string mine = Submit(d, {"--gpus", "1", "--", "sleep", "20"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, mine) == "running"; }, 60))
      << Job(d, mine).dump() << d.Cli({"ps"}).out;
  std::string reclaimed;
  for (const std::string& id : theirs) {
    if (HasEvent(d, id, "reclaimed")) reclaimed = id;
  }
  ASSERT_FALSE(reclaimed.empty()) << d.Cli({"events"}).out;
  EXPECT_EQ(State(d, reclaimed), "suspended");
  EXPECT_TRUE(HasEvent(d, mine, "reclaiming"));

  // The daemon dies in the middle of the borrow.
  d.Kill(SIGKILL);
  Start(d);
  EXPECT_EQ(State(d, reclaimed), "suspended");
  EXPECT_EQ(State(d, mine), "running");
  // Root's job ends: the borrower comes back by itself, every byte intact.
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, mine) == "exited"; }, 60));
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, reclaimed) == "running"; }, 60))
      << Job(d, reclaimed).dump();
  for (const std::string& id : theirs) ExpectVerifiedOnce(d, id);
}

TEST_F(SchedulingE2E, GpuModelPlacesOnlyOnThatModelAndRefusesOneTheNodeLacks) {
  Daemon d("2xH100-80GB,1xA100-40GB");
  LogOnFailure log_on_failure(d);
  Start(d);
  json gpus = json::parse(d.Cli({"gpus", "--json"}).out, nullptr, false);
  ASSERT_TRUE(gpus.is_object()) << "gpus --json";
  std::string a100;
  std::vector<std::string> h100s;
  for (const json& g : gpus["gpus"]) {
    const std::string name = g.value("name", g.value("model", ""));
    (name.find("A100") != std::string::npos ? a100 : h100s.emplace_back()) = g.value("uuid", "");
  }
  ASSERT_FALSE(a100.empty()) << gpus.dump();
  ASSERT_EQ(h100s.size(), 2u) << gpus.dump();
  const std::string small =
      Submit(d, {"--mem", "1GiB", "--gpu-model", "a100", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, small) == "running"; }));
  EXPECT_EQ(GpusOf(d, small), std::vector<std::string>{a100});
  // Slurm's form.
  const std::string pair = Submit(d, {"--gres", "gpu:h100:2", "--", "sleep", "60"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, pair) == "running"; }));
  std::vector<std::string> got = GpusOf(d, pair);
  std::sort(got.begin(), got.end());
  std::sort(h100s.begin(), h100s.end());
  EXPECT_EQ(got, h100s);
  EXPECT_NE(Job(d, pair)["request"].value("describe", "").find("h100"), std::string::npos);
  // A model the node lacks: refused at once, saying what it has.
  CliResult no = d.Cli({"submit", "--gpus", "1", "--gpu-model", "l4", "--", "true"});
  EXPECT_EQ(no.exit_code, 125);
  EXPECT_NE(no.err.find("--gpu-model l4: no GPU of that model on this machine"), std::string::npos)
      << no.err;
  EXPECT_NE(no.err.find("A100"), std::string::npos) << no.err;
  // A bad name is the CLI's usage error.
  EXPECT_EQ(d.Cli({"submit", "--gpus", "1", "--gpu-model", "a100;x", "--", "true"}).exit_code, 2);
  ASSERT_EQ(d.Cli({"cancel", small, pair}).exit_code, 0);
}

TEST_F(SchedulingE2E, NoIdleReclaimAndTheExemptPriorityAreLeftAloneWhileOthersArePaused) {
  Daemon d("1xH100-80GB", {"--set", "idle_after=2s", "--set", "idle_action=pause", "--set",
                           "idle_action_always=true"});
  LogOnFailure log_on_failure(d);
  Start(d);
  const std::string plain = Submit(d, {"--mem", "1GiB", "--", "sleep", "120"});
  const std::string service =
      Submit(d, {"--mem", "1GiB", "--no-idle-reclaim", "--", "sleep", "120"});
  const std::string urgent =
      Submit(d, {"--mem", "1GiB", "--priority", "high", "--", "sleep", "120"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return HasFlag(d, plain, "paused"); }, 60))
      << Job(d, plain).dump();
  // By then the others were idle as long: flagged, never acted on.
  ASSERT_TRUE(Daemon::WaitFor(
      [&] { return HasFlag(d, service, "idle") && HasFlag(d, urgent, "idle"); }, 30));
  EXPECT_FALSE(HasFlag(d, service, "paused"));
  EXPECT_FALSE(HasFlag(d, urgent, "paused"));
  EXPECT_TRUE(HasEvent(d, service, "idle_flagged", "--no-idle-reclaim"));
  EXPECT_TRUE(HasEvent(d, urgent, "idle_flagged", "idle_exempt_priority"));
  EXPECT_FALSE(HasEvent(d, service, "idle_action"));
  EXPECT_FALSE(HasEvent(d, urgent, "idle_action"));
  EXPECT_NE(d.Cli({"show", service}).out.find("exempt (--no-idle-reclaim)"), std::string::npos);
  ASSERT_EQ(d.Cli({"cancel", plain, service, urgent}).exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::e2e
