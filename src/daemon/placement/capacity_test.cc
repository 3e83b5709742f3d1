#include "daemon/placement/capacity.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpuslice::daemon {
namespace {

using core::Status;

GpuInfo Gpu(uint32_t i, int island = -1) {
  GpuInfo g;
  g.index = i;
  g.uuid = "GPU-" + std::to_string(i);
  g.model = "A100";
  g.memory_total = 40 * core::kGiB;
  g.island = island;
  return g;
}

core::ResourceRequest Fraction(uint64_t gib, uint32_t milli) {
  core::ResourceRequest r;
  r.kind = core::RequestKind::kFraction;
  r.memory_bytes = gib * core::kGiB;
  r.compute_milli = milli;
  return r;
}

TEST(NodeCapacity, MemoryOnlyRequestsShareAGpu) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  for (uint64_t id = 1; id <= 4; ++id) {
    ASSERT_TRUE((*c)->SetDemand(id, Fraction(10, 0)).ok());
    EXPECT_EQ((*c)->TryPlace(id), core::FitResult::kPlaced) << id;
  }
  ASSERT_TRUE((*c)->SetDemand(5, Fraction(10, 0)).ok());
  EXPECT_EQ((*c)->TryPlace(5), core::FitResult::kNotNow);
  EXPECT_EQ((*c)->AllocationOf(1)->memory_bytes_per_gpu, 10 * core::kGiB);
}

TEST(NodeCapacity, NeverFitsIsToldApartFromNotNow) {
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1)}, core::Policy::kBinpack);
  core::ResourceRequest three;
  three.kind = core::RequestKind::kWholeGpus;
  three.gpus_min = three.gpus_max = 3;
  EXPECT_EQ((*c)->CouldEverFit(three).code(), core::StatusCode::kOutOfRange);
  EXPECT_EQ((*c)->CouldEverFit(Fraction(41, 100)).code(), core::StatusCode::kOutOfRange);
  EXPECT_TRUE((*c)->CouldEverFit(Fraction(40, 100)).ok());
  core::ResourceRequest mig;
  mig.kind = core::RequestKind::kMig;
  mig.mig = {1, 10};
  EXPECT_NE((*c)->CouldEverFit(mig).message().find("MIG mode"), std::string::npos);
}

TEST(NodeCapacity, MultiGpuJobsStayOnOneIsland) {
  auto c = NodeCapacity::Create({Gpu(0, 0), Gpu(1, 1), Gpu(2, 1), Gpu(3, 0)},
                                core::Policy::kBinpack);
  core::ResourceRequest two;
  two.kind = core::RequestKind::kWholeGpus;
  two.gpus_min = two.gpus_max = 2;
  ASSERT_TRUE((*c)->SetDemand(1, two).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  auto a = (*c)->AllocationOf(1);
  ASSERT_EQ(a->gpu_indices.size(), 2u);
  bool island0 = a->gpu_indices == std::vector<uint32_t>{0, 3};
  bool island1 = a->gpu_indices == std::vector<uint32_t>{1, 2};
  EXPECT_TRUE(island0 || island1) << a->gpu_indices[0] << "," << a->gpu_indices[1];
}

TEST(NodeCapacity, HoldRestoresAnAllocationAndRefusesADoubleOne) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  core::ResourceRequest one;
  one.kind = core::RequestKind::kWholeGpus;
  one.gpus_min = one.gpus_max = 1;
  ASSERT_TRUE((*c)->SetDemand(1, one).ok());
  ASSERT_TRUE((*c)->SetDemand(2, one).ok());
  core::Allocation a;
  a.gpu_indices = {0};
  a.gpu_uuids = {"GPU-0"};
  ASSERT_TRUE((*c)->Hold(1, a).ok());
  EXPECT_FALSE((*c)->Hold(2, a).ok());
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow);
  a.gpu_uuids = {"GPU-gone"};
  EXPECT_EQ((*c)->Hold(2, a).code(), core::StatusCode::kNotFound);
}

