#include "daemon/placement/pool_index.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

core::ResourceRequest InPool(const std::string& pool, std::vector<std::string> models = {}) {
  core::ResourceRequest r;
  r.kind = core::RequestKind::kWholeGpus;
  r.gpus_min = r.gpus_max = 1;
  r.pool = pool;
  r.gpu_models = std::move(models);
  return r;
}

TEST(PoolIndex, WithNoPoolsTheDefaultHoldsEverythingAndMasksNothing) {
  PoolIndex pools("shared");
  EXPECT_EQ(pools.Names(), std::vector<std::string>{"shared"});
  EXPECT_EQ(pools.default_pool(), "shared");
  EXPECT_EQ(*pools.Resolve(InPool("")), "");
  EXPECT_EQ(*pools.Resolve(InPool("shared")), "");
  EXPECT_EQ(pools.MaskOf(""), 0u);
  EXPECT_FALSE(pools.Resolve(InPool("train")).ok());
}

TEST(PoolIndex, APoolIsTheMaskOfItsModels) {
  PoolIndex pools("train");
  pools.Add("train");
  pools.AddModel("train", 0);
  pools.AddModel("train", 2);
  pools.Add("infer");
  pools.AddModel("infer", 1);
  pools.Add("mig-only");
  EXPECT_EQ(pools.Names(), (std::vector<std::string>{"infer", "mig-only", "train"}));
  EXPECT_EQ(*pools.Resolve(InPool("")), "train") << "the default pool";
  EXPECT_EQ(*pools.Resolve(InPool("infer")), "infer");
  EXPECT_EQ(pools.MaskOf("train"), 0b101u);
  EXPECT_EQ(pools.MaskOf("mig-only"), 0u);
}

TEST(PoolIndex, AnUnknownPoolIsRefusedNamingThePoolsThereAre) {
  PoolIndex pools;
  pools.Add("a");
  pools.Add("b");
  auto r = pools.Resolve(InPool("c"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--pool: no pool 'c' on this machine (pools: a, b)");
}

TEST(PoolIndex, ModelsAskedForNarrowThePoolsMask) {
  PoolIndex pools;
  pools.Add("p");
  pools.AddModel("p", 0);
  pools.AddModel("p", 1);
  pools.Add("q");
  pools.AddModel("q", 2);
  const std::vector<std::string> interned = {"A100@p", "H100@p", "A100@q"};
  EXPECT_EQ(pools.ModelMaskFor(InPool("p"), "p", interned), 0b011u);
  EXPECT_EQ(pools.ModelMaskFor(InPool("p", {"A100"}), "p", interned), 0b001u);
  EXPECT_EQ(pools.ModelMaskFor(InPool("q", {"H100"}), "q", interned), 0u) << "none of them there";
  EXPECT_EQ(pools.ModelMaskFor(InPool("", {"A100"}), "", interned), 0b101u) << "any pool";
  EXPECT_EQ(PoolIndex::PoolOfModel("A100@q"), "q");
}

}  // namespace
}  // namespace gpuslice::daemon
