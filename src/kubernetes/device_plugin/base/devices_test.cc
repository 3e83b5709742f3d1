#include "kubernetes/device_plugin/base/devices.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

constexpr char kA[] = "GPU-aaaaaaaa-0000-0000-0000-000000000000";
constexpr char kB[] = "GPU-bbbbbbbb-0000-0000-0000-000000000000";

// Two 4 GiB GPUs and one in MIG mode with two instances, as GET /v1/gpus
// answers (fields the plugin does not read left out).
nlohmann::json GpusReply() {
  return nlohmann::json::parse(R"({"gpus": [
    {"index": 0, "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000", "model": "T4",
     "memory_total": 4294967296, "mig_enabled": false, "mig": [], "healthy": true,
     "foreign_memory": 0,
     "slices": [{"job": 3, "memory_limit": 1073741824, "compute_milli": 300}]},
    {"index": 1, "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000", "model": "T4",
     "memory_total": 4294967296, "mig_enabled": false, "mig": [], "healthy": false,
     "health_reason": "XID 79", "foreign_memory": 536870912, "slices": []},
    {"index": 2, "uuid": "GPU-cccccccc-0000-0000-0000-000000000000", "model": "A100-40GB",
     "memory_total": 42949672960, "mig_enabled": true, "slices": [],
     "mig": [{"uuid": "MIG-1111", "profile": "3g.20gb"}, {"uuid": "MIG-2222", "profile": "1g.5gb"}]}
  ]})");
}

TEST(Resource, NamesRoundTrip) {
  for (const Resource& r :
       {Resource{ResourceKind::kGpu, ""}, Resource{ResourceKind::kGpuMemory, ""},
        Resource{ResourceKind::kGpuShare, ""}, Resource{ResourceKind::kMig, "1g.10gb"}}) {
    auto back = ParseResourceName(r.Name());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ((Resource{ResourceKind::kMig, "1g.10gb"}.Name()), "gpuslice.dev/mig-1g.10gb");
  EXPECT_FALSE(ParseResourceName("nvidia.com/gpu").ok());
  EXPECT_FALSE(ParseResourceName("gpuslice.dev/tpu").ok());
  EXPECT_FALSE(ParseResourceName("gpuslice.dev/mig-").ok());
}

TEST(Inventory, ReadsTheDaemonsGpusWithFreeRoomAndHealth) {
  auto inv = InventoryFromJson(GpusReply());
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  ASSERT_EQ(inv->gpus.size(), 3u);
  EXPECT_EQ(inv->gpus[0].memory_free, 3 * kGiB);
  EXPECT_EQ(inv->gpus[0].milli_free, 700u);
  EXPECT_TRUE(inv->gpus[0].healthy);
  EXPECT_FALSE(inv->gpus[1].healthy);
  EXPECT_EQ(inv->gpus[1].health_reason, "XID 79");
  EXPECT_EQ(inv->gpus[1].memory_free, (4 * kGiB - kGiB / 2));  // Foreign memory counts.
  EXPECT_EQ(inv->gpus[2].mig.size(), 2u);
  EXPECT_EQ(inv->ParentOfMig("MIG-2222"), &inv->gpus[2]);
}

// The daemon reports a whole-GPU job as all of the GPU's memory and no
// share: no share may be placed beside it (on a real kubelet a 70% share
// was, and its pod's memory Allocate was refused).
TEST(Inventory, AJobHoldingAllOfAGpusMemoryHoldsItWhole) {
  auto inv = InventoryFromJson(nlohmann::json::parse(R"({"gpus": [
      {"index": 0, "uuid": "GPU-a", "memory_total": 42949672960,
       "slices": [{"job": 3, "memory_limit": 42949672960, "compute_milli": 0}]}]})"));
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  ASSERT_EQ(inv->gpus[0].slices.size(), 1u);
  EXPECT_TRUE(inv->gpus[0].slices[0].Whole());
  EXPECT_EQ(inv->gpus[0].milli_free, 0u);
  EXPECT_EQ(inv->gpus[0].memory_free, 0u);
}

TEST(Inventory, AGpuWithoutHealthFieldIsHealthy) {
  auto inv = InventoryFromJson(
      nlohmann::json::parse(R"({"gpus": [{"uuid": "GPU-x", "memory_total": 1073741824}]})"));
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->gpus[0].healthy);
}

TEST(Inventory, AReplyWithoutGpusIsAnError) {
  EXPECT_FALSE(InventoryFromJson(nlohmann::json::parse(R"({"jobs": []})")).ok());
  EXPECT_FALSE(InventoryFromJson(nlohmann::json::parse(R"({"gpus": [{"index": 0}]})")).ok());
}

