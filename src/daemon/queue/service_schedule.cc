// Service: scheduling a team can trust (docs/DAEMON.md, "Placement
// and the queue"). Fair share and aging in the queue order, run-time
// estimates for the head's reservation, packing fractions while whole GPUs
// wait, automatic defragmentation (moves the daemon makes), over-quota
// borrowing and its reclaim, and the idle-reclaim exemptions. The decisions
// are the core's (fair_share.h, runtime_estimate.h, defrag.h, quota.h,
// preemption.h); this file feeds them the daemon's state and acts.

#include <grp.h>
#include <signal.h>

#include <algorithm>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"
#include "daemon/api/usage_api.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

namespace {

constexpr int64_t kRerankMs = FairShareBook::kRankEveryMs;
constexpr int64_t kHourMs = 3600 * 1000;
// A job whose automatic move failed is not planned again for this long.
constexpr int64_t kDefragRetryMs = kHourMs;
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
    if (auto l = live_.find(job.id); l != live_.end() && l->second.resume_asked_ms != 0) {
      queued_since = l->second.resume_asked_ms;
    }
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
      job.request.pool.empty() && capacity_ ? capacity_->default_pool() : job.request.pool;
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

bool Service::Movable(const Job& job, int64_t now) const {
  if (job.state != JobState::kRunning || job.mode == core::JobMode::kExternal) return false;
  if (job.allocation.gpu_uuids.size() != 1 || job.request.kind == core::RequestKind::kMig) {
    return false;
  }
  if (!CanMove(job).ok()) return false;  // A container, an elastic job.
  auto l = live_.find(job.id);
  if (l == live_.end() || l->second.checkpoint || l->second.ending || watchdog_.Stopped(job.id)) {
    return false;
  }
  // A job with no CUDA process cannot be suspended (docs/SUSPEND.md): the
  // processes the shim registered in its slice are its CUDA processes.
  auto pids = regions_.Pids(job.region_path);
  if (!pids.ok() || pids->empty()) return false;
  if (auto r = defrag_refused_until_.find(job.id);
      r != defrag_refused_until_.end() && now < r->second) {
    return false;
  }
  auto moved = defrag_moves_at_.find(job.id);
  if (moved != defrag_moves_at_.end()) {
    const auto recent = std::count_if(moved->second.begin(), moved->second.end(),
                                      [&](int64_t at) { return now - at < kHourMs; });
    if (recent >= static_cast<int64_t>(options_.rules.defragment_moves_per_hour)) return false;
  }
  return true;
}

bool Service::Defragment(uint64_t head_id) {
  const DefragMode mode = options_.rules.defragment;
  const int64_t now = clock_.NowMs();
  // Moves in flight are done once their job's worker is.
  std::erase_if(defrag_moving_, [&](uint64_t id) {
    auto l = live_.find(id);
    return l == live_.end() || !l->second.checkpoint;
  });
  for (auto& [id, times] : defrag_moves_at_) {
    while (!times.empty() && now - times.front() >= kHourMs) times.pop_front();
  }
  std::erase_if(defrag_moves_at_, [](const auto& e) { return e.second.empty(); });
  if (mode == DefragMode::kOff || head_id == 0 || !capacity_ || !defrag_moving_.empty()) {
    return false;
  }
  if (!options_.checkpointer || !options_.checkpointer->Available().ok()) return false;
  // Planned at most once a second for the same head: a tick is 100 ms.
  if (head_id == defrag_checked_head_ && now - defrag_checked_ms_ < kRerankMs) return false;
  defrag_checked_head_ = head_id;
  defrag_checked_ms_ = now;
  defrag_hint_.clear();  // Only the head's is shown, and it is planned again now.
  const std::vector<NodeCapacity::MoveHint> moves = capacity_->PlanDefragFor(
      head_id, options_.rules.defragment_max_moves,
      [&](uint64_t id) { return jobs_.count(id) && Movable(jobs_.at(id), now); });
  if (moves.empty()) return false;
  const Job& head = jobs_[head_id];
  if (mode == DefragMode::kSuggest) {
    std::vector<std::string> steps;
    for (const auto& m : moves) {
      steps.push_back("gpuslice move " + std::to_string(m.job_id) + " --gpu " + m.to_uuid);
    }
    defrag_hint_[head_id] = std::string(moves.size() == 1 ? "; a move would let it start: "
                                                          : "; moves would let it start: ") +
                            core::Join(steps, ", then ");
    return false;
  }
  const std::string why = "to let job " + std::to_string(head_id) + " (" + head.request.Describe() +
                          ", first in line) start";
  std::vector<std::string> started;
  for (const auto& m : moves) {
    Job& job = jobs_[m.job_id];
    SuspendCause cause;
    cause.by = "the daemon " + why;
    cause.move_to = m.to_uuid;
    cause.defrag_for = head_id;
    if (Status s = StartSuspend(job, live_[m.job_id], cause); !s.ok()) {
      defrag_refused_until_[m.job_id] = now + kDefragRetryMs;
      RecordEvent("move_failed", m.job_id, job.user, "automatic move " + why + ": " + s.message());
      continue;
    }
    defrag_moving_.insert(m.job_id);
    defrag_moves_at_[m.job_id].push_back(now);
    started.push_back("job " + std::to_string(m.job_id) + " to " + m.to_uuid);
  }
  if (started.empty()) return false;
  RecordEvent("defragmenting", head_id, head.user, "moving " + core::Join(started, ", "));
  LogInfo("defragmenting for job " + std::to_string(head_id) + ": moving " +
          core::Join(started, ", "));
  return true;
}

bool Service::Borrowable(const Job& job) const {
  if (job.restartable) return true;
  // Suspendable: the daemon runs its processes (not a Slurm step's or a
  // pod's), outside a container, and the driver can checkpoint.
  return options_.checkpointer && options_.checkpointer->Available().ok() &&
         job.mode != core::JobMode::kExternal && job.image.empty();
}

void Service::ReclaimBorrowed(uint64_t head_id) {
  if (!quotas_.borrowing() || quotas_.empty() || head_id == 0) return;
  if (reclaiming_.count(head_id)) return;  // Its borrowers are still leaving.
  reclaim_note_.erase(head_id);
  const Job& head = jobs_[head_id];
  // Only a job within a group's guarantee reclaims: some group quota of its
  // owner applies (and, the head not being a borrower, has room for it).
  if (!quotas_.Guaranteed(head)) return;
  std::vector<core::PreemptCandidate> candidates;
  for (uint64_t id : quotas_.borrowers()) {
    auto l = live_.find(id);
    if (l == live_.end() || l->second.ending || l->second.checkpoint || IsSuspended(id)) continue;
    const Job& job = jobs_[id];
    if (job.mode == core::JobMode::kExternal) continue;
    core::PreemptCandidate c;
    c.id = id;
    c.priority = job.request.priority;
    c.started_ms = job.started_ms;
    c.restartable = job.restartable;
    c.gpu_weight = core::HeldGpuWeight(job.request, job.allocation, quotas_.whole_gpu_bytes());
    candidates.push_back(c);
  }
  if (candidates.empty()) return;
  auto plan = core::ChooseVictims(head_id, candidates, clock_.NowMs(), *capacity_);
  if (!plan.ok()) {
    reclaim_note_[head_id] = plan.status().message();
    return;
  }
  std::vector<std::string> ids;
  for (uint64_t v : plan->victims) {
    Job& job = jobs_[v];
    Live& l = live_[v];
    ids.push_back(std::to_string(v));
    const std::string by =
        "reclaim for job " + std::to_string(head_id) + " (within its group's quota)";
    if (options_.checkpointer && job.image.empty()) {
      SuspendCause cause;
      cause.by = by;
      cause.reclaimed_for = head_id;
      Status s = StartSuspend(job, l, cause);
      if (s.ok()) {
        RecordEvent("reclaimed", v, job.user,
                    "over its group's quota: " + by + ": suspending; resumed when there is room");
        continue;
      }
      RecordEvent("suspend_failed", v, job.user,
                  by + ": " + s.message() + (job.restartable ? "; requeued" : "; it runs on"));
    }
    if (job.restartable) RequeueForReclaim(job, l, head_id);
  }
  reclaiming_[head_id] = plan->victims;
  RecordEvent("reclaiming", head_id, head.user,
              "taking back its group's quota from borrowing job(s) " + core::Join(ids, ", "));
}

void Service::RequeueForReclaim(Job& job, Live& l, uint64_t head_id) {
  l.ending = JobState::kQueued;
  l.ending_reason = "over its group's quota: capacity reclaimed for job " +
                    std::to_string(head_id) + " (within its group's quota)";
  l.kill_at_ms = clock_.NowMs() + options_.rules.preemption_grace_ms;
  if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGTERM);
  RecordEvent(
      "reclaimed", job.id, job.user,
      l.ending_reason + "; requeued: SIGTERM, SIGKILL after " +
          core::FormatDuration(std::chrono::milliseconds(options_.rules.preemption_grace_ms)));
}

}  // namespace gpuslice::daemon
