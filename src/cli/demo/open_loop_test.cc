#include "cli/demo/open_loop.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

constexpr uint64_t kMs = 1000000;

TEST(OpenLoop, ThePeriodGivesTheDutyAsAFractionOfTheGpusTime) {
  struct Case {
    uint64_t work_ns;
    uint32_t duty_milli;
    uint64_t period_ns;
  } cases[] = {
      {2 * kMs, 300, 6666667},   // 2 ms every 6.67 ms: 30%.
      {2 * kMs, 1000, 2 * kMs},  // Back to back.
      {1 * kMs, 50, 20 * kMs},
      {2 * kMs, 0, 2000 * kMs},  // Treated as 0.1%, never a division by zero.
  };
  for (const Case& c : cases) {
    EXPECT_EQ(OpenLoop::PeriodFor(c.work_ns, c.duty_milli), c.period_ns)
        << c.work_ns << " ns at " << c.duty_milli;
  }
  // 2 s of 30% demand is 300 requests, not 301.
  EXPECT_EQ(OpenLoop(0, OpenLoop::PeriodFor(2 * kMs, 300), 2000 * kMs).Summarize().offered, 300u);
}

TEST(OpenLoop, RequestsArriveEveryPeriodFromTheStartUntilTheEnd) {
  OpenLoop load(1000, 10, 1100);
  EXPECT_EQ(load.Arrival(0), 1000u);
  EXPECT_EQ(load.Arrival(9), 1090u);
  EXPECT_TRUE(load.Offered(9));
  EXPECT_FALSE(load.Offered(10));
  EXPECT_EQ(load.Summarize().offered, 10u);
  // A last request that arrives just before the end is offered too.
  EXPECT_EQ(OpenLoop(0, 10, 101).Summarize().offered, 11u);
}

TEST(OpenLoop, ALateRequestDoesNotMoveTheArrivalsAfterIt) {
  OpenLoop load(0, 10 * kMs, 100 * kMs);
  // Request 0 takes 25 ms: requests 1 and 2 arrive while it runs.
  load.Record(0, 0, 25 * kMs);
  load.Record(1, 25 * kMs, 27 * kMs);
  load.Record(2, 27 * kMs, 29 * kMs);
  load.Record(3, 30 * kMs, 32 * kMs);  // On time again.
  EXPECT_EQ(load.Arrival(3), 30 * kMs);
  OpenLoopSummary s = load.Summarize();
  EXPECT_EQ(s.late, 2u);
  EXPECT_EQ(s.max_late_ns, 15 * kMs);  // Request 1: arrived at 10, started at 25.
}

TEST(OpenLoop, LatencyRunsFromArrivalToCompletion) {
  OpenLoop load(0, 10 * kMs, 40 * kMs);
  load.Record(0, 0, 2 * kMs);
  load.Record(1, 10 * kMs, 12 * kMs);
  load.Record(2, 20 * kMs, 31 * kMs);  // Waited 9 ms for its turn inside the launch.
  load.Record(3, 31 * kMs, 33 * kMs);  // Started 1 ms late behind request 2.
  OpenLoopSummary s = load.Summarize();
  EXPECT_EQ(s.p50_ns, 2 * kMs);
  EXPECT_EQ(s.p99_ns, 11 * kMs);
  EXPECT_EQ(s.max_ns, 11 * kMs);
  EXPECT_EQ(s.late, 1u);
  EXPECT_EQ(s.max_late_ns, 1 * kMs);
}

TEST(OpenLoop, RequestsNotServedByTheEndLowerTheDeliveredFraction) {
  OpenLoop load(0, 10 * kMs, 100 * kMs);
  for (uint64_t i = 0; i < 7; ++i) load.Record(i, i * 10 * kMs, i * 10 * kMs + 2 * kMs);
  OpenLoopSummary s = load.Summarize();
  EXPECT_EQ(s.offered, 10u);
  EXPECT_EQ(s.served, 7u);
  EXPECT_DOUBLE_EQ(s.delivered, 0.7);
}

TEST(OpenLoop, PercentilesAreNearestRankOverTheServedRequests) {
  OpenLoop load(0, kMs, 200 * kMs);
  // Latencies 1..200 us.
  for (uint64_t i = 0; i < 200; ++i) load.Record(i, i * kMs, i * kMs + (i + 1) * 1000);
  OpenLoopSummary s = load.Summarize();
  EXPECT_EQ(s.p50_ns, 100u * 1000);
  EXPECT_EQ(s.p99_ns, 198u * 1000);
  EXPECT_EQ(s.max_ns, 200u * 1000);
  EXPECT_EQ(s.late, 0u);
}

TEST(OpenLoop, NothingServedReportsZerosRatherThanInventingFigures) {
  OpenLoopSummary s = OpenLoop(0, kMs, 10 * kMs).Summarize();
  EXPECT_EQ(s.offered, 10u);
  EXPECT_EQ(s.served, 0u);
  EXPECT_EQ(s.delivered, 0);
  EXPECT_EQ(s.p50_ns, 0u);
  EXPECT_EQ(s.p99_ns, 0u);
}

}  // namespace
}  // namespace gpuslice::cli
