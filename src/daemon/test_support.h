#pragma once

// Shared by the daemon's unit tests (never linked into gpusliced): a
// simulated GPU inventory and callers, so that each test file does not grow
// its own copy.

#include <cstdint>
#include <string>

#include "core/units.h"
#include "daemon/inventory.h"
#include "daemon/service.h"

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

}  // namespace gpuslice::daemon
