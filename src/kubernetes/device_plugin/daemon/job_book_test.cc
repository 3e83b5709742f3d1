#include "kubernetes/device_plugin/daemon/job_book.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

using std::chrono::seconds;

const Resource kMem{ResourceKind::kGpuMemory, ""};
const Resource kGpus{ResourceKind::kGpu, ""};
const std::string kUuid = "GPU-aaaaaaaa-1111-2222-3333-444444444444";

std::vector<std::string> MemIds(std::initializer_list<uint32_t> units) {
  std::vector<std::string> out;
  for (uint32_t u : units) out.push_back(FractionId(ResourceKind::kGpuMemory, kUuid, u));
  return out;
}

TEST(IdsLabels, FractionIdsAreKeptCompactly) {
  Labels l = IdsLabels(kMem, MemIds({0, 1, 2, 3, 9}));
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[kIdsLabel], kUuid + ":0-3,9");
  auto back = IdsFromLabels(kMem, l);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, MemIds({0, 1, 2, 3, 9}));
}

TEST(IdsLabels, LongListsContinueInNumberedLabelsWithinTheValueLimit) {
  std::vector<std::string> gpus;
  for (int i = 0; i < 12; ++i)
    gpus.push_back("GPU-0000000" + std::to_string(i % 10) + "-1111-2222-3333-44444444444" +
                   std::to_string(i / 10));
  Labels l = IdsLabels(kGpus, gpus);
  EXPECT_GT(l.size(), 1u);
  for (const auto& [k, v] : l) EXPECT_LE(v.size(), kMaxLabelValue) << k;
  EXPECT_TRUE(l.count(std::string(kIdsLabel) + ".1"));
  auto back = IdsFromLabels(kGpus, l);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, gpus);
  // Every other unit of an 80 GiB GPU: the worst case for ranges.
  std::vector<std::string> sparse;
  for (uint32_t u = 0; u < 80; u += 2)
    sparse.push_back(FractionId(ResourceKind::kGpuMemory, kUuid, u));
  auto sparse_back = IdsFromLabels(kMem, IdsLabels(kMem, sparse));
  ASSERT_TRUE(sparse_back.ok());
  EXPECT_EQ(*sparse_back, sparse);
}

TEST(IdsLabels, MissingOrBrokenLabelsAreErrors) {
  EXPECT_FALSE(IdsFromLabels(kMem, {}).ok());
  EXPECT_FALSE(IdsFromLabels(kMem, {{kIdsLabel, "0-3"}}).ok());
  EXPECT_FALSE(IdsFromLabels(kGpus, {{kIdsLabel, "MIG-1"}}).ok());
}

TEST(PluginJobFrom, OnlyThisNodesRunningExternalJobsAreRecovered) {
  JobInfo j;
  j.id = 7;
  j.state = "running";
  j.mode = "external";
  j.paused = true;
  j.labels = IdsLabels(kMem, MemIds({4, 5}));
  j.labels[kOwnerLabel] = "node-1";
  j.labels[kResourceLabel] = kMem.Name();
  auto now = Clock::now();
  auto pj = PluginJobFrom(j, "node-1", now);
  ASSERT_TRUE(pj.has_value());
  EXPECT_EQ(pj->id, 7u);
  EXPECT_EQ(pj->resource, kMem);
  EXPECT_EQ(pj->gpu_uuid, kUuid);
  EXPECT_EQ(pj->ids, MemIds({4, 5}));
  EXPECT_TRUE(pj->paused);
  EXPECT_EQ(pj->created, now);
  EXPECT_FALSE(PluginJobFrom(j, "node-2", now).has_value());
  JobInfo exited = j;
  exited.state = "exited";
  EXPECT_FALSE(PluginJobFrom(exited, "node-1", now).has_value());
  JobInfo submitted = j;
  submitted.mode = "submit";
  EXPECT_FALSE(PluginJobFrom(submitted, "node-1", now).has_value());
}

PluginJob MemJob(uint64_t id, std::initializer_list<uint32_t> units, Clock::time_point at) {
  PluginJob j;
  j.id = id;
  j.resource = kMem;
  j.gpu_uuid = kUuid;
  j.ids = MemIds(units);
  j.created = at;
  return j;
}

TEST(JobBook, OverlappingFindsJobsHoldingAnyOfTheIds) {
  JobBook book;
  auto now = Clock::now();
  book.Add(MemJob(1, {0, 1}, now));
  book.Add(MemJob(2, {2, 3}, now));
  EXPECT_EQ(book.Overlapping(kMem, MemIds({1, 5})), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(book.Overlapping(kGpus, MemIds({1})).empty());
  book.Remove(1);
  EXPECT_TRUE(book.Overlapping(kMem, MemIds({1})).empty());
}

TEST(JobBook, AShareThenAMemoryAllocationPairOneToOne) {
  JobBook book;
  auto t0 = Clock::now();
  book.NoteShareAllocated(kUuid, t0, seconds(10));
  EXPECT_EQ(book.PairingGpus(ResourceKind::kGpuMemory, t0, seconds(10)),
            (std::vector<std::string>{kUuid}));
  book.AddMemoryJob(MemJob(1, {0}, t0 + seconds(1)), seconds(10));
  // The hint was taken by that memory job: no longer offered to the next.
  EXPECT_TRUE(book.PairingGpus(ResourceKind::kGpuMemory, t0 + seconds(1), seconds(10)).empty());
  EXPECT_TRUE(book.PairingGpus(ResourceKind::kGpuShare, t0 + seconds(1), seconds(10)).empty());
}

TEST(JobBook, AMemoryJobWithoutItsShareIsAHintForTheNextShareUntilTheWindowEnds) {
  JobBook book;
  auto t0 = Clock::now();
  book.AddMemoryJob(MemJob(1, {0}, t0), seconds(10));
  EXPECT_EQ(book.PairingGpus(ResourceKind::kGpuShare, t0, seconds(10)),
            (std::vector<std::string>{kUuid}));
  EXPECT_TRUE(book.PairingGpus(ResourceKind::kGpuShare, t0 + seconds(11), seconds(10)).empty());
  book.NoteShareAllocated(kUuid, t0 + seconds(1), seconds(10));
  EXPECT_TRUE(book.PairingGpus(ResourceKind::kGpuShare, t0 + seconds(1), seconds(10)).empty());
  EXPECT_TRUE(book.PairingGpus(ResourceKind::kGpuMemory, t0 + seconds(1), seconds(10)).empty());
}

}  // namespace
}  // namespace gpuslice::kubernetes
