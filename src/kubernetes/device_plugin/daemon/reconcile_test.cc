#include "kubernetes/device_plugin/daemon/reconcile.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

using std::chrono::seconds;
using Kind = Action::Kind;

const Resource kMem{ResourceKind::kGpuMemory, ""};
const Resource kGpus{ResourceKind::kGpu, ""};
const std::string kMemName = "gpuslice.dev/gpu-memory";
const std::string kShareName = "gpuslice.dev/gpu-share";

std::vector<std::string> Ids(ResourceKind kind, const std::string& gpu, uint32_t from,
                             uint32_t count) {
  std::vector<std::string> out;
  for (uint32_t u = from; u < from + count; ++u) out.push_back(FractionId(kind, gpu, u));
  return out;
}

struct ReconcileTest : ::testing::Test {
  Clock::time_point t0 = Clock::now();
  ReconcileOptions options;  // 30 s grace, 1 s settle.

  PluginJob MemJob(uint64_t id, const std::string& gpu, uint32_t from, uint32_t gib) {
    PluginJob j;
    j.id = id;
    j.resource = kMem;
    j.gpu_uuid = gpu;
    j.ids = Ids(ResourceKind::kGpuMemory, gpu, from, gib);
    j.labels = {{kOwnerLabel, "node-1"}};
    j.paused = true;
    j.created = t0;
    return j;
  }
  ContainerHolding Holder(const std::string& pod,
                          std::map<std::string, std::vector<std::string>> ids) {
    return ContainerHolding{{"default", pod, "main"}, std::move(ids)};
  }
  static std::vector<Kind> Kinds(const std::vector<Action>& actions) {
    std::vector<Kind> out;
    for (const Action& a : actions) out.push_back(a.kind);
    return out;
  }
};

TEST_F(ReconcileTest, MemoryAndShareOfOneContainerBecomeOneLabelledResizedResumedSlice) {
  PluginJob job = MemJob(5, "GPU-a", 0, 8);
  auto containers = {Holder(
      "train", {{kMemName, job.ids}, {kShareName, Ids(ResourceKind::kGpuShare, "GPU-a", 10, 30)}})};
  auto actions = Reconcile(containers, {job}, t0 + seconds(1) / 10, options);
  ASSERT_EQ(Kinds(actions),
            (std::vector<Kind>{Kind::kSetLabels, Kind::kResizeCompute, Kind::kResume}));
  EXPECT_EQ(actions[0].labels.at("namespace"), "default");
  EXPECT_EQ(actions[0].labels.at("pod"), "train");
  EXPECT_EQ(actions[0].labels.at("container"), "main");
  EXPECT_EQ(actions[0].labels.at(kOwnerLabel), "node-1");  // Ours are kept.
  EXPECT_EQ(actions[1].compute_milli, 300u);
  for (const Action& a : actions) EXPECT_EQ(a.job, 5u);
}

TEST_F(ReconcileTest, ASliceAlreadyInLineNeedsNothing) {
  PluginJob job = MemJob(5, "GPU-a", 0, 8);
  job.labels.insert({{"namespace", "default"}, {"pod", "train"}, {"container", "main"}});
  job.paused = false;
  job.compute_milli = 300;
  auto containers = {Holder(
      "train", {{kMemName, job.ids}, {kShareName, Ids(ResourceKind::kGpuShare, "GPU-a", 0, 30)}})};
  EXPECT_TRUE(Reconcile(containers, {job}, t0 + seconds(60), options).empty());
}

TEST_F(ReconcileTest, MemoryWithoutAShareIsResumedOnlyAfterTheSettleTime) {
  PluginJob job = MemJob(5, "GPU-a", 0, 2);
  auto containers = {Holder("infer", {{kMemName, job.ids}})};
  EXPECT_EQ(Kinds(Reconcile(containers, {job}, t0 + seconds(1) / 10, options)),
            (std::vector<Kind>{Kind::kSetLabels}));
  EXPECT_EQ(Kinds(Reconcile(containers, {job}, t0 + seconds(2), options)),
            (std::vector<Kind>{Kind::kSetLabels, Kind::kResume}));
}

