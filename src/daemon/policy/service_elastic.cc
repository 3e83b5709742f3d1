// Service: elastic jobs ("--gpus 1-4"). See docs/DAEMON.md ("Elastic jobs").
//
// A running elastic job gives GPUs back (down to its minimum) when the job
// first in line would then fit, and, if it opted in (`submit --grow`, which
// puts GPUSLICE_ELASTIC_GROW=1 in its environment), takes the idle GPUs when
// nothing waits (all it can at once), at most once per elastic_cooldown.
// Each change is applied to the capacity model, the slice region (recreated
// with the new devices), the ledger (allocation rows closed and opened) and
// <job dir>/gpus, and the job's process group gets elastic_signal:
// CUDA_VISIBLE_DEVICES cannot change inside a running process, so the job
// restarts its workers on the new set.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/jobs/elastic.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::Status;

bool Service::IsElastic(const Job& job) {
  return job.request.kind == core::RequestKind::kWholeGpus &&
         job.request.gpus_max > job.request.gpus_min;
}

namespace {

// Whether an elastic job asked to grow while it runs (a job that does not catch
// elastic_signal would be killed by a growth it never asked for). The marker
// lives in the job's environment, so the ledger keeps it.
constexpr char kGrowMarker[] = "GPUSLICE_ELASTIC_GROW=1";

bool WantsGrowth(const Job& job) {
  return std::find(job.env.begin(), job.env.end(), kGrowMarker) != job.env.end();
}

}  // namespace

void Service::WriteGpusFile(const Job& job) {
  // Atomically (a reader sees the old set or the new one, never half), and
  // readable by the job's user: the job directory is made traversable
  // (0711: files can be opened by name, not listed or created).
  std::string dir = JobDir(job.id);
  chmod(dir.c_str(), 0711);
  std::string path = dir + "/gpus", tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    LogWarn("job " + std::to_string(job.id) + ": cannot write " + tmp);
    return;
  }
  std::string text;
  for (const std::string& uuid : job.allocation.gpu_uuids) text += uuid + "\n";
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fchmod(fd, 0644) == 0 && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    LogWarn("job " + std::to_string(job.id) + ": cannot write " + path);
    unlink(tmp.c_str());
  }
}

Status Service::ApplyElastic(Job& job, uint32_t count, const std::string& why) {
  size_t before = job.allocation.gpu_indices.size();
  SliceLimits given_back = SliceLimitsOf(job);
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
    auto region = regions_.Create(SliceLimitsOf(job));
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
  WriteGpusFile(job);
  if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, options_.rules.elastic_signal);
  live_[job.id].elastic_changed_ms = clock_.NowMs();
  std::string uuids;
  for (const std::string& u : a.gpu_uuids) uuids += (uuids.empty() ? "" : ",") + u;
  RecordEvent(count > before ? "elastic_grow" : "elastic_shrink", job.id, job.user,
              std::to_string(before) + " -> " + std::to_string(count) + " GPUs (" + uuids +
                  "): " + why + "; " + std::string(strsignal(options_.rules.elastic_signal)) +
                  " sent, " + JobDir(job.id) + "/gpus rewritten; workers must restart");
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

void Service::Elastic(uint64_t head_id) {
  if (!capacity_ || degraded()) return;
  std::vector<core::ElasticJob> elastic;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (!IsElastic(job) || l.ending || job.allocation.empty() || IsSuspended(id) ||
        suspender_.Busy(id)) {
      continue;
    }
    core::ElasticJob e;
    e.id = id;
    e.min = job.request.gpus_min;
    e.max = job.request.gpus_max;
    e.held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
    e.priority = job.request.priority;
    e.last_change_ms = std::max(job.started_ms, l.elastic_changed_ms);
    elastic.push_back(e);
  }
  if (elastic.empty()) return;
  int64_t now = clock_.NowMs();
  if (head_id != 0) {
    // Shrink only when that makes the head fit, checked on a copy.
    const Job& head = jobs_[head_id];
    if (preemptions_.Preempting(head_id)) return;
    uint32_t idle = capacity_->IdleGpus();
    uint32_t wants = head.request.kind == core::RequestKind::kWholeGpus ? head.request.gpus_min : 1;
    if (wants <= idle) return;  // Not for want of idle GPUs (islands, pools): leave it.
    auto steps = core::PlanElasticShrink(elastic, wants - idle, head.request.priority);
    if (steps.empty()) return;
    auto probe = capacity_->Clone();
    auto& model = static_cast<NodeCapacity&>(*probe);
    for (const core::ElasticStep& s : steps) {
      uint32_t held = static_cast<uint32_t>(jobs_[s.id].allocation.gpu_indices.size());
      if (!model.SetElasticGpus(s.id, held + s.delta).ok()) return;
    }
    if (model.TryPlace(head_id) != core::FitResult::kPlaced) return;
    for (const core::ElasticStep& s : steps) {
      Job& job = jobs_[s.id];
      uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
      Status st =
          ApplyElastic(job, held + s.delta, s.reason + " (job " + std::to_string(head_id) + ")");
      if (!st.ok()) LogWarn("job " + std::to_string(s.id) + ": shrink failed: " + st.message());
    }
    Schedule();
    return;
  }
  core::ElasticOptions opt;
  opt.cooldown_ms = options_.rules.elastic_cooldown_ms;
  std::erase_if(elastic, [&](const core::ElasticJob& e) { return !WantsGrowth(jobs_[e.id]); });
  for (const core::ElasticStep& s :
       core::PlanElasticGrowth(elastic, capacity_->IdleGpus(), false, now, opt)) {
    Job& job = jobs_[s.id];
    uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
    // As many of the GPUs planned as its quotas allow and its pool and
    // island hold (SetElasticGpus changes nothing when they do not).
    for (uint32_t more = static_cast<uint32_t>(s.delta); more > 0; --more) {
      if (!quotas_.empty()) {
        core::Allocation grown = job.allocation;
        grown.gpu_indices.resize(held + more, 0);
        core::QuotaDecision d =
            quotas_.Decide(quotas_.OwnerOf(job), core::ChargeOfAllocation(job.request, grown),
                           quotas_.RunningUsage(job.id));
        if (d.verdict != core::QuotaVerdict::kFits) continue;
      }
      if (ApplyElastic(job, held + more, s.reason).ok()) break;
    }
  }
}

}  // namespace gpuslice::daemon
