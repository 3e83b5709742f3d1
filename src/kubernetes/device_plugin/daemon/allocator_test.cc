#include "kubernetes/device_plugin/daemon/allocator.h"

#include <gtest/gtest.h>

#include "kubernetes/device_plugin/daemon/fake_daemon_client.h"

namespace gpuslice::kubernetes {
namespace {

const Resource kMem{ResourceKind::kGpuMemory, ""};
const Resource kShare{ResourceKind::kGpuShare, ""};
const Resource kGpus{ResourceKind::kGpu, ""};
const Resource kMig{ResourceKind::kMig, "1g.10gb"};

std::vector<std::string> Ids(ResourceKind kind, const std::string& gpu,
                             std::initializer_list<uint32_t> units) {
  std::vector<std::string> out;
  for (uint32_t u : units) out.push_back(FractionId(kind, gpu, u));
  return out;
}

class AllocatorTest : public ::testing::Test {
 protected:
  FakeDaemonClient daemon_;
  JobBook book_;
  Allocator allocator_{&daemon_, &book_, AllocatorOptions{"node-1", true}};
};

TEST_F(AllocatorTest, MemoryCreatesAPausedJobOnItsGpuAndAnswersItsCdiDevice) {
  auto a = allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, "GPU-a", {0, 1, 2}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(daemon_.created.size(), 1u);
  const ExternalJobSpec& spec = daemon_.created[0];
  EXPECT_EQ(spec.mem_bytes, 3 * kGiB);
  EXPECT_EQ(spec.gpu_uuids, (std::vector<std::string>{"GPU-a"}));
  EXPECT_TRUE(spec.paused);
  EXPECT_EQ(spec.labels.at(kOwnerLabel), "node-1");
  EXPECT_EQ(spec.labels.at(kResourceLabel), "gpuslice.dev/gpu-memory");
  EXPECT_EQ(spec.labels.at(kIdsLabel), "GPU-a:0-2");
  EXPECT_EQ(a->cdi_devices, (std::vector<std::string>{"gpuslice.dev/slice=1"}));
  EXPECT_TRUE(a->envs.empty());
  auto job = book_.Get(1);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->gpu_uuid, "GPU-a");
  EXPECT_TRUE(job->paused);
}

TEST_F(AllocatorTest, WithoutCdiTheAnswerIsEnvMountsAndDeviceNodes) {
  Allocator plain(&daemon_, &book_, AllocatorOptions{"node-1", false});
  auto a = plain.Allocate(kGpus, {"GPU-a", "GPU-b"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->cdi_devices.empty());
  EXPECT_EQ(a->envs.at("GPUSLICE_JOB_ID"), "1");
  ASSERT_EQ(a->mounts.size(), 1u);
  EXPECT_TRUE(a->mounts[0].read_only);
  EXPECT_EQ(a->device_nodes, (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidiactl"}));
  EXPECT_EQ(daemon_.created[0].gpus, 2u);
  EXPECT_EQ(daemon_.created[0].gpu_uuids, (std::vector<std::string>{"GPU-a", "GPU-b"}));
  EXPECT_FALSE(daemon_.created[0].paused);
}

TEST_F(AllocatorTest, MigCreatesAJobOfThatInstanceAndRefusesTwo) {
  auto a = allocator_.Allocate(kMig, {"MIG-1"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(daemon_.created[0].mig, "1g.10gb");
  EXPECT_EQ(daemon_.created[0].gpu_uuids, (std::vector<std::string>{"MIG-1"}));
  auto two = allocator_.Allocate(kMig, {"MIG-1", "MIG-2"});
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("ask for 1"), std::string::npos);
}

TEST_F(AllocatorTest, AShareCreatesNothingAndAnswersEmpty) {
  auto a = allocator_.Allocate(kShare, Ids(ResourceKind::kGpuShare, "GPU-a", {0, 1}));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(daemon_.created.empty());
  EXPECT_TRUE(a->cdi_devices.empty());
  EXPECT_EQ(a->job, 0u);
  EXPECT_EQ(book_.PairingGpus(ResourceKind::kGpuMemory, Clock::now(), std::chrono::seconds(10)),
            (std::vector<std::string>{"GPU-a"}));
}

TEST_F(AllocatorTest, AFractionAcrossGpusIsRefusedAndCreatesNothing) {
  std::vector<std::string> ids = Ids(ResourceKind::kGpuMemory, "GPU-a", {0});
  ids.push_back(FractionId(ResourceKind::kGpuMemory, "GPU-b", 0));
  auto a = allocator_.Allocate(kMem, ids);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(daemon_.created.empty());
  auto s = allocator_.Allocate(kShare, {FractionId(ResourceKind::kGpuShare, "GPU-a", 0),
                                        FractionId(ResourceKind::kGpuShare, "GPU-b", 0)});
  EXPECT_FALSE(s.ok());
}

TEST_F(AllocatorTest, TheDaemonsRefusalIsPassedOnWithItsMessage) {
  daemon_.refuse_create = core::FailedPreconditionError("8 GiB does not fit on GPU-a: 2 GiB free");
  auto a = allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, "GPU-a", {0}));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.status().message().find("does not fit"), std::string::npos);
  EXPECT_TRUE(book_.All().empty());
}

TEST_F(AllocatorTest, AJobWhoseContainerAnswerFailsIsReleased) {
  daemon_.refuse_container = core::UnavailableError("lost connection");
  auto a = allocator_.Allocate(kGpus, {"GPU-a"});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(daemon_.calls, (std::vector<std::string>{"create 1", "cancel 1"}));
  EXPECT_TRUE(book_.All().empty());
}

TEST_F(AllocatorTest, IdsHandedOutAgainReleaseTheJobThatHeldThemFirst) {
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, "GPU-a", {0, 1})).ok());
  ASSERT_TRUE(allocator_.Allocate(kMem, Ids(ResourceKind::kGpuMemory, "GPU-a", {1, 2})).ok());
  EXPECT_EQ(daemon_.calls, (std::vector<std::string>{"create 1", "cancel 1", "create 2"}));
  EXPECT_FALSE(book_.Get(1).has_value());
  EXPECT_TRUE(book_.Get(2).has_value());
}

}  // namespace
}  // namespace gpuslice::kubernetes
