#include "slice/compute/coord.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "slice/compute/coord_turns.h"

namespace gpuslice::slice {
namespace {

class CoordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-coord-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST(CoordPath, IgnoresPrefixAndCase) {
  EXPECT_EQ(CoordPath("/d", "GPU-ABCD-12"), "/d/gpu-abcd-12.coord");
  EXPECT_EQ(CoordPath("/d", "MIG-ab/../x"), "/d/gpu-ab____x.coord");
}

TEST(SliceKey, DiffersByPathAndTimeAndIsNeverZero) {
  EXPECT_NE(SliceKey("/a", 1), SliceKey("/b", 1));
  EXPECT_NE(SliceKey("/a", 1), SliceKey("/a", 2));
  EXPECT_NE(SliceKey("", 0), 0u);
}

TEST_F(CoordTest, CreateThenOpenSharesState) {
  const std::string path = CoordPath(dir_, "GPU-1");
  auto a = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto b = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_TRUE(b.ok()) << b.status().message();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, off_t(coord::kCoordSize));
  (*a)->header().turns.store(7);
  EXPECT_EQ((*b)->header().turns.load(), 7u);
  EXPECT_STREQ((*b)->header().uuid, "GPU-1");
}

TEST_F(CoordTest, RefusesWorldAccessAndForeignFiles) {
  EXPECT_FALSE(Coordinator::OpenOrCreate(dir_ + "/x.coord", "GPU-1", 0666).ok());
  const std::string path = dir_ + "/bad.coord";
  FILE* f = fopen(path.c_str(), "w");
  fputs("not a coordination file", f);
  fclose(f);
  auto r = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("size"), std::string::npos);
  chmod(path.c_str(), 0666);
  r = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("writable by others"), std::string::npos);
}

TEST_F(CoordTest, WaitingSliceGetsTheTurnAndDeadMembersAreReclaimed) {
  auto c = Coordinator::OpenOrCreate(CoordPath(dir_, "GPU-1"), "GPU-1", 0600);
  ASSERT_TRUE(c.ok());
  Coordinator& co = **c;
  uint64_t now = MonotonicNs();
  auto a = co.Join(11, 100, now);
  auto b = co.Join(22, 101, now);
  ASSERT_TRUE(a.ok() && b.ok());
  co.Configure(*a, 500, coord::kModeHard, 1);
  co.Configure(*b, 500, coord::kModeHard, 1);
  co.member(*b).flags.store(coord::kMemberWaiting);
  co.member(*b).heartbeat_ns.store(now);
  co.member(*a).heartbeat_ns.store(now);
  PolicyParams p;
  now += 10'000'000;  // Tokens accrue.
  co.member(*b).heartbeat_ns.store(now);
  co.member(*a).heartbeat_ns.store(now);
  const uint32_t seq = co.header().turn_seq.load();
  ASSERT_TRUE(co.Tick(now, p));
  EXPECT_EQ(co.header().holder.load(), co.member(*b).slice.load());
  EXPECT_EQ(co.header().turn_state.load(), uint32_t(coord::kTurnOpen));
  EXPECT_GT(co.header().turn_seq.load(), seq);
  // B's process stops heartbeating (killed): it is reclaimed and its turn ends.
  co.member(*a).flags.store(coord::kMemberWaiting);
  now += coord::kMemberTimeoutNs + 1;
  co.member(*a).heartbeat_ns.store(now);
  ASSERT_TRUE(co.Tick(now, p));
  EXPECT_EQ(co.member(*b).owner.load(), 0u);
  EXPECT_EQ(co.header().holder.load(), co.member(*a).slice.load());
}

TEST_F(CoordTest, AStaleLeaseIsBroken) {
  auto c = Coordinator::OpenOrCreate(CoordPath(dir_, "GPU-1"), "GPU-1", 0600);
  ASSERT_TRUE(c.ok());
  Coordinator& co = **c;
  const uint64_t now = MonotonicNs();
  co.header().lock.store((uint64_t{999999} << 32) | 1);  // Held by a dead process.
  co.header().lock_since_ns.store(now);
  EXPECT_FALSE(co.Tick(now + 1000, PolicyParams{}));
  EXPECT_TRUE(co.Tick(now + coord::kLeaseNs + 1, PolicyParams{}));
  EXPECT_EQ(co.header().lock.load(), 0u);
}

