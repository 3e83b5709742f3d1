#include "kubernetes/extender/placement/pod_request.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::kubernetes {
namespace {

using nlohmann::json;

json Pod(json containers, json init = json::array(), json annotations = json::object()) {
  return {{"metadata",
           {{"name", "p"}, {"namespace", "ns"}, {"uid", "u1"}, {"annotations", annotations}}},
          {"spec", {{"containers", containers}, {"initContainers", init}}}};
}

json Container(const std::string& name, json limits, json requests = json::object()) {
  return {{"name", name}, {"resources", {{"limits", limits}, {"requests", requests}}}};
}

TEST(PodRequest, AFractionIsMemoryPlusShareOnOneGpu) {
  auto p = ParsePod(
      Pod({Container("c", {{"gpuslice.dev/gpu-memory", "8"}, {"gpuslice.dev/gpu-share", "30"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->uses_gpuslice);
  EXPECT_EQ(p->invalid, "");
  ASSERT_EQ(p->containers.size(), 1u);
  EXPECT_EQ(p->containers[0].gpu_mem_bytes, 8 * core::kGiB);
  EXPECT_EQ(p->containers[0].share_milli, 300u);
  core::Demand d = p->containers[0].ToDemand();
  EXPECT_TRUE(d.IsFraction());
  EXPECT_EQ(d.gpu_milli, 300u);
  EXPECT_EQ(p->name, "p");
  EXPECT_EQ(p->ns, "ns");
  EXPECT_EQ(p->uid, "u1");
}

TEST(PodRequest, LimitsWinOverRequestsAndRequestsFillTheRest) {
  auto p = ParsePod(
      Pod({Container("c", {{"gpuslice.dev/gpu-memory", "8"}},
                     {{"gpuslice.dev/gpu-memory", "4"}, {"gpuslice.dev/gpu-share", 25}})}));
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->containers.size(), 1u);
  EXPECT_EQ(p->containers[0].gpu_mem_bytes, 8 * core::kGiB);
  EXPECT_EQ(p->containers[0].share_milli, 250u);
}

TEST(PodRequest, ShareWithoutMemoryIsRefusedWithAClearReason) {
  auto p = ParsePod(Pod({Container("c", {{"gpuslice.dev/gpu-share", "30"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->uses_gpuslice);
  EXPECT_NE(p->invalid.find("gpu-share needs gpuslice.dev/gpu-memory"), std::string::npos)
      << p->invalid;
  EXPECT_NE(p->invalid.find("container 'c'"), std::string::npos);
}

TEST(PodRequest, MemoryWithoutShareIsUncappedWithTheSmallestShare) {
  auto p = ParsePod(Pod({Container("c", {{"gpuslice.dev/gpu-memory", "4"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->invalid, "");
  EXPECT_EQ(p->containers[0].ToDemand().gpu_milli, 1u);
}

TEST(PodRequest, AWholeShareIsAWholeGpu) {
  auto p = ParsePod(
      Pod({Container("c", {{"gpuslice.dev/gpu-memory", "4"}, {"gpuslice.dev/gpu-share", "100"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->containers[0].whole_gpus, 1u);
  EXPECT_TRUE(p->containers[0].ToDemand().IsWhole());
}

TEST(PodRequest, EachContainerIsItsOwnAskAndInitContainersAreApart) {
  auto p = ParsePod(Pod(
      {Container("a", {{"gpuslice.dev/gpu-memory", "8"}, {"gpuslice.dev/gpu-share", "30"}}),
       Container("b", {{"gpuslice.dev/gpu", "2"}}),
       Container("c", {{"gpuslice.dev/mig-1g.10gb", "1"}}), Container("sidecar", {{"cpu", "1"}})},
      {Container("init", {{"gpuslice.dev/gpu-memory", "20"}, {"gpuslice.dev/gpu-share", "50"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->invalid, "");
  ASSERT_EQ(p->containers.size(), 3u);
  EXPECT_EQ(p->containers[1].whole_gpus, 2u);
  EXPECT_EQ(p->containers[2].mig_profile, "1g.10gb");
  EXPECT_EQ(p->containers[2].mig_count, 1u);
  ASSERT_EQ(p->init_containers.size(), 1u);
  EXPECT_EQ(p->init_containers[0].gpu_mem_bytes, 20 * core::kGiB);
}

TEST(PodRequest, APodWithoutGpusliceResourcesIsNotOurs) {
  auto p = ParsePod(Pod({Container("c", {{"cpu", "2"}, {"nvidia.com/gpu", "1"}})}));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->uses_gpuslice);
  EXPECT_TRUE(p->containers.empty());
}

TEST(PodRequest, BadAsksAreNamed) {
  struct Case {
    json limits;
    const char* says;
  } cases[] = {
      {{{"gpuslice.dev/gpu-memory", "8"}, {"gpuslice.dev/gpu", "1"}}, "one of a fraction"},
      {{{"gpuslice.dev/gpu-memory", "8"}, {"gpuslice.dev/gpu-share", "130"}}, "1-100"},
      {{{"gpuslice.dev/gpu-memory", "500m"}}, "whole number"},
      {{{"gpuslice.dev/gpu-memory", "0"}}, "not a GPU memory size"},
      {{{"gpuslice.dev/gpu", "17"}}, "exceeds 16"},
      {{{"gpuslice.dev/vram", "1"}}, "unknown resource"},
  };
  for (const Case& c : cases) {
    auto p = ParsePod(Pod({Container("c", c.limits)}));
    ASSERT_TRUE(p.ok());
    EXPECT_NE(p->invalid.find(c.says), std::string::npos) << c.limits << ": " << p->invalid;
  }
  auto p = ParsePod(Pod({Container("c", {{"gpuslice.dev/gpu-memory", "8"}})}, json::array(),
                        {{"gpuslice.dev/priority", "urgent"}}));
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->invalid.find("not high, normal or low"), std::string::npos);
  p = ParsePod(Pod({Container("c", {{"gpuslice.dev/gpu-memory", "8"}})}, json::array(),
                   {{"gpuslice.dev/priority", "high"}}));
  EXPECT_EQ(p->priority, "high");
  EXPECT_EQ(p->invalid, "");
}

TEST(Quantity, IntegersWithKubernetesSuffixes) {
  EXPECT_EQ(*ParseIntegerQuantity("8"), 8u);
  EXPECT_EQ(*ParseIntegerQuantity(json(3)), 3u);
  EXPECT_EQ(*ParseIntegerQuantity("2k"), 2000u);
  EXPECT_EQ(*ParseIntegerQuantity("1Ki"), 1024u);
  EXPECT_FALSE(ParseIntegerQuantity("1.5").ok());
  EXPECT_FALSE(ParseIntegerQuantity("100m").ok());
  EXPECT_FALSE(ParseIntegerQuantity("").ok());
  EXPECT_FALSE(ParseIntegerQuantity(json(-1)).ok());
  EXPECT_FALSE(ParseIntegerQuantity("99999999999999999999").ok());
}

}  // namespace
}  // namespace gpuslice::kubernetes
