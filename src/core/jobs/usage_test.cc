#include "core/jobs/usage.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::core {
namespace {

constexpr int64_t kHour = 3600 * 1000;
constexpr int64_t kT0 = 1'700'000'000'000;  // Some instant; windows are relative to it.

UsageRecord Row(uint64_t job, std::string user, int64_t from_h, int64_t to_h) {
  UsageRecord r;
  r.job_id = job;
  r.uid = 1000 + static_cast<uint32_t>(job);
  r.gid = 100;
  r.user = std::move(user);
  r.group = "staff";
  r.name = "job" + std::to_string(job);
  r.gpu_memory_total = 80 * kGiB;
  r.allocated_ms = kT0 + from_h * kHour;
  r.released_ms = to_h < 0 ? 0 : kT0 + to_h * kHour;
  r.job_started_ms = r.allocated_ms;
  r.job_ended_ms = r.released_ms;
  return r;
}

UsageRecord Whole(uint64_t job, std::string user, int64_t from_h, int64_t to_h) {
  UsageRecord r = Row(job, std::move(user), from_h, to_h);
  r.whole_gpu = true;
  r.memory_bytes = 80 * kGiB;
  return r;
}

UsageRecord Fraction(uint64_t job, std::string user, int64_t from_h, int64_t to_h, uint64_t mem,
                     uint32_t milli) {
  UsageRecord r = Row(job, std::move(user), from_h, to_h);
  r.memory_bytes = mem;
  r.compute_milli = milli;
  return r;
}

const UsageTotals* Find(const UsageReport& r, const std::string& key) {
  for (const UsageTotals& t : r.rows) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

TEST(GpuWeight, WholeGpuCountsOneMigItsSlicesAFractionItsShareElseItsMemory) {
  EXPECT_DOUBLE_EQ(GpuWeight(Whole(1, "a", 0, 1)), 1.0);
  EXPECT_DOUBLE_EQ(GpuWeight(Fraction(1, "a", 0, 1, 8 * kGiB, 300)), 0.3);
  EXPECT_DOUBLE_EQ(GpuWeight(Fraction(1, "a", 0, 1, 20 * kGiB, 0)), 0.25);
  UsageRecord mig = Fraction(1, "a", 0, 1, 10 * kGiB, 0);
  mig.mig_compute_slices = 2;
  EXPECT_DOUBLE_EQ(GpuWeight(mig), 2.0 / 7);
  EXPECT_DOUBLE_EQ(ComputeShare(mig), 2.0 / 7);
  EXPECT_DOUBLE_EQ(ComputeShare(Fraction(1, "a", 0, 1, 20 * kGiB, 0)), 0.0);
  EXPECT_DOUBLE_EQ(ComputeShare(Whole(1, "a", 0, 1)), 1.0);
  UsageRecord unknown_total = Fraction(1, "a", 0, 1, 20 * kGiB, 0);
  unknown_total.gpu_memory_total = 0;
  EXPECT_DOUBLE_EQ(GpuWeight(unknown_total), 0.0);
}

TEST(AggregateUsage, SumsEachMeasureByUser) {
  std::vector<UsageRecord> rows = {
      Whole(1, "alice", 0, 2),                  // 2 GPU-h, 160 GiB-h, 2 compute-h.
      Whole(1, "alice", 0, 2),                  // Its second GPU.
      Fraction(2, "bob", 0, 4, 8 * kGiB, 250),  // 1 GPU-h, 32 GiB-h, 1 compute-h.
      Fraction(3, "bob", 0, 2, 20 * kGiB, 0),   // 0.5 GPU-h, 40 GiB-h, 0 compute-h.
  };
  rows[1].gpu_index = 1;
  auto r = AggregateUsage(rows, kT0, kT0 + 10 * kHour, kT0 + 10 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_EQ(r->rows[0].key, "alice") << "most GPU-hours first";
  const UsageTotals* a = Find(*r, "alice");
  EXPECT_EQ(a->jobs, 1u);
  EXPECT_DOUBLE_EQ(a->gpu_hours, 4.0);
  EXPECT_DOUBLE_EQ(a->memory_gib_hours, 320.0);
  EXPECT_DOUBLE_EQ(a->compute_share_hours, 4.0);
  const UsageTotals* b = Find(*r, "bob");
  EXPECT_EQ(b->jobs, 2u);
  EXPECT_DOUBLE_EQ(b->gpu_hours, 1.5);
  EXPECT_DOUBLE_EQ(b->memory_gib_hours, 72.0);
  EXPECT_DOUBLE_EQ(b->compute_share_hours, 1.0);
  EXPECT_EQ(r->total.key, "TOTAL");
  EXPECT_EQ(r->total.jobs, 3u);
  EXPECT_DOUBLE_EQ(r->total.gpu_hours, 5.5);
}

TEST(AggregateUsage, ProratesAllocationsAtBothEdgesOfTheWindow) {
  // 0h..10h, window 4h..6h: 2 of its 10 hours count.
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 10)};
  auto r =
      AggregateUsage(rows, kT0 + 4 * kHour, kT0 + 6 * kHour, kT0 + 20 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.gpu_hours, 2.0);
  // Starting before and ending inside: only the inside part.
  r = AggregateUsage(rows, kT0 + 9 * kHour, kT0 + 12 * kHour, kT0 + 20 * kHour,
                     UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.gpu_hours, 1.0);
}

TEST(AggregateUsage, RowsOutsideTheWindowCountNothingNotEvenAJob) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 1), Whole(2, "bob", 5, 6)};
  auto r =
      AggregateUsage(rows, kT0 + 2 * kHour, kT0 + 4 * kHour, kT0 + 20 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->rows.empty());
  EXPECT_EQ(r->total.jobs, 0u);
  EXPECT_NE(RenderUsageTable(*r).find("no allocations"), std::string::npos);
}

