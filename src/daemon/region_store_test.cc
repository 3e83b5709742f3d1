#include "daemon/region_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "shim/admission.h"
#include "shim/region.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class ShimRegionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-region-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  SliceLimits Limits(uint64_t id, std::vector<std::string> uuids) {
    SliceLimits l;
    l.job_id = id;
    l.uid = getuid();
    l.gid = getgid();
    l.uuids = std::move(uuids);
    l.memory_bytes_per_device = 4 * core::kGiB;
    return l;
  }

  std::string dir_;
};

struct Case {
  const char* what;
  uint32_t share_milli;
  bool work_conserving;
  core::Priority priority;
  uint32_t want_mode;  // DeviceEntry::compute_mode.
};

TEST_F(ShimRegionStoreTest, EachDeviceGetsTheShareModeAndPriority) {
  const Case cases[] = {
      {"a hard 30% fraction, high", 300, false, core::Priority::kHigh, 0},
      {"a work-conserving 70% fraction, low", 700, true, core::Priority::kLow, 2},
      {"a whole GPU (no share), low", 0, false, core::Priority::kLow, 0},
      {"a normal job", 250, false, core::Priority::kNormal, 0},
  };
  ShimRegionStore store(dir_ + "/slices");
  uint64_t id = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SliceLimits l = Limits(id++, {"GPU-aaaa", "GPU-bbbb"});
    l.compute_milli = c.share_milli;
    l.work_conserving = c.work_conserving;
    l.priority = c.priority;
    auto path = store.Create(l);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    auto region = shim::Region::Open(*path);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    for (const std::string& uuid : l.uuids) {
      auto index = (*region)->FindDevice(uuid);
      ASSERT_TRUE(index.ok()) << uuid;
      const auto& d = (*region)->device(*index);
      EXPECT_EQ(d.compute_share_milli.load(), c.share_milli) << uuid;
      EXPECT_EQ(d.compute_mode.load(), c.want_mode) << uuid;
      // The region encodes a set priority as core::Priority + 1 (0: unset).
      EXPECT_EQ(d.priority.load(), uint32_t(c.priority) + 1) << uuid;
    }
  }
}

TEST_F(ShimRegionStoreTest, AShareAboveTheWholeGpuIsRefusedAndLeavesNoRegion) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(9, {"GPU-aaaa"});
  l.compute_milli = 1001;
  auto path = store.Create(l);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("above 100%"), std::string::npos)
      << path.status().message();
  EXPECT_FALSE(store.Exists(dir_ + "/slices/job-9.slice"));
}

TEST_F(ShimRegionStoreTest, LaunchesPausedIsSetAtCreateAndFollowsUpdates) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(3, {"GPU-aaaa", "GPU-bbbb"});
  l.launches_paused = true;
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto region = shim::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  for (const shim::DeviceUsage& d : (*region)->Devices()) EXPECT_TRUE(d.launches_paused) << d.uuid;
  l.launches_paused = false;
  ASSERT_TRUE(store.Update(*path, l).ok());
  for (const shim::DeviceUsage& d : (*region)->Devices()) EXPECT_FALSE(d.launches_paused) << d.uuid;
  l.launches_paused = true;
  ASSERT_TRUE(store.Update(*path, l).ok());
  for (const shim::DeviceUsage& d : (*region)->Devices()) EXPECT_TRUE(d.launches_paused) << d.uuid;
}

TEST_F(ShimRegionStoreTest, AnUpdateOfSomeDevicesLeavesTheOthersAlone) {
  // An elastic job's shrink closes only the given-back GPU (limit 0) in the
  // region its running processes keep.
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(4, {"GPU-aaaa", "GPU-bbbb"});
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  SliceLimits gone = l;
  gone.uuids = {"GPU-bbbb"};
  gone.memory_bytes_per_device = 0;
  ASSERT_TRUE(store.Update(*path, gone).ok());
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 2u);
  for (const SliceUsage& u : *usage) {
    EXPECT_EQ(u.limit_bytes, u.uuid == "GPU-bbbb" ? 0 : 4 * core::kGiB) << u.uuid;
  }
}

TEST_F(ShimRegionStoreTest, UsageCarriesTheShimsRefusalAndThrottleCounters) {
  ShimRegionStore store(dir_ + "/slices");
  auto path = store.Create(Limits(4, {"GPU-aaaa"}));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto region = shim::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  // What the shim does in a job's processes (admission.h, the compute gate).
  shim::CountRefusal((*region)->device(0));
  shim::CountRefusal((*region)->device(0));
  (*region)->device(0).throttled_ns.fetch_add(2'500'000);
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].refused_allocs, 2u);
  EXPECT_EQ((*usage)[0].throttled_ns, 2'500'000u);
}

}  // namespace
}  // namespace gpuslice::daemon
