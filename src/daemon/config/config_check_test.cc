#include "daemon/config/config_check.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

InventorySnapshot SimulatedGpus(uint32_t count) {
  InventorySnapshot s;
  s.source = "simulated";
  for (uint32_t i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.model = "H100";
    g.memory_total = 80 * core::kGiB;
    s.gpus.push_back(g);
  }
  return s;
}

core::Job Running(uint64_t id, std::string pool, std::vector<uint32_t> gpus) {
  core::Job j;
  j.id = id;
  j.user = "alice";
  j.state = core::JobState::kRunning;
  j.request.kind = core::RequestKind::kWholeGpus;
  j.request.gpus_min = j.request.gpus_max = static_cast<uint32_t>(gpus.size());
  j.request.pool = std::move(pool);
  j.allocation.gpu_indices = std::move(gpus);
  return j;
}

DaemonConfig Pools(const std::string& text) {
  DaemonConfig c;
  EXPECT_TRUE(ParseConfigText(text, "new.conf", &c).ok()) << text;
  return c;
}

// Pools changed under a running 2-GPU job must not let the restart kill it.
TEST(ConfigCheck, AJobWhoseGpusMoveToAnotherPoolIsSaidToRunOnFlagged) {
  const InventorySnapshot inv = SimulatedGpus(4);
  auto c = CheckConfigChange(Pools("pool.train = 1\npool.infer = 2,3\n"), inv,
                             {Running(7, "train", {1, 2}), Running(8, "", {0})});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->running, 2u);
  ASSERT_EQ(c->outside_pool.size(), 1u);
  EXPECT_NE(c->outside_pool[0].find("job 7 (alice"), std::string::npos) << c->outside_pool[0];
  EXPECT_NE(c->outside_pool[0].find("GPU 2 would be in pool 'infer'"), std::string::npos);
  EXPECT_EQ(c->outside_pool[0].find("GPU 1"), std::string::npos) << "GPU 1 stays in train";
  ASSERT_EQ(c->pools.size(), 4u);
  EXPECT_EQ(c->pools[2], "GPU 2 (GPU-2): pool infer");
  const std::string text = FormatConfigCheck("new.conf", *c);
  EXPECT_NE(text.find("a restart with this configuration ends none of them"), std::string::npos);
}

TEST(ConfigCheck, APoolThatIsGoneAndAQueuedJobThatCouldNeverRunAreSaid) {
  const InventorySnapshot inv = SimulatedGpus(2);
  core::Job queued = Running(9, "infer", {});
  queued.state = core::JobState::kQueued;
  auto c = CheckConfigChange(Pools("pool.train = 0\n"), inv, {Running(7, "old", {1}), queued});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->outside_pool.size(), 1u);
  EXPECT_NE(c->outside_pool[0].find("pool 'old' would no longer exist"), std::string::npos);
  ASSERT_EQ(c->queued_failing.size(), 1u);
  EXPECT_NE(c->queued_failing[0].find("job 9"), std::string::npos);
  EXPECT_NE(c->queued_failing[0].find("no pool 'infer'"), std::string::npos)
      << c->queued_failing[0];
}

TEST(ConfigCheck, AConfigurationTheDaemonWouldRefuseIsAnError) {
  const InventorySnapshot inv = SimulatedGpus(2);
  auto twice = CheckConfigChange(Pools("pool.a = 1\npool.b = 1\n"), inv, {});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("GPU 1 is in two pools"), std::string::npos);
  auto missing = CheckConfigChange(Pools("pool.a = 5\n"), inv, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no GPU '5'"), std::string::npos);
}

TEST(ConfigCheck, NothingChangesWhenEveryJobStaysInItsPool) {
  auto c = CheckConfigChange(Pools("pool.train = 1\n"), SimulatedGpus(2),
                             {Running(7, "train", {1})});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->outside_pool.empty());
  EXPECT_NE(FormatConfigCheck("f", *c).find("every one stays in its pool"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