TEST(AggregateUsage, StillRunningAllocationsCountUpToNowNotToTheEndOfTheWindow) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, -1)};
  auto r = AggregateUsage(rows, kT0, kT0 + 24 * kHour, kT0 + 3 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.gpu_hours, 3.0);
  EXPECT_EQ(r->until_ms, kT0 + 3 * kHour) << "the window is clamped to now";
}

TEST(AggregateUsage, IdleTimeIsProratedToTheWindowAndCountedOncePerJob) {
  // Two GPUs for 10 h, idle 5 h of them (half): window 0..4h sees 2 idle hours.
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 10), Whole(1, "alice", 0, 10)};
  rows[0].job_idle_ms = rows[1].job_idle_ms = 5 * kHour;
  rows[1].gpu_index = 1;
  auto r = AggregateUsage(rows, kT0, kT0 + 4 * kHour, kT0 + 20 * kHour, UsageGroupBy::kJob);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r->rows[0].idle_hours, 2.0);
  EXPECT_DOUBLE_EQ(r->rows[0].gpu_hours, 8.0);
  EXPECT_DOUBLE_EQ(r->rows[0].idle_gpu_hours, 4.0);
}

TEST(AggregateUsage, IdleOfARunningJobIsAFractionOfItsRunSoFar) {
  std::vector<UsageRecord> rows = {Fraction(1, "alice", 0, -1, 8 * kGiB, 500)};
  rows[0].job_idle_ms = 3 * kHour;  // Of 4 hours so far.
  auto r = AggregateUsage(rows, kT0 + 2 * kHour, kT0 + 100 * kHour, kT0 + 4 * kHour,
                          UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.idle_hours, 1.5);
  EXPECT_DOUBLE_EQ(r->total.idle_gpu_hours, 0.75);
}

TEST(AggregateUsage, IdleTimeLongerThanTheRunIsCappedAtAllOfIt) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 2)};
  rows[0].job_idle_ms = 5 * kHour;
  auto r = AggregateUsage(rows, kT0, kT0 + 10 * kHour, kT0 + 10 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.idle_hours, 2.0);
}

TEST(AggregateUsage, GroupsByGroupNameOrGidAndByJobInIdOrder) {
  std::vector<UsageRecord> rows = {Whole(3, "alice", 0, 1), Whole(1, "bob", 0, 2),
                                   Whole(2, "carol", 0, 3)};
  rows[2].group = "";
  rows[2].gid = 4242;
  auto g = AggregateUsage(rows, kT0, kT0 + 10 * kHour, kT0 + 10 * kHour, UsageGroupBy::kGroup);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->rows.size(), 2u);
  EXPECT_EQ(g->rows[0].key, "4242");
  EXPECT_EQ(g->rows[1].key, "staff");
  EXPECT_EQ(g->rows[1].jobs, 2u);
  auto j = AggregateUsage(rows, kT0, kT0 + 10 * kHour, kT0 + 10 * kHour, UsageGroupBy::kJob);
  ASSERT_TRUE(j.ok());
  ASSERT_EQ(j->rows.size(), 3u);
  EXPECT_EQ(j->rows[0].key, "1");
  EXPECT_EQ(j->rows[0].user, "bob");
  EXPECT_EQ(j->rows[0].name, "job1");
  EXPECT_EQ(j->rows[2].key, "3");
}

