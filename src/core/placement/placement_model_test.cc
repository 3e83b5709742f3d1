#include "core/placement/placement_model.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::core {
namespace {

Placement At(uint32_t node, std::initializer_list<uint8_t> gpus) {
  Placement p;
  p.node = node;
  for (uint8_t g : gpus) p.gpus[p.gpu_count++] = g;
  return p;
}

ClusterState OneNode(uint32_t gpus, uint64_t gpu_mem = 0) {
  ClusterState s;
  EXPECT_TRUE(s.AddUniformNode("n0", 16000, 64 * kGiB, gpus, "A100", gpu_mem).ok());
  return s;
}

TEST(Demand, ValidateRejectsFractionOfSeveralGpus) {
  Demand d = Demand::WholeGpus(2);
  d.gpu_milli = 500;
  Status s = d.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exactly 1 GPU"), std::string::npos) << s.message();
}

TEST(Demand, ValidateRejectsGpuMilliAboveOneGpu) {
  Demand d = Demand::Fraction(1200, 0);
  EXPECT_EQ(d.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(Demand, ValidateAcceptsTheThreeShapes) {
  EXPECT_TRUE(Demand::CpuOnly(1000, kGiB).Validate().ok());
  EXPECT_TRUE(Demand::WholeGpus(8).Validate().ok());
  EXPECT_TRUE(Demand::Fraction(250, 4 * kGiB).Validate().ok());
}

TEST(Demand, ClassNamesTheKindOfTask) {
  EXPECT_EQ(Demand::CpuOnly(1, 0).Class(), TaskClass::kCpuOnly);
  EXPECT_EQ(Demand::Fraction(300, 0).Class(), TaskClass::kShared);
  EXPECT_EQ(Demand::WholeGpus(1).Class(), TaskClass::kOneGpu);
  EXPECT_EQ(Demand::WholeGpus(8).Class(), TaskClass::kEightGpus);
  EXPECT_EQ(Demand::WholeGpus(3).Class(), TaskClass::kOther);
}

TEST(ClusterState, ModelMaskParsesTheOpenbSyntax) {
  ClusterState s;
  ASSERT_TRUE(s.InternModel("T4").ok());
  Result<uint64_t> mask = s.ModelMask("V100M16|T4");
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(*mask, (1u << 0) | (1u << 1));  // T4 = 0, V100M16 interned as 1.
  EXPECT_EQ(s.ModelMask("").value(), 0u);
  EXPECT_EQ(s.ModelMask("T4||P100").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ModelMask("T4|").status().code(), StatusCode::kInvalidArgument);
}

TEST(ClusterState, AddNodeRejectsTooManyGpus) {
  ClusterState s;
  Result<uint32_t> r = s.AddUniformNode("big", 1000, kGiB, kMaxGpusPerNode + 1, "A100");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'big'"), std::string::npos);
}

TEST(ClusterState, AllocateAndReleaseRoundTrip) {
  ClusterState s = OneNode(4);
  Demand d = Demand::Fraction(300, 0, 2000, kGiB);
  ASSERT_TRUE(s.Allocate(d, At(0, {2})).ok());
  EXPECT_EQ(s.node(0).gpus[2].milli_free, 700u);
  EXPECT_EQ(s.node(0).cpu_free, 14000u);
  EXPECT_EQ(s.FreeGpuMilli(), 3700u);
  EXPECT_EQ(s.node(0).tasks_by_class[static_cast<int>(TaskClass::kShared)], 1u);
  ASSERT_TRUE(s.Release(d, At(0, {2})).ok());
  EXPECT_EQ(s.node(0).gpus[2].milli_free, 1000u);
  EXPECT_EQ(s.node(0).cpu_free, 16000u);
  EXPECT_EQ(s.FreeGpuMilli(), 4000u);
  EXPECT_EQ(s.node(0).version, 2u);
}

TEST(ClusterState, AllocateNeverOverAllocatesAGpu) {
  ClusterState s = OneNode(1);
  Demand d = Demand::Fraction(600, 0);
  ASSERT_TRUE(s.Allocate(d, At(0, {0})).ok());
  Status second = s.Allocate(d, At(0, {0}));
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.node(0).gpus[0].milli_free, 400u);  // Unchanged by the failure.
}

TEST(ClusterState, AllocateNeverOverAllocatesCpuOrMemory) {
  ClusterState s = OneNode(2);
  EXPECT_EQ(s.Allocate(Demand::CpuOnly(16001, 0), At(0, {})).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(s.Allocate(Demand::CpuOnly(0, 65 * kGiB), At(0, {})).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(s.node(0).cpu_free, 16000u);
}

TEST(ClusterState, WholeGpuNeedsAnIdleGpuAndTakesItAll) {
  ClusterState s = OneNode(2, 80 * kGiB);
  ASSERT_TRUE(s.Allocate(Demand::Fraction(100, kGiB), At(0, {0})).ok());
  EXPECT_EQ(s.Allocate(Demand::WholeGpus(1), At(0, {0})).code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(s.Allocate(Demand::WholeGpus(1), At(0, {1})).ok());
  EXPECT_EQ(s.node(0).gpus[1].milli_free, 0u);
  EXPECT_EQ(s.node(0).gpus[1].mem_free, 0u);
}

TEST(ClusterState, GpuMemoryLimitsFractionsWhenTracked) {
  ClusterState s = OneNode(1, 10 * kGiB);
  ASSERT_TRUE(s.Allocate(Demand::Fraction(100, 8 * kGiB), At(0, {0})).ok());
  EXPECT_EQ(s.Allocate(Demand::Fraction(100, 4 * kGiB), At(0, {0})).code(),
            StatusCode::kResourceExhausted);
}

TEST(ClusterState, AllocateRejectsBadPlacements) {
  ClusterState s = OneNode(2);
  EXPECT_EQ(s.Allocate(Demand::WholeGpus(1), At(3, {0})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Allocate(Demand::WholeGpus(1), At(0, {5})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Allocate(Demand::WholeGpus(2), At(0, {1, 1})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Allocate(Demand::WholeGpus(2), At(0, {1})).code(), StatusCode::kInvalidArgument);
}

TEST(ClusterState, AllocateHonoursModelConstraints) {
  ClusterState s = OneNode(1);
  Demand d = Demand::WholeGpus(1);
  d.model_mask = s.ModelMask("H100").value();
  EXPECT_EQ(s.Allocate(d, At(0, {0})).code(), StatusCode::kInvalidArgument);
}

TEST(ClusterState, ReleaseOfWhatWasNotAllocatedFails) {
  ClusterState s = OneNode(1);
  Status r = s.Release(Demand::Fraction(100, 0), At(0, {0}));
  EXPECT_EQ(r.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.node(0).gpus[0].milli_free, 1000u);
}

TEST(DemandFromRequest, MapsTheThreeRequestKinds) {
  ResourceRequest whole;
  whole.kind = RequestKind::kWholeGpus;
  whole.gpus_min = whole.gpus_max = 2;
  EXPECT_EQ(DemandFromRequest(whole)->gpus, 2u);

  ResourceRequest frac;
  frac.kind = RequestKind::kFraction;
  frac.memory_bytes = 8 * kGiB;
  frac.compute_milli = 300;
  Result<Demand> f = DemandFromRequest(frac);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->IsFraction());
  EXPECT_EQ(f->gpu_milli, 300u);
  EXPECT_EQ(f->gpu_mem, 8 * kGiB);

  ResourceRequest mig;
  mig.kind = RequestKind::kMig;
  mig.mig = {1, 10};
  Result<Demand> m = DemandFromRequest(mig);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->gpu_milli, 143u);  // ceil(1000/7).
  EXPECT_EQ(m->gpu_mem, 10000000000ull);
}

}  // namespace
}  // namespace gpuslice::core