// A slice alone on its GPU may decide less often (the gate's quiet tick)
// for as long as its cap is away; another slice on the GPU, or a cap that
// has run out, brings the usual pace back.
TEST_F(CoordTest, ASliceAloneIsQuietForAsLongAsItsTokensLast) {
  const std::string path = CoordPath(dir_, "GPU-1");
  auto a = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  auto b = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_TRUE(a.ok() && b.ok());
  Coordinator& co = **a;
  CooperativeTurns mine(std::move(*a), 100, path);
  CooperativeTurns other(std::move(*b), 101, path);
  EXPECT_EQ(mine.QuietNs(), 0u) << "not a member yet";
  const uint64_t now = MonotonicNs();
  ASSERT_TRUE(mine.Join(11, now).ok());
  mine.Configure(300, coord::kModeHard, 1);
  const int32_t s = co.member(0).slice.load();
  ASSERT_GE(s, 0);
  co.slice(uint32_t(s)).tokens_ns.store(7'000'000);
  EXPECT_EQ(mine.QuietNs(), 7'000'000u);
  co.slice(uint32_t(s)).tokens_ns.store(-5);
  EXPECT_EQ(mine.QuietNs(), 0u) << "out of tokens";
  mine.Configure(300, coord::kModeWorkConserving, 1);
  EXPECT_EQ(mine.QuietNs(), UINT64_MAX) << "no cap to close its turn";
  ASSERT_TRUE(other.Join(22, now).ok());
  other.Configure(700, coord::kModeHard, 1);
  EXPECT_EQ(mine.QuietNs(), 0u) << "another slice is on the GPU";
  other.Leave(22);
  // Its slice entry stays until a decision frees it (no process left).
  EXPECT_EQ(mine.QuietNs(), 0u);
  co.member(0).heartbeat_ns.store(now);
  ASSERT_TRUE(mine.Decide(now, PolicyParams{}));
  EXPECT_EQ(mine.QuietNs(), UINT64_MAX) << "alone again";
}

// Slices that all launch at once (the holder in its open turn and
// co-runners beside it) are as quiet as a slice alone, while nobody waits
// for a turn; a slice that takes turns, a waiting member or a closing turn
// brings the usual pace back.
TEST_F(CoordTest, CoRunningSlicesAreQuietWhileNobodyWaits) {
  const std::string path = CoordPath(dir_, "GPU-1");
  auto a = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  auto b = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  auto c = Coordinator::OpenOrCreate(path, "GPU-1", 0600);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  Coordinator& co = **a;
  CooperativeTurns mine(std::move(*a), 100, path);
  CooperativeTurns other(std::move(*b), 101, path);
  CooperativeTurns third(std::move(*c), 102, path);
  const uint64_t now = MonotonicNs();
  ASSERT_TRUE(mine.Join(11, now).ok());
  ASSERT_TRUE(other.Join(22, now).ok());
  mine.Configure(300, coord::kModeHard, 1);
  other.Configure(700, coord::kModeHard, 1);
  const int32_t ms = co.member(0).slice.load(), os = co.member(1).slice.load();
  ASSERT_GE(ms, 0);
  ASSERT_GE(os, 0);
  ASSERT_NE(ms, os);
  co.slice(uint32_t(ms)).tokens_ns.store(7'000'000);
  // The other slice holds an open turn and this one co-runs beside it.
  co.header().holder.store(os);
  co.header().turn_state.store(coord::kTurnOpen);
  co.slice(uint32_t(ms)).flags.store(coord::kSliceCoRun);
  EXPECT_EQ(mine.QuietNs(), 7'000'000u) << "co-running beside the holder";
  co.member(1).flags.store(coord::kMemberWaiting);
  EXPECT_EQ(mine.QuietNs(), 0u) << "a member waits";
  co.member(1).flags.store(coord::kMemberInflight);
  EXPECT_EQ(mine.QuietNs(), 7'000'000u);
  co.header().turn_state.store(coord::kTurnClosing);
  EXPECT_EQ(mine.QuietNs(), 0u) << "the turn closes: its drain is reported";
  co.header().turn_state.store(coord::kTurnOpen);
  // This slice holds the turn and the other co-runs.
  co.header().holder.store(ms);
  co.slice(uint32_t(ms)).flags.store(0);
  co.slice(uint32_t(os)).flags.store(coord::kSliceCoRun);
  EXPECT_EQ(mine.QuietNs(), 7'000'000u) << "holding, the other co-running";
  co.slice(uint32_t(os)).flags.store(0);
  EXPECT_EQ(mine.QuietNs(), 0u) << "the other slice takes turns";
  co.slice(uint32_t(os)).flags.store(coord::kSliceCoRun);
  ASSERT_TRUE(third.Join(33, now).ok());
  third.Configure(200, coord::kModeHard, 1);
  EXPECT_EQ(mine.QuietNs(), 0u) << "a third slice neither holds the turn nor co-runs";
}

}  // namespace
}  // namespace gpuslice::slice
