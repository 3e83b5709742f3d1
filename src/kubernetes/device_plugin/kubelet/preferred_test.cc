#include "kubernetes/device_plugin/kubelet/preferred.h"

#include <gtest/gtest.h>

#include <set>

namespace gpuslice::kubernetes {
namespace {

constexpr ResourceKind kMem = ResourceKind::kGpuMemory;
constexpr ResourceKind kShare = ResourceKind::kGpuShare;

NodeGpu Gpu(const std::string& uuid, uint64_t gib, std::vector<SliceShape> slices = {}) {
  NodeGpu g;
  g.uuid = uuid;
  g.model = "L4";
  g.memory_total = gib * kGiB;
  g.slices = std::move(slices);
  uint64_t used = 0;
  uint32_t milli = 0;
  for (const SliceShape& s : g.slices) {
    used += s.memory_limit;
    milli += s.compute_milli;
  }
  g.memory_free = g.memory_total - used;
  g.milli_free = 1000 - milli;
  return g;
}

std::vector<std::string> AllIds(ResourceKind kind, const Inventory& inv) {
  std::vector<std::string> out;
  for (const NodeGpu& g : inv.gpus) {
    uint32_t n = kind == kMem ? g.MemoryUnits() : kSharesPerGpu;
    for (uint32_t k = 0; k < n; ++k) out.push_back(FractionId(kind, g.uuid, k));
  }
  return out;
}

std::set<std::string> GpusOf(ResourceKind kind, const std::vector<std::string>& ids) {
  std::set<std::string> out;
  for (const std::string& id : ids) out.insert(ParseDeviceId(kind, id)->uuid);
  return out;
}

TEST(PreferredIds, AFractionGetsAllItsIdsOnOneGpuLowestFirst) {
  Inventory inv{{Gpu("GPU-a", 8), Gpu("GPU-b", 8)}};
  auto ids = PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 3}, {});
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 3u);
  ASSERT_EQ(GpusOf(kMem, *ids).size(), 1u);
  std::string gpu = *GpusOf(kMem, *ids).begin();
  EXPECT_EQ((*ids)[0], FractionId(kMem, gpu, 0));
  EXPECT_EQ((*ids)[2], FractionId(kMem, gpu, 2));
}

TEST(PreferredIds, PlacementUsesWhatTheDaemonReportsFree) {
  // The kubelet offers IDs on both GPUs, but the daemon has 7 of GPU-a's 8
  // GiB in a slice (a job outside Kubernetes): 2 GiB only fit on GPU-b.
  Inventory inv{{Gpu("GPU-a", 8, {{7 * kGiB, 100}}), Gpu("GPU-b", 8)}};
  auto ids = PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 2}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(GpusOf(kMem, *ids), std::set<std::string>{"GPU-b"});
}

TEST(PreferredIds, AFragAwareChoiceKeepsTheEmptyGpuForABigShape) {
  // GPU-a already holds a 4 GiB + 50% slice; the workload's shape is half a
  // GPU: a new half beside it leaves GPU-b whole for the next one.
  Inventory inv{{Gpu("GPU-a", 8, {{4 * kGiB, 500}}), Gpu("GPU-b", 8)}};
  auto ids = PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 4}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(GpusOf(kMem, *ids), std::set<std::string>{"GPU-a"});
}

TEST(PreferredIds, OnlyGpusWithEnoughOfferedIdsAreCandidates) {
  Inventory inv{{Gpu("GPU-a", 8), Gpu("GPU-b", 8)}};
  std::vector<std::string> offer = {FractionId(kMem, "GPU-a", 0), FractionId(kMem, "GPU-b", 0),
                                    FractionId(kMem, "GPU-b", 5), FractionId(kMem, "GPU-b", 3)};
  auto ids = PreferredIds({kMem, ""}, inv, {offer, {}, 2}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids,
            (std::vector<std::string>{FractionId(kMem, "GPU-b", 0), FractionId(kMem, "GPU-b", 3)}));
}

TEST(PreferredIds, MustIncludeChoosesTheGpuAndComesFirst) {
  Inventory inv{{Gpu("GPU-a", 8), Gpu("GPU-b", 8)}};
  std::string must = FractionId(kShare, "GPU-b", 42);
  auto ids = PreferredIds({kShare, ""}, inv, {AllIds(kShare, inv), {must}, 30}, {});
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 30u);
  EXPECT_EQ((*ids)[0], must);
  EXPECT_EQ(GpusOf(kShare, *ids), std::set<std::string>{"GPU-b"});
}

TEST(PreferredIds, APairingHintWinsOverPlacement) {
  Inventory inv{{Gpu("GPU-a", 8), Gpu("GPU-b", 8)}};
  for (const char* hint : {"GPU-a", "GPU-b"}) {
    auto ids = PreferredIds({kShare, ""}, inv, {AllIds(kShare, inv), {}, 25}, {hint});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(GpusOf(kShare, *ids), std::set<std::string>{hint});
  }
  // A hint on a GPU without enough IDs offered is passed over.
  std::vector<std::string> offer;
  for (uint32_t k = 0; k < 10; ++k) offer.push_back(FractionId(kShare, "GPU-a", k));
  for (uint32_t k = 0; k < 50; ++k) offer.push_back(FractionId(kShare, "GPU-b", k));
  auto ids = PreferredIds({kShare, ""}, inv, {offer, {}, 25}, {"GPU-a"});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(GpusOf(kShare, *ids), std::set<std::string>{"GPU-b"});
}

TEST(PreferredIds, WhenNoGpuHasRoomItFallsBackToTheMostRoom) {
  Inventory inv{{Gpu("GPU-a", 8, {{7 * kGiB, 100}}), Gpu("GPU-b", 8, {{6 * kGiB, 100}})}};
  auto ids = PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 4}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(GpusOf(kMem, *ids), std::set<std::string>{"GPU-b"});
}

TEST(PreferredIds, WholeGpusGoToIdleGpus) {
  Inventory inv{{Gpu("GPU-a", 8, {{kGiB, 100}}), Gpu("GPU-b", 8), Gpu("GPU-c", 8)}};
  auto ids = PreferredIds({ResourceKind::kGpu, ""}, inv, {{"GPU-a", "GPU-b", "GPU-c"}, {}, 2}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::set<std::string>(ids->begin(), ids->end()),
            (std::set<std::string>{"GPU-b", "GPU-c"}));
  ids =
      PreferredIds({ResourceKind::kGpu, ""}, inv, {{"GPU-a", "GPU-b", "GPU-c"}, {"GPU-a"}, 2}, {});
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], "GPU-a");
}

TEST(PreferredIds, MigTakesMustIncludeThenTheOfferInOrder) {
  auto ids = PreferredIds({ResourceKind::kMig, "1g.5gb"}, Inventory{},
                          {{"MIG-1", "MIG-2", "MIG-3"}, {"MIG-3"}, 2}, {});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"MIG-3", "MIG-1"}));
}

TEST(PreferredIds, AMalformedRequestIsRefused) {
  Inventory inv{{Gpu("GPU-a", 8)}};
  EXPECT_FALSE(PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 0}, {}).ok());
  EXPECT_FALSE(PreferredIds({kMem, ""}, inv, {AllIds(kMem, inv), {}, 9}, {}).ok());
  EXPECT_FALSE(PreferredIds({kMem, ""}, inv, {{"GPU-a-share-1"}, {}, 1}, {}).ok());
}

}  // namespace
}  // namespace gpuslice::kubernetes
