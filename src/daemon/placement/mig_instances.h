#pragma once

// The node's MIG instances as NodeCapacity places them: allocatable units of
// their own, matched by profile (never split), each in its GPU's pool. An
// instance is free while no job holds it and no process outside gpuslice
// runs in it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/jobs/request.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

// Whether a MIG instance is of `profile` (by name, else by its memory).
bool IsOfProfile(const MigInstance& m, const core::MigProfile& profile);

class MigInstances {
 public:
  struct Unit {
    uint32_t gpu_index = 0;
    std::string model;  // Of its GPU (--gpu-model).
    MigInstance instance;
    bool taken = false;  // By a job.
    std::string pool;    // "" when the machine has one pool.
    // Foreign use (SetForeign): who, and the bytes they hold.
    std::string foreign;
    uint64_t foreign_bytes = 0;
    bool Free() const { return !taken && foreign.empty(); }
    // Whether it is of a model `request` may use (any, when it names none).
    bool ModelAllowed(const core::ResourceRequest& request) const;
  };

  void Add(uint32_t gpu_index, std::string model, MigInstance instance, std::string pool);
  bool empty() const { return units_.empty(); }
  const std::vector<Unit>& units() const { return units_; }
  const Unit& at(size_t i) const { return units_.at(i); }

  // The first instance of `request`'s profile and models in `pool` ("":
  // any pool), only free ones when `free_only`; -1 when there is none.
  int Find(const core::ResourceRequest& request, const std::string& pool, bool free_only) const;
  // The instance with UUID `uuid`; -1 when there is none.
  int IndexOf(const std::string& uuid) const;
  // A job takes instance `i` / gives it back. Take is false (nothing
  // changed) when a job holds it already.
  bool Take(size_t i);
  void Give(size_t i) { units_.at(i).taken = false; }

  // Foreign use of the instance with UUID `uuid`: while `who` names
  // processes belonging to no job that run in it, it is not free; "" frees
  // it. `bytes` is what they hold (for messages). Unknown UUIDs are ignored.
  void SetForeign(const std::string& uuid, uint64_t bytes, std::string who);
  // Who holds the instance outside gpuslice, as set; "" when nobody.
  std::string ForeignOf(const std::string& uuid) const;
  // Whether a job holds the instance.
  bool HeldByJob(const std::string& uuid) const;

 private:
  std::vector<Unit> units_;
};

}  // namespace gpuslice::daemon
