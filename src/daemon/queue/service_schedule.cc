// Service: scheduling a team can trust (docs/DAEMON.md, "Placement
// and the queue"). Fair share and aging in the queue order, run-time
// estimates for the head's reservation, packing fractions while whole GPUs
// wait, and the idle-reclaim exemptions. The decisions are the core's
// (fair_share.h, runtime_estimate.h); this file feeds them the daemon's
// state. Automatic moves and the reclaim of borrowed capacity for the head
// are makeroom/'s (defragmenter.h, preemptions.h).

#include <grp.h>

#include <algorithm>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"
#include "daemon/api/usage_api.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

// How far back the ledger's history is read at start: past ten half-lives
// a GPU-second weighs less than a thousandth.
constexpr int kHalfLivesRead = 10;

}  // namespace

const std::string& Service::GroupNameOf(uint32_t gid) {
  auto it = group_names_.find(gid);
  if (it != group_names_.end()) return it->second;
  std::string name = std::to_string(gid);
  struct group grp;
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrgid_r(gid, &grp, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    name = found->gr_name;
  }
  return group_names_.emplace(gid, std::move(name)).first->second;
}

void Service::SeedFairShare() {
  const core::FairShareConfig& config = fair_share_.config();
  fair_share_.Open();
  if (!ledger_) return;
  const int64_t now = clock_.NowMs();
  const int64_t since = now - kHalfLivesRead * config.half_life_ms;
  auto rows = ledger_->UsageRows(since, now);
  if (!rows.ok()) {
    LogWarn("fair share starts without the ledger's history: " + rows.status().message());
    return;
  }
  auto mig = MigSlices(*ledger_, *rows);
  if (!mig.ok()) {
    LogWarn("fair share starts without the ledger's history: " + mig.status().message());
    return;
  }
  // The same rows and weights as `gpuslice usage` (docs/ACCOUNTING.md).
  for (const core::UsageRecord& r : UsageRecords(*rows, inventory_, *mig)) {
    if (r.suspension_only) continue;
    const double w = core::GpuWeight(r);
    const int64_t from = std::max(r.allocated_ms, since);
    const int64_t to = r.released_ms == 0 ? now : std::min(r.released_ms, now);
    fair_share_.Charge(r.user, GroupNameOf(r.gid), w, from, to);
  }
  // Running jobs are charged from now on.
  for (const auto& [id, l] : live_) fair_share_.MarkCharged(id, now);
}

void Service::ChargeFairShare(int64_t now) {
  if (!fair_share_.open()) return;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    const int64_t from =
        std::max(fair_share_.AdvanceCharge(id, job.started_ms > 0 ? job.started_ms : now, now),
                 job.started_ms);
    if (job.state != JobState::kRunning || job.allocation.empty() || now <= from) continue;
    uint64_t gpu_memory = 0;
    for (const GpuInfo& g : inventory_.gpus) {
      if (g.index == job.allocation.gpu_indices[0]) gpu_memory = g.memory_total;
    }
    const double w = core::HeldGpuWeight(job.request, job.allocation, gpu_memory);
    fair_share_.Charge(job.user, GroupNameOf(job.gid), w, from, now);
  }
  // Jobs no longer live: charged up to their last tick (within a second).
  fair_share_.ForgetEnded([&](uint64_t id) { return live_.count(id) > 0; });
}

double Service::RankOf(const Job& job, int64_t now) const {
  const core::FairShareConfig& config = fair_share_.config();
  auto group = group_names_.find(job.gid);
  const double fs =
      fair_share_.FactorOf(job.user, group == group_names_.end() ? "" : group->second);
  // Its age counts from when it entered the queue: a suspended job waiting
  // to resume on demand entered it when its processes asked, not when it
  // was submitted (that would put it before everyone who waited since).
  int64_t queued_since = job.submitted_ms;
  if (job.state == JobState::kSuspended) {
    if (const int64_t asked = suspender_.ResumeAskedMs(job.id); asked != 0) queued_since = asked;
  }
  return core::QueueRank(fs, now - queued_since, config);
}

void Service::Rerank(bool force) {
  const int64_t now = clock_.NowMs();
  if (!fair_share_.RankDue(now, force)) return;
  ChargeFairShare(now);
  std::set<core::Principal> active;
  for (const core::QueuedJob& q : queue_) {
    const Job& job = jobs_[q.id];
    active.insert({core::PrincipalKind::kUser, job.user});
    active.insert({core::PrincipalKind::kGroup, GroupNameOf(job.gid)});
  }
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    active.insert({core::PrincipalKind::kUser, job.user});
    active.insert({core::PrincipalKind::kGroup, GroupNameOf(job.gid)});
  }
  fair_share_.Rank(active, now);
  if (queue_.empty()) return;
  for (core::QueuedJob& q : queue_) q.rank = RankOf(jobs_[q.id], now);
  std::stable_sort(queue_.begin(), queue_.end(), core::QueueBefore);
}

std::optional<std::chrono::milliseconds> Service::EstimateOf(const Job& job) const {
  if (job.request.max_runtime) return std::nullopt;
  const std::string& pool =
      job.request.pool.empty() && capacity_ ? capacity_->pools().default_pool() : job.request.pool;
  return options_.rules.runtime_estimates.For(pool, job.request.priority);
}

core::RunningJob Service::PlanEntryOf(const Job& job, int64_t now) const {
  core::RunningJob r{job.id, job.DeadlineMs(), std::nullopt};
  if (!r.ends_at_ms) {
    if (auto estimate = EstimateOf(job)) {
      const int64_t ran = now - job.started_ms - job.suspended_total_ms;
      r.expected_end_ms = core::ExpectedEndMs(now, ran, estimate->count());
    }
  }
  return r;
}

void Service::UpdatePacking() {
  if (!capacity_) return;
  bool whole_waits = false;
  for (const core::QueuedJob& q : queue_) {
    if (dependencies_.Waits(q.id)) continue;  // Held for its dependencies.
    if (jobs_[q.id].request.kind == core::RequestKind::kWholeGpus) {
      whole_waits = true;
      break;
    }
  }
  capacity_->set_pack_fractions(whole_waits);
}

}  // namespace gpuslice::daemon