// Resume on demand: a suspended job's demand goes back where it was, else
// only onto the GPUs it may move to, and is never "never fits".
TEST(NodeCapacity, AResumeTargetGoesBackWhereItWasElseOnlyWhereItMayMove) {
  GpuInfo other_model = Gpu(2);
  other_model.model = "H100";
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1), other_model}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  NodeCapacity& cap = **c;
  ASSERT_TRUE(cap.SetDemand(1, Fraction(30, 500)).ok());
  ASSERT_EQ(cap.TryPlace(1), core::FitResult::kPlaced);
  const core::Allocation own = *cap.AllocationOf(1);
  cap.Release(1);  // Suspended: it holds nothing.
  cap.SetResumeTarget(1, own, {"GPU-0", "GPU-1"});
  EXPECT_TRUE(cap.HasResumeTarget(1));
  EXPECT_EQ(cap.TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ(cap.AllocationOf(1)->gpu_uuids, own.gpu_uuids) << "where it was";
  cap.Release(1);
  // Its GPU taken: the other A100, never the H100.
  ASSERT_TRUE(cap.SetDemand(2, Fraction(30, 500)).ok());
  ASSERT_TRUE(cap.Hold(2, own).ok());
  EXPECT_EQ(cap.TryPlace(1), core::FitResult::kPlaced);
  const std::string other = own.gpu_uuids[0] == "GPU-0" ? "GPU-1" : "GPU-0";
  EXPECT_EQ(cap.AllocationOf(1)->gpu_uuids, std::vector<std::string>({other}));
  cap.Release(1);
  ASSERT_TRUE(cap.SetDemand(3, Fraction(30, 500)).ok());
  ASSERT_TRUE(cap.PlaceOn(3, {other}).ok());
  EXPECT_EQ(cap.TryPlace(1), core::FitResult::kNotNow) << "the H100 is free, but another model";
  // Only where it was (a container job): not elsewhere either.
  cap.SetResumeTarget(1, own, {});
  cap.Release(3);
  EXPECT_EQ(cap.TryPlace(1), core::FitResult::kNotNow);
  // On a copy, as the queue planner probes.
  cap.Release(2);
  auto probe = cap.Clone();
  EXPECT_EQ(probe->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_FALSE(cap.AllocationOf(1).has_value());
  cap.ForgetResumeTarget(1);
  EXPECT_FALSE(cap.HasResumeTarget(1));
  EXPECT_EQ(cap.TryPlace(1), core::FitResult::kPlaced) << "an ordinary demand again";
}

TEST(NodeCapacity, MigInstancesAreAllocatableUnits) {
  GpuInfo g = Gpu(0);
  g.mig_enabled = true;
  for (int i = 0; i < 2; ++i) {
    MigInstance m;
    m.uuid = "MIG-" + std::to_string(i);
    m.profile = "1g.10gb";
    m.memory_total = 10 * core::kGiB;
    g.mig.push_back(m);
  }
  auto c = NodeCapacity::Create({g}, core::Policy::kBinpack);
  core::ResourceRequest mig;
  mig.kind = core::RequestKind::kMig;
  mig.mig = {1, 10};
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE((*c)->SetDemand(id, mig).ok());
  EXPECT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->TryPlace(3), core::FitResult::kNotNow);
  EXPECT_EQ((*c)->AllocationOf(2)->gpu_uuids[0], "MIG-1");
  (*c)->Release(1);
  EXPECT_EQ((*c)->TryPlace(3), core::FitResult::kPlaced);
  mig.mig = {3, 40};
  EXPECT_EQ((*c)->CouldEverFit(mig).code(), core::StatusCode::kOutOfRange);
}

