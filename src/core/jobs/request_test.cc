#include "core/jobs/request.h"

#include <gtest/gtest.h>

#include "core/jobs/job.h"

namespace gpuslice::core {
namespace {

TEST(ParseMigProfile, ParsesNvidiaNames) {
  auto p = ParseMigProfile("1g.10gb");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->compute_slices, 1u);
  EXPECT_EQ(p->memory_gb, 10u);
  EXPECT_EQ(p->ToString(), "1g.10gb");
  EXPECT_EQ(ParseMigProfile("7g.80gb")->compute_slices, 7u);
}

TEST(ParseMigProfile, RejectsMalformed) {
  for (const char* t : {"", "1g", "1g.10", "0g.10gb", "9g.10gb", "ag.10gb", "1g.0gb", "1g.10gb+me",
                        "5g.40gb", "8g.80gb", "nvidia.com/gpu", "mig-"}) {
    auto p = ParseMigProfile(t);
    EXPECT_FALSE(p.ok()) << t;
  }
}

// The Kubernetes spellings are accepted, not refused with "compute slices
// must be 1 to 8" (which is not even true).
TEST(ParseMigProfile, AcceptsKubernetesSpellingsInAnyCase) {
  for (const char* t : {"nvidia.com/mig-1g.5gb", "mig-1g.5gb", "1G.5GB", "MIG-1g.5Gb",
                        "NVIDIA.COM/MIG-1G.5GB"}) {
    auto p = ParseMigProfile(t);
    ASSERT_TRUE(p.ok()) << t << ": " << p.status().ToString();
    EXPECT_EQ(p->ToString(), "1g.5gb") << t;
  }
  for (uint32_t n : {1u, 2u, 3u, 4u, 7u}) {
    EXPECT_TRUE(ParseMigProfile(std::to_string(n) + "g.40gb").ok()) << n;
  }
}

TEST(ParseMigProfile, SaysWhichComputeSliceCountsExist) {
  for (const char* t : {"5g.40gb", "8g.80gb", "0g.10gb"}) {
    auto p = ParseMigProfile(t);
    ASSERT_FALSE(p.ok()) << t;
    EXPECT_NE(p.status().message().find("compute slices must be 1, 2, 3, 4 or 7"),
              std::string::npos)
        << p.status().message();
  }
  EXPECT_NE(ParseMigProfile("xg.10gb").status().message().find("'x' is not a number"),
            std::string::npos);
}

TEST(ParseGpuCount, AcceptsCountAndRange) {
  uint32_t lo = 0, hi = 0;
  ASSERT_TRUE(ParseGpuCount("2", &lo, &hi).ok());
  EXPECT_EQ(lo, 2u);
  EXPECT_EQ(hi, 2u);
  ASSERT_TRUE(ParseGpuCount("1-4", &lo, &hi).ok());
  EXPECT_EQ(lo, 1u);
  EXPECT_EQ(hi, 4u);
  for (const char* t : {"0", "4-1", "x", "1-", "-3", "100"}) {
    EXPECT_FALSE(ParseGpuCount(t, &lo, &hi).ok()) << t;
  }
}

TEST(ResourceRequest, ValidFractionDescribesItself) {
  ResourceRequest r;
  r.kind = RequestKind::kFraction;
  r.memory_bytes = 8 * kGiB;
  r.compute_milli = 300;
  EXPECT_TRUE(r.Validate().ok());
  EXPECT_EQ(r.Describe(), "8 GiB + 30%");
}

TEST(ResourceRequest, FractionWithoutMemoryIsRefusedNamingTheField) {
  ResourceRequest r;
  r.kind = RequestKind::kFraction;
  Status s = r.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("mem:", 0), 0u) << s.message();
}

TEST(ResourceRequest, WholeGpusCannotCarryMemory) {
  ResourceRequest r;
  r.kind = RequestKind::kWholeGpus;
  r.gpus_min = r.gpus_max = 2;
  EXPECT_TRUE(r.Validate().ok());
  EXPECT_EQ(r.Describe(), "2 GPUs");
  r.memory_bytes = kGiB;
  EXPECT_FALSE(r.Validate().ok());
}

TEST(ResourceRequest, MigNeedsProfile) {
  ResourceRequest r;
  r.kind = RequestKind::kMig;
  EXPECT_FALSE(r.Validate().ok());
  r.mig = *ParseMigProfile("1g.10gb");
  EXPECT_TRUE(r.Validate().ok());
  EXPECT_EQ(r.Describe(), "MIG 1g.10gb");
}

TEST(HostLimits, CpusParseLikeDockerAndRoundTrip) {
  struct Case {
    const char* text;
    uint32_t milli;
  } good[] = {{"0.5", 500}, {"2", 2000}, {"1.25", 1250}, {"0.01", 10}, {".5", 500},
              {"4096", 4'096'000}};
  for (const Case& c : good) {
    auto m = ParseCpuMilli(c.text);
    ASSERT_TRUE(m.ok()) << c.text << ": " << m.status().message();
    EXPECT_EQ(*m, c.milli) << c.text;
  }
  EXPECT_EQ(FormatCpuMilli(500), "0.5");
  EXPECT_EQ(FormatCpuMilli(2000), "2");
  EXPECT_EQ(FormatCpuMilli(1250), "1.25");
  for (const char* bad : {"", ".", "0", "0.001", "1.2345", "-1", "1e3", "4097", "2 cpus", "abc"}) {
    EXPECT_FALSE(ParseCpuMilli(bad).ok()) << bad;
  }
}

