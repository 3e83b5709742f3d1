#include "daemon/compute/arbiter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/futex.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "daemon/compute/arbiter_members.h"
#include "daemon/compute/arbiter_test_fixture.h"
#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"

namespace gpuslice::daemon {
namespace {

using arbiter_testing::ArbiterTest;
using arbiter_testing::BoardMode;
using arbiter_testing::kGpu;
using arbiter_testing::kMs;
using arbiter_testing::kUs;
using arbiter_testing::Limits;
using arbiter_testing::Write;
namespace bd = slice::board;
namespace fs = std::filesystem;

// What one slice's processes write, step by step: honest (as our shim), or
// an attack. `holds_open`: the board says this slice holds an open turn;
// `draining`: its turn closes and its queued work still runs.
using Behaviour =
    std::function<void(slice::MembersFile& m, uint64_t now, bool holds_open, bool draining)>;

void Honest(slice::MembersFile& m, uint64_t now, bool holds_open, bool draining) {
  // Always has work: waits unless its turn is open; in flight while it runs.
  Write(m, 0,
        (holds_open ? 0 : bd::kMemberWaiting) | (holds_open || draining ? bd::kMemberInflight : 0),
        now);
}

// Our shim: the same, and it reports the GPU time its work
// used (the model's step while it runs), so it is charged that.
void HonestGpuTime(slice::MembersFile& m, uint64_t now, bool holds_open, bool draining) {
  Write(m, 0,
        bd::kMemberGpuTime | (holds_open ? 0 : bd::kMemberWaiting) |
            (holds_open || draining ? bd::kMemberInflight : 0),
        now);
  if (holds_open || draining) m.slot(0).gpu_ns.fetch_add(100 * kUs);
}

// A discrete model of one GPU under the arbiter: every step the GPU runs the
// open holder, or drains a closing one for drain_ns; each slice's members
// file is written by its behaviour; the arbiter decides. Returns GPU ns per
// honest slice (what the turns gave it).
struct Model {
  explicit Model(Arbiter& a) : arbiter(a) {}
  Arbiter& arbiter;
  std::vector<std::unique_ptr<slice::MembersFile>> members;
  std::vector<Behaviour> behaviours;
  std::unique_ptr<slice::BoardView> board;
  std::vector<uint64_t> board_index;  // Slice i's job id.
  uint64_t now = slice::MonotonicNs() + kMs;
  uint64_t step_ns = 100 * kUs;
  uint64_t drain_ns = 200 * kUs;
  uint64_t drain_left = 0;
  std::vector<uint64_t> gpu_ns;