// "can never fit" speaks the user's words, not the cluster placer's (cpu 0m,
// mem 0 B, 1 per-mille, island), and says when GPUs are in MIG mode.
TEST(NodeCapacity, NeverFitsSaysWhyInTheRequestsTermsAndNamesMigMode) {
  GpuInfo mig_gpu = Gpu(1);
  mig_gpu.mig_enabled = true;
  for (const char* profile : {"3g.20gb", "1g.5gb"}) {
    MigInstance m;
    m.uuid = std::string("MIG-") + profile;
    m.profile = profile;
    mig_gpu.mig.push_back(m);
  }
  auto c = NodeCapacity::Create({Gpu(0), mig_gpu}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  core::ResourceRequest two;
  two.kind = core::RequestKind::kWholeGpus;
  two.gpus_min = two.gpus_max = 2;
  const std::string mig_note =
      "; 1 GPU is in MIG mode (it holds only MIG instances: ask for one with --mig PROFILE, "
      "here 3g.20gb, 1g.5gb)";
  EXPECT_EQ((*c)->CouldEverFit(two).message(),
            "2 GPUs can never fit on this machine: 1 GPU is outside MIG mode" + mig_note);
  EXPECT_EQ((*c)->CouldEverFit(Fraction(41, 0)).message(),
            "41 GiB can never fit on this machine: the largest GPU has 40 GiB" + mig_note);
  for (const core::ResourceRequest& r : {two, Fraction(41, 0)}) {
    std::string m = (*c)->CouldEverFit(r).message();
    for (const char* jargon : {"cpu", "0m", "per-mille", "\u2030", "island", "node"}) {
      EXPECT_EQ(m.find(jargon), std::string::npos) << jargon << " in: " << m;
    }
  }
  // Islands, in words.
  auto linked = NodeCapacity::Create({Gpu(0, 0), Gpu(1, 1)}, core::Policy::kBinpack);
  EXPECT_EQ((*linked)->CouldEverFit(two).message(),
            "2 GPUs can never fit on this machine: 2 GPUs are outside MIG mode, at most 1 of them "
            "linked together (a job's GPUs must be)");
}

// Two GPUs with 600 and 500 per-mille free, a workload of 50% requests, and
// a 10% request: packing fills the fuller GPU and leaves 400 there, which no
// typical request can use; frag-aware takes the emptier one and keeps two
// GPUs that can each still host a typical request.
TEST(NodeCapacity, FragAwareKeepsRoomForTheTypicalRequest) {
  for (core::Policy policy : {core::Policy::kFragAware, core::Policy::kBinpack}) {
    auto c = NodeCapacity::Create({Gpu(0), Gpu(1)}, policy);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->SetDemand(1, Fraction(8, 400)).ok());
    ASSERT_TRUE((*c)->Hold(1, {{0}, {"GPU-0"}, 8 * core::kGiB, 400}).ok());
    ASSERT_TRUE((*c)->SetDemand(2, Fraction(8, 500)).ok());
    ASSERT_TRUE((*c)->Hold(2, {{1}, {"GPU-1"}, 8 * core::kGiB, 500}).ok());
    for (uint64_t id = 10; id < 20; ++id) ASSERT_TRUE((*c)->SetDemand(id, Fraction(8, 500)).ok());
    ASSERT_TRUE((*c)->SetDemand(30, Fraction(4, 100)).ok());
    ASSERT_EQ((*c)->TryPlace(30), core::FitResult::kPlaced);
    uint32_t gpu = (*c)->AllocationOf(30)->gpu_indices[0];
    if (policy == core::Policy::kFragAware) {
      EXPECT_EQ(gpu, 0u) << "frag-aware keeps a 500 hole on each GPU";
      ASSERT_NE((*c)->profile(), nullptr);
      EXPECT_GE((*c)->profile()->shapes().size(), 3u);
    } else {
      EXPECT_EQ(gpu, 1u) << "binpack fills the fuller GPU";
      EXPECT_EQ((*c)->profile(), nullptr);
    }
  }
}

TEST(NodeCapacity, TheLearntProfileRemembersEndedDemandsAndFollowsChanges) {
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1)}, core::Policy::kFragAware);
  ASSERT_TRUE(c.ok());
  // Many 25% requests come and go.
  for (uint64_t id = 1; id <= 40; ++id) {
    ASSERT_TRUE((*c)->SetDemand(id, Fraction(2, 250)).ok());
    ASSERT_EQ((*c)->TryPlace(id), core::FitResult::kPlaced) << id;
    if (id > 4) {
      (*c)->Release(id);
      (*c)->ForgetDemand(id);
    }
  }
  const core::WorkloadProfile* p = (*c)->profile();
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->shapes().size(), 1u) << "one shape: 25%, from live and ended demands";
  EXPECT_EQ(p->shapes()[0].demand.gpu_milli, 250u);
  // A new kind of request appears in numbers: the profile is rebuilt.
  for (uint64_t id = 100; id < 140; ++id) ASSERT_TRUE((*c)->SetDemand(id, Fraction(4, 700)).ok());
  ASSERT_TRUE((*c)->SetDemand(200, Fraction(1, 100)).ok());
  ASSERT_EQ((*c)->TryPlace(200), core::FitResult::kPlaced);
  bool has_700 = false;
  for (const core::TaskShape& s : (*c)->profile()->shapes()) has_700 |= s.demand.gpu_milli == 700;
  EXPECT_TRUE(has_700);
}

