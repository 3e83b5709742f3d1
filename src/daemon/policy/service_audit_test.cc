// The audit of the arbiter's charge: NVML's per-process use
// against what the arbiter charged a slice by its processes' reports.

#include <string>
#include <vector>

#include "daemon/policy/service_watchdog_fixture.h"

namespace gpuslice::daemon {
namespace {

// The arbiter charges a slice the GPU time its processes report.
// A slice whose processes NVML sees use far more than it was charged over the
// compute window hid its work: the daemon tells the arbiter to disregard its
// reports (the slice is then charged the wall time of its turns), once, with
// an event, a warning in the job's log and a flag.
TEST_F(WatchdogTest, ASliceUsingMoreThanItWasChargedIsDistrustedOnce) {
  PolicyConfig rules;
  rules.watchdog_compute_window_ms = 5000;
  Start(rules);
  JobView v = StartJob("4GiB", "25%");
  Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 40, 1000, v.job.pid);
  // Charged 10% of the wall time while NVML sees 40%.
  auto run = [&](int seconds, uint64_t charged_per_s) {
    for (int i = 0; i < seconds; ++i) {
      regions_.charged[v.job.region_path] += charged_per_s;
      Run(1);
    }
  };
  run(4, 100'000'000);
  EXPECT_TRUE(regions_.distrusted.empty()) << "not before a whole window";
  run(2, 100'000'000);
  ASSERT_EQ(regions_.distrusted, std::vector<std::string>{v.job.region_path});
  auto events = EventsOf(v.job.id, "compute_audit");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].message.find("charged the wall time of its turns"), std::string::npos)
      << events[0].message;
  EXPECT_TRUE(HasFlag(v.job.id, "under_reported"));
  EXPECT_NE(Log(v).find("(NVML), but the arbiter charged it"), std::string::npos) << Log(v);
  EXPECT_EQ(Get(v.job.id).job.state, core::JobState::kRunning) << "neither killed nor stopped";
  run(10, 100'000'000);
  EXPECT_EQ(regions_.distrusted.size(), 1u) << "once";
  EXPECT_EQ(EventsOf(v.job.id, "compute_audit").size(), 1u);
  EXPECT_TRUE(EventsOf(v.job.id, "watchdog_compute").empty()) << "40% < 25% + 25% margin";
}

// The audit's bounds: a slice charged what NVML sees it use (honest; the
// charge errs high), or a little less (a report that lags by a sample), or
// one whose whole second of use at the start of a burst is charged a sample
// late (its publishing thread starved of CPU; CI, stop 32, with a 2 s
// window), or a slice whose charge went back (it moved to other GPUs, whose
// boards count from zero), is left alone; and without the compute watchdog,
// or without an arbiter, there is no audit.
TEST_F(WatchdogTest, AnHonestSliceIsNotDistrusted) {
  for (const char* kase : {"honest", "lagging", "burst", "moved", "off", "unarbitrated"}) {
    PolicyConfig rules;
    rules.watchdog_compute_window_ms = std::string(kase) == "burst" ? 2000 : 3000;
    if (std::string(kase) == "off") rules.watchdog_compute = WatchdogAction::kOff;
    Start(rules);
    JobView v = StartJob("4GiB", "25%");
    Process(v.job.allocation.gpu_indices[0], 777, 1 * core::kGiB, 40, 1000, v.job.pid);
    for (int i = 0; i < 20; ++i) {
      if (std::string(kase) == "unarbitrated") {  // No arbiter decides its turns: nothing to audit.
        Run(1);
        continue;
      }
      uint64_t& charged = regions_.charged[v.job.region_path];
      if (std::string(kase) == "burst") {
        // Idle, then 40% from second 6 on, each second's use charged at the
        // next sample (NVML samples the interval before its time).
        auto& processes = inventory_.usage[v.job.allocation.gpu_indices[0]].processes;
        processes.back().sm_util_pct = i < 6 ? 0 : 40;
        if (i > 6) charged += 400'000'000;
      } else if (std::string(kase) == "lagging") {
        charged += i % 2 == 0 ? 250'000'000 : 450'000'000;  // 35% on average, unevenly.
      } else if (std::string(kase) == "moved") {
        charged = i == 10 ? 0 : charged + 420'000'000;
      } else {
        charged += 420'000'000;
      }
      Run(1);
    }
    EXPECT_TRUE(regions_.distrusted.empty()) << kase;
    EXPECT_TRUE(EventsOf(v.job.id, "compute_audit").empty()) << kase;
    regions_.distrusted.clear();
    regions_.charged.clear();
  }
}

}  // namespace
}  // namespace gpuslice::daemon
