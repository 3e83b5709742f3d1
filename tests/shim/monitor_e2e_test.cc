// The shim's monitoring counters and the launch pause, end to end: real
// CUDA programs under libgpuslice.so over the simulated GPU, in a daemon
// style (closed) slice region that the test reads and writes as the daemon
// would (docs/SLICE_REGION.md: refused_allocs, throttled_ns,
// launches_paused).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "slice/region/region.h"
#include "subprocess.h"

namespace gpuslice::shim {
namespace {

using core::kGiB;
using core::kMiB;
using testing::Env;
using testing::Output;
using testing::Session;

constexpr int kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY

class MonitorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-monitor-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Env Bare() const {
    return {{"PATH", "/usr/bin:/bin"},
            {"LD_LIBRARY_PATH", GPUSLICE_SIM_DIR},
            {"GPUSLICE_SIM_STATE", dir_ + "/sim-state"},
            {"GPUSLICE_SIM_CONTEXT_MEM", "0"},
            {"XDG_RUNTIME_DIR", dir_}};
  }
  // A process of the slice, as the daemon starts one.
  Env InSlice() const {
    Env e = Bare();
    e["LD_PRELOAD"] = GPUSLICE_SHIM_PATH;
    e["GPUSLICE_SLICE"] = RegionPath();
    e["GPUSLICE_COORD_DIR"] = dir_;
    return e;
  }
  std::string RegionPath() const { return dir_ + "/slice.region"; }
  std::string CountPath() const { return dir_ + "/count"; }

  std::string DeviceUuid() const {
    Output o = testing::Run({GPUSLICE_PROBE_PATH, "info"}, Bare(), 60);
    return o.values["uuid0"];
  }
  std::unique_ptr<slice::Region> MakeRegion(uint64_t limit) {
    const std::string uuid = DeviceUuid();
    EXPECT_FALSE(uuid.empty());
    slice::RegionOptions options;
    options.name = "monitor";
    options.closed = true;
    options.devices = {{uuid, limit}};
    auto r = slice::Region::Create(RegionPath(), options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }

  // Launches done so far by launch_loop (0 before its first).
  long long Count() const {
    std::ifstream in(CountPath());
    long long n = 0;
    in >> n;
    return n;
  }
  // Waits (at most `limit`) until the count exceeds `than`.
  bool CountExceeds(long long than, std::chrono::seconds limit = std::chrono::seconds(20)) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (Count() > than) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Waits (at most 20 s) until the count has not moved for `still`; returns
  // the count then, or -1 if it never stood still.
  long long CountStandsStill(std::chrono::milliseconds still) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    long long last = Count();
    auto since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const long long now = Count();
      if (now != last) {
        last = now;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since >= still) {
        return last;
      }
    }
    return -1;
  }

  std::string dir_;
};

TEST_F(MonitorE2eTest, ARefusedAllocationIsCountedOnceAndAGrantedOneNotAtAll) {
  std::unique_ptr<slice::Region> region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  Output fits = testing::Run({GPUSLICE_PROBE_PATH, "alloc", "alloc", std::to_string(512 * kMiB)},
                             InSlice(), 60);
  ASSERT_EQ(fits.exit_code, 0) << fits.out << fits.err;
  EXPECT_EQ(fits.Int("result"), 0) << fits.out;
  EXPECT_EQ(region->Devices()[0].refused_allocs, 0u);

  Output refused = testing::Run({GPUSLICE_PROBE_PATH, "alloc", "alloc", std::to_string(2 * kGiB)},
                                InSlice(), 60);
  ASSERT_EQ(refused.exit_code, 0) << refused.out << refused.err;
  EXPECT_EQ(refused.Int("result"), kOutOfMemory) << refused.out;
  EXPECT_EQ(region->Devices()[0].refused_allocs, 1u);

  // Every route counts, and the counter only grows across processes.
  Output filled = testing::Run({GPUSLICE_PROBE_PATH, "fill", "pitch", std::to_string(64 * kMiB)},
                               InSlice(), 60);
  ASSERT_EQ(filled.exit_code, 0) << filled.out << filled.err;
  EXPECT_EQ(filled.Int("error"), kOutOfMemory) << filled.out;
  EXPECT_GE(region->Devices()[0].refused_allocs, 2u);
}

TEST_F(MonitorE2eTest, APauseHoldsALaunchLoopAndClearingItResumesTheSameProcess) {
  std::unique_ptr<slice::Region> region = MakeRegion(4 * kGiB);
  ASSERT_NE(region, nullptr);
  const std::string uuid = region->Devices()[0].uuid;
  Session loop({GPUSLICE_LAUNCH_LOOP_PATH, CountPath(), "100", "60"}, InSlice());
  ASSERT_TRUE(CountExceeds(20)) << "the loop never ran";

  ASSERT_TRUE(region->SetLaunchesPaused(uuid, true).ok());
  EXPECT_TRUE(region->Devices()[0].launches_paused);
  const auto paused_at = std::chrono::steady_clock::now();
  // Held: the count stops (one launch may have been past the gate already).
  const long long held = CountStandsStill(std::chrono::milliseconds(500));
  ASSERT_GE(held, 0) << "launches went on while paused";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Count(), held) << "a held launch went through while still paused";

  ASSERT_TRUE(region->SetLaunchesPaused(uuid, false).ok());
  const auto paused_for = std::chrono::steady_clock::now() - paused_at;
  EXPECT_TRUE(CountExceeds(held + 20)) << "the loop did not resume after the pause was cleared";
  loop.Kill(SIGTERM);

  // Time held by the pause is not throttling (there is no share here).
  const uint64_t throttled = region->Devices()[0].throttled_ns;
  EXPECT_LT(throttled, uint64_t(std::chrono::nanoseconds(paused_for).count()) / 2);
}

TEST_F(MonitorE2eTest, LaunchesHeldByAHardShareAddUpAsThrottledTime) {
  std::unique_ptr<slice::Region> region = MakeRegion(4 * kGiB);
  ASSERT_NE(region, nullptr);
  const std::string uuid = region->Devices()[0].uuid;
  ASSERT_TRUE(
      region->SetComputeShare(uuid, 200, slice::ComputeMode::kHard, core::Priority::kNormal).ok());
  const auto start = std::chrono::steady_clock::now();
  Output o = testing::Run({GPUSLICE_LAUNCH_LOOP_PATH, CountPath(), "1000", "1.5"}, InSlice(), 60);
  const auto wall = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  ASSERT_GT(o.Int("launches"), 0) << o.out;
  // A 20% hard cap keeps a busy loop waiting most of its 1.5 s; a generous
  // lower bound, and never more than the program lived.
  const uint64_t throttled = region->Devices()[0].throttled_ns;
  EXPECT_GE(throttled, 200'000'000u);
  EXPECT_LE(throttled, uint64_t(std::chrono::nanoseconds(wall).count()));
}

TEST_F(MonitorE2eTest, WithoutAShareOrPauseNothingIsThrottled) {
  // Proves the test above can fail: the same loop alone, no share.
  std::unique_ptr<slice::Region> region = MakeRegion(4 * kGiB);
  ASSERT_NE(region, nullptr);
  Output o = testing::Run({GPUSLICE_LAUNCH_LOOP_PATH, CountPath(), "1000", "1"}, InSlice(), 60);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_LT(region->Devices()[0].throttled_ns, 100'000'000u);
}

}  // namespace
}  // namespace gpuslice::shim