TEST(HostLimits, ValidateBoundsBothLimits) {
  ResourceRequest r;
  r.kind = RequestKind::kFraction;
  r.memory_bytes = kGiB;
  r.host_cpu_milli = 5;
  EXPECT_FALSE(r.Validate().ok());
  r.host_cpu_milli = 500;
  r.host_memory_bytes = kMiB;
  EXPECT_FALSE(r.Validate().ok());
  r.host_memory_bytes = 64 * kMiB;
  EXPECT_TRUE(r.Validate().ok());
}

TEST(GpuModels, ParseAListAndRefuseBadNames) {
  auto m = ParseGpuModels("a100, H100-80GB|l4");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (std::vector<std::string>{"a100", "H100-80GB", "l4"}));
  EXPECT_EQ(FormatGpuModels(*m), "a100|H100-80GB|l4");
  EXPECT_FALSE(ParseGpuModels("").ok());
  EXPECT_FALSE(ParseGpuModels("a100,,h100").ok());
  auto bad = ParseGpuModels("a100;rm");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a100;rm"), std::string::npos);
  EXPECT_FALSE(ParseGpuModels("a,b,c,d,e,f,g,h,i").ok());
}

TEST(GpuModels, ANameMatchesTheModelsWhoseWordsItHas) {
  EXPECT_TRUE(GpuModelMatches("a100", "NVIDIA A100-SXM4-40GB"));
  EXPECT_TRUE(GpuModelMatches("A100-40GB", "NVIDIA A100-SXM4-40GB"));
  EXPECT_TRUE(GpuModelMatches("h100", "NVIDIA H100 80GB HBM3"));
  EXPECT_TRUE(GpuModelMatches("nvidia h100 80gb hbm3", "NVIDIA H100 80GB HBM3"));
  EXPECT_FALSE(GpuModelMatches("a100-80gb", "NVIDIA A100-SXM4-40GB"));
  EXPECT_FALSE(GpuModelMatches("a10", "NVIDIA A100-SXM4-40GB"));
  EXPECT_FALSE(GpuModelMatches("h100", "NVIDIA L4"));
}

TEST(GpuModels, BuildRequestCarriesThemAndDescribeSaysSo) {
  RequestFields f;
  f.gpus = "2";
  f.gpu_model = "a100,h100";
  auto r = BuildRequest(f);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->gpu_models, (std::vector<std::string>{"a100", "h100"}));
  EXPECT_EQ(r->Describe(), "2 GPUs (a100 or h100)");
  f.gpu_model = "a|";
  auto bad = BuildRequest(f);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--gpu-model"), std::string::npos);
}

TEST(Gres, SlurmsGpuTypeAndCountMapToGpusAndAModel) {
  auto g = ParseGres("gpu:a100:2");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->gpus, "2");
  EXPECT_EQ(g->model, "a100");
  g = ParseGres("gpu:3");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->gpus, "3");
  EXPECT_FALSE(g->model.has_value());
  g = ParseGres("gpu:h100");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->gpus, "1");
  EXPECT_EQ(g->model, "h100");
  g = ParseGres("gpu");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->gpus, "1");
  for (const char* bad : {"mps:2", "gpu:", "gpu:a100:two", "gpu:a:b:1", "gpus:2", "gpu:a100:0"}) {
    EXPECT_FALSE(ParseGres(bad).ok()) << bad;
  }
}

// `update` (a queued job) and `resize` (a running one) read --mem and
// --compute alike: the same words, the same refusals, each naming its flag.
TEST(ApplySliceSize, ChangesOnlyWhatIsGivenAndNamesTheFlagItRefuses) {
  ResourceRequest r;
  r.kind = RequestKind::kFraction;
  r.memory_bytes = 8ull << 30;
  r.compute_milli = 300;
  ASSERT_TRUE(ApplySliceSize(std::string("4GiB"), std::nullopt, &r).ok());
  EXPECT_EQ(r.memory_bytes, 4ull << 30);
  EXPECT_EQ(r.compute_milli, 300u);
  ASSERT_TRUE(ApplySliceSize(std::nullopt, std::string("50%"), &r).ok());
  EXPECT_EQ(r.memory_bytes, 4ull << 30);
  EXPECT_EQ(r.compute_milli, 500u);

  const ResourceRequest before = r;
  Status zero = ApplySliceSize(std::string("0"), std::nullopt, &r);
  EXPECT_EQ(zero.message(), "--mem: must be more than 0 bytes");
  Status bad_mem = ApplySliceSize(std::string("lots"), std::nullopt, &r);
  EXPECT_NE(bad_mem.message().find("--mem"), std::string::npos) << bad_mem.message();
  Status bad_share = ApplySliceSize(std::nullopt, std::string("150%"), &r);
  EXPECT_NE(bad_share.message().find("--compute"), std::string::npos) << bad_share.message();
  EXPECT_EQ(r.memory_bytes, before.memory_bytes);
  EXPECT_EQ(r.compute_milli, before.compute_milli);
}

}  // namespace
}  // namespace gpuslice::core
