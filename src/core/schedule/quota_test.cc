#include "core/schedule/quota.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::core {
namespace {

const Principal kAlice{PrincipalKind::kUser, "alice"};
const Principal kStudents{PrincipalKind::kGroup, "students"};
const QuotaOwner kAliceOwner{"alice", {"students", "alice"}};

ResourceRequest Fraction(uint64_t mem, uint32_t milli = 0) {
  ResourceRequest r;
  r.kind = RequestKind::kFraction;
  r.memory_bytes = mem;
  r.compute_milli = milli;
  return r;
}

ResourceRequest Whole(uint32_t n) {
  ResourceRequest r;
  r.kind = RequestKind::kWholeGpus;
  r.gpus_min = r.gpus_max = n;
  return r;
}

Quota Memory(uint64_t bytes) {
  Quota q;
  q.memory_bytes = bytes;
  return q;
}

TEST(BuildQuota, ParsesEveryField) {
  auto q = BuildQuota({"20GiB", "2", "150%", "3"});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->memory_bytes, 20 * kGiB);
  EXPECT_EQ(q->gpus, 2u);
  EXPECT_EQ(q->compute_milli, 1500u);
  EXPECT_EQ(q->jobs, 3u);
  EXPECT_EQ(q->Describe(), "memory 20 GiB, gpus 2, compute 150%, jobs 3");
}

TEST(BuildQuota, UnsetFieldsAreUnlimited) {
  QuotaFields f;
  f.jobs = "2";
  auto q = BuildQuota(f);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->memory_bytes);
  EXPECT_FALSE(q->gpus);
  EXPECT_EQ(q->Describe(), "jobs 2");
}

TEST(BuildQuota, ErrorsNameTheFieldAndToken) {
  struct Case {
    QuotaFields fields;
    std::string needle;
  } cases[] = {
      {{"20XB", {}, {}, {}}, "--mem"},    {{{}, "two", {}, {}}, "'two'"},
      {{"20", {}, {}, {}}, "--mem: size '20' has no unit"},  // No unit: refused.
      {{{}, {}, "1.25%", {}}, "'1.25%'"}, {{{}, {}, "x%", {}}, "--compute"},
      {{{}, {}, {}, "-1"}, "--jobs"},     {{}, "at least one"},
  };
  for (const Case& c : cases) {
    auto q = BuildQuota(c.fields);
    ASSERT_FALSE(q.ok()) << c.needle;
    EXPECT_NE(q.status().message().find(c.needle), std::string::npos) << q.status().message();
  }
}

TEST(BuildQuota, ComputeMayExceedOneGpu) {
  QuotaFields f;
  f.compute = "250.5%";
  EXPECT_EQ(BuildQuota(f)->compute_milli, 2505u);
}

TEST(QuotaCharge, WholeGpusCountMemoryGpusAndCompute) {
  Allocation a;
  a.gpu_indices = {0, 1};
  a.memory_bytes_per_gpu = 80 * kGiB;
  QuotaCharge c = ChargeOfAllocation(Whole(2), a);
  EXPECT_EQ(c.gpus, 2u);
  EXPECT_EQ(c.memory_bytes, 160 * kGiB);
  EXPECT_EQ(c.compute_milli, 2000u);
  EXPECT_EQ(c.jobs, 1u);
  EXPECT_EQ(ChargeOfRequest(Whole(2), 40 * kGiB).memory_bytes, 80 * kGiB);
}

TEST(QuotaCharge, FractionCountsItsMemoryAndShare) {
  Allocation a;
  a.gpu_indices = {0};
  a.memory_bytes_per_gpu = 8 * kGiB;
  a.compute_milli = 300;
  QuotaCharge c = ChargeOfAllocation(Fraction(8 * kGiB, 300), a);
  EXPECT_EQ(c, (QuotaCharge{8 * kGiB, 0, 300, 1}));
  EXPECT_EQ(ChargeOfRequest(Fraction(8 * kGiB, 300), 0), c);
}

