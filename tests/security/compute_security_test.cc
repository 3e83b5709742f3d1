// Compute shares against the participants. A job that rewrites what it can
// reach must not raise its own share nor clear an idle-reclaim pause; a
// socket-group member with no job must not starve another user's slice; a job
// that hides the GPU time it used must not gain by it. GPU time is read from
// each tenant's own kernel count (the simulated GPU runs a kernel of N us in N
// us of its time), over a common window, and compared with a run without the
// attacker measured in the same test, so a slow machine moves both alike.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

constexpr unsigned kKernelUs = 500;
constexpr int kBatch = 4;  // Kernels per synchronisation: 2 ms of GPU work.
constexpr double kWorkSeconds = 4;
// How far an attack may move a share from the same test's baseline before it
// counts as working. The issue measured 20% -> 55%, 50% -> 33% and 50% -> 5%;
// two runs without any attack differed by up to 6.5 pp on the 2-core
// development machine at a load of 15, so twice that is noise-proof and
// still far below every effect the attacks had.
constexpr double kToleranceShare = 0.12;

bool Terminal(const std::string& state) {
  return state == "exited" || state == "cancelled" || state == "failed" || state == "timed_out";
}

// The window both `work` outputs were launching in, trimmed of their start.
std::pair<int64_t, int64_t> CommonWindow(const std::string& a, const std::string& b,
                                         double seconds = kWorkSeconds) {
  auto [a0, a1] = WorkSpan(a);
  auto [b0, b1] = WorkSpan(b);
  int64_t from = std::max(a0, b0) + 500;
  int64_t to = std::min(std::min(a1, b1), std::min(a0, b0) + int64_t(seconds * 1000)) - 100;
  return {from, to};
}

// The GPU time a 20% and a 50% slice got side by side.
struct Split {
  double a = 0, b = 0;
  std::string a_work, b_work;  // The slices' `work` outputs.
  std::string a_id, b_id;      // Their jobs.
  int64_t from = 0, to = 0;    // The window both launched in (unix ms).
};

