// Service: quotas, live resize and requeueing a preempted job. See
// service.h and docs/DAEMON.md ("Policies"); whom preemption ends is
// makeroom/preemptions.h's.

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "daemon/base/log.h"
#include "daemon/config/config_check.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

std::string Who(const Caller& c) { return c.user.empty() ? std::to_string(c.uid) : c.user; }

}  // namespace

std::vector<uint32_t> SystemGidsOf(const std::string& user, uint32_t gid) {
  std::vector<gid_t> gids(64);
  int n = static_cast<int>(gids.size());
  if (!user.empty() && getgrouplist(user.c_str(), gid, gids.data(), &n) < 0) {
    gids.resize(static_cast<size_t>(n));
    if (getgrouplist(user.c_str(), gid, gids.data(), &n) < 0) n = 0;
  }
  if (user.empty()) {
    gids = {gid};
    n = 1;
  }
  gids.resize(static_cast<size_t>(std::max(n, 0)));
  if (std::find(gids.begin(), gids.end(), gid) == gids.end()) gids.push_back(gid);
  return std::vector<uint32_t>(gids.begin(), gids.end());
}

std::vector<std::string> SystemGroupsOf(const std::string& user, uint32_t gid) {
  std::vector<std::string> out;
  for (gid_t g : SystemGidsOf(user, gid)) {
    struct group grp;
    struct group* found = nullptr;
    std::vector<char> buf(16384);
    if (getgrgid_r(g, &grp, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      out.emplace_back(found->gr_name);
    }
  }
  return out;
}

Result<JobView> Service::ResizeElastic(const Caller& caller, Job& job, const ResizeSpec& spec) {
  const std::string name = "job " + std::to_string(job.id);
  if (spec.mem || spec.compute) {
    return core::InvalidArgumentError("--gpus resizes an elastic job; not with --mem or --compute");
  }
  if (!IsElastic(job)) {
    return core::FailedPreconditionError(name + " holds " + job.request.Describe() +
                                         "; only elastic jobs (--gpus MIN-MAX) change their GPU "
                                         "count");
  }
  uint32_t want = 0;
  const std::string& text = *spec.gpus;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), want);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      want < job.request.gpus_min || want > job.request.gpus_max) {
    return core::InvalidArgumentError("--gpus '" + text.substr(0, 32) + "': " + name + " runs on " +
                                      std::to_string(job.request.gpus_min) + " to " +
                                      std::to_string(job.request.gpus_max) + " GPUs");
  }
  const uint32_t held = static_cast<uint32_t>(job.allocation.gpu_indices.size());
  if (want == held) return reads_.View(job);
  if (want > held && !quotas_.empty()) {
    core::Allocation grown = job.allocation;
    grown.gpu_indices.resize(want, 0);
    core::QuotaDecision d =
        quotas_.Decide(quotas_.OwnerOf(job), core::ChargeOfAllocation(job.request, grown),
                       quotas_.RunningUsage(job.id));
    if (d.verdict != core::QuotaVerdict::kFits) {
      return core::ResourceExhaustedError("resize to " + std::to_string(want) +
                                          " GPUs is over quota: " + d.reason);
    }
  }
  Status s = ApplyElastic(job, want, "asked by " + caller.user);
  if (!s.ok()) {
    if (s.code() != core::StatusCode::kResourceExhausted) return s;
    return core::ResourceExhaustedError(name + " holds " + std::to_string(held) + " GPUs; " +
                                        std::to_string(want - held) +
                                        " more are not idle in its pool (and on its island) now");
  }
  Schedule();
  return reads_.View(job);
}

