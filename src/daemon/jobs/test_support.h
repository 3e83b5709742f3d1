#pragma once

// Shared by the daemon's unit tests (never linked into gpusliced): a
// simulated GPU inventory and callers, so that each test file does not grow
// its own copy.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "core/units.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/jobs/service.h"
#include "daemon/launch/launcher_fake.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

// `count` GPUs "GPU-0", "GPU-1"... of `model`, `memory` each, reported as
// the simulated driver does.
inline InventorySnapshot SimulatedGpus(uint32_t count, const std::string& model = "H100",
                                       uint64_t memory = 80 * core::kGiB) {
  InventorySnapshot s;
  s.source = "simulated";
  for (uint32_t i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.model = model;
    g.memory_total = memory;
    s.gpus.push_back(g);
  }
  return s;
}

// A local caller "u<uid>" whose group id is its uid.
inline Caller TestCaller(uint32_t uid, bool admin = false) {
  Caller c;
  c.uid = uid;
  c.gid = uid;
  c.user = "u" + std::to_string(uid);
  c.admin = admin;
  return c;
}

// A Service over the fake clock, launcher, inventory (`gpus` simulated GPUs)
// and regions, with a real ledger in a temp directory; Restart() makes a
// fresh Service over the same state, as a daemon restart does. Tests adjust
// `options_` (then Restart()) or the fakes.
// Whether job `id` has an event of `kind` in the service's event log.
inline bool HasEvent(Service& service, uint64_t id, const std::string& kind) {
  EventQuery q;
  q.job_id = id;
  auto events = service.events().Query(q);
  if (!events.ok()) return false;
  for (const Event& e : *events) {
    if (e.kind == kind) return true;
  }
  return false;
}

class ServiceFixture : public ::testing::Test {
 protected:
  explicit ServiceFixture(uint32_t gpus = 2) : inventory_(SimulatedGpus(gpus)) {}
  explicit ServiceFixture(InventorySnapshot gpus) : inventory_(std::move(gpus)) {}
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-service-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    options_.state_dir = dir_;
    options_.kill_grace_ms = 1000;
    Restart();
  }
  void TearDown() override {
    service_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Restart() {
    service_.reset();
    service_ = std::make_unique<Service>(options_, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
  }
  JobView Get(uint64_t id) { return *service_->reads().Get(id); }
  core::JobState State(uint64_t id) { return Get(id).job.state; }

  std::string dir_;
  ServiceOptions options_;
  FakeClock clock_;
  FakeInventory inventory_;
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
};

}  // namespace gpuslice::daemon