class ComputeShare : public SecurityTest {
 protected:
  // Runs a 20% job (gsattack_a) beside a 50% one (gsattack_b), both busy
  // for `seconds`; with `attack` flags, the 20% job also runs `scribble`
  // with them over what it can reach, from half a second before its work
  // starts. `during` is called with the 20% job's id once both are
  // submitted.
  Split SideBySide(const std::string& attack, const std::string& tag, double seconds = kWorkSeconds,
                   const std::function<void(const std::string&)>& during = nullptr) {
    const std::string wa = Drop(tag + "-a.work"), wb = Drop(tag + "-b.work");
    std::string script = attack.empty() ? "exec " + WorkCommand(wa, "", seconds)
                                        : ScribbleCommand(attack, Drop(tag + "-scribble.out")) +
                                              " & sleep 0.5; exec " + WorkCommand(wa, "", seconds);
    std::string ia = Submit(&a_, {"--mem", "2GiB", "--compute", "20%", "--name", tag + "-20", "--",
                                  "sh", "-c", script});
    std::string ib = Submit(
        &b_, {"--mem", "2GiB", "--compute", "50%", "--name", tag + "-50", "--", "sh", "-c",
              "sleep 0.5; exec " + WorkCommand(wb, b_extra_, seconds, b_kernel_us_, b_batch_)});
    if (during) during(ia);
    Finish({ia, ib}, seconds + 15);
    auto [from, to] = CommonWindow(wa, wb, seconds);
    Split s;
    s.a_work = wa;
    s.b_work = wb;
    s.a_id = ia;
    s.b_id = ib;
    s.from = from;
    s.to = to;
    if (to - from < 1000) {
      ADD_FAILURE() << tag << ": the two jobs did not run side by side for a second:\n"
                    << ReadFile(wa).substr(0, 300) << "\n"
                    << ReadFile(wb).substr(0, 300);
      return s;
    }
    s.a = WorkShare(wa, kKernelUs, from, to);
    s.b = WorkShare(wb, b_kernel_us_, from, to);
    std::cerr << tag << ": 20% slice " << s.a << ", 50% slice " << s.b << " over " << (to - from)
              << " ms\n";
    if (!attack.empty()) std::cerr << ReadFile(Drop(tag + "-scribble.out")).substr(0, 1500);
    return s;
  }
  // The attack moved neither slice beyond the tolerance.
  static void ExpectHeld(const Split& base, const Split& attacked, const std::string& how) {
    // The measurement itself must work for the comparison to mean anything:
    // both ran, and the shares ordered them.
    ASSERT_GT(base.a, 0.03);
    ASSERT_GT(base.b, base.a) << "the baseline did not give the 50% slice more than the 20% one";
    EXPECT_LE(attacked.a, base.a + kToleranceShare)
        << "the 20% slice " << how << ": " << base.a << " -> " << attacked.a;
    EXPECT_GE(attacked.b, base.b - kToleranceShare)
        << "the 50% neighbour lost its share to the attacker: " << base.b << " -> " << attacked.b;
  }
  std::string WorkCommand(const std::string& out, const std::string& extra = "",
                          double seconds = kWorkSeconds, unsigned kernel_us = kKernelUs,
                          int batch = kBatch) {
    return Attacker() + " work --seconds " + std::to_string(seconds) + " --kernel-us " +
           std::to_string(kernel_us) + " --batch " + std::to_string(batch) + " --out " + out +
           extra;
  }
  std::string ScribbleCommand(const std::string& flags, const std::string& report) {
    return Attacker() + " scribble --root " + state_dir() + " --shared-root /dev/shm --exclude " +
           sim_state() + " " + flags + " --report " + report;
  }
  // The 50% neighbour's loop (SideBySide): its kernels and how many it
  // launches between two synchronisations.
  unsigned b_kernel_us_ = kKernelUs;
  int b_batch_ = kBatch;
  std::string b_extra_;  // More of its flags (" --think-us 30").
  // Waits for the jobs to end (a starved one is cancelled after `timeout_s`).
  void Finish(const std::vector<std::string>& ids, double timeout_s) {
    WaitFor(
        [&] {
          for (const auto& id : ids) {
            if (!Terminal(State(id))) return false;
          }
          return true;
        },
        timeout_s);
    for (const auto& id : ids) {
      if (!Terminal(State(id))) Cli(nullptr, {"cancel", id});
    }
  }
};

// The job's write into its region must not raise its compute share
// (unguarded, a 20% slice got 55%, its 50% neighbour fell to 33%).
TEST_F(ComputeShare, AJobThatRewritesItsShareStaysAt20PercentBesideA50PercentNeighbour) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // The attacker raises everything that says "20%" (200 per mille) to the
  // whole GPU and everything that says "50%" to nothing, in every file it
  // can write, and the v1 fields it knows.
  Split base = SideBySide("", "baseline");
  Split attacked = SideBySide(
      "--own-share 200 --subst32 200=1000 --subst32 500=1 --seconds 8 --interval-ms 5", "attack");
  ExpectHeld(base, attacked, "raised its own share by rewriting files");
}

