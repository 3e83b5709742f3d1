#pragma once

// The fixture of the suspend, resume and move tests (service_suspend_test.cc,
// service_move_test.cc): a service over a fake driver (FakeCheckpointer) and
// a fake process table, with a job whose CUDA process the tests drive.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "daemon/jobs/test_support.h"
#include "daemon/launch/checkpointer_fake.h"

namespace gpuslice::daemon {

using core::JobState;
using core::kGiB;

constexpr uint32_t kUser = 1000;
constexpr int64_t kCuda = 5001;      // The job's CUDA process.
constexpr int64_t kHelper = 5002;    // Its process that uses no GPU.
constexpr int64_t kStranger = 7001;  // Another user's process its slice names.

class SuspendTest : public ServiceFixture {
 protected:
  SuspendTest() : ServiceFixture(1) {}
  explicit SuspendTest(InventorySnapshot gpus) : ServiceFixture(std::move(gpus)) {}
  void SetUp() override {
    options_.processes = &procs_;
    options_.checkpointer = checkpointer_;
    ServiceFixture::SetUp();
    for (int64_t pid : {kCuda, kHelper}) procs_.owners[pid] = {kUser, kUser, "u1000", {}};
    procs_.owners[kStranger] = {1001, 1001, "u1001", {}};
  }
  core::Result<JobView> Submit(const std::string& mem, const std::string& priority = "normal",
                               uint32_t uid = kUser) {
    SubmitSpec s;
    s.fields.mem = mem;
    s.fields.compute = "30%";
    s.fields.priority = priority;
    s.argv = {"train"};
    s.cwd = "/home/u";
    return service_->intake().Submit(TestCaller(uid), s);
  }
  // A running 60 GiB job whose slice lists its two processes and a stranger.
  uint64_t StartJob() {
    auto v = Submit("60GiB");
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->job.state, JobState::kRunning);
    regions_.pids[v->job.region_path] = {static_cast<int32_t>(kCuda), static_cast<int32_t>(kHelper),
                                         static_cast<int32_t>(kStranger)};
    checkpointer_->Set(kCuda, GpuProcessState::kRunning);
    checkpointer_->Set(kStranger, GpuProcessState::kRunning);
    return v->job.id;
  }
  bool HasFlag(uint64_t id, const std::string& flag) {
    for (const std::string& f : Get(id).flags) {
      if (f == flag) return true;
    }
    return false;
  }
  // Ticks until the worker is done with job `id` (bounded: the fake is fast).
  void Settle(uint64_t id) {
    for (int i = 0; i < 500 && (HasFlag(id, "suspending") || HasFlag(id, "resuming")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      service_->Tick();
    }
    ASSERT_FALSE(HasFlag(id, "suspending") || HasFlag(id, "resuming")) << "worker never finished";
  }
  bool HasEvent(uint64_t id, const std::string& kind) {
    return daemon::HasEvent(*service_, id, kind);
  }
  // Its process group ends; ticks past the wait for its exit status.
  void EndProcesses(uint64_t id) {
    launcher_.alive.erase(Get(id).job.pid);
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(5000);
      service_->Tick();
    }
  }
  // With preemption on: a running low-priority job whose CUDA process is
  // kCuda, as preemption's victim.
  uint64_t StartVictim() {
    options_.rules.preemption = *core::ParsePreemptionPolicy("lower");
    Restart();
    auto v = Submit("60GiB", "low");
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    if (!v.ok()) return 0;
    regions_.pids[v->job.region_path] = {static_cast<int32_t>(kCuda)};
    checkpointer_->Set(kCuda, GpuProcessState::kRunning);
    return v->job.id;
  }
  const SliceLimits& Limits(uint64_t id) { return regions_.regions.at(Get(id).job.region_path); }

  FakeProcessTable procs_;
  std::shared_ptr<FakeCheckpointer> checkpointer_ = std::make_shared<FakeCheckpointer>();
};

}  // namespace gpuslice::daemon
