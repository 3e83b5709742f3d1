// Service: elastic jobs ("--gpus 1-4"). See docs/DAEMON.md ("Elastic jobs");
// when a job shrinks or grows is elastic/elastic_jobs.h's.
//
// Each change is applied to the capacity model, the slice region (recreated
// with the new devices), the ledger (allocation rows closed and opened) and
// <job dir>/gpus, and the job's process group gets elastic_signal:
// CUDA_VISIBLE_DEVICES cannot change inside a running process, so the job
// restarts its workers on the new set.

#include <algorithm>
#include <cstring>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::Status;

Status Service::ApplyElastic(Job& job, uint32_t count, const std::string& why) {
  size_t before = job.allocation.gpu_indices.size();
  SliceLimits given_back = setup_.SliceLimitsOf(job);
  GPUSLICE_ASSIGN_OR_RETURN(core::Allocation a, capacity_->SetElasticGpus(job.id, count));
  job.allocation = a;
  // A region's device list is fixed: a new one at the same path. Running
  // processes keep the old mapping; restarted workers open the new one.
  if (!job.region_path.empty()) {
    // In the old region, which the running processes keep, the GPUs given
    // back get a memory limit of 0: until they restart, those processes can
    // allocate nothing more there (what they hold stays theirs, and their
    // kernels still run: the workers are told to restart).
    std::vector<std::string> gone;
    for (const std::string& u : given_back.uuids) {
      if (std::find(a.gpu_uuids.begin(), a.gpu_uuids.end(), u) == a.gpu_uuids.end()) {
        gone.push_back(u);
      }
    }
    if (!gone.empty() && regions_.Exists(job.region_path)) {
      given_back.uuids = gone;
      given_back.memory_bytes_per_device = 0;
      if (Status s = regions_.Update(job.region_path, given_back); !s.ok()) {
        LogWarn("job " + std::to_string(job.id) +
                ": cannot close the given-back GPUs to new allocations: " + s.message());
      }
    }
    if (regions_.Exists(job.region_path)) (void)regions_.Remove(job.region_path);
    auto region = regions_.Create(setup_.SliceLimitsOf(job));
    if (region.ok()) {
      job.region_path = *region;
    } else {
      LogWarn("job " + std::to_string(job.id) +
              ": cannot recreate its slice: " + region.status().message());
      if (region.status().code() == core::StatusCode::kResourceExhausted) {
        degraded_.NoRoom("no room for job slices on the state disk (" + region.status().message() +
                         ")");
      }
    }
  }
  if (ledger_) {
    if (Status s = ledger_->SaveResize(job, clock_.NowMs()); !s.ok()) {
      degraded_.Degrade("ledger write failed: " + s.message());
    }
  }
  WriteGpusFile(job, setup_.JobDir(job.id));
  if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, options_.rules.elastic_signal);
  elastic_.Changed(job.id, clock_.NowMs());
  std::string uuids;
  for (const std::string& u : a.gpu_uuids) uuids += (uuids.empty() ? "" : ",") + u;
  RecordEvent(count > before ? "elastic_grow" : "elastic_shrink", job.id, job.user,
              std::to_string(before) + " -> " + std::to_string(count) + " GPUs (" + uuids +
                  "): " + why + "; " + std::string(strsignal(options_.rules.elastic_signal)) +
                  " sent, " + setup_.JobDir(job.id) + "/gpus rewritten; workers must restart");
  LogInfo("job " + std::to_string(job.id) + " elastic: " + std::to_string(before) + " -> " +
          std::to_string(count) + " GPUs");
  return Status::Ok();
}

void Service::FitElasticToQuotas(Job& job) {
  if (!IsElastic(job) || quotas_.empty()) return;
  auto a = capacity_->AllocationOf(job.id);
  if (!a) return;
  // The queue admitted it by its minimum; it may have been placed on more.
  core::QuotaUsage usage = quotas_.RunningUsage(job.id);
  core::QuotaOwner owner = quotas_.OwnerOf(job);
  for (uint32_t n = static_cast<uint32_t>(a->gpu_indices.size()); n > job.request.gpus_min; --n) {
    if (quotas_.Decide(owner, core::ChargeOfAllocation(job.request, *a), usage).verdict ==
        core::QuotaVerdict::kFits) {
      return;
    }
    auto smaller = capacity_->SetElasticGpus(job.id, n - 1);
    if (!smaller.ok()) return;
    a = *smaller;
  }
}

}  // namespace gpuslice::daemon