// Compute through a private copy of the driver (dlmopen) can take 62.9% from
// a 20% slice and push a 50% neighbour to 34%; an event after 10 s
// (watchdog_compute = report) is not enough. The 20% job loads its
// own copy of libcuda.so.1 into a new link-map namespace, where no preloaded
// library interposes anything, and launches through it. With the defaults
// it must be ended within the compute window (2 s) and the sample that
// completes it, and its neighbour must then have its share back.
TEST_F(ComputeShare, AJobThatLaunchesThroughAPrivateCopyOfTheDriverIsEndedByDefault) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());  // Defaults.
  constexpr double kAttackSeconds = 10;
  Split base = SideBySide("", "baseline");
  // The attack: the neighbour starts half a second after it, as above.
  const std::string wa = Drop("private-a.work"), wb = Drop("private-b.work");
  std::string ia =
      Submit(&a_, {"--mem", "2GiB", "--compute", "20%", "--name", "private-20", "--", "sh", "-c",
                   "exec " + WorkCommand(wa, " --private-driver", kAttackSeconds)});
  std::string ib =
      Submit(&b_, {"--mem", "2GiB", "--compute", "50%", "--name", "private-50", "--", "sh", "-c",
                   "sleep 0.5; exec " + WorkCommand(wb, "", kAttackSeconds)});
  ASSERT_FALSE(ia.empty());
  ASSERT_FALSE(ib.empty());
  Finish({ia, ib}, kAttackSeconds + 15);
  ASSERT_TRUE(FirstAt(wa, "private driver").has_value())
      << "the attacker did not load its own driver:\n"
      << ReadFile(wa).substr(0, 500);
  json j = Job(ia);
  EXPECT_EQ(j.value("state", ""), "cancelled") << j.dump();
  auto events = Events(ia, "watchdog_compute");
  ASSERT_FALSE(events.empty()) << "the bypass was not acted on: " << j.dump();
  EXPECT_NE(events[0].find("bypasses its turns"), std::string::npos) << events[0];
  EXPECT_NE(events[0].find("killed"), std::string::npos) << events[0];
  // From its first launch to its last sign of life: the window, the sample
  // that completes it (NVML's figure for a process covers the interval
  // before a sample), and a busy machine's slack.
  const auto [go, last] = WorkSpan(wa);
  ASSERT_GT(last, go) << ReadFile(wa).substr(0, 500);
  const double took = WorkShare(wa, kKernelUs, go, last);
  std::cerr << "the bypass took " << took << " of the GPU for its 20% and was ended " << (last - go)
            << " ms after its first launch: " << events[0] << "\n";
  EXPECT_GT(took, 0.2 + 0.25) << "the premise: launches through the copy pass no gate";
  EXPECT_LE(last - go, 2000 + 1000 + 750);
  // The neighbour gets its share back once the bypass is gone.
  const int64_t b_last = WorkSpan(wb).second;
  ASSERT_GE(b_last - (last + 500), 1500) << "too little of the neighbour's run was left";
  const double b_after = WorkShare(wb, kKernelUs, last + 500, b_last - 100);
  std::cerr << "the neighbour after: " << b_after << " (baseline " << base.b << ")\n";
  EXPECT_GE(b_after, base.b - kToleranceShare);
  EXPECT_EQ(Job(ib).value("state", ""), "exited") << Job(ib).dump();
}

