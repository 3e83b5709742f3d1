#include "slice/compute/coord_board.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "slice/compute/coord.h"

namespace gpuslice::slice {
namespace {

namespace fs = std::filesystem;

class CoordBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-board-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST(CoordBoard, PathsOfBoardsAndMembers) {
  EXPECT_EQ(BoardPath("/s/coord", "GPU-ABCD-12"), "/s/coord/gpu-abcd-12.board");
  EXPECT_EQ(MembersPath("/s/slices/job-4/limits", "/s/slices/job-4/region"),
            "/s/slices/job-4/members");
  EXPECT_EQ(MembersPath(nullptr, "/s/slices/job-4.slice"), "/s/slices/job-4/members");
  EXPECT_EQ(MembersPath("", "/s/slices/job-4/region"), "/s/slices/job-4/members");
}

// What the shim accepts as the daemon's word: nothing its own process (or
// anyone but root and itself) could have written.
TEST(CoordBoard, ABoardTheProcessCouldHaveWrittenIsRefused) {
  struct Case {
    uid_t owner;
    mode_t mode;
    uid_t euid;
    bool ok;
  } cases[] = {
      {0, 0644, 1000, true},     // A root daemon's board, a user's job.
      {0, 0644, 0, true},        // ... a root job.
      {0, 0664, 1000, false},    // Group-writable.
      {0, 0646, 1000, false},    // World-writable.
      {1000, 0444, 1000, true},  // A daemon that is not root, its own jobs.
      {1000, 0644, 1000, false},  // ... but writable by the job itself.
      {1001, 0444, 1000, false},  // Another user's.
  };
  for (const Case& c : cases) {
    EXPECT_EQ(CheckDaemonWritten("b", c.owner, c.mode, c.euid).ok(), c.ok)
        << c.owner << " " << std::oct << c.mode << " " << std::dec << c.euid;
  }
}

TEST_F(CoordBoardTest, TheShimOpensABoardReadOnlyAndFollowsIt) {
  const mode_t mode = geteuid() == 0 ? 0644 : 0444;
  const std::string path = BoardPath(dir_, "GPU-1");
  auto made = CreateOrOpenBoard(path, "GPU-1", mode);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto* h = static_cast<board::BoardHeader*>(*made);
  auto view = BoardView::Open(path);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ((*view)->header().holder.load(), -1);
  h->holder.store(3);
  EXPECT_EQ((*view)->header().holder.load(), 3) << "one shared file";
  EXPECT_TRUE((*view)->ArbiterStale(MonotonicNs())) << "never beaten";
  h->arbiter_beat_ns.store(MonotonicNs());
  EXPECT_FALSE((*view)->ArbiterStale(MonotonicNs()));
  // Its mapping is read-only: a write would fault (not tried), and the file
  // cannot be opened for writing through the view's path by a non-owner.
  munmap(*made, board::kBoardSize);
  // Reopening keeps what the board records (a restarted arbiter recovers it).
  auto again = CreateOrOpenBoard(path, "GPU-1", mode);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(static_cast<board::BoardHeader*>(*again)->holder.load(), 3);
  munmap(*again, board::kBoardSize);
}

TEST_F(CoordBoardTest, AGroupWritableOrForeignBoardIsRefused) {
  const std::string path = BoardPath(dir_, "GPU-2");
  auto made = CreateOrOpenBoard(path, "GPU-2", 0664);
  ASSERT_TRUE(made.ok());
  munmap(*made, board::kBoardSize);
  auto view = BoardView::Open(path);
  EXPECT_EQ(view.status().code(), core::StatusCode::kPermissionDenied)
      << view.status().ToString();
  // A file of the wrong size or magic, made by anyone, is no board.
  const std::string junk = BoardPath(dir_, "GPU-3");
  std::ofstream(junk) << "junk";
  chmod(junk.c_str(), 0444);
  EXPECT_FALSE(BoardView::Open(junk).ok());
}

TEST_F(CoordBoardTest, MembersFileClaimsSlotsAndRingsTheDoorbell) {
  const std::string path = dir_ + "/members";
  auto fd = CreateMembersFile(path, 42, geteuid(), getegid());
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  close(*fd);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto m = MembersFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->job_id(), 42u);
  const uint64_t now = MonotonicNs();
  auto a = (*m)->Claim(100, 0, now);
  auto b = (*m)->Claim(101, 1, now);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ((*m)->slot(*b).device_index.load(), 1u);
  (*m)->Leave(*a, 100);
  EXPECT_EQ((*m)->slot(*a).owner.load(), 0u);
  // A dead member's slot (no heartbeat for kMemberTimeoutNs) is taken over.
  for (uint32_t i = 0; i < board::kMembersPerSlice; ++i) {
    if ((*m)->slot(i).owner.load() == 0) {
      ASSERT_TRUE((*m)->Claim(200 + int32_t(i), 0, now).ok());
    }
  }
  EXPECT_EQ((*m)->Claim(999, 0, now).status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_TRUE((*m)->Claim(999, 0, now + board::kMemberTimeoutNs + 1).ok());
}

}  // namespace
}  // namespace gpuslice::slice