TEST(NodeCapacity, RandomPoliciesAreRefusedAndProfilePoliciesAccepted) {
  EXPECT_FALSE(NodeCapacity::Create({Gpu(0)}, core::Policy::kRandomFit).ok());
  EXPECT_TRUE(NodeCapacity::Create({Gpu(0)}, core::Policy::kFgd).ok());
  EXPECT_TRUE(NodeCapacity::Create({Gpu(0)}, core::Policy::kFragAware).ok());
}

TEST(NodeCapacity, PoolsRestrictPlacementToTheirGpus) {
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1), Gpu(2)}, core::Policy::kBinpack,
                                {"inference", "shared", "shared"}, "shared");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->pools().Names(), (std::vector<std::string>{"inference", "shared"}));
  core::ResourceRequest whole;
  whole.kind = core::RequestKind::kWholeGpus;
  whole.gpus_min = whole.gpus_max = 1;
  // The default pool (shared) has two GPUs: a third whole GPU waits.
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE((*c)->SetDemand(id, whole).ok());
  EXPECT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->TryPlace(3), core::FitResult::kNotNow);
  EXPECT_NE((*c)->AllocationOf(1)->gpu_indices[0], 0u);
  EXPECT_NE((*c)->AllocationOf(2)->gpu_indices[0], 0u);
  EXPECT_NE((*c)->WhyNotNow(3).find("in pool 'shared'"), std::string::npos) << (*c)->WhyNotNow(3);
  // A request for the inference pool lands on GPU 0.
  core::ResourceRequest inf = Fraction(10, 300);
  inf.pool = "inference";
  ASSERT_TRUE((*c)->SetDemand(4, inf).ok());
  EXPECT_EQ((*c)->TryPlace(4), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(4)->gpu_indices, std::vector<uint32_t>{0});
  // Two whole GPUs can never fit the one-GPU inference pool.
  core::ResourceRequest two = whole;
  two.gpus_min = two.gpus_max = 2;
  two.pool = "inference";
  EXPECT_EQ((*c)->CouldEverFit(two).code(), core::StatusCode::kOutOfRange);
}

// The note of a job that asked for no compute does not end in "+ 0%".
TEST(NodeCapacity, WhyNotNowNamesAFreeShareOnlyForRequestsWithOne) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->SetDemand(1, Fraction(30, 500)).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  ASSERT_TRUE((*c)->SetDemand(2, Fraction(20, 0)).ok());
  ASSERT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow);
  EXPECT_EQ((*c)->WhyNotNow(2), "needs 20 GiB on one GPU; most free on one GPU: 10 GiB");
  ASSERT_TRUE((*c)->SetDemand(3, Fraction(20, 300)).ok());
  ASSERT_EQ((*c)->TryPlace(3), core::FitResult::kNotNow);
  EXPECT_EQ((*c)->WhyNotNow(3),
            "needs 20 GiB + 30% on one GPU; most free on one GPU: 10 GiB + 50%");
}

TEST(NodeCapacity, UnknownPoolIsAClearError) {
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1)}, core::Policy::kBinpack, {"a", "b"}, "a");
  core::ResourceRequest r = Fraction(1, 100);
  r.pool = "gpu-farm";
  Status s = (*c)->SetDemand(1, r);
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--pool: no pool 'gpu-farm' on this machine (pools: a, b)");
  // Without pools configured, only the default pool's name is accepted.
  auto one = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  r.pool = "default";
  EXPECT_TRUE((*one)->SetDemand(2, r).ok());
  r.pool = "a";
  EXPECT_FALSE((*one)->SetDemand(3, r).ok());
}