TEST(QuotaCharge, MigCountsProfileMemoryAndSlices) {
  ResourceRequest r;
  r.kind = RequestKind::kMig;
  r.mig = {1, 10};
  QuotaCharge c = ChargeOfRequest(r, 0);
  EXPECT_EQ(c.memory_bytes, 10'000'000'000ull);
  EXPECT_EQ(c.compute_milli, 142u);
}

TEST(DecideQuota, FitsWhenEveryQuotaHasRoom) {
  QuotaDecision d =
      DecideQuota({8 * kGiB, 0, 0, 1}, {{kAlice, Memory(20 * kGiB), {8 * kGiB, 0, 0, 1}}});
  EXPECT_EQ(d.verdict, QuotaVerdict::kFits);
  EXPECT_TRUE(d.reason.empty());
}

TEST(DecideQuota, WaitsWithTheQuotaAndNumbersInTheReason) {
  QuotaDecision d =
      DecideQuota({8 * kGiB, 0, 0, 1}, {{kAlice, Memory(20 * kGiB), {16 * kGiB, 0, 0, 2}}});
  EXPECT_EQ(d.verdict, QuotaVerdict::kWaits);
  EXPECT_EQ(d.reason, "user alice: memory 16 GiB of 20 GiB in use, asks 8 GiB");
  EXPECT_EQ(d.blocking, kAlice);
}

TEST(DecideQuota, RunningJobsLimit) {
  Quota q;
  q.jobs = 2;
  QuotaDecision d = DecideQuota({kGiB, 0, 0, 1}, {{kStudents, q, {0, 0, 0, 2}}});
  EXPECT_EQ(d.verdict, QuotaVerdict::kWaits);
  EXPECT_EQ(d.reason, "group students: 2 of 2 running jobs in use, asks 1 more");
}

TEST(DecideQuota, NeverWhenTheRequestAloneExceeds) {
  QuotaDecision d = DecideQuota({24 * kGiB, 0, 0, 1}, {{kAlice, Memory(20 * kGiB), {}}});
  EXPECT_EQ(d.verdict, QuotaVerdict::kNever);
  EXPECT_EQ(d.reason, "user alice: asks 24 GiB of memory, over its quota of 20 GiB");
}

TEST(DecideQuota, NeverWinsOverWaits) {
  Quota gpus;
  gpus.gpus = 1;
  QuotaDecision d =
      DecideQuota({160 * kGiB, 2, 2000, 1},
                  {{kAlice, Memory(400 * kGiB), {390 * kGiB, 0, 0, 1}}, {kStudents, gpus, {}}});
  EXPECT_EQ(d.verdict, QuotaVerdict::kNever);
  EXPECT_EQ(d.blocking, kStudents);
  EXPECT_EQ(d.reason, "group students: asks 2 whole GPUs, over its quota of 1");
}

TEST(DecideQuota, ComputeTotal) {
  Quota q;
  q.compute_milli = 1500;
  QuotaDecision d = DecideQuota({kGiB, 0, 500, 1}, {{kAlice, q, {0, 0, 1200, 2}}});
  EXPECT_EQ(d.reason, "user alice: compute 120% of 150% in use, asks 50%");
}

TEST(QuotaBook, BothUserAndGroupQuotasApply) {
  QuotaBook book;
  book.Set(kAlice, Memory(20 * kGiB));
  Quota jobs;
  jobs.jobs = 3;
  book.Set(kStudents, jobs);
  book.Set({PrincipalKind::kUser, "bob"}, Memory(kGiB));

  QuotaUsage usage;
  QuotaOwner bob{"bob", {"students"}};
  book.AddCharge(kAliceOwner, {4 * kGiB, 0, 0, 1}, &usage);
  book.AddCharge(bob, {kGiB, 0, 0, 1}, &usage);
  book.AddCharge(bob, {kGiB, 0, 0, 1}, &usage);
  EXPECT_EQ(usage[kAlice].memory_bytes, 4 * kGiB);
  EXPECT_EQ(usage[kStudents].jobs, 3u);
  EXPECT_FALSE(usage.count({PrincipalKind::kGroup, "alice"}));  // No quota: not tracked.

  auto applied = book.Applicable(kAliceOwner, usage);
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[0].who, kAlice);  // The user's own quota first.
  QuotaDecision d = book.Decide(kAliceOwner, {kGiB, 0, 0, 1}, usage);
  EXPECT_EQ(d.verdict, QuotaVerdict::kWaits);
  EXPECT_EQ(d.blocking, kStudents);
}

TEST(QuotaBook, NoQuotaMeansFits) {
  QuotaBook book;
  EXPECT_EQ(book.Decide(kAliceOwner, {kTiB, 8, 8000, 1}, {}).verdict, QuotaVerdict::kFits);
  book.Set(kAlice, Memory(kGiB));
  EXPECT_TRUE(book.Remove(kAlice));
  EXPECT_FALSE(book.Remove(kAlice));
  EXPECT_EQ(book.Find(kAlice), nullptr);
}

TEST(Principal, ParsesKinds) {
  EXPECT_EQ(*ParsePrincipalKind("group"), PrincipalKind::kGroup);
  EXPECT_FALSE(ParsePrincipalKind("team").ok());
  EXPECT_EQ(kStudents.ToString(), "group students");
}

}  // namespace
}  // namespace gpuslice::core
