#include "kubernetes/device_plugin/kubelet/device_table.h"

#include <gtest/gtest.h>

#include <thread>

namespace gpuslice::kubernetes {
namespace {

using std::chrono::milliseconds;

const Resource kGpus{ResourceKind::kGpu, ""};
const Resource kMem{ResourceKind::kGpuMemory, ""};

Inventory Node(bool healthy) {
  NodeGpu g;
  g.uuid = "GPU-a";
  g.memory_total = 2 * kGiB;
  g.healthy = healthy;
  return Inventory{{g}};
}

TEST(DeviceTable, AFirstWatcherGetsTheListAtOnce) {
  DeviceTable t;
  EXPECT_FALSE(t.has_inventory());
  t.Update(Node(true));
  auto s = t.WaitChange(kMem, 0, milliseconds(0));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->devices.size(), 2u);
  EXPECT_EQ(t.resources().size(), 3u);
}

TEST(DeviceTable, OnlyAChangeWakesAWatcher) {
  DeviceTable t;
  t.Update(Node(true));
  uint64_t seen = t.WaitChange(kGpus, 0, milliseconds(0))->generation;
  EXPECT_TRUE(t.Update(Node(true)).empty());
  EXPECT_FALSE(t.WaitChange(kGpus, seen, milliseconds(20)).has_value());
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(50));
    t.Update(Node(false));  // The GPU turned unhealthy.
  });
  auto s = t.WaitChange(kGpus, seen, milliseconds(10000));
  later.join();
  ASSERT_TRUE(s.has_value());
  EXPECT_FALSE(s->devices[0].healthy);
}

TEST(DeviceTable, AResourceThatGoesAnswersAnEmptyListAndCloseEndsWaits) {
  DeviceTable t;
  t.Update(Node(true));
  uint64_t seen = t.WaitChange(kGpus, 0, milliseconds(0))->generation;
  std::vector<Resource> changed = t.Update(Inventory{});
  EXPECT_EQ(changed.size(), 3u);
  auto s = t.WaitChange(kGpus, seen, milliseconds(0));
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->devices.empty());
  t.Close();
  EXPECT_FALSE(t.WaitChange(kGpus, s->generation, milliseconds(10000)).has_value());
}

}  // namespace
}  // namespace gpuslice::kubernetes
