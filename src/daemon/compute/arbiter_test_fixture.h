#pragma once

// What the arbiter's tests share: a temporary coordination directory with
// an Arbiter's options (no threads: tests call TickForTest), the limits of a
// slice, and a member slot written as a job's process writes it.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "daemon/compute/arbiter.h"
#include "slice/compute/coord_board.h"

namespace gpuslice::daemon::arbiter_testing {

namespace bd = slice::board;
namespace fs = std::filesystem;

inline constexpr uint64_t kUs = 1'000;
inline constexpr uint64_t kMs = 1'000'000;
inline const std::string kGpu = "GPU-11111111-2222-3333-4444-555555555555";

inline mode_t BoardMode() { return geteuid() == 0 ? 0644 : 0444; }

inline SliceLimits Limits(uint64_t job, uint32_t milli, bool wc = false,
                          core::Priority priority = core::Priority::kNormal) {
  SliceLimits l;
  l.job_id = job;
  l.uid = geteuid();
  l.gid = getegid();
  l.uuids = {kGpu};
  l.compute_milli = milli;
  l.work_conserving = wc;
  l.priority = priority;
  return l;
}

class ArbiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-arbiter-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0755);
    ASSERT_EQ(mkdir((dir_ + "/coord").c_str(), 0755), 0);
    options_.coord_dir = dir_ + "/coord";
    options_.slices_dir = dir_ + "/slices";
    options_.board_mode = BoardMode();
    options_.threads = false;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<slice::MembersFile> Members(Arbiter& a, uint64_t job) {
    auto m = slice::MembersFile::Open(a.MembersPath(job));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::unique_ptr<slice::BoardView> Board(Arbiter& a) {
    auto b = slice::BoardView::Open(a.BoardPath(kGpu));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(*b) : nullptr;
  }

  std::string dir_;
  ArbiterOptions options_;
};

// A member slot as a process of this test's pid writes it: claimed, on the
// slice's first device, `flags`, beating at `now`.
inline void Write(slice::MembersFile& m, uint32_t slot, uint32_t flags, uint64_t now) {
  bd::MemberSlot& s = m.slot(slot);
  s.owner.store((uint64_t{uint32_t(getpid())} << 32) | 1);
  s.device_index.store(0);
  s.flags.store(flags);
  s.heartbeat_ns.store(now);
}

}  // namespace gpuslice::daemon::arbiter_testing
