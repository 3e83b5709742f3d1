#pragma once

// The fixture of the watchdog's tests (service_watchdog_test.cc,
// service_audit_test.cc): a service over fakes and a hand-moved clock, NVML's
// per-process figures from FakeInventory, process owners and groups from
// FakeProcessTable.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/jobs/service.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {

class WatchdogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-watchdog-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Start(PolicyConfig rules = {},
             InventorySnapshot gpus = SimulatedGpus(2, "A100", 40 * core::kGiB)) {
    inventory_ = FakeInventory(gpus);
    ServiceOptions o;
    o.state_dir = dir_;
    o.kill_grace_ms = 1000;
    o.rules = rules;
    o.processes = &processes_;
    o.admin_gid = admin_gid_;
    o.external_gid_base = external_gid_base_;
    o.groups_of = [](const std::string&, uint32_t) { return std::vector<std::string>{}; };
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
    inventory_.usage = *FakeInventory(gpus).Usage();
  }

  // A running 4 GiB / 25% slice of user 1000; its log file exists, as the
  // real launcher makes it.
  JobView StartJob(const std::string& mem = "4GiB", const std::string& compute = "25%") {
    SubmitSpec s;
    s.fields.mem = mem;
    s.fields.compute = compute;
    s.argv = {"train"};
    s.cwd = "/home/u";
    auto v = service_->intake().Submit(TestCaller(1000), s);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    JobView job = *service_->reads().Get(v->job.id);
    EXPECT_EQ(job.job.state, core::JobState::kRunning);
    std::ofstream(launcher_.launches[job.job.pid].stderr_path);
    return job;
  }
  // A GPU process of user `uid`, in process group `pgid` (0: its own).
  void Process(uint32_t gpu, uint32_t pid, uint64_t bytes, uint32_t sm_pct, uint32_t uid,
               int64_t pgid = 0, std::vector<std::string> groups = {}) {
    inventory_.usage[gpu].processes.push_back({pid, bytes, sm_pct});
    ProcessOwner o;
    o.uid = o.gid = uid;
    o.user = uid == 0 ? "root" : "u" + std::to_string(uid);
    o.groups = std::move(groups);
    processes_.owners[pid] = o;
    processes_.groups[pid] = pgid ? pgid : pid;
  }
  // A process on a GPU in MIG mode, in the MIG device with these ids (as
  // NVML lists it on the GPU).
  void MigProcess(uint32_t gpu, uint32_t pid, uint64_t bytes, uint32_t uid, uint32_t gpu_instance,
                  uint32_t compute_instance = 0) {
    Process(gpu, pid, bytes, 0, uid);
    inventory_.usage[gpu].processes.back().gpu_instance_id = gpu_instance;
    inventory_.usage[gpu].processes.back().compute_instance_id = compute_instance;
  }
  core::Result<JobView> SubmitMig(const std::string& profile) {
    SubmitSpec s;
    s.fields.mig = profile;
    s.argv = {"train"};
    s.cwd = "/home/u";
    return service_->intake().Submit(TestCaller(1000), s);
  }
  // A Slurm step's 4 GiB slice of user 1000, bound to its slurmstepd (pid
  // 4242, root, alive).
  core::Result<JobView> SubmitBoundStep() {
    launcher_.alive.insert(4242);
    processes_.owners[4242] = {0, 0, "root", {}};
    Caller stepd = TestCaller(1000);
    stepd.process = std::make_shared<FakePeerProcess>(PeerIdentity{4242, 0, 1});
    SubmitSpec s;
    s.mode = core::JobMode::kExternal;
    s.fields.mem = "4GiB";
    s.bound_to_caller = true;
    return service_->intake().Submit(stepd, s);
  }
  JobView Get(uint64_t id) { return *service_->reads().Get(id); }
  std::vector<Event> EventsOf(uint64_t job_id, const std::string& kind) {
    EventQuery q;
    q.job_id = job_id;
    std::vector<Event> out;
    auto events = service_->events().Query(q);
    if (!events.ok()) return out;
    for (const Event& e : *events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  std::string Log(const JobView& v) {
    std::ifstream in(launcher_.launches[v.job.pid].stderr_path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool HasFlag(uint64_t id, const std::string& flag) {
    auto flags = Get(id).flags;
    return std::find(flags.begin(), flags.end(), flag) != flags.end();
  }
  void Run(int seconds) {
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(1000);
      service_->Tick();
    }
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2, "A100", 40 * core::kGiB)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  FakeProcessTable processes_;
  std::unique_ptr<Service> service_;
  std::optional<uint32_t> admin_gid_;  // ServiceOptions::admin_gid at Start.
  uint32_t external_gid_base_ = 0;     // ServiceOptions::external_gid_base at Start.
};

}  // namespace gpuslice::daemon