TEST(AdvertisedDevices, EachResourceTheNodeHasWithItsIdsAndHealth) {
  auto inv = InventoryFromJson(GpusReply());
  ASSERT_TRUE(inv.ok());
  auto devices = AdvertisedDevices(*inv);
  ASSERT_EQ(devices.size(), 5u);  // gpu, gpu-memory, gpu-share, mig-3g.20gb, mig-1g.5gb.
  const auto& gpus = devices[Resource{ResourceKind::kGpu, ""}];
  ASSERT_EQ(gpus.size(), 2u);  // Not the GPU in MIG mode.
  EXPECT_EQ(gpus[0], (Device{kA, true}));
  EXPECT_EQ(gpus[1], (Device{kB, false}));
  const auto& mem = devices[Resource{ResourceKind::kGpuMemory, ""}];
  ASSERT_EQ(mem.size(), 8u);  // 4 GiB each.
  EXPECT_EQ(mem[0].id, std::string(kA) + "-mem-0");
  EXPECT_EQ(mem[7].id, std::string(kB) + "-mem-3");
  EXPECT_FALSE(mem[7].healthy);  // Every ID of an unhealthy GPU.
  const auto& share = devices[Resource{ResourceKind::kGpuShare, ""}];
  ASSERT_EQ(share.size(), 200u);
  EXPECT_EQ(share[99].id, std::string(kA) + "-share-99");
  EXPECT_EQ(devices[(Resource{ResourceKind::kMig, "1g.5gb"})],
            (std::vector<Device>{{"MIG-2222", true}}));
}

TEST(AdvertisedDevices, ANodeWithoutGpusAdvertisesNothing) {
  EXPECT_TRUE(AdvertisedDevices(Inventory{}).empty());
}

TEST(DeviceId, FractionIdsParseBackToTheirGpuAndUnit) {
  auto p = ParseDeviceId(ResourceKind::kGpuMemory, FractionId(ResourceKind::kGpuMemory, kA, 17));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->uuid, kA);
  EXPECT_EQ(p->unit, 17);
  p = ParseDeviceId(ResourceKind::kGpuShare, FractionId(ResourceKind::kGpuShare, kB, 99));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->uuid, kB);
  EXPECT_EQ(p->unit, 99);
}

TEST(DeviceId, WrongShapesAreRefusedWithTheId) {
  struct Case {
    ResourceKind kind;
    const char* id;
  };
  for (const Case& c :
       {Case{ResourceKind::kGpuMemory, "GPU-a-share-1"},
        Case{ResourceKind::kGpuMemory, "GPU-a-mem-"}, Case{ResourceKind::kGpuMemory, "GPU-a-mem-x"},
        Case{ResourceKind::kGpuMemory, "-mem-1"}, Case{ResourceKind::kGpuShare, "GPU-a-share-100"},
        Case{ResourceKind::kGpu, "MIG-1"}, Case{ResourceKind::kMig, "GPU-1"},
        Case{ResourceKind::kGpu, ""}}) {
    auto p = ParseDeviceId(c.kind, c.id);
    EXPECT_FALSE(p.ok()) << c.id;
    if (*c.id != '\0') {
      EXPECT_NE(p.status().message().find(c.id), std::string::npos);
    }
  }
}

TEST(Grouping, IdsAreGroupedByGpuInOrder) {
  std::vector<std::string> ids = {std::string(kB) + "-mem-0", std::string(kA) + "-mem-1",
                                  std::string(kB) + "-mem-1"};
  auto g = GroupByGpu(ResourceKind::kGpuMemory, ids);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->size(), 2u);
  EXPECT_EQ((*g)[0].uuid, kB);
  EXPECT_EQ((*g)[0].ids.size(), 2u);
  EXPECT_EQ((*g)[1].uuid, kA);
}

TEST(Grouping, AFractionOnTwoGpusIsRefusedNamingThem) {
  Resource mem{ResourceKind::kGpuMemory, ""};
  auto one = OnOneGpu(mem, {std::string(kA) + "-mem-0", std::string(kA) + "-mem-1"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->uuid, kA);
  auto two = OnOneGpu(mem, {std::string(kA) + "-mem-0", std::string(kB) + "-mem-1"});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("lie on 2 GPUs"), std::string::npos);
  EXPECT_NE(two.status().message().find(kB), std::string::npos);
}

TEST(Grouping, ADuplicateIdIsRefused) {
  auto g = GroupByGpu(ResourceKind::kGpu, {kA, kA});
  EXPECT_FALSE(g.ok());
}

TEST(Units, RangesRoundTrip) {
  EXPECT_EQ(EncodeUnits({3, 0, 1, 2, 7, 9, 10}), "0-3,7,9-10");
  EXPECT_EQ(EncodeUnits({}), "");
  auto back = DecodeUnits("0-3,7,9-10");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, (std::vector<int64_t>{0, 1, 2, 3, 7, 9, 10}));
  EXPECT_FALSE(DecodeUnits("3-1").ok());
  EXPECT_FALSE(DecodeUnits("x").ok());
  EXPECT_FALSE(DecodeUnits("0-99999").ok());
}

}  // namespace
}  // namespace gpuslice::kubernetes