// A slice is charged the GPU time its processes report, and the
// job writes that number (docs/SECURITY.md). The attacker claims, in its own
// members file, that every process reports GPU time and that it used none
// (the counter kept at zero by a loop that stores it). The arbiter's check
// charges it only while it keeps the 50% slice waiting, so on a GPU that is
// partly idle it takes 43% for its 20%; the daemon's audit (NVML's use against
// the arbiter's charge, over the compute watchdog's window, 2 s here) must
// catch it, and from then on it must be back at its share. The neighbour
// must keep its share throughout.
TEST_F(ComputeShare, AJobThatHidesItsGpuTimeIsCaughtAndHeldToItsShare) {
  // The audit on its own: the compute watchdog only reports (by default it
  // may end the liar once its use is far over its share, before what the
  // audit does to it can be measured).
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      DaemonOptions().Set("watchdog_compute_window=2s").Set("watchdog_compute=report")));
  constexpr double kAttackSeconds = 9;
  Split base = SideBySide("", "baseline");
  int64_t caught_ms = 0;
  std::string audit, flags;
  Split attacked = SideBySide("--hide-gpu-time --seconds 12 --interval-us 0", "attack",
                              kAttackSeconds, [&](const std::string& id) {
                                WaitFor(
                                    [&] {
                                      auto events = Events(id, "compute_audit");
                                      if (events.empty()) return false;
                                      caught_ms = NowMs();
                                      audit = events[0];
                                      return true;
                                    },
                                    kAttackSeconds);
                                flags = Job(id).value("flags", nlohmann::json::array()).dump();
                              });
  ASSERT_NE(caught_ms, 0) << "the audit never caught the job that hid its GPU time";
  std::cerr << "caught " << (caught_ms - attacked.from) << " ms into the common window: " << audit
            << "\n";
  EXPECT_NE(audit.find("charged the wall time of its turns"), std::string::npos) << audit;
  EXPECT_NE(flags.find("under_reported"), std::string::npos) << "the job's flags: " << flags;
  // Caught within the window, a sample and the slack of a busy machine.
  EXPECT_LE(caught_ms - attacked.from, 6000);
  const int64_t after = caught_ms + 500;
  ASSERT_GE(attacked.to - after, 1500) << "too little of the run was left after the audit";
  const double a_after = WorkShare(attacked.a_work, kKernelUs, after, attacked.to);
  std::cerr << "after the audit: 20% slice " << a_after << ", 50% slice "
            << WorkShare(attacked.b_work, kKernelUs, after, attacked.to) << " over "
            << (attacked.to - after) << " ms\n";
  for (const std::string& honest : {base.a_id, base.b_id}) {
    EXPECT_TRUE(Events(honest, "compute_audit").empty())
        << "an honest slice of the baseline was distrusted: " << Events(honest, "compute_audit")[0];
  }
  EXPECT_TRUE(Events(attacked.b_id, "compute_audit").empty())
      << "the honest neighbour was distrusted too: " << Events(attacked.b_id, "compute_audit")[0];
  for (int64_t t = attacked.from; t + 1000 <= attacked.to; t += 1000) {
    std::cerr << "  " << (t - attacked.from)
              << " ms: " << WorkShare(attacked.a_work, kKernelUs, t, t + 1000) << " / "
              << WorkShare(attacked.b_work, kKernelUs, t, t + 1000) << "\n";
  }
  Split held = attacked;
  held.a = a_after;
  ExpectHeld(base, held, "hid the GPU time it used and kept its gain");
}

// The (only) GPU's board mapped read-only, as a job's shim maps it, to read
// one slice's flags as often as the arbiter may change them: reading the
// whole file every 2 ms missed a slice that co-ran in short bursts on a
// loaded 2-core machine (0 samples co-running in 1 of 5 runs with four busy
// loops beside the test, though the attacker took 43% of the GPU).
class BoardWatch {
 public:
  BoardWatch(const std::string& state_dir, const std::string& id) : job_(std::stoull(id)) {
    for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/coord")) {
      if (entry.path().extension() != ".board") continue;
      const int fd = open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st {};
      // 64 slices of 128 bytes after a 512-byte header: job_id at 0, flags
      // at 20 (src/slice/compute/coord_board_layout.h).
      if (fstat(fd, &st) == 0 && st.st_size >= 512 + 64 * 128) {
        void* m = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
          map_ = static_cast<const uint8_t*>(m);
          size_ = size_t(st.st_size);
        }
      }
      close(fd);
      break;
    }
    if (map_ == nullptr) return;
    for (size_t at = 512; at + 128 <= size_; at += 128) {
      uint64_t job = 0;
      std::memcpy(&job, map_ + at, sizeof(job));
      if (job == job_) slot_ = at;
    }
  }
  ~BoardWatch() {
    if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), size_);
  }
  BoardWatch(const BoardWatch&) = delete;
  BoardWatch& operator=(const BoardWatch&) = delete;
  // The job's slice is on the board.
  bool ok() const { return slot_ != 0; }
  // The slice's flags, or -1 once its entry names another job (it ended).
  int64_t Flags() const {
    const auto* job = reinterpret_cast<const std::atomic<uint64_t>*>(map_ + slot_);
    const auto* flags = reinterpret_cast<const std::atomic<uint32_t>*>(map_ + slot_ + 20);
    if (job->load(std::memory_order_acquire) != job_) return -1;
    return flags->load(std::memory_order_acquire);
  }

 private:
  const uint64_t job_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  size_t slot_ = 0;
};

