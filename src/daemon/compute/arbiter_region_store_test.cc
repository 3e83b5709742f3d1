#include "daemon/compute/arbiter_region_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "slice/compute/coord_board.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

const std::string kGpu = "GPU-aaaaaaaa-2222-3333-4444-555555555555";

TEST(JobIdOfSlicePath, ReadsTheIdOfEitherLayout) {
  struct Case {
    const char* path;
    uint64_t id;
  } cases[] = {
      {"/var/lib/gpuslice/slices/job-12.slice", 12},
      {"/var/lib/gpuslice/slices/job-12/region", 12},
      {"/state/job-3/slices/job-40/region", 40},
      {"/fake/slice-7", 0},
      {"/x/job-/region", 0},
      {"/x/job-99999999999999999999999/region", 0},
  };
  for (const Case& c : cases) EXPECT_EQ(JobIdOfSlicePath(c.path), c.id) << c.path;
}

class ArbiterRegionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-arbiter-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(mkdir((dir_ + "/coord").c_str(), 0755), 0);
    options_.coord_dir = dir_ + "/coord";
    options_.slices_dir = dir_ + "/slices";
    options_.board_mode = geteuid() == 0 ? 0644 : 0444;
    options_.threads = false;
  }
  void TearDown() override { fs::remove_all(dir_); }

  SliceLimits Limits(uint64_t job, uint32_t milli) {
    SliceLimits l;
    l.job_id = job;
    l.uid = geteuid();
    l.gid = getegid();
    l.uuids = {kGpu};
    l.compute_milli = milli;
    return l;
  }

  std::string dir_;
  ArbiterOptions options_;
};

TEST_F(ArbiterRegionStoreTest, CreateUpdateAndRemoveReachTheArbiter) {
  FakeRegionStore inner;
  Arbiter arbiter(options_);
  ArbiterRegionStore store(inner, arbiter);
  auto path = store.Create(Limits(5, 300));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_TRUE(inner.regions.count(*path));
  EXPECT_TRUE(fs::exists(arbiter.MembersPath(5)));
  auto board = slice::BoardView::Open(arbiter.BoardPath(kGpu));
  ASSERT_TRUE(board.ok()) << board.status().ToString();
  const int32_t at = (*board)->FindSlice(5, -1);
  ASSERT_GE(at, 0);
  EXPECT_EQ((*board)->slice(uint32_t(at)).share_milli.load(), 300u);

  SliceLimits up = Limits(5, 600);
  up.launches_paused = true;
  ASSERT_TRUE(store.Update(*path, up).ok());
  EXPECT_EQ((*board)->slice(uint32_t(at)).share_milli.load(), 600u);
  EXPECT_EQ((*board)->slice(uint32_t(at)).flags.load(), slice::board::kSlicePaused);
  EXPECT_EQ(inner.updates.size(), 1u);

  // The fake's paths carry no job id; a real one does.
  ASSERT_TRUE(store.Remove(*path).ok());
  EXPECT_GE((*board)->FindSlice(5, -1), 0) << "the fake path names no job";
  arbiter.Drop(5);
  EXPECT_EQ((*board)->FindSlice(5, -1), -1);
  EXPECT_FALSE(fs::exists(arbiter.MembersPath(5)));
}

// Resume on demand was off in the daemon (which stacks this store on the
// shim's) while every test over the shim's store passed: the request of a
// suspended job's process never reached the daemon through this one.
TEST_F(ArbiterRegionStoreTest, AResumeRequestAndTheSuspensionPassThrough) {
  FakeRegionStore inner;
  Arbiter arbiter(options_);
  ArbiterRegionStore store(inner, arbiter);
  auto path = store.Create(Limits(6, 300));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  SliceLimits suspended = Limits(6, 300);
  suspended.suspension = 1'700'000'000'000;
  ASSERT_TRUE(store.Update(*path, suspended).ok());
  EXPECT_EQ(inner.regions.at(*path).suspension, 1'700'000'000'000u);
  inner.resume_requests[*path] = 1'700'000'000'000;
  auto asked = store.ResumeRequest(*path);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ(*asked, 1'700'000'000'000u);
}

TEST_F(ArbiterRegionStoreTest, RemoveOfARealSlicePathDropsItsJob) {
  FakeRegionStore inner;
  Arbiter arbiter(options_);
  ArbiterRegionStore store(inner, arbiter);
  ASSERT_TRUE(store.Create(Limits(8, 300)).ok());
  // What ShimRegionStore returns; the fake removes only what it created.
  inner.regions[dir_ + "/slices/job-8.slice"] = Limits(8, 300);
  ASSERT_TRUE(store.Remove(dir_ + "/slices/job-8.slice").ok());
  EXPECT_TRUE(arbiter.Jobs().empty());
  EXPECT_FALSE(fs::exists(dir_ + "/slices/job-8"));
}

TEST_F(ArbiterRegionStoreTest, AShareNothingWouldEnforceIsNotHandedOut) {
  options_.coord_dir = dir_ + "/no/such/dir";
  FakeRegionStore inner;
  Arbiter arbiter(options_);
  ArbiterRegionStore store(inner, arbiter);
  auto shared = store.Create(Limits(1, 300));
  EXPECT_FALSE(shared.ok());
  EXPECT_TRUE(inner.regions.empty()) << "the region was removed again";
  // Without a share the slice works without the arbiter.
  auto plain = store.Create(Limits(2, 0));
  EXPECT_TRUE(plain.ok()) << plain.status().ToString();
  // A daemon whose coordination directory was refused has none at all.
  options_.coord_dir.clear();
  Arbiter none(options_);
  ArbiterRegionStore bare(inner, none);
  EXPECT_EQ(bare.Create(Limits(3, 300)).status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(none.Recover().ok());
}

}  // namespace
}  // namespace gpuslice::daemon
