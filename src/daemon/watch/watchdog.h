#pragma once

// The enforcement watchdog (docs/DAEMON.md, "Enforcement watchdog"): after
// each usage sample it compares what NVML says a running job's processes
// hold and use with what the daemon gave the job, and acts on a breach as
// `watchdog` and `watchdog_compute` say: a job over its memory limit (plus
// an allowance for the contexts the shim registered) is killed, stopped
// until it is back under, or reported; one far over its compute share for a
// whole window is killed or reported. Over the same window it audits the
// arbiter's charge against NVML: a slice that used more than it reported is
// charged the wall time of its turns from then on (docs/SECURITY.md).
//
// Every figure compared is NVML's (ground truth) or the daemon's own (the
// job's allocation, the arbiter's counters); nothing is read back from a
// file a job can write, so a job that rewrites its slice region cannot blind
// it.
//
// It owns each running job's watch state (over its limit, stopped, over its
// share, the compute window, the audit's verdicts), keyed by job id, and
// decides; what it does to a job it asks of the daemon through Hooks. One
// thread, as Service.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/jobs/job.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/policy_config.h"
#include "daemon/usage/usage_book.h"

namespace gpuslice::daemon {

class Watchdog {
 public:
  // What it asks of the daemon.
  struct Hooks {
    // Ends `job` at once (SIGKILL), with the event `kind` saying `why` and a
    // line in its log (an external job without a holder: its launches are
    // paused instead).
    std::function<void(const core::Job& job, const std::string& kind, const std::string& why)> kill;
    // Freezes / thaws every process of `job`.
    std::function<void(const core::Job& job)> stop;
    std::function<void(const core::Job& job)> resume;
    // Records the event `kind` about `job`.
    std::function<void(const std::string& kind, const core::Job& job, const std::string& message)>
        record;
    // Appends `line` to the job's stderr log, for `gpuslice logs`.
    std::function<void(const core::Job& job, const std::string& line)> tell;
    // The size of a context on GPU `gpu`, learnt from NVML; unset: unknown.
    std::function<std::optional<uint64_t>(uint32_t gpu)> context_size;
    // Whether `job` is elastic (its workers keep a given-back GPU until they
    // restart).
    std::function<bool(const core::Job& job)> elastic;
  };

  // `regions`: the arbiter's counters per slice (contended and charged
  // time), and where a slice found under-reporting is told to be
  // distrusted. `sample_interval_ms`: the time each sample stands for.
  Watchdog(PolicyConfig rules, int64_t sample_interval_ms, RegionStore& regions, Hooks hooks)
      : rules_(std::move(rules)),
        sample_interval_ms_(sample_interval_ms),
        regions_(regions),
        hooks_(std::move(hooks)) {}

  // The daemon's memory limit for `job` on GPU `gpu` (inventory index): its
  // allocation there; 0 on a GPU it was not given, and while suspended.
  static uint64_t MemoryLimitOn(const core::Job& job, uint32_t gpu);

  // Watches running job `job` at sample `use`: memory first, then compute
  // (and the audit). True when it ended the job (Hooks::kill).
  bool Watch(const core::Job& job, const JobUsage& use);
  // A job being ended must run to take its SIGTERM: continued when the
  // watchdog stopped it.
  void LetEnd(const core::Job& job);
  // Stopped by the watchdog (watchdog = stop) until it is back under.
  bool Stopped(uint64_t id) const;
  // Appends the job's watchdog flags, in this order: "over_limit",
  // "stopped", "over_share", "under_reported".
  void AppendFlags(uint64_t id, std::vector<std::string>* flags) const;
  // The job no longer runs (ended, or requeued): its watch state goes.
  void Forget(uint64_t id) { watched_.erase(id); }

 private:
  struct JobWatch {
    // Memory.
    bool over_limit = false;  // Seen over its limit.
    bool stopped = false;     // Stopped by it (watchdog = stop).
    // Compute.
    bool over_share = false;  // Seen far over its share.
    // SM use per GPU of the last samples within the compute window, and the
    // share and mode they were taken under (a live change starts a new one:
    // use within the old share is no breach of the new).
    std::deque<std::pair<int64_t, std::map<uint32_t, double>>> sm_window;
    uint32_t sm_window_share = 0;
    bool sm_window_work_conserving = false;
    // The arbiter's contended time (RegionStore::ContendedNs) at the same
    // samples: how long others waited for the GPU (work-conserving slices).
    std::deque<uint64_t> contended_window;
    // The arbiter's charge (RegionStore::ChargedNs) at the same samples.
    std::deque<std::optional<uint64_t>> charged_window;
    // The audit saw it use more than it was charged (AuditCharge): the
    // arbiter disregards its reports.
    bool under_reported = false;
    // The last audit found it short; the next one confirms it (a report
    // that arrives a sample late, at the start of a burst, is not a lie).
    bool audit_suspect = false;
  };

  // Each returns true when it ended the job.
  bool WatchMemory(const core::Job& job, JobWatch& w, const JobUsage& use);
  bool WatchCompute(const core::Job& job, JobWatch& w, const JobUsage& use);
  // The audit of the arbiter's charge against NVML, over WatchCompute's
  // window.
  void AuditCharge(const core::Job& job, JobWatch& w);

  const PolicyConfig rules_;
  const int64_t sample_interval_ms_;
  RegionStore& regions_;
  Hooks hooks_;
  std::unordered_map<uint64_t, JobWatch> watched_;  // Running jobs, by id.
};

}  // namespace gpuslice::daemon