TEST(NodeCapacity, ResizeGrowsInPlaceOnlyWhenTheGpuHasRoom) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  ASSERT_TRUE((*c)->SetDemand(1, Fraction(10, 300)).ok());
  ASSERT_TRUE((*c)->SetDemand(2, Fraction(15, 300)).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  ASSERT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  // 40 GiB: 15 free. Growing job 1 to 20 GiB fits; to 26 GiB does not.
  EXPECT_TRUE((*c)->Resize(1, Fraction(20, 500)).ok());
  EXPECT_EQ((*c)->AllocationOf(1)->memory_bytes_per_gpu, 20 * core::kGiB);
  EXPECT_EQ((*c)->AllocationOf(1)->compute_milli, 500u);
  Status s = (*c)->Resize(1, Fraction(26, 500));
  EXPECT_EQ(s.code(), core::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "GPU 0 has only 25 GiB + 70% free besides this job; 26 GiB + 50% does "
                         "not fit there");
  // Nothing changed: a 1 GiB job still fits next to both.
  ASSERT_TRUE((*c)->SetDemand(3, Fraction(1, 100)).ok());
  EXPECT_EQ((*c)->TryPlace(3), core::FitResult::kPlaced);
  // Shrinking frees room at once.
  EXPECT_TRUE((*c)->Resize(2, Fraction(5, 100)).ok());
  ASSERT_TRUE((*c)->SetDemand(4, Fraction(14, 100)).ok());
  EXPECT_EQ((*c)->TryPlace(4), core::FitResult::kPlaced);
}

TEST(NodeCapacity, ElasticJobsTakeWhatIsIdleGrowAndShrink) {
  auto c = NodeCapacity::Create({Gpu(0), Gpu(1), Gpu(2), Gpu(3)}, core::Policy::kBinpack);
  core::ResourceRequest one;
  one.kind = core::RequestKind::kWholeGpus;
  one.gpus_min = one.gpus_max = 1;
  ASSERT_TRUE((*c)->SetDemand(1, one).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  core::ResourceRequest elastic;
  elastic.kind = core::RequestKind::kWholeGpus;
  elastic.gpus_min = 1;
  elastic.gpus_max = 4;
  ASSERT_TRUE((*c)->SetDemand(2, elastic).ok());
  ASSERT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(2)->gpu_indices.size(), 3u) << "all that was idle";
  EXPECT_EQ((*c)->IdleGpus(), 0u);
  // Shrinks to 1: two GPUs idle again; releasing it frees exactly what it holds.
  auto a = (*c)->SetElasticGpus(2, 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->gpu_indices.size(), 1u);
  EXPECT_EQ((*c)->IdleGpus(), 2u);
  // Grows by one onto an idle GPU, keeping the one it has.
  auto b = (*c)->SetElasticGpus(2, 2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->gpu_indices.size(), 2u);
  EXPECT_NE(std::find(b->gpu_indices.begin(), b->gpu_indices.end(), a->gpu_indices[0]),
            b->gpu_indices.end());
  EXPECT_EQ((*c)->IdleGpus(), 1u);
  EXPECT_EQ((*c)->SetElasticGpus(2, 5).status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*c)->SetElasticGpus(2, 3).ok());
  EXPECT_EQ((*c)->SetElasticGpus(2, 4).status().code(), core::StatusCode::kResourceExhausted)
      << "the fourth GPU is job 1's";
  (*c)->Release(2);
  EXPECT_EQ((*c)->IdleGpus(), 3u);
  // A restart re-takes what the ledger says it held (three GPUs).
  auto again = NodeCapacity::Create({Gpu(0), Gpu(1), Gpu(2), Gpu(3)}, core::Policy::kBinpack);
  ASSERT_TRUE((*again)->SetDemand(2, elastic).ok());
  ASSERT_TRUE((*again)->Hold(2, {{1, 2, 3}, {"GPU-1", "GPU-2", "GPU-3"}, 40 * core::kGiB, 0}).ok());
  EXPECT_EQ((*again)->IdleGpus(), 1u);
}

// A 40 GiB job must not be placed on a GPU where a process outside gpuslice
// holds 70 GiB: it would fail with out of memory (measured).
TEST(NodeCapacity, ForeignMemorySendsAJobToTheOtherGpuOrMakesItWait) {
  GpuInfo big0 = Gpu(0), big1 = Gpu(1);
  big0.memory_total = big1.memory_total = 80 * core::kGiB;
  auto c = NodeCapacity::Create({big0, big1}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  (*c)->SetForeign(0, 70 * core::kGiB, "pid 4242, user bob");
  EXPECT_EQ((*c)->foreign().Charged(0), 70 * core::kGiB);
  ASSERT_TRUE((*c)->SetDemand(1, Fraction(40, 300)).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(1)->gpu_indices, std::vector<uint32_t>{1}) << "not beside the 70 GiB";
  // With GPU 1 taken too, the next one waits and says why.
  (*c)->SetForeign(1, 70 * core::kGiB, "pid 4343, user eve");
  ASSERT_TRUE((*c)->SetDemand(2, Fraction(20, 100)).ok());
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow);
  std::string why = (*c)->WhyNotNow(2);
  EXPECT_NE(why.find("GPU 0: 70 GiB held by processes outside gpuslice (pid 4242, user bob)"),
            std::string::npos)
      << why;
  // The foreign process ends: the job fits.
  (*c)->SetForeign(0, 0, "");
  EXPECT_EQ((*c)->foreign().Charged(0), 0u);
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(2)->gpu_indices, std::vector<uint32_t>{0});
}