Result<JobView> Service::Resize(const Caller& caller, uint64_t id, const ResizeSpec& spec) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (degraded()) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): not resizing");
  }
  if (job.state != JobState::kRunning) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         "; only running jobs are resized");
  }
  if (spec.gpus) return ResizeElastic(caller, job, spec);
  std::optional<core::Priority> priority;
  if (spec.priority) {
    auto p = core::ParsePriority(*spec.priority);
    if (!p.ok()) return p.status().WithContext("--priority");
    priority = *p;
    const AccessConfig& access = options_.rules.access;
    const std::string& pool =
        job.request.pool.empty() ? capacity_->pools().default_pool() : job.request.pool;
    GPUSLICE_RETURN_IF_ERROR(
        CheckAccess(access, job.user, job.uid, quotas_.OwnerOf(job).groups, pool, *priority));
    if (!spec.mem && !spec.compute) {
      GPUSLICE_RETURN_IF_ERROR(edits_.ChangePriority(caller, job, *priority));
      return reads_.View(job);
    }
  }
  if (job.request.kind != core::RequestKind::kFraction) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " holds " +
                                         job.request.Describe() +
                                         "; only parts of a GPU (--mem jobs) can be resized, "
                                         "and elastic jobs (--gpus MIN-MAX) with --gpus");
  }
  if (!spec.mem && !spec.compute) {
    return core::InvalidArgumentError("resize needs --mem and/or --compute");
  }
  core::ResourceRequest next = job.request;
  GPUSLICE_RETURN_IF_ERROR(core::ApplySliceSize(spec.mem, spec.compute, &next));
  GPUSLICE_RETURN_IF_ERROR(next.Validate());
  std::string from = job.request.Describe(), to = next.Describe();
  if (next.memory_bytes == job.request.memory_bytes &&
      next.compute_milli == job.request.compute_milli) {
    if (priority) GPUSLICE_RETURN_IF_ERROR(edits_.ChangePriority(caller, job, *priority));
    return reads_.View(job);
  }
  // Quotas: what the job would hold instead of what it holds.
  if (!quotas_.empty()) {
    core::Allocation after = job.allocation;
    after.memory_bytes_per_gpu = next.memory_bytes;
    after.compute_milli = next.compute_milli;
    core::QuotaDecision d = quotas_.Decide(
        quotas_.OwnerOf(job), core::ChargeOfAllocation(next, after), quotas_.RunningUsage(job.id));
    if (d.verdict != core::QuotaVerdict::kFits) {
      return core::ResourceExhaustedError("resize to " + to + " is over quota: " + d.reason);
    }
  }
  // Memory in use: a limit under it is refused unless forced.
  uint64_t used = 0;
  if (auto u = regions_.Usage(job.region_path); u.ok()) {
    for (const SliceUsage& s : *u) used = std::max(used, s.used_bytes);
  }
  if (next.memory_bytes < used && !spec.force) {
    return core::FailedPreconditionError(
        "job " + std::to_string(id) + " uses " + core::FormatBytes(used) + "; a limit of " +
        core::FormatBytes(next.memory_bytes) +
        " is below that (--force applies it anyway: new allocations then fail until its use "
        "falls under the limit)");
  }
  GPUSLICE_RETURN_IF_ERROR(capacity_->Resize(id, next));
  SliceLimits limits = setup_.SliceLimitsOf(job);
  limits.memory_bytes_per_device = next.memory_bytes;
  limits.compute_milli = next.compute_milli;
  limits.work_conserving = job.request.compute_mode == core::ComputeMode::kWorkConserving;
  JobSetup::TakeTurnsWithoutAShare(job, &limits);
  if (Status s = regions_.Update(job.region_path, limits); !s.ok()) {
    (void)capacity_->Resize(id, job.request);
    return s.WithContext("update the slice");
  }
  job.request.memory_bytes = next.memory_bytes;
  job.request.compute_milli = next.compute_milli;
  job.allocation.memory_bytes_per_gpu = next.memory_bytes;
  job.allocation.compute_milli = next.compute_milli;
  if (ledger_) {
    if (Status s = ledger_->SaveResize(job, clock_.NowMs()); !s.ok()) {
      degraded_.Degrade("ledger write failed: " + s.message());
    }
  }
  RecordEvent(
      "resized", id, job.user,
      from + " -> " + to + " by " + Who(caller) +
          (next.memory_bytes < used ? " (forced below the " + core::FormatBytes(used) + " in use)"
                                    : ""));
  LogInfo("job " + std::to_string(id) + " resized: " + from + " -> " + to);
  if (priority) GPUSLICE_RETURN_IF_ERROR(edits_.ChangePriority(caller, job, *priority));
  // A smaller job leaves room for the queue.
  RequestSchedule();
  return reads_.View(job);
}

void Service::Requeue(Job& job, std::string reason) {
  if (capacity_) capacity_->Release(job.id);
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    Status s = regions_.Remove(job.region_path);
    if (!s.ok()) LogWarn("job " + std::to_string(job.id) + ": " + s.message());
  }
  if (!job.image.empty()) containers_.RemoveContainer(job);  // Its name is free for the next run.
  table_.live().erase(job.id);
  suspender_.Forget(job.id);
  usage_.Forget(job.id);
  watchdog_.Forget(job.id);
  idle_.Forget(job.id);
  job.reason = std::move(reason);
  job.pid = 0;
  job.pid_start_time = 0;
  job.region_path.clear();
  job.allocation = core::Allocation();
  job.started_ms = 0;
  // The next run's supervisor writes a new status; an old one would end it.
  unlink((setup_.JobDir(job.id) + "/status").c_str());
  ChangeState(job, JobState::kQueued, "requeued", job.reason);
  LogInfo("job " + std::to_string(job.id) + " requeued: " + job.reason);
  Enqueue(job);
}

Status Service::ResolvePools(std::vector<std::string>* pool_of) {
  const PolicyConfig& rules = options_.rules;
  pool_of->clear();
  pool_of_gpu_.clear();
  for (const GpuInfo& g : inventory_.gpus) pool_of_gpu_[g.index] = rules.default_pool;
  if (rules.pools.empty() || inventory_.gpus.empty()) return Status::Ok();
  GPUSLICE_ASSIGN_OR_RETURN(*pool_of, PoolsOfGpus(rules, inventory_.gpus));
  for (size_t i = 0; i < pool_of->size(); ++i) {
    pool_of_gpu_[inventory_.gpus[i].index] = (*pool_of)[i];
  }
  std::string summary;
  for (size_t i = 0; i < pool_of->size(); ++i) {
    summary += (i ? ", " : "") + std::to_string(inventory_.gpus[i].index) + ":" + (*pool_of)[i];
  }
  LogInfo("pools (GPU:pool): " + summary + "; default pool " + rules.default_pool);
  return Status::Ok();
}

const std::string& Service::PoolOf(uint32_t gpu_index) const {
  auto it = pool_of_gpu_.find(gpu_index);
  return it == pool_of_gpu_.end() ? options_.rules.default_pool : it->second;
}

}  // namespace gpuslice::daemon
