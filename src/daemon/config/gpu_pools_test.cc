#include "daemon/config/gpu_pools.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

std::vector<GpuInfo> Gpus(uint32_t count) {
  std::vector<GpuInfo> gpus;
  for (uint32_t i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    gpus.push_back(g);
  }
  return gpus;
}

TEST(GpuPoolsTest, WithoutPoolsEveryGpuIsInTheDefaultPool) {
  GpuPools pools("default");
  PolicyConfig rules;
  rules.default_pool = "shared";
  auto resolved = pools.Resolve(rules, Gpus(2));
  ASSERT_TRUE(resolved.ok());
  EXPECT_TRUE(resolved->empty());
  EXPECT_EQ(pools.PoolOf(0), "shared");
  EXPECT_EQ(pools.PoolOf(1), "shared");
}

TEST(GpuPoolsTest, AGpuIsNamedByIndexOrUuidAndTheRestStayInTheDefaultPool) {
  GpuPools pools("default");
  PolicyConfig rules;
  rules.pools = {{"train", {"0"}}, {"infer", {"GPU-2"}}};
  auto resolved = pools.Resolve(rules, Gpus(3));
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  EXPECT_EQ(*resolved, (std::vector<std::string>{"train", "default", "infer"}));
  EXPECT_EQ(pools.PoolOf(0), "train");
  EXPECT_EQ(pools.PoolOf(1), "default");
  EXPECT_EQ(pools.PoolOf(2), "infer");
}

TEST(GpuPoolsTest, AGpuTheMachineLacksIsAnErrorAndLeavesTheDefaultPool) {
  GpuPools pools("default");
  PolicyConfig rules;
  rules.pools = {{"train", {"7"}}};
  auto resolved = pools.Resolve(rules, Gpus(2));
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().message().find("pool.train: no GPU '7'"), std::string::npos)
      << resolved.status().message();
  EXPECT_EQ(pools.PoolOf(0), "default");
}

TEST(GpuPoolsTest, AGpuOutsideTheInventoryReadsAsTheDefaultPool) {
  GpuPools pools("default");
  PolicyConfig rules;
  rules.pools = {{"train", {"0"}}};
  ASSERT_TRUE(pools.Resolve(rules, Gpus(1)).ok());
  EXPECT_EQ(pools.PoolOf(5), "default");
}

}  // namespace
}  // namespace gpuslice::daemon
