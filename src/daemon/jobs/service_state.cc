// Service: keeping state. Start (the state directory and recovery from the
// ledger, both asked of Recovery: recovery/recovery.h; the ledger, the
// inventory), the ledger's upkeep and degraded mode, and undoing a start
// that was never recorded. See service.h.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

bool Service::Persist(const Job& job, std::optional<JobState> from) {
  if (!ledger_) return false;
  Status s = ledger_->SaveJob(job, from, clock_.NowMs());
  if (!s.ok()) {
    degraded_.Unsaved(job.id, from, s.message());
    return false;
  }
  return true;
}

bool Service::ChangeState(Job& job, JobState to, std::string kind, std::string message) {
  const JobState from = job.state;
  if (!core::CanTransition(from, to)) {
    LogError("job " + std::to_string(job.id) + ": illegal transition " +
             std::string(core::JobStateName(from)) + " -> " + std::string(core::JobStateName(to)));
    return false;
  }
  job.state = to;
  const bool saved = Persist(job, from);
  if (!kind.empty()) RecordEvent(std::move(kind), job.id, job.user, std::move(message));
  return saved;
}

void Service::MaintainLedger() { degraded_.Maintain(); }

Status Service::Start() {
  GPUSLICE_RETURN_IF_ERROR(recovery_.SecureStateDir());
  containers_.OpenCdi();

  auto inv = inventory_source_.Read();
  if (!inv.ok()) {
    degraded_.Degrade("cannot read the GPUs: " + inv.status().message());
  } else {
    inventory_ = *inv;
    LogInfo("GPUs from " +
            (inventory_.simulated() ? std::string("the SIMULATED GPU (no NVIDIA "
                                                  "driver found): ")
                                    : std::string("NVML: ")) +
            inventory_.library + ", " + std::to_string(inventory_.gpus.size()) + " GPU(s)");
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<std::string> pool_of,
                            pools_.Resolve(options_.rules, inventory_.gpus));
  auto cap =
      NodeCapacity::Create(inventory_.gpus, options_.policy, pool_of, options_.rules.default_pool);
  if (!cap.ok()) return cap.status();
  capacity_ = std::move(*cap);
  for (const GpuInfo& g : inventory_.gpus) {
    quotas_.NoteGpuMemory(g.memory_total);
  }

  std::string ledger_path = options_.state_dir + "/ledger.db";
  auto ledger = Ledger::Open(ledger_path);
  if (!ledger.ok()) {
    degraded_.Degrade("ledger unreadable: " + ledger.status().message());
    return Status::Ok();
  }
  ledger_ = std::move(*ledger);
  auto max_id = ledger_->MaxJobId();
  auto live = ledger_->LoadJobs(/*live_only=*/false);
  if (!max_id.ok() || !live.ok()) {
    degraded_.Degrade("ledger unreadable: " +
                      (!max_id.ok() ? max_id.status() : live.status()).message());
    ledger_.reset();
    return Status::Ok();
  }
  table_.ContinueIdsAfter(*max_id);
  if (auto quotas = ledger_->LoadQuotas(); quotas.ok()) {
    for (const auto& [who, quota] : *quotas) quotas_.Set(who, quota);
  } else {
    degraded_.Degrade("ledger unreadable: " + quotas.status().message());
  }
  events_.LoadCounts();
  recovery_.Recover(std::move(*live));
  SeedFairShare();
  ranker_.Rerank(/*force=*/true);
  Schedule();
  containers_.SyncCdi();
  return Status::Ok();
}

void Service::ForgetStart(Job& job) {
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    (void)regions_.Remove(job.region_path);
  }
  job.region_path.clear();
  job.allocation = {};
  job.started_ms = 0;
}

void Service::UndoStart(Job& job) {
  degraded_.DropUnsaved(job.id);
  ForgetStart(job);
  // Not a transition: the launch intent's ledger write failed and is
  // dropped above, so the ledger and the events never saw it leave the
  // queue. The one assignment of a job's state outside ChangeState.
  job.state = JobState::kQueued;
  capacity_->Release(job.id);
  Enqueue(job);
}

}  // namespace gpuslice::daemon