// GPU-hours per Slurm job (the slices' slurm_job label); jobs
// without one are left out of that report.
TEST(AggregateUsage, BySlurmJobSumsItsStepsSlicesAndLeavesOthersOut) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 2), Whole(2, "alice", 0, 1),
                                   Fraction(3, "bob", 0, 4, 8 * kGiB, 250),
                                   Whole(4, "carol", 0, 1)};
  rows[0].slurm_job = "812";  // Two steps of one Slurm job.
  rows[1].slurm_job = "812";
  rows[2].slurm_job = "99";
  auto r = AggregateUsage(rows, kT0, kT0 + 10 * kHour, kT0 + 10 * kHour, UsageGroupBy::kSlurmJob);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_EQ(r->rows[0].key, "99");  // Numeric order.
  EXPECT_EQ(r->rows[0].user, "bob");
  EXPECT_DOUBLE_EQ(r->rows[0].gpu_hours, 1.0);  // 25% for 4 h.
  EXPECT_EQ(r->rows[1].key, "812");
  EXPECT_EQ(r->rows[1].jobs, 2u);
  EXPECT_DOUBLE_EQ(r->rows[1].gpu_hours, 3.0);
  EXPECT_DOUBLE_EQ(r->total.gpu_hours, 4.0);  // carol's job is not a Slurm job's.
  EXPECT_NE(RenderUsageTable(*r).find("SLURM_JOB"), std::string::npos);
  EXPECT_EQ(*ParseUsageGroupBy("slurm-job"), UsageGroupBy::kSlurmJob);
}

TEST(AggregateUsage, AnEmptyOrBackwardWindowIsAnError) {
  auto r = AggregateUsage({}, kT0, kT0, kT0, UsageGroupBy::kUser);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty"), std::string::npos) << r.status().message();
  EXPECT_FALSE(AggregateUsage({}, kT0 + 1, kT0, kT0, UsageGroupBy::kUser).ok());
}

TEST(ParseUsageGroupBy, AcceptsTheThreeAndNamesABadOne) {
  EXPECT_EQ(*ParseUsageGroupBy("user"), UsageGroupBy::kUser);
  EXPECT_EQ(*ParseUsageGroupBy("group"), UsageGroupBy::kGroup);
  EXPECT_EQ(*ParseUsageGroupBy("job"), UsageGroupBy::kJob);
  auto bad = ParseUsageGroupBy("team");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'team'"), std::string::npos);
}

TEST(ParseUsageTime, DurationsCountBackFromNow) {
  EXPECT_EQ(*ParseUsageTime("7d", kT0), kT0 - 7 * 24 * kHour);
  EXPECT_EQ(*ParseUsageTime("12h", kT0), kT0 - 12 * kHour);
  EXPECT_EQ(*ParseUsageTime("30m", kT0), kT0 - 30 * 60 * 1000);
  EXPECT_EQ(*ParseUsageTime("now", kT0), kT0);
}

TEST(ParseUsageTime, DatesAreUtc) {
  EXPECT_EQ(*ParseUsageTime("1970-01-01", kT0), 0);
  EXPECT_EQ(*ParseUsageTime("2026-11-01", kT0), 1'793'491'200'000);
  EXPECT_EQ(*ParseUsageTime("2026-11-01T08:30", kT0), 1'793'491'200'000 + 8 * kHour + 30 * 60000);
  EXPECT_EQ(*ParseUsageTime("2026-11-01T08:30:15Z", kT0),
            1'793'491'200'000 + 8 * kHour + 30 * 60000 + 15000);
  EXPECT_EQ(*ParseUsageTime("2024-02-29", kT0), 1'709'164'800'000);
}

TEST(ParseUsageTime, BadInputNamesTheProblem) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "empty"},
      {"7x", "'7x'"},
      {"2026-13-01", "month 13"},
      {"2026-02-29", "day 29"},
      {"2026-11-01T25:00", "out of range"},
      {"2026-11-01T08:30+02:00", "UTC"},
      {"2026-1-01", "not a date"},
      {"-5h", "'-5h'"},
  };
  for (const Case& c : cases) {
    auto r = ParseUsageTime(c.text, kT0);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.text << ": " << r.status().message();
  }
}

TEST(CsvField, QuotesOnlyWhatRfc4180Requires) {
  EXPECT_EQ(CsvField("alice"), "alice");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField(""), "");
}