// Co-running: slices whose loops leave the GPU mostly idle launch
// beside the holder, and the check on unexplained time charges nobody for a
// co-runner. A job that hides its GPU time reports a duty of nothing, so it
// co-runs beside a 50% neighbour whose loop synchronises after every 20 us
// kernel, and takes what the GPU's time-slicing gives it, past its 20% cap,
// until the daemon's audit catches it. From then on it must never co-run
// again (its slice's co-running bit stays clear on the board), and both
// slices must be back where the same two jobs are without the attack.
TEST_F(ComputeShare, AJobThatHidesItsGpuTimeToCoRunIsCaughtAndNeverCoRunsAgain) {
  // The audit on its own, as above: co-running, the liar took up to 85% of
  // the GPU, which the default compute watchdog ends.
  ASSERT_NO_FATAL_FAILURE(StartDaemon(
      DaemonOptions().Set("watchdog_compute_window=2s").Set("watchdog_compute=report")));
  b_kernel_us_ = 20;
  b_batch_ = 1;
  // Host work between its requests keeps the neighbour's duty low enough to
  // have co-runners on any machine: without it, a loop that reached ~38% of
  // the GPU on a fast moment of the 2-core VM left no room, the attacker
  // never co-ran, and the test failed on its own premise in 2 of 5 runs.
  b_extra_ = " --think-us 30";
  constexpr double kAttackSeconds = 9;
  Split base = SideBySide("", "baseline");
  int64_t caught_ms = 0;
  int samples_before = 0, corun_samples = 0, corun_after = 0, samples_after = 0;
  auto watch = [&](const std::string& id) {
    // Whether it co-runs, sampled every 0.2 ms until the audit caught it.
    std::atomic<bool> caught{false};
    std::unique_ptr<BoardWatch> board;
    std::thread sampler([&] {
      while (!caught.load()) {
        // The slice is on the board once its first process registered.
        if (board == nullptr || !board->ok()) {
          board = std::make_unique<BoardWatch>(state_dir(), id);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        const int64_t flags = board->Flags();
        ++samples_before;
        corun_samples += flags > 0 && (flags & 2) != 0 ? 1 : 0;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    WaitFor(
        [&] {
          if (Events(id, "compute_audit").empty()) return false;
          caught_ms = NowMs();
          return true;
        },
        kAttackSeconds);
    caught.store(true);
    sampler.join();
    if (caught_ms == 0 || board == nullptr || !board->ok()) return;
    // The flag is written by the decision after the distrust (one tick).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 2000; ++i) {
      const int64_t flags = board->Flags();
      if (flags < 0) break;  // The job ended.
      ++samples_after;
      corun_after += (flags & 2) != 0 ? 1 : 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // Whether the attack gets to co-run before the audit catches it depends
  // on the neighbour's duty at that moment; the audit catches it either way
  // (on a loaded 2-core machine, within 0.2 s and no co-running in 2 of 10
  // runs). Such a run shows nothing of what follows co-running, so the
  // attack is tried again, as a new job.
  Split attacked;
  constexpr int kAttempts = 3;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    caught_ms = 0;
    samples_before = corun_samples = corun_after = samples_after = 0;
    attacked = SideBySide("--hide-gpu-time --seconds 12 --interval-us 0",
                          "attack" + std::to_string(attempt), kAttackSeconds, watch);
    ASSERT_NE(caught_ms, 0) << "the audit never caught the job that hid its GPU time";
    std::cerr << "attempt " << attempt << ": caught " << (caught_ms - attacked.from)
              << " ms into the common window; co-running in " << corun_samples << " of "
              << samples_before << " samples before, " << corun_after << " of " << samples_after
              << " after\n";
    if (corun_samples > 0) break;
  }
  ASSERT_GT(corun_samples, 0) << "the attack never co-ran in " << kAttempts
                              << " attempts: this test shows nothing";
  EXPECT_GT(samples_after, 100);
  EXPECT_EQ(corun_after, 0) << "a distrusted slice co-ran again";
  EXPECT_LE(caught_ms - attacked.from, 6000);
  const int64_t after = caught_ms + 500;
  ASSERT_GE(attacked.to - after, 1500) << "too little of the run was left after the audit";
  for (int64_t t = attacked.from; t + 1000 <= attacked.to; t += 1000) {
    std::cerr << "  " << (t - attacked.from)
              << " ms: " << WorkShare(attacked.a_work, kKernelUs, t, t + 1000) << " / "
              << WorkShare(attacked.b_work, b_kernel_us_, t, t + 1000) << "\n";
  }
  EXPECT_TRUE(Events(attacked.b_id, "compute_audit").empty())
      << "the honest neighbour was distrusted too: " << Events(attacked.b_id, "compute_audit")[0];
  // The neighbour's loop cannot use its 50% (it is CPU-bound): compared with
  // the baseline, not with its share.
  const double a_after = WorkShare(attacked.a_work, kKernelUs, after, attacked.to);
  const double b_after = WorkShare(attacked.b_work, b_kernel_us_, after, attacked.to);
  std::cerr << "after the audit: 20% slice " << a_after << ", neighbour " << b_after
            << " (baseline " << base.a << " / " << base.b << ")\n";
  ASSERT_GT(base.a, 0.03);
  ASSERT_GT(base.b, 0.03);
  EXPECT_LE(a_after, base.a + kToleranceShare) << "the liar kept its gain after the audit";
  EXPECT_GE(b_after, base.b - kToleranceShare) << "the neighbour did not get its time back";
}

// The same write must not clear an idle-reclaim pause.
TEST_F(ComputeShare, AJobCannotClearItsOwnIdleReclaimPause) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions()
                                          .Set("idle_after=2s")
                                          .Set("idle_action=pause")
                                          .Set("idle_action_always=true")));
  const std::string go = Drop("go"), work = Drop("paused.work");
  // Idle until the test says go (after the pause), then clear the pause
  // wherever it can and launch.
  std::string script =
      ScribbleCommand("--unpause --random 2 --seconds 10 --interval-ms 5 --wait-file " + go,
                      Drop("scribble.out")) +
      " & exec " + WorkCommand(work, " --wait-file " + go + " --delay-ms 700");
  std::string id = Submit(
      &a_, {"--mem", "2GiB", "--compute", "50%", "--name", "paused", "--", "sh", "-c", script});
  ASSERT_FALSE(id.empty());
  auto paused = [&] {
    json j = Job(id);
    return j.contains("flags") && j["flags"].dump().find("paused") != std::string::npos;
  };
  ASSERT_TRUE(WaitFor(paused, 45)) << "idle reclaim never paused the job: " << Job(id).dump();
  std::ofstream(go) << "go\n";
  // Give the attack and the launches 3 s.
  ASSERT_TRUE(WaitFor([&] { return FirstAt(work, "go ").has_value(); }, 10)) << ReadFile(work);
  const int64_t from = *FirstAt(work, "go ") + 700;
  WaitFor([&] { return LastAt(work, "p ").value_or(0) >= from + 3000; }, 15);
  double share = WorkShare(work, kKernelUs, from, from + 3000);
  std::cerr << "paused job's use after clearing the pause: " << share << "\n"
            << ReadFile(Drop("scribble.out")).substr(0, 1500) << "\n";
  EXPECT_LT(share, 0.02) << "a paused job launched again after rewriting its files";
  EXPECT_TRUE(paused()) << "the daemon no longer sees the job paused: " << Job(id).dump();
  Cli(nullptr, {"cancel", id});
}

// A member of the socket group, with no job at all, writing into
// state/coord/gpu-*.coord must not starve another user's 50% slice (to 5%
// of its work, one launch waiting 30 s, where that file decided turns).
TEST_F(ComputeShare, ASocketGroupMemberWithNoJobCannotStarveAnotherUsers50PercentSlice) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  constexpr double kVictimSeconds = 5;
  constexpr int64_t kAttackAfterMs = 1000;  // Into the victim's run: it has joined the GPU's turns.
  const std::string empty = Drop("empty");
  std::filesystem::create_directories(empty);
  // gsattack_b: in the socket group, no job. It holds every lease it finds
  // (rewriting it every 100 us: the victims' own unlocks clear it), leaves
  // the turn to nobody, drains every budget, zeroes the victim's share
  // wherever "500" appears, and writes random bytes into the files it does
  // not recognise. The baseline runs the same loop over an empty directory,
  // so both runs share the CPU alike on a small machine.
  auto scribbler = [&](const std::string& root, const std::string& tag) {
    pid_t p = SpawnAs(&b_,
                      {Attacker(), "scribble", "--root", root, "--exclude", sim_state(), "--starve",
                       "--random", "4", "--subst32", "500=1", "--seconds", "30", "--interval-us",
                       "100", "--report", Drop(tag + ".report")},
                      {}, "scribble-" + tag);
    EXPECT_GT(p, 0);
    return p;
  };
  struct Run {
    double share = 0;
    int64_t max_stall_ms = 0;
  };
  auto run = [&](const std::string& tag, const std::string& attack_root) {
    const std::string w = Drop(tag + ".work");
    std::string id =
        Submit(&a_, {"--mem", "2GiB", "--compute", "50%", "--name", tag, "--", Attacker(), "work",
                     "--seconds", std::to_string(kVictimSeconds), "--kernel-us",
                     std::to_string(kKernelUs), "--batch", std::to_string(kBatch), "--out", w});
    Run r;
    if (!WaitFor([&] { return FirstAt(w, "go ").has_value(); }, 30)) {
      ADD_FAILURE() << tag << ": the victim never launched:\n" << ReadFile(w);
      return r;
    }
    const int64_t go = *FirstAt(w, "go ");
    WaitFor([&] { return NowMs() >= go + kAttackAfterMs; }, 10);
    pid_t attacker = scribbler(attack_root, tag);
    // Done, or (a starved victim still waiting for a launch) past its time.
    const int64_t end = go + int64_t(kVictimSeconds * 1000);
    WaitFor([&] { return FirstAt(w, "done").has_value() || LastAt(w, "p ").value_or(0) >= end; },
            kVictimSeconds + 20);
    kill(-attacker, SIGKILL);
    Finish({id}, 1);
    const int64_t from = go + kAttackAfterMs + 300, to = end - 100;
    r.share = WorkShare(w, kKernelUs, from, to);
    // The longest stretch in the window in which no kernel completed.
    int64_t last_change = from;
    long last = -1;
    for (const auto& l : Lines(w)) {
      long long at = 0;
      long k = 0;
      if (std::sscanf(l.c_str(), "p at=%lld kernels=%ld", &at, &k) != 2 || at < from || at > to)
        continue;
      if (k != last) {
        r.max_stall_ms = std::max<int64_t>(r.max_stall_ms, at - last_change);
        last_change = at;
        last = k;
      }
    }
    r.max_stall_ms = std::max<int64_t>(
        r.max_stall_ms, std::min<int64_t>(to, LastAt(w, "p ").value_or(to)) - last_change);
    std::cerr << tag << ": 50% slice got " << r.share << ", longest stall " << r.max_stall_ms
              << " ms\n";
    return r;
  };
  Run base = run("baseline", empty);
  Run attacked = run("attack", state_dir());
  std::cerr << ReadFile(Drop("attack.report")).substr(0, 1500) << "\n";
  ASSERT_GT(base.share, 0.15) << "the baseline measurement failed";
  EXPECT_GE(attacked.share, base.share - kToleranceShare)
      << "a socket-group member without a job starved another user's slice: " << base.share
      << " -> " << attacked.share;
  EXPECT_LE(attacked.max_stall_ms, std::max<int64_t>(1000, 3 * base.max_stall_ms))
      << "the victim's launches stalled for " << attacked.max_stall_ms << " ms";
}

}  // namespace
}  // namespace gpuslice::security