TEST_F(ReconcileTest, AShareOnAnotherGpuIsReportedAndGivesNoCompute) {
  PluginJob job = MemJob(5, "GPU-a", 0, 2);
  auto containers = {Holder(
      "odd", {{kMemName, job.ids}, {kShareName, Ids(ResourceKind::kGpuShare, "GPU-b", 0, 20)}})};
  auto actions = Reconcile(containers, {job}, t0 + seconds(2), options);
  ASSERT_EQ(Kinds(actions), (std::vector<Kind>{Kind::kSetLabels, Kind::kReport, Kind::kResume}));
  EXPECT_NE(actions[1].message.find("not on the GPU of its"), std::string::npos);
}

TEST_F(ReconcileTest, AShareWithoutMemoryIsReported) {
  auto containers = {
      Holder("share-only", {{kShareName, Ids(ResourceKind::kGpuShare, "GPU-a", 0, 20)}})};
  auto actions = Reconcile(containers, {}, t0, options);
  ASSERT_EQ(Kinds(actions), (std::vector<Kind>{Kind::kReport}));
  EXPECT_EQ(actions[0].job, 0u);
  EXPECT_NE(actions[0].message.find("default/share-only/main"), std::string::npos);
}

TEST_F(ReconcileTest, AJobNoContainerHoldsIsReleasedOnlyAfterTheGrace) {
  PluginJob job = MemJob(5, "GPU-a", 0, 2);
  EXPECT_TRUE(Reconcile({}, {job}, t0 + seconds(29), options).empty());
  auto actions = Reconcile({}, {job}, t0 + seconds(30), options);
  ASSERT_EQ(Kinds(actions), (std::vector<Kind>{Kind::kRelease}));
  EXPECT_EQ(actions[0].job, 5u);
}

TEST_F(ReconcileTest, AJobIsMatchedByAnyOfItsIdsAndOnlyUnderItsResource) {
  PluginJob whole;
  whole.id = 9;
  whole.resource = kGpus;
  whole.ids = {"GPU-a", "GPU-b"};
  whole.created = t0;
  // The same string under another resource is not this job's.
  auto other = {Holder("x", {{kMemName, {"GPU-a"}}})};
  EXPECT_EQ(Kinds(Reconcile(other, {whole}, t0 + seconds(31), options)),
            (std::vector<Kind>{Kind::kRelease}));
  auto holder = {Holder("y", {{"gpuslice.dev/gpu", {"GPU-b"}}})};
  auto actions = Reconcile(holder, {whole}, t0 + seconds(31), options);
  ASSERT_EQ(Kinds(actions), (std::vector<Kind>{Kind::kSetLabels}));  // Whole GPUs: labels only.
  EXPECT_EQ(actions[0].labels.at("pod"), "y");
}

TEST_F(ReconcileTest, TwoContainersOnOneGpuEachGetTheirOwnShare) {
  PluginJob a = MemJob(1, "GPU-a", 0, 4);
  PluginJob b = MemJob(2, "GPU-a", 4, 4);
  auto containers = {
      Holder("a", {{kMemName, a.ids}, {kShareName, Ids(ResourceKind::kGpuShare, "GPU-a", 0, 30)}}),
      Holder("b",
             {{kMemName, b.ids}, {kShareName, Ids(ResourceKind::kGpuShare, "GPU-a", 30, 70)}})};
  auto actions = Reconcile(containers, {a, b}, t0, options);
  ASSERT_EQ(actions.size(), 6u);
  EXPECT_EQ(actions[1].job, 1u);
  EXPECT_EQ(actions[1].compute_milli, 300u);
  EXPECT_EQ(actions[4].job, 2u);
  EXPECT_EQ(actions[4].compute_milli, 700u);
}

}  // namespace
}  // namespace gpuslice::kubernetes
