// The queue's order and the head's reservation (queue_ranker.h).

#include "daemon/ranking/queue_ranker.h"

#include <grp.h>

#include <algorithm>
#include <set>

#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

// How far back the ledger's history is read at start: past ten half-lives
// a GPU-second weighs less than a thousandth.
constexpr int kHalfLivesRead = 10;

}  // namespace

const std::string& QueueRanker::GroupNameOf(uint32_t gid) {
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

void QueueRanker::Seed(const History& history) {
  const core::FairShareConfig& config = fair_share_.config();
  fair_share_.Open();
  if (!history) return;
  const int64_t now = clock_.NowMs();
  const int64_t since = now - kHalfLivesRead * config.half_life_ms;
  auto records = history(since, now);
  if (!records.ok()) {
    LogWarn("fair share starts without the ledger's history: " + records.status().message());
    return;
  }
  for (const core::UsageRecord& r : *records) {
    if (r.suspension_only) continue;
    const double w = core::GpuWeight(r);
    const int64_t from = std::max(r.allocated_ms, since);
    const int64_t to = r.released_ms == 0 ? now : std::min(r.released_ms, now);
    fair_share_.Charge(r.user, GroupNameOf(r.gid), w, from, to);
  }
  // Running jobs are charged from now on.
  hooks_.for_each_live([&](const Job& job) { fair_share_.MarkCharged(job.id, now); });
}

void QueueRanker::ChargeFairShare(int64_t now) {
  if (!fair_share_.open()) return;
  hooks_.for_each_live([&](const Job& job) {
    const int64_t from =
        std::max(fair_share_.AdvanceCharge(job.id, job.started_ms > 0 ? job.started_ms : now, now),
                 job.started_ms);
    if (job.state != JobState::kRunning || job.allocation.empty() || now <= from) return;
    const uint64_t gpu_memory = hooks_.gpu_memory(job.allocation.gpu_indices[0]);
    const double w = core::HeldGpuWeight(job.request, job.allocation, gpu_memory);
    fair_share_.Charge(job.user, GroupNameOf(job.gid), w, from, now);
  });
  // Jobs no longer live: charged up to their last tick (within a second).
  fair_share_.ForgetEnded(hooks_.live);
}

double QueueRanker::RankOf(const Job& job, int64_t now) const {
  const core::FairShareConfig& config = fair_share_.config();
  auto group = group_names_.find(job.gid);
  const double fs =
      fair_share_.FactorOf(job.user, group == group_names_.end() ? "" : group->second);
  // Its age counts from when it entered the queue: a suspended job waiting
  // to resume on demand entered it when its processes asked, not when it
  // was submitted (that would put it before everyone who waited since).
  int64_t queued_since = job.submitted_ms;
  if (job.state == JobState::kSuspended) {
    if (const int64_t asked = hooks_.resume_asked_ms(job.id); asked != 0) queued_since = asked;
  }
  return core::QueueRank(fs, now - queued_since, config);
}

double QueueRanker::RankOfArrival(const Job& job) {
  // Its rank from the factors and at the time of the last ranking (the
  // queue is ranked again within a second), as every other queued job's
  // is: ranked at a later instant, a job that waited a millisecond would
  // outrank one ranked with no wait at the last ranking, and a job
  // submitted just after the head would pass it. Its group named now, for
  // that ranking.
  (void)GroupNameOf(job.gid);
  return RankOf(job, fair_share_.ranked_ms());
}

std::optional<double> QueueRanker::ShownFactorOf(const Job& job) const {
  if (!fair_share_.config().enabled || !fair_share_.ranked()) return std::nullopt;
  auto group = group_names_.find(job.gid);
  return fair_share_.FactorOf(job.user, group == group_names_.end() ? "" : group->second);
}

void QueueRanker::Rerank(bool force) {
  const int64_t now = clock_.NowMs();
  if (!fair_share_.RankDue(now, force)) return;
  ChargeFairShare(now);
  std::vector<core::QueuedJob>& queue = hooks_.queue();
  std::set<core::Principal> active;
  for (const core::QueuedJob& q : queue) {
    const Job& job = hooks_.job(q.id);
    active.insert({core::PrincipalKind::kUser, job.user});
    active.insert({core::PrincipalKind::kGroup, GroupNameOf(job.gid)});
  }
  hooks_.for_each_live([&](const Job& job) {
    active.insert({core::PrincipalKind::kUser, job.user});
    active.insert({core::PrincipalKind::kGroup, GroupNameOf(job.gid)});
  });
  fair_share_.Rank(active, now);
  if (queue.empty()) return;
  for (core::QueuedJob& q : queue) q.rank = RankOf(hooks_.job(q.id), now);
  std::stable_sort(queue.begin(), queue.end(), core::QueueBefore);
}

std::optional<std::chrono::milliseconds> QueueRanker::EstimateOf(const Job& job) const {
  if (job.request.max_runtime) return std::nullopt;
  const std::string pool = job.request.pool.empty() ? hooks_.default_pool() : job.request.pool;
  return estimates_.For(pool, job.request.priority);
}

core::RunningJob QueueRanker::PlanEntryOf(const Job& job, int64_t now) const {
  core::RunningJob r{job.id, job.DeadlineMs(), std::nullopt};
  if (!r.ends_at_ms) {
    if (auto estimate = EstimateOf(job)) {
      const int64_t ran = now - job.started_ms - job.suspended_total_ms;
      r.expected_end_ms = core::ExpectedEndMs(now, ran, estimate->count());
    }
  }
  return r;
}

void QueueRanker::UpdatePacking() {
  bool whole_waits = false;
  for (const core::QueuedJob& q : hooks_.queue()) {
    if (hooks_.waits_for_dependencies(q.id)) continue;  // Held for its dependencies.
    if (hooks_.job(q.id).request.kind == core::RequestKind::kWholeGpus) {
      whole_waits = true;
      break;
    }
  }
  hooks_.pack_fractions(whole_waits);
}

}  // namespace gpuslice::daemon