TEST(NodeCapacity, ForeignMemoryKeepsWholeGpuRequestsOffAndIsChargedOnceJobsGiveBack) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  core::ResourceRequest whole;
  whole.kind = core::RequestKind::kWholeGpus;
  whole.gpus_min = whole.gpus_max = 1;
  ASSERT_TRUE((*c)->SetDemand(1, Fraction(30, 500)).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  // 20 GiB foreign beside a 30 GiB job on a 40 GiB GPU: only the free 10 GiB
  // can be charged now (the job keeps what it holds).
  (*c)->SetForeign(0, 20 * core::kGiB, "pid 1, user x");
  EXPECT_EQ((*c)->foreign().Charged(0), 10 * core::kGiB);
  (*c)->Release(1);
  EXPECT_EQ((*c)->foreign().Charged(0), 20 * core::kGiB)
      << "charged in full once the job gave back";
  ASSERT_TRUE((*c)->SetDemand(2, whole).ok());
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow) << "a GPU with foreign use is not idle";
  EXPECT_NE((*c)->WhyNotNow(2).find("outside gpuslice"), std::string::npos);
  ASSERT_TRUE((*c)->SetDemand(3, Fraction(20, 500)).ok());
  EXPECT_EQ((*c)->TryPlace(3), core::FitResult::kPlaced);
  (*c)->Release(3);
  (*c)->SetForeign(0, 0, "");
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
}

// Memory a job's processes hold over its limit (NVML) is not free in
// placement: another user's job placed into it would fail with out of
// memory. It is charged at once, beside the GPU's foreign use, and given
// back when cleared.
TEST(NodeCapacity, MemoryAJobHoldsOverItsLimitIsTakenAtOnceBesideForeignUse) {
  auto c = NodeCapacity::Create({Gpu(0)}, core::Policy::kBinpack);  // 40 GiB.
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->SetDemand(1, Fraction(1, 200)).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->UnpromisedBytes(0), 39 * core::kGiB);
  (*c)->SetOverLimit(0, 23 * core::kGiB, "job 1");
  (*c)->SetForeign(0, 2 * core::kGiB, "pid 4242, user bob");
  EXPECT_EQ((*c)->foreign().Charged(0), 25 * core::kGiB);
  EXPECT_EQ((*c)->UnpromisedBytes(0), 39 * core::kGiB) << "what is charged was nobody's promise";
  ASSERT_TRUE((*c)->SetDemand(2, Fraction(30, 300)).ok());
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow) << "39 - 25 GiB free < 30";
  std::string why = (*c)->WhyNotNow(2);
  EXPECT_NE(why.find("GPU 0: 23 GiB held beyond their limits by job 1"), std::string::npos) << why;
  EXPECT_NE(why.find("GPU 0: 2 GiB held by processes outside gpuslice (pid 4242, user bob)"),
            std::string::npos)
      << why;
  // Clearing one keeps the other.
  (*c)->SetOverLimit(0, 0, "");
  EXPECT_EQ((*c)->foreign().Charged(0), 2 * core::kGiB);
  EXPECT_EQ((*c)->WhyNotNow(2).find("beyond their limits"), std::string::npos);
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->UnpromisedBytes(0), 9 * core::kGiB);
  // Over a promise: only what is free is charged; the rest once jobs give back.
  (*c)->SetOverLimit(0, 20 * core::kGiB, "job 1");
  EXPECT_EQ((*c)->foreign().Charged(0), 9 * core::kGiB);
  (*c)->Release(2);
  EXPECT_EQ((*c)->foreign().Charged(0), 22 * core::kGiB);
  (*c)->SetForeign(0, 0, "");
  (*c)->SetOverLimit(0, 0, "");
  EXPECT_EQ((*c)->foreign().Charged(0), 0u);
  EXPECT_EQ((*c)->UnpromisedBytes(0), 39 * core::kGiB);
  EXPECT_EQ((*c)->UnpromisedBytes(7), 0u) << "no such GPU";
}