  void Run(uint64_t duration_ns) {
    gpu_ns.assign(members.size(), 0);
    const uint64_t end = now + duration_ns;
    while (now < end) {
      now += step_ns;
      const bd::BoardHeader& h = board->header();
      const int32_t holder = h.holder.load();
      const uint32_t state = h.turn_state.load();
      for (size_t i = 0; i < members.size(); ++i) {
        const int32_t idx = board->FindSlice(board_index[i], -1);
        const bool holds = idx >= 0 && idx == holder;
        const bool open = holds && state == bd::kTurnOpen;
        const bool draining = holds && state == bd::kTurnClosing && drain_left > 0;
        if (open || draining) gpu_ns[i] += step_ns;
        behaviours[i](*members[i], now, open, draining);
      }
      if (state == bd::kTurnClosing && drain_left > 0) {
        drain_left = drain_left > step_ns ? drain_left - step_ns : 0;
      }
      arbiter.TickForTest(kGpu, now);
      if (state != bd::kTurnClosing && h.turn_state.load() == bd::kTurnClosing) {
        drain_left = drain_ns;
      }
    }
  }
};

// Two victims at 40% each (hard) and a third slice at 20% with `attack`:
// returns the victims' GPU time as fractions of the run.
std::pair<double, double> Victims(const ArbiterOptions& options, const Behaviour& attack,
                                  uint32_t attacker_milli = 200,
                                  core::Priority attacker_priority = core::Priority::kNormal,
                                  const Behaviour& victim = Honest) {
  Arbiter a(options);
  EXPECT_TRUE(a.Register(Limits(1, 400)).ok());
  EXPECT_TRUE(a.Register(Limits(2, 400)).ok());
  EXPECT_TRUE(a.Register(Limits(3, attacker_milli, false, attacker_priority)).ok());
  Model m{a};
  m.board_index = {1, 2, 3};
  auto open = [&](uint64_t job) {
    auto f = slice::MembersFile::Open(a.MembersPath(job));
    EXPECT_TRUE(f.ok());
    return std::move(*f);
  };
  m.members.push_back(open(1));
  m.members.push_back(open(2));
  m.members.push_back(open(3));
  m.behaviours = {victim, victim, attack};
  auto board = slice::BoardView::Open(a.BoardPath(kGpu));
  EXPECT_TRUE(board.ok());
  m.board = std::move(*board);
  constexpr uint64_t kRun = 3'000 * kMs;
  m.Run(kRun);
  return {double(m.gpu_ns[0]) / kRun, double(m.gpu_ns[1]) / kRun};
}

TEST_F(ArbiterTest, HonestSlicesGetTheirShares) {
  auto [a, b] = Victims(options_, Honest);
  EXPECT_NEAR(a, 0.40, 0.02);
  EXPECT_NEAR(b, 0.40, 0.02);
  // Charged the GPU time they report, with the third slice too.
  std::tie(a, b) = Victims(options_, HonestGpuTime, 200, core::Priority::kNormal, HonestGpuTime);
  EXPECT_NEAR(a, 0.40, 0.02);
  EXPECT_NEAR(b, 0.40, 0.02);
}

// Each attack is what a slice can write into the one file it can write (its
// members file); each must leave the victims their 40% (within 2 pp).
struct Attack {
  const char* name;
  Behaviour write;
};

TEST_F(ArbiterTest, WhateverASliceWritesIntoItsMembersFileTheOthersKeepTheirShares) {
  std::mt19937_64 rng(13);
  const std::vector<Attack> attacks = {
      {"garbage in every byte",
       [&](slice::MembersFile& m, uint64_t, bool, bool) {
         unsigned char* p = reinterpret_cast<unsigned char*>(&m.slot(0)) - bd::kMembersSlotsOffset;
         for (uint64_t i = 0; i < bd::kMembersSize; ++i) p[i] = uint8_t(rng());
       }},
      {"garbage flags in live slots",
       [&](slice::MembersFile& m, uint64_t now, bool, bool) {
         for (uint32_t s = 0; s < bd::kMembersPerSlice; ++s) Write(m, s, uint32_t(rng()), now);
       }},
      {"waits forever, never in flight", [](slice::MembersFile& m, uint64_t now, bool,
                                            bool) { Write(m, 0, bd::kMemberWaiting, now); }},
      {"in flight forever: never drains", [](slice::MembersFile& m, uint64_t now, bool,
                                             bool) { Write(m, 0, bd::kMemberInflight, now); }},
      {"waits and in flight forever",
       [](slice::MembersFile& m, uint64_t now, bool, bool) {
         Write(m, 0, bd::kMemberWaiting | bd::kMemberInflight, now);
       }},
      {"reports idle as soon as it holds the turn",
       [](slice::MembersFile& m, uint64_t now, bool open, bool) {
         Write(m, 0, open ? 0 : bd::kMemberWaiting, now);
       }},
      {"claims another device, a future heartbeat, another job id",
       [](slice::MembersFile& m, uint64_t now, bool, bool) {
         Write(m, 0, bd::kMemberWaiting | bd::kMemberInflight, now + 10'000 * kMs);
         m.slot(1).owner.store(uint64_t{1} << 32 | 1);
         m.slot(1).device_index.store(7);
         m.slot(1).flags.store(3);
         m.slot(1).heartbeat_ns.store(now);
         auto* h = reinterpret_cast<bd::MembersHeader*>(reinterpret_cast<char*>(&m.slot(0)) -
                                                        bd::kMembersSlotsOffset);
         h->job_id = 1;  // A victim's.
       }},
      // A slice that says it reports GPU time is charged what it
      // reports, so it lies about that too.
      {"reports no GPU time, waits and in flight forever",
       [](slice::MembersFile& m, uint64_t now, bool, bool) {
         Write(m, 0, bd::kMemberGpuTime | bd::kMemberWaiting | bd::kMemberInflight, now);
       }},
      {"reports no GPU time and idle as soon as it holds the turn",
       [](slice::MembersFile& m, uint64_t now, bool open, bool) {
         Write(m, 0, bd::kMemberGpuTime | (open ? 0 : bd::kMemberWaiting), now);
       }},
      {"a GPU time counter of garbage, in every slot",
       [&](slice::MembersFile& m, uint64_t now, bool, bool) {
         for (uint32_t s = 0; s < bd::kMembersPerSlice; ++s) {
           Write(m, s, bd::kMemberGpuTime | bd::kMemberWaiting, now);
           m.slot(s).gpu_ns.store(rng() >> (rng() % 64));
         }
       }},
  };
  // Against victims of an older shim (charged wall time in flight) and of
  // ours (charged the GPU time they report).
  for (const Behaviour& victim : {Behaviour(Honest), Behaviour(HonestGpuTime)}) {
    for (const Attack& attack : attacks) {
      auto [a, b] = Victims(options_, attack.write, 200, core::Priority::kNormal, victim);
      std::cerr << attack.name << ": victims " << a << " / " << b << "\n";
      EXPECT_GE(a, 0.40 - 0.02) << attack.name;
      EXPECT_GE(b, 0.40 - 0.02) << attack.name;
    }
  }
}

TEST_F(ArbiterTest, ASliceThatTruncatesItsMembersFileOnlyLosesItsOwnTurns) {
  auto cut = [this](slice::MembersFile&, uint64_t, bool, bool) {
    ASSERT_EQ(truncate((dir_ + "/slices/job-3/members").c_str(), 0), 0);
  };
  auto [a, b] = Victims(options_, cut);
  EXPECT_GE(a, 0.38);
  EXPECT_GE(b, 0.38);
}

// A members file cut shorter than its header (as fuzz/slice_reports_fuzz
// makes) must not read as "every member reports GPU time" with no member
// live; whatever is left of a file, no live member means nothing reported.
TEST(ArbiterMembers, AMembersFileCutShortReportsNothingAtAll) {
  MembersHandle m;
  m.fd = int(syscall(SYS_memfd_create, "members", 0u));
  ASSERT_GE(m.fd, 0);
  GpuSeen seen[slice::board::kMembersPerSlice] = {};
  for (off_t size : {off_t(0), off_t(100), off_t(slice::board::kMembersSlotsOffset - 1),
                     off_t(slice::board::kMembersSlotsOffset), off_t(slice::board::kMembersSize)}) {
    SCOPED_TRACE(size);
    ASSERT_EQ(ftruncate(m.fd, size), 0);
    Report r = ReadReport(m, 0, 1'000'000'000, seen);
    EXPECT_FALSE(r.live);
    EXPECT_FALSE(r.gpu_time);
    EXPECT_FALSE(r.waiting || r.inflight);
    EXPECT_EQ(r.gpu_ns, 0u);
  }
}

// The share and the priority are the daemon's: nothing in the members file
// says them. A slice registered high, or with a big share, by the daemon is
// what raises them (here: shown to work, so the attacks above are not
// passing for want of an effect).
TEST_F(ArbiterTest, OnlyTheDaemonsShareAndPriorityMoveTheSplit) {
  auto [a, b] = Victims(options_, Honest, 200, core::Priority::kHigh);
  EXPECT_NEAR(a, 0.40, 0.03) << "hard caps hold whatever the neighbour's priority";
  Arbiter arb(options_);
  ASSERT_TRUE(arb.Register(Limits(1, 300)).ok());
  ASSERT_TRUE(arb.Register(Limits(2, 700)).ok());
  auto board = Board(arb);
  ASSERT_NE(board, nullptr);
  const int32_t i1 = board->FindSlice(1, -1), i2 = board->FindSlice(2, -1);
  ASSERT_GE(i1, 0);
  ASSERT_GE(i2, 0);
  EXPECT_EQ(board->slice(uint32_t(i1)).share_milli.load(), 300u);
  EXPECT_EQ(board->slice(uint32_t(i2)).share_milli.load(), 700u);
  SliceLimits up = Limits(1, 500, true, core::Priority::kHigh);
  ASSERT_TRUE(arb.Update(up).ok());
  EXPECT_EQ(board->slice(uint32_t(i1)).share_milli.load(), 500u);
  EXPECT_EQ(board->slice(uint32_t(i1)).mode.load(), bd::kModeWorkConserving);
  EXPECT_EQ(board->slice(uint32_t(i1)).priority.load(), uint32_t(core::Priority::kHigh));
}

TEST_F(ArbiterTest, APausedSliceGetsNoTurns) {
  Arbiter a(options_);
  SliceLimits l = Limits(1, 500);
  l.launches_paused = true;
  ASSERT_TRUE(a.Register(l).ok());
  auto m = Members(a, 1);
  auto board = Board(a);
  uint64_t now = slice::MonotonicNs() + kMs;
  for (int i = 0; i < 50; ++i) {
    now += 100 * kUs;
    Write(*m, 0, bd::kMemberWaiting, now);
    a.TickForTest(kGpu, now);
    EXPECT_EQ(board->header().holder.load(), -1);
  }
  l.launches_paused = false;
  ASSERT_TRUE(a.Update(l).ok());
  now += 100 * kUs;
  Write(*m, 0, bd::kMemberWaiting, now);
  a.TickForTest(kGpu, now);
  EXPECT_EQ(board->header().holder.load(), board->FindSlice(1, -1));
}

TEST_F(ArbiterTest, FilesHaveTheirOwnersAndModes) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(7, 300)).ok());
  struct stat st {};
  ASSERT_EQ(stat(a.BoardPath(kGpu).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, BoardMode());
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(stat(a.MembersPath(7).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((dir_ + "/slices/job-7").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "the job may not replace files in its slice directory";
  EXPECT_EQ(st.st_uid, geteuid());
  a.Drop(7);
  EXPECT_FALSE(fs::exists(a.MembersPath(7)));
  EXPECT_FALSE(fs::exists(dir_ + "/slices/job-7"));
  auto board = Board(a);
  EXPECT_EQ(board->FindSlice(7, -1), -1);
}

// Root only: the members file belongs to the job's user; another user can
// open neither it nor the board for writing.
TEST_F(ArbiterTest, OtherUsersCanWriteNeitherTheBoardNorAnotherSlicesMembers) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch users";
  struct passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user nobody";
  Arbiter a(options_);
  SliceLimits l = Limits(9, 300);
  l.uid = 1;  // daemon (Debian): the job's user, not nobody.
  l.gid = 1;
  ASSERT_TRUE(a.Register(l).ok());
  struct stat st {};
  ASSERT_EQ(stat(a.MembersPath(9).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1u);
  const std::string board = a.BoardPath(kGpu), members = a.MembersPath(9);
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) _exit(90);
    int bad = 0;
    if (open(board.c_str(), O_RDWR) >= 0) bad |= 1;
    if (open(board.c_str(), O_RDONLY) < 0) bad |= 2;  // Everyone reads the board.
    if (open(members.c_str(), O_RDWR) >= 0) bad |= 4;
    if (open(members.c_str(), O_RDONLY) >= 0) bad |= 8;
    if (open((dir_ + "/coord/gpu-x.board").c_str(), O_RDWR | O_CREAT, 0666) >= 0) bad |= 16;
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 board writable, 2 board unreadable, "
                                       "4/8 members open to others, 16 coord dir writable";
}

TEST_F(ArbiterTest, ARestartedArbiterRecoversItsSlicesFromTheBoards) {
  {
    Arbiter a(options_);
    ASSERT_TRUE(a.Register(Limits(1, 300)).ok());
    ASSERT_TRUE(a.Register(Limits(2, 700, true, core::Priority::kHigh)).ok());
    ASSERT_TRUE(a.Register(Limits(3, 100)).ok());
  }  // Stopped without dropping anything, as a killed daemon.
  // Job 3 ended while no daemon ran: its members file went with its slice.
  ASSERT_EQ(unlink((dir_ + "/slices/job-3/members").c_str()), 0);
  Arbiter b(options_);
  ASSERT_TRUE(b.Recover().ok());
  std::vector<uint64_t> jobs = b.Jobs();
  EXPECT_EQ(jobs, (std::vector<uint64_t>{1, 2}));
  auto board = Board(b);
  const int32_t i2 = board->FindSlice(2, -1);
  ASSERT_GE(i2, 0);
  EXPECT_EQ(board->slice(uint32_t(i2)).share_milli.load(), 700u);
  EXPECT_EQ(board->slice(uint32_t(i2)).priority.load(), uint32_t(core::Priority::kHigh));
  EXPECT_EQ(board->FindSlice(3, -1), -1);
  // And it arbitrates: job 1 waits and gets the GPU.
  auto m = Members(b, 1);
  const uint64_t now = slice::MonotonicNs() + kMs;
  Write(*m, 0, bd::kMemberWaiting, now);
  b.TickForTest(kGpu, now);
  EXPECT_EQ(board->header().holder.load(), board->FindSlice(1, -1));
}

// A live change for a job the arbiter does not know (not on a board to
// recover) keeps the members file its processes already write.
TEST_F(ArbiterTest, AnUpdateOfAnUnknownJobKeepsItsMembersFile) {
  {
    Arbiter a(options_);
    ASSERT_TRUE(a.Register(Limits(4, 300)).ok());
  }
  fs::remove_all(dir_ + "/coord");  // Its board is gone: nothing to recover.
  ASSERT_EQ(mkdir((dir_ + "/coord").c_str(), 0755), 0);
  auto before = slice::MembersFile::Open(options_.slices_dir + "/job-4/members");
  ASSERT_TRUE(before.ok());
  const uint64_t now = slice::MonotonicNs() + kMs;
  Write(**before, 0, bd::kMemberWaiting, now);
  Arbiter b(options_);
  ASSERT_TRUE(b.Recover().ok());
  ASSERT_TRUE(b.Update(Limits(4, 500)).ok());
  b.TickForTest(kGpu, now);
  auto board = Board(b);
  EXPECT_EQ(board->header().holder.load(), board->FindSlice(4, -1))
      << "the report in the file the job already had was heard";
}

// The thread: a doorbell wakes it at once; one rung in a loop makes it
// decide at most every min_tick_gap_ns.
TEST_F(ArbiterTest, TheDoorbellWakesTheArbiterAndIsRateLimited) {
  options_.threads = true;
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 500, true)).ok());
  ASSERT_TRUE(a.Register(Limits(2, 500, true)).ok());
  auto m1 = Members(a, 1);
  auto board = Board(a);
  // Idle: the arbiter beats every 100 ms. A waiting member rings and gets
  // the GPU well before that.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = std::chrono::steady_clock::now();
  Write(*m1, 0, bd::kMemberWaiting, slice::MonotonicNs());
  m1->Ring();
  while (board->header().holder.load() != board->FindSlice(1, -1) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    board->WaitTurnChange(board->header().turn_seq.load(), 1 * kMs);
  }
  const auto granted = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(board->header().holder.load(), board->FindSlice(1, -1));
  EXPECT_LT(granted, std::chrono::milliseconds(50)) << "the doorbell did not wake the arbiter";
  // A flood of rings from job 2 (which has no member at all).
  auto m2 = Members(a, 2);
  const uint64_t ticks0 = board->header().ticks.load();
  const auto flood_start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - flood_start < std::chrono::milliseconds(200)) {
    Write(*m1, 0, bd::kMemberInflight, slice::MonotonicNs());
    m2->Ring();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flood_start).count();
  const uint64_t ticks = board->header().ticks.load() - ticks0;
  EXPECT_LE(double(ticks), seconds * 1e9 / double(options_.min_tick_gap_ns) * 1.1 + 10)
      << ticks << " decisions in " << seconds << " s";
  EXPECT_EQ(board->header().holder.load(), board->FindSlice(1, -1)) << "the rings changed nothing";
}

}  // namespace
}  // namespace gpuslice::daemon

