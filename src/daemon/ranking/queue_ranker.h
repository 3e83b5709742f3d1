#pragma once

// The queue's order and the head's reservation (docs/DAEMON.md, "Placement
// and the queue"): fair share and aging rank the jobs within a priority,
// run-time estimates tell the planner when running jobs are expected to
// end, fractions are packed while a job of whole GPUs waits, and the last
// plan's reservation of the head is kept for its view. The decisions are
// the core's (core/schedule/fair_share.h, runtime_estimate.h); this feeds
// them the daemon's state.
//
// It owns the fair-share book (decayed use, charges, factors), the names of
// the jobs' primary groups, and the last plan's reservation. It reads the
// job table and the queue, and sorts the queue, through Hooks; the ledger's
// history comes to Seed as a callback. One thread, as Service.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/jobs/usage.h"
#include "core/schedule/fair_share.h"
#include "core/schedule/queue.h"
#include "core/schedule/runtime_estimate.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/fairshare/fair_share_book.h"

namespace gpuslice::daemon {

class QueueRanker {
 public:
  // What it asks of the daemon.
  struct Hooks {
    // Job `id` of the job table (every queued and live job is there).
    std::function<const core::Job&(uint64_t id)> job;
    // Calls `visit` with each live job (running or suspended).
    std::function<void(const std::function<void(const core::Job&)>& visit)> for_each_live;
    // Whether job `id` is live (running or suspended).
    std::function<bool(uint64_t id)> live;
    // The queue, sorted by core::QueueBefore; Rerank sets the ranks and
    // sorts it again.
    std::function<std::vector<core::QueuedJob>&()> queue;
    // When suspended job `id`'s processes asked to resume it (0: they did
    // not, or it is not suspended).
    std::function<int64_t(uint64_t id)> resume_asked_ms;
    // Whether queued job `id` waits for its dependencies (held out of the
    // plan, so it packs nothing).
    std::function<bool(uint64_t id)> waits_for_dependencies;
    // The memory of the GPU of inventory index `index` (0 when unknown).
    std::function<uint64_t(uint32_t index)> gpu_memory;
    // The default pool ("" while the capacity is not known).
    std::function<std::string()> default_pool;
    // Packs fractions (true) or spreads them (placement's capacity).
    std::function<void(bool pack)> pack_fractions;
  };

  // The ledger's history from `since_ms` to `now_ms`: the rows and weights
  // of `gpuslice usage` (docs/ACCOUNTING.md).
  using History =
      std::function<core::Result<std::vector<core::UsageRecord>>(int64_t since_ms, int64_t now_ms)>;

  QueueRanker(core::FairShareConfig fair_share, core::RuntimeEstimates estimates, Clock& clock,
              Hooks hooks)
      : fair_share_(std::move(fair_share)),
        estimates_(std::move(estimates)),
        clock_(clock),
        hooks_(std::move(hooks)) {}

  // Fair share: opens the book at start with the ledger's `history` (null:
  // no ledger, nothing to read) charged to its users and groups; the live
  // jobs are charged from now on. A history that cannot be read is logged
  // and the book starts without it.
  void Seed(const History& history);
  // The running jobs' use charged since their last charge, then the queue's
  // ranks (fair share + age) recomputed and the queue sorted again by them:
  // at most once a second (FairShareBook::kRankEveryMs), at once with
  // `force`.
  void Rerank(bool force);
  // The rank of `job` as of `now_ms`, from the factors of the last ranking.
  double RankOf(const core::Job& job, int64_t now_ms) const;
  // The rank of `job` entering the queue now: from the factors and at the
  // time of the last ranking, its group named for the next one.
  double RankOfArrival(const core::Job& job);
  // The fair-share factor a live job's view shows: unset while fair share
  // is off or nothing has been ranked.
  std::optional<double> ShownFactorOf(const core::Job& job) const;
  // The job's primary group by name (its gid when the system has none);
  // looked up once per gid.
  const std::string& GroupNameOf(uint32_t gid);

  // Run-time estimates: what a job without --max-runtime is expected to
  // run (none with one, or when every level that applies is off), and a
  // running job as the planner sees it (deadline, expected end).
  std::optional<std::chrono::milliseconds> EstimateOf(const core::Job& job) const;
  core::RunningJob PlanEntryOf(const core::Job& job, int64_t now_ms) const;

  // Fractions are packed while a job of whole GPUs waits in the queue (not
  // held for its dependencies), spread otherwise.
  void UpdatePacking();

  // The last plan's reservation of its head: when it is expected to start,
  // and whether run-time estimates (rather than maximum run times alone)
  // gave it.
  void SetReservation(std::optional<int64_t> expected_start_ms, bool estimated) {
    head_expected_start_ms_ = expected_start_ms;
    head_estimated_ = estimated;
  }
  void ClearReservation() { head_expected_start_ms_.reset(); }
  const std::optional<int64_t>& head_expected_start_ms() const { return head_expected_start_ms_; }
  bool head_estimated() const { return head_estimated_; }

 private:
  void ChargeFairShare(int64_t now_ms);

  FairShareBook fair_share_;
  const core::RuntimeEstimates estimates_;
  Clock& clock_;
  Hooks hooks_;
  std::unordered_map<uint32_t, std::string> group_names_;
  std::optional<int64_t> head_expected_start_ms_;  // The last plan's reservation.
  bool head_estimated_ = false;
};

}  // namespace gpuslice::daemon