// On a GPU in MIG mode, a MIG instance that a process outside gpuslice runs
// in is charged, so it is never handed to a job.
TEST(NodeCapacity, AMigInstanceWithAForeignProcessIsNotHandedToAJob) {
  GpuInfo g = Gpu(0);
  g.mig_enabled = true;
  for (int i = 0; i < 2; ++i) {
    MigInstance m;
    m.uuid = "MIG-" + std::to_string(i);
    m.profile = "1g.10gb";
    m.memory_total = 10 * core::kGiB;
    m.gpu_instance_id = 7 + i;
    g.mig.push_back(m);
  }
  auto c = NodeCapacity::Create({g}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  core::ResourceRequest mig;
  mig.kind = core::RequestKind::kMig;
  mig.mig = {1, 10};
  for (uint64_t id = 1; id <= 2; ++id) ASSERT_TRUE((*c)->SetDemand(id, mig).ok());
  (*c)->SetForeignMig("MIG-0", 2 * core::kGiB, "pid 4242, user bob");
  EXPECT_EQ((*c)->mig().ForeignOf("MIG-0"), "pid 4242, user bob");
  EXPECT_EQ((*c)->mig().ForeignOf("MIG-1"), "");
  // The first job goes to the other instance; the second waits, and says why.
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(1)->gpu_uuids, std::vector<std::string>{"MIG-1"});
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow);
  std::string why = (*c)->WhyNotNow(2);
  EXPECT_NE(
      why.find("MIG-0 (GPU 0): 2 GiB held by processes outside gpuslice (pid 4242, user bob)"),
      std::string::npos)
      << why;
  // What the planner works on (a clone) sees the instance taken too.
  std::unique_ptr<core::CapacityModel> plan = (*c)->Clone();
  EXPECT_EQ(plan->TryPlace(2), core::FitResult::kNotNow);
  // The foreign process ends: the instance is placed again.
  (*c)->SetForeignMig("MIG-0", 0, "");
  EXPECT_EQ((*c)->mig().ForeignOf("MIG-0"), "");
  ASSERT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
  EXPECT_EQ((*c)->AllocationOf(2)->gpu_uuids, std::vector<std::string>{"MIG-0"});
}

TEST(NodeCapacity, AMigInstanceAJobHoldsStaysItsAndIsFreeOnlyWhenForeignUseEndsToo) {
  GpuInfo g = Gpu(0);
  g.mig_enabled = true;
  MigInstance m;
  m.uuid = "MIG-0";
  m.profile = "3g.20gb";
  m.memory_total = 20 * core::kGiB;
  g.mig.push_back(m);
  auto c = NodeCapacity::Create({Gpu(1), g}, core::Policy::kBinpack);
  ASSERT_TRUE(c.ok());
  core::ResourceRequest mig;
  mig.kind = core::RequestKind::kMig;
  mig.mig = {3, 20};
  for (uint64_t id = 1; id <= 2; ++id) ASSERT_TRUE((*c)->SetDemand(id, mig).ok());
  ASSERT_EQ((*c)->TryPlace(1), core::FitResult::kPlaced);
  // A process outside gpuslice joins the job's instance: the job keeps it.
  (*c)->SetForeignMig("MIG-0", 1 * core::kGiB, "pid 77, user eve");
  EXPECT_EQ((*c)->AllocationOf(1)->gpu_uuids, std::vector<std::string>{"MIG-0"});
  (*c)->Release(1);
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kNotNow) << "the foreign process still runs there";
  // Whole-GPU foreign use is unchanged beside it, and an unknown UUID is ignored.
  (*c)->SetForeignMig("MIG-9", 1, "pid 1, user x");
  (*c)->SetForeign(1, 30 * core::kGiB, "pid 5, user y");
  EXPECT_EQ((*c)->foreign().Charged(1), 30 * core::kGiB);
  (*c)->SetForeignMig("MIG-0", 0, "");
  EXPECT_EQ((*c)->TryPlace(2), core::FitResult::kPlaced);
}

}  // namespace
}  // namespace gpuslice::daemon