namespace gpuslice::daemon {
namespace {

// The compute watchdog holds a work-conserving slice to its
// share only while others wait for the GPU; the arbiter counts that time.
TEST_F(ArbiterTest, ContendedTimeCountsOnlyWhileAnotherSliceWaits) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 500)).ok());
  ASSERT_TRUE(a.Register(Limits(2, 500)).ok());
  Model m{a};
  m.board_index = {1, 2};
  m.members.push_back(Members(a, 1));
  m.members.push_back(Members(a, 2));
  auto idle = [](slice::MembersFile& f, uint64_t now, bool, bool) { Write(f, 0, 0, now); };
  m.behaviours = {Honest, idle};
  m.board = Board(a);
  m.Run(500 * kMs);
  EXPECT_EQ(a.ContendedNs(1), 0u) << "nobody waited for the GPU";
  EXPECT_EQ(a.WaitedNs(1), 0u) << "alone, it never waits for another";
  EXPECT_EQ(a.ContendedNs(2), 0u);
  // Both want the GPU all the time: each waits about half of it.
  m.behaviours = {Honest, Honest};
  m.Run(1'000 * kMs);
  EXPECT_NEAR(double(a.ContendedNs(1)) / double(1'000 * kMs), 0.5, 0.1);
  EXPECT_NEAR(double(a.ContendedNs(2)) / double(1'000 * kMs), 0.5, 0.1);
  EXPECT_EQ(a.ContendedNs(3), 0u) << "no such job";
  // What each waited itself (idle reclaim's "waiting is not idle").
  EXPECT_NEAR(double(a.WaitedNs(1)) / double(1'000 * kMs), 0.5, 0.1);
  EXPECT_NEAR(double(a.WaitedNs(2)) / double(1'000 * kMs), 0.5, 0.1);
}

// A hard slice that says its processes report GPU time and then
// reports none is charged only while it keeps another waiting, so alone on
// the GPU it runs far over its share. Once the daemon's audit distrusts it
// (DistrustReports), it pays the wall time of its turns and is held to its
// share, also after a live update; ChargedNs says what it was charged.
TEST_F(ArbiterTest, ADistrustedSliceIsChargedTheWallTimeOfItsTurns) {
  Arbiter a(options_);
  ASSERT_TRUE(a.Register(Limits(1, 300)).ok());
  Model m{a};
  m.board_index = {1};
  m.members.push_back(Members(a, 1));
  m.behaviours = {[](slice::MembersFile& f, uint64_t now, bool open, bool draining) {
    Write(f, 0,
          bd::kMemberGpuTime | (open ? 0 : bd::kMemberWaiting) |
              (open || draining ? bd::kMemberInflight : 0),
          now);
  }};
  m.board = Board(a);
  constexpr uint64_t kRun = 1'000 * kMs;
  m.Run(kRun);
  EXPECT_GT(double(m.gpu_ns[0]) / kRun, 0.6) << "the escape, shown";
  const uint64_t before = a.ChargedNs(1).value_or(~0ull);
  EXPECT_LT(double(before) / kRun, 0.2) << "charged little for it";
  a.DistrustReports(1);
  m.Run(2 * kRun);
  EXPECT_NEAR(double(m.gpu_ns[0]) / (2 * kRun), 0.30, 0.03);
  EXPECT_NEAR(double(a.ChargedNs(1).value_or(0) - before) / (2 * kRun), 0.30, 0.03);
  // A live change keeps the distrust.
  ASSERT_TRUE(a.Update(Limits(1, 200)).ok());
  m.Run(2 * kRun);
  EXPECT_NEAR(double(m.gpu_ns[0]) / (2 * kRun), 0.20, 0.03);
  EXPECT_FALSE(a.ChargedNs(2).has_value()) << "no such job";
}

// The distrust follows a slice that moves to another GPU (the move makes a
// new board entry): there, a slice that reports work but no GPU time while
// it holds the GPU alone is charged the wall time of its turn; one that was
// never distrusted is charged nothing for it (nobody waits).
TEST_F(ArbiterTest, ADistrustedSliceStaysDistrustedAfterAMove) {
  const std::string kOther = "GPU-99999999-2222-3333-4444-555555555555";
  Arbiter a(options_);
  for (uint64_t job : {1, 2}) {
    SliceLimits l = Limits(job, 300);
    ASSERT_TRUE(a.Register(l).ok());
  }
  a.DistrustReports(1);
  uint64_t now = slice::MonotonicNs() + kMs;  // The new GPU's clock, one for both runs.
  auto charged_after_move = [&](uint64_t job) {
    SliceLimits l = Limits(job, 300);
    l.uuids = {kOther};
    EXPECT_TRUE(a.Move(l, {{kGpu, kOther}}).ok());
    auto m = Members(a, job);
    for (int i = 0; i < 100; ++i) {
      now += 100 * kUs;
      Write(*m, 0, bd::kMemberGpuTime | bd::kMemberWaiting | bd::kMemberInflight, now);
      a.TickForTest(kOther, now);
    }
    const uint64_t charged = a.ChargedNs(job).value_or(0);
    a.Drop(job);
    return charged;
  };
  EXPECT_EQ(charged_after_move(2), 0u) << "a trusted slice that reports nothing is charged nothing";
  const uint64_t distrusted = charged_after_move(1);
  EXPECT_GT(distrusted, 5 * kMs) << "the distrust was lost in the move";
}

// Slices whose loops leave the GPU mostly idle launch beside the
// holder (bd::kSliceCoRun on the board, and a turn change wakes them), so
// that a 30/70 pair of them uses what both loops reach; a slice whose work
// keeps the GPU busy never co-runs, and with the arbiter's co-running off the
// pair is back to exclusive turns. Each step, every slice the board lets
// launch (the open holder, or a co-runner while a turn is open or closing)
// runs `duty` of the step, and reports it.
struct CoRunResult {
  std::vector<double> used;  // Fraction of the run each slice's work ran.
  double corun = 0;          // Fraction of the run in which a slice co-ran.
};
CoRunResult RunLoops(const ArbiterOptions& options, const std::vector<uint32_t>& shares,
                     const std::vector<double>& duty) {
  Arbiter a(options);
  std::vector<std::unique_ptr<slice::MembersFile>> members;
  for (size_t i = 0; i < shares.size(); ++i) {
    EXPECT_TRUE(a.Register(Limits(i + 1, shares[i])).ok());
    auto f = slice::MembersFile::Open(a.MembersPath(i + 1));
    EXPECT_TRUE(f.ok());
    members.push_back(std::move(*f));
  }
  auto board = slice::BoardView::Open(a.BoardPath(kGpu));
  EXPECT_TRUE(board.ok());
  constexpr uint64_t kStep = 100 * kUs;
  constexpr uint64_t kWarm = 300 * kMs, kRun = 3'000 * kMs;
  CoRunResult out;
  out.used.assign(shares.size(), 0);
  uint64_t now = slice::MonotonicNs() + kMs;
  for (uint64_t t = 0; t < kWarm + kRun; t += kStep) {
    now += kStep;
    const bd::BoardHeader& h = (*board)->header();
    const int32_t holder = h.holder.load();
    const uint32_t state = h.turn_state.load();
    bool corun = false;
    for (size_t i = 0; i < shares.size(); ++i) {
      const int32_t idx = (*board)->FindSlice(i + 1, -1);
      EXPECT_GE(idx, 0);
      if (idx < 0) return out;
      const bool open = idx == holder && state == bd::kTurnOpen;
      const bool beside = state != bd::kTurnNone &&
                          ((*board)->slice(uint32_t(idx)).flags.load() & bd::kSliceCoRun) != 0;
      corun |= beside;
      const bool runs = open || beside;
      const uint64_t ran = runs ? uint64_t(double(kStep) * duty[i]) : 0;
      if (t >= kWarm) out.used[i] += double(ran) / kRun;
      Write(*members[i], 0, bd::kMemberGpuTime | (runs ? bd::kMemberInflight : bd::kMemberWaiting),
            now);
      members[i]->slot(0).gpu_ns.fetch_add(ran);
    }
    if (corun && t >= kWarm) out.corun += double(kStep) / kRun;
    a.TickForTest(kGpu, now);
  }
  return out;
}

TEST_F(ArbiterTest, SlicesThatLeaveTheGpuIdleCoRunBesideTheHolder) {
  CoRunResult r = RunLoops(options_, {300, 700}, {0.25, 0.25});
  EXPECT_NEAR(r.used[0], 0.25, 0.01);
  EXPECT_NEAR(r.used[1], 0.25, 0.01);
  EXPECT_GT(r.corun, 0.95);

  ArbiterOptions exclusive = options_;
  exclusive.params.corun = false;
  r = RunLoops(exclusive, {300, 700}, {0.25, 0.25});
  EXPECT_LT(r.used[0] + r.used[1], 0.30) << "exclusive turns, shown short";
  EXPECT_EQ(r.corun, 0);

  r = RunLoops(options_, {300, 700}, {1.0, 1.0});
  // Busy slices keep exclusive turns, but for a window now and then in which
  // a turn began behind the previous holder's drain (measured 2.4%).
  EXPECT_LT(r.corun, 0.10);
  EXPECT_NEAR(r.used[0], 0.30, 0.02);
  EXPECT_NEAR(r.used[1], 0.70, 0.02);
}

}  // namespace
}  // namespace gpuslice::daemon
