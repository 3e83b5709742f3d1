#pragma once

// Foreign GPU use (docs/DAEMON.md, "Foreign GPU use"): GPU processes that
// belong to no job. After each usage sample Service says which of NVML's
// processes are its jobs'; the rest are foreign. This charges their memory
// to their GPUs (or MIG instances) in placement, reports each process once
// from its second sample on (a job's process may be listed once between its
// job's end and NVML's next update), and ends those that the `foreign`
// policy says to, each once. It owns which pids it has seen, reported and
// ended; what it needs of the daemon it is given per sample or through
// Hooks. One thread, as Service.

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/config/policy_config.h"
#include "daemon/node/inventory.h"
#include "daemon/node/process_table.h"
#include "daemon/placement/capacity.h"

namespace gpuslice::daemon {

// A GPU process that belongs to no job (NVML lists it; no job's process
// group or slice claims it), as of the last sample.
struct ForeignProcess {
  uint32_t gpu_index = 0;
  uint32_t pid = 0;
  uint64_t used_memory = 0;
  int64_t uid = -1;  // -1: the process is gone (its owner unknown).
  std::string user;  // "?" when unknown.
  // Root, the admin group or an allowed group: `foreign` never ends it.
  bool spared = false;
  // The MIG device it runs in ("MIG-..."), on a GPU in MIG mode; "" else.
  std::string mig_uuid;
};

class ForeignUse {
 public:
  // What it asks of the daemon.
  struct Hooks {
    // Records the event "foreign_process" for `user` with `message`.
    std::function<void(const std::string& user, const std::string& message)> report;
    // The node's processes: their owners, and signals to them.
    std::function<ProcessTable&()> processes;
  };
  // Memory jobs hold over their limits, per GPU: bytes and "job N, job M".
  using OverLimit = std::map<uint32_t, std::pair<uint64_t, std::string>>;
  // One sample, as Service sees it.
  struct Sample {
    const std::vector<GpuUsage>& gpus;   // NVML's, in the inventory's order.
    const InventorySnapshot& inventory;  // Which GPUs are in MIG mode.
    // The GPU processes that are jobs' (every other one is foreign).
    const std::unordered_map<int64_t, uint64_t>& job_of_pid;
    // Processes a root-owned external job's slice names (a pod's
    // containers): charged, never ended. Pid -> that job.
    const std::unordered_map<int64_t, uint64_t>& container_of;
    const OverLimit& over_limit;
    const PolicyConfig& rules;  // `foreign` and foreign_allowed_groups.
    std::string admin_group;    // Its members' processes are spared ("": none).
    NodeCapacity* capacity;     // Charged; null: nothing is charged or protected.
  };

  explicit ForeignUse(Hooks hooks) : hooks_(std::move(hooks)) {}

  // Takes one sample: finds the foreign processes, charges them (and
  // `over_limit`) to their GPUs in `capacity`, clearing a GPU or MIG
  // instance without such use, reports and ends what is due. A pid gone
  // from a sample is forgotten, so a reused pid is reported anew.
  void Watch(const Sample& sample);
  // The foreign processes of the last sample.
  const std::vector<ForeignProcess>& processes() const { return now_; }

 private:
  Hooks hooks_;
  std::vector<ForeignProcess> now_;
  // Foreign pids seen in consecutive samples (reported/acted on at the
  // second, so a job's process caught between its job's end and NVML's
  // next update is not called foreign), and those already reported.
  std::unordered_map<int64_t, int> seen_;
  std::set<int64_t> reported_;
  std::set<int64_t> ended_;  // Signalled by `foreign`; forgotten once gone.
};

}  // namespace gpuslice::daemon
