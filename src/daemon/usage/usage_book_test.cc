#include "daemon/usage/usage_book.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

constexpr int64_t kInterval = 1000;

GpuProcess Process(uint32_t pid, uint64_t bytes, uint32_t sm_pct = 0) {
  GpuProcess p;
  p.pid = pid;
  p.used_memory = bytes;
  p.sm_util_pct = sm_pct;
  return p;
}

std::vector<GpuUsage> Gpus(std::vector<GpuProcess> on_gpu0) {
  GpuUsage g;
  g.index = 0;
  g.processes = std::move(on_gpu0);
  return {g};
}

core::Allocation OnGpus(std::vector<uint32_t> indices) {
  core::Allocation a;
  a.gpu_indices = std::move(indices);
  for (uint32_t i : a.gpu_indices) a.gpu_uuids.push_back("GPU-" + std::to_string(i));
  return a;
}

TEST(UsageBook, TheFirstSampleStandsForNoTimeAndALongGapForOneInterval) {
  UsageBook book;
  EXPECT_TRUE(book.Due(5000, kInterval));
  EXPECT_EQ(book.BeginSample(5000, kInterval), 0);
  EXPECT_FALSE(book.Due(5999, kInterval));
  EXPECT_TRUE(book.Due(6000, kInterval));
  EXPECT_EQ(book.BeginSample(6500, kInterval), 1500);
  EXPECT_EQ(book.BeginSample(6500 + UsageBook::kMaxGapIntervals * kInterval, kInterval),
            UsageBook::kMaxGapIntervals * kInterval);
  // The daemon was stopped for a minute: one interval, not a minute of idleness.
  EXPECT_EQ(book.BeginSample(80'000, kInterval), kInterval);
}

TEST(UsageBook, AFailedReadKeepsTheLastGoodFigures) {
  UsageBook book;
  EXPECT_TRUE(book.TakeGpuUsage(Gpus({Process(7, 100)})));
  EXPECT_FALSE(book.TakeGpuUsage(core::UnavailableError("NVML is gone")));
  ASSERT_EQ(book.gpus().size(), 1u);
  EXPECT_EQ(book.gpus()[0].processes[0].pid, 7u);
  EXPECT_TRUE(book.TakeGpuUsage(Gpus({})));
  EXPECT_TRUE(book.gpus()[0].processes.empty());
}

TEST(UsageBook, AContextSizeIsLearntFromTwoEqualFreshReadsOnly) {
  UsageBook book;
  ASSERT_TRUE(book.TakeGpuUsage(Gpus({Process(7, 500)})));
  EXPECT_FALSE(book.ContextSizeOf(0).has_value());
  // A failed read in between teaches nothing and forgets nothing.
  ASSERT_FALSE(book.TakeGpuUsage(core::UnavailableError("busy")));
  ASSERT_TRUE(book.TakeGpuUsage(Gpus({Process(7, 500)})));
  EXPECT_EQ(book.ContextSizeOf(0), 500u);
  EXPECT_FALSE(book.ContextSizeOf(1).has_value());
}

TEST(UsageBook, ResetClearsTheSamplesFiguresAndKeepsWhatCarriesOver) {
  UsageBook book;
  ASSERT_TRUE(book.TakeGpuUsage(Gpus({})));
  book.Reset(1, 1000, 4096);
  book.AddProcess(1, 0, Process(7, 300, 20), true);
  book.SetUtilization(1, OnGpus({0}), InventorySnapshot{});
  EXPECT_EQ(book.AccountIdle(1, 1000, book.BusyPct(1, 1000, 5'000'000), 30.0, 0), 1000);
  JobUsage& u = book.Reset(1, 2000, 8192);
  EXPECT_EQ(u.sampled_ms, 2000);
  EXPECT_EQ(u.memory_limit_bytes, 8192u);
  EXPECT_TRUE(u.pids.empty());
  EXPECT_EQ(u.nvml_memory_bytes, 0u);
  EXPECT_TRUE(u.nvml_memory_by_gpu.empty());
  EXPECT_TRUE(u.registered_by_gpu.empty());
  EXPECT_EQ(u.low_use_ms, 1000);
  EXPECT_EQ(u.idle_ms_total, 1000);
  EXPECT_EQ(u.waited_ns_seen, 5'000'000u);
}

TEST(UsageBook, AProcessCountsOncePerGpuAndItsPidOnceForTheJob) {
  UsageBook book;
  book.Reset(1, 1000, 0);
  book.AddProcess(1, 0, Process(7, 300, 40), true);
  book.AddProcess(1, 1, Process(7, 200, 30), false);
  book.AddProcess(1, 1, Process(8, 100, 90), false);
  const JobUsage* u = book.Find(1);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->pids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(u->nvml_memory_bytes, 600u);
  EXPECT_EQ(u->nvml_memory_by_gpu.at(0), 300u);
  EXPECT_EQ(u->nvml_memory_by_gpu.at(1), 300u);
  EXPECT_EQ(u->processes_by_gpu.at(1), 2u);
  EXPECT_EQ(u->registered_by_gpu.at(0), 1u);
  EXPECT_EQ(u->registered_by_gpu.count(1), 0u);
  EXPECT_DOUBLE_EQ(u->sm_pct_by_gpu.at(1), 120.0);
}

TEST(UsageBook, UtilizationIsCappedPerGpuAndAveragedOverTheJobsGpus) {
  UsageBook book;
  book.Reset(1, 1000, 0);
  book.AddProcess(1, 0, Process(7, 1, 80), false);
  book.AddProcess(1, 0, Process(8, 1, 70), false);  // 150 on GPU 0: counts as 100.
  book.AddProcess(1, 2, Process(9, 1, 50), false);  // Not its GPU.
  book.SetUtilization(1, OnGpus({0, 1}), InventorySnapshot{});
  EXPECT_DOUBLE_EQ(book.Find(1)->gpu_util_pct, 50.0);
  EXPECT_TRUE(book.Find(1)->gpu_util_known);
}

TEST(UsageBook, AMigJobWithoutAnInstanceFigureHasUnknownUseAndIsNeverIdle) {
  InventorySnapshot inventory;
  GpuInfo gpu;
  gpu.index = 0;
  gpu.mig_enabled = true;
  MigInstance m;
  m.uuid = "MIG-a";
  m.gpu_instance_id = 3;
  gpu.mig.push_back(m);
  inventory.gpus.push_back(gpu);
  core::Allocation a;
  a.gpu_indices = {0};
  a.gpu_uuids = {"MIG-a"};

  UsageBook book;
  std::vector<GpuUsage> gpus = Gpus({});
  gpus[0].mig.push_back(MigUsage{3, -1});  // No GPM: no figure.
  ASSERT_TRUE(book.TakeGpuUsage(gpus));
  book.Reset(1, 1000, 0);
  book.SetUtilization(1, a, inventory);
  EXPECT_FALSE(book.Find(1)->gpu_util_known);
  EXPECT_EQ(book.AccountIdle(1, 1000, book.BusyPct(1, 1000, std::nullopt), 30.0, 0), 0);
  EXPECT_EQ(book.Find(1)->low_use_ms, 0);

  gpus[0].mig[0].utilization_pct = 12.5;
  ASSERT_TRUE(book.TakeGpuUsage(gpus));
  book.SetUtilization(1, a, inventory);
  EXPECT_TRUE(book.Find(1)->gpu_util_known);
  EXPECT_DOUBLE_EQ(book.Find(1)->gpu_util_pct, 12.5);
}

TEST(UsageBook, TimeASliceWaitedForItsTurnCountsAsUse) {
  UsageBook book;
  book.Reset(1, 1000, 0);
  book.SetUtilization(1, OnGpus({0}), InventorySnapshot{});
  EXPECT_DOUBLE_EQ(book.BusyPct(1, 1000, 100'000'000), 10.0);  // 100 ms of 1 s.
  EXPECT_DOUBLE_EQ(book.BusyPct(1, 1000, 600'000'000), 50.0);  // 500 ms more.
  EXPECT_DOUBLE_EQ(book.BusyPct(1, 1000, 600'000'000), 0.0);   // None since.
  EXPECT_DOUBLE_EQ(book.BusyPct(1, 1000, std::nullopt), 0.0);  // No slice.
}

TEST(UsageBook, LowUseGrowsBelowTheThresholdAndStartsOverAtIt) {
  UsageBook book;
  book.Reset(1, 1000, 0);
  int64_t idle = 5000;  // Before the daemon's restart (jobs.idle_ms).
  idle = book.AccountIdle(1, 1000, 10.0, 30.0, idle);
  idle = book.AccountIdle(1, 1000, 29.9, 30.0, idle);
  EXPECT_EQ(idle, 7000);
  EXPECT_EQ(book.Find(1)->low_use_ms, 2000);
  idle = book.AccountIdle(1, 0, 0.0, 30.0, idle);  // The first sample: no time.
  EXPECT_EQ(idle, 7000);
  idle = book.AccountIdle(1, 1000, 30.0, 30.0, idle);
  EXPECT_EQ(idle, 7000);
  EXPECT_EQ(book.Find(1)->low_use_ms, 0);
  EXPECT_EQ(book.Find(1)->idle_ms_total, 7000);
  book.AccountIdle(1, 1000, 0.0, 30.0, idle);
  book.HoldsNoGpu(1);
  EXPECT_EQ(book.Find(1)->low_use_ms, 0);
}

TEST(UsageBook, IdleTimeIsDueToBeWrittenOnceAMinute) {
  UsageBook book;
  EXPECT_TRUE(book.IdlePersistDue(60'000));
  book.IdlePersisted(60'000);
  EXPECT_FALSE(book.IdlePersistDue(119'999));
  EXPECT_TRUE(book.IdlePersistDue(120'000));
}

TEST(UsageBook, EndedJobsAreForgotten) {
  UsageBook book;
  book.Reset(1, 1000, 0);
  book.Reset(2, 1000, 0);
  book.Reset(3, 1000, 0);
  book.Forget(1);
  book.ForgetEnded([](uint64_t id) { return id == 3; });
  EXPECT_FALSE(book.Of(1).has_value());
  EXPECT_EQ(book.Find(2), nullptr);
  ASSERT_TRUE(book.Of(3).has_value());
  EXPECT_EQ(book.Of(3)->sampled_ms, 1000);
}

TEST(UsageBook, QueueWaitsAreCountedInCumulativeBucketsInSeconds) {
  UsageBook book;
  EXPECT_EQ(book.queue_waits().count, 0u);
  book.ObserveQueueWait(50);      // 0.05 s: in every bucket.
  book.ObserveQueueWait(20'000);  // 20 s: from the 30 s bucket on.
  book.ObserveQueueWait(-5);      // A clock step back counts as no wait.
  const WaitHistogram& h = book.queue_waits();
  ASSERT_EQ(h.bounds_s.size(), h.cumulative.size());
  ASSERT_EQ(h.bounds_s.front(), 0.1);
  EXPECT_EQ(h.count, 3u);
  EXPECT_DOUBLE_EQ(h.sum_s, 20.05);
  EXPECT_EQ(h.cumulative.front(), 2u);
  for (size_t i = 0; i < h.bounds_s.size(); ++i) {
    EXPECT_EQ(h.cumulative[i], h.bounds_s[i] >= 20 ? 3u : 2u) << h.bounds_s[i];
  }
}

}  // namespace
}  // namespace gpuslice::daemon