TEST(RenderUsage, CsvHasAHeaderCrlfLinesAndQuotedNames) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 1)};
  rows[0].name = "a,\"b\"";
  auto r = AggregateUsage(rows, kT0, kT0 + kHour, kT0 + kHour, UsageGroupBy::kJob);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(RenderUsageCsv(*r),
            "job,user,name,jobs,gpu_hours,memory_gib_hours,compute_share_hours,idle_hours,"
            "idle_gpu_hours,suspended_hours\r\n"
            "1,alice,\"a,\"\"b\"\"\",1,1.000000,80.000000,1.000000,0.000000,0.000000,0.000000\r\n");
}

TEST(RenderUsage, TableAlignsFiguresAndEndsWithTheTotal) {
  std::vector<UsageRecord> rows = {Whole(1, "alice", 0, 12), Fraction(2, "bob", 0, 1, kGiB, 100)};
  auto r = AggregateUsage(rows, kT0, kT0 + 12 * kHour, kT0 + 12 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  std::string t = RenderUsageTable(*r);
  EXPECT_EQ(t,
            "Usage by user from 2023-11-14 22:13 UTC to 2023-11-15 10:13 UTC\n"
            "USER   JOBS  GPU-H  MEM-GiB-H  COMPUTE-H  IDLE-H  IDLE-GPU-H  SUSPENDED-H\n"
            "alice     1  12.00     960.00      12.00    0.00        0.00         0.00\n"
            "bob       1   0.10       1.00       0.10    0.00        0.00         0.00\n"
            "TOTAL     2  12.10     961.00      12.10    0.00        0.00         0.00\n");
}

// A job that ran 4 h (00:00-04:00), of which it was suspended 2 h (01:00-03:00,
// so two allocation rows) and holds nothing meanwhile.
TEST(AggregateUsage, TimeSuspendedIsItsOwnColumnAndHoldsNoGpuHours) {
  UsageRecord a = Whole(1, "alice", 0, 1);
  UsageRecord b = Whole(1, "alice", 3, 4);
  for (UsageRecord* r : {&a, &b}) {
    r->job_started_ms = kT0;
    r->job_ended_ms = kT0 + 4 * kHour;
    r->job_suspended_ms = 2 * kHour;
  }
  auto r = AggregateUsage({a, b}, kT0, kT0 + 4 * kHour, kT0 + 4 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_DOUBLE_EQ(r->rows[0].gpu_hours, 2.0);
  EXPECT_DOUBLE_EQ(r->rows[0].suspended_hours, 2.0);
  EXPECT_EQ(r->rows[0].jobs, 1u);
  // Half of the run in a window of its first two hours: prorated.
  r = AggregateUsage({a, b}, kT0, kT0 + 2 * kHour, kT0 + 4 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.suspended_hours, 1.0);
  // With the exact time from its transitions (1 h of 01:00-03:00 falls in
  // 00:00-02:00), that figure is used instead.
  a.suspended_in_window_ms = b.suspended_in_window_ms = kHour;
  r = AggregateUsage({a, b}, kT0, kT0 + 2 * kHour, kT0 + 4 * kHour, UsageGroupBy::kUser);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->total.suspended_hours, 1.0);
}

// A job suspended through the whole window holds no GPU in it: it still
// counts, with its suspended hours and nothing else.
TEST(AggregateUsage, AJobSuspendedThroughTheWindowCountsWithItsSuspendedHoursOnly) {
  UsageRecord held = Whole(1, "alice", 0, 1);
  held.job_started_ms = kT0;
  UsageRecord s;
  s.job_id = 2;
  s.uid = 1000;
  s.user = "alice";
  s.job_started_ms = kT0;
  s.job_idle_ms = 3 * kHour;
  s.suspension_only = true;
  s.suspended_in_window_ms = 2 * kHour;
  auto r = AggregateUsage({held, s}, kT0 + 2 * kHour, kT0 + 4 * kHour, kT0 + 4 * kHour,
                          UsageGroupBy::kJob);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->rows[0].key, "2");
  EXPECT_EQ(r->rows[0].jobs, 1u);
  EXPECT_DOUBLE_EQ(r->rows[0].suspended_hours, 2.0);
  EXPECT_DOUBLE_EQ(r->rows[0].gpu_hours, 0.0);
  EXPECT_DOUBLE_EQ(r->rows[0].idle_hours, 0.0);
  // Without suspended time in the window it is left out like any job.
  s.suspended_in_window_ms = 0;
  r = AggregateUsage({s}, kT0 + 2 * kHour, kT0 + 4 * kHour, kT0 + 4 * kHour, UsageGroupBy::kJob);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->rows.empty());
}

}  // namespace
}  // namespace gpuslice::core
