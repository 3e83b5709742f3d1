#include "core/schedule/queue.h"

#include <algorithm>

namespace gpuslice::core {
namespace {

constexpr int64_t kNever = INT64_MAX;

// When a running job is expected to end: its deadline, else its estimate,
// else never.
int64_t EndOrNever(const RunningJob& r) {
  if (r.ends_at_ms) return *r.ends_at_ms;
  return r.expected_end_ms.value_or(kNever);
}

struct Reservation {
  int64_t at = kNever;
  bool estimated = false;  // A job released by then ends by an estimate.
};

// The head's reservation: the smallest expected end T such that, with every
// running job expected to end by T released, the head fits. kNever when that
// needs a job with no expected end (or never happens). Only jobs with an
// expected end can give a finite answer, so only they are searched; fitting
// is monotone in the set released, so a binary search over them (sorted by
// end) finds it.
Reservation ReservationTime(const CapacityModel& model, const std::vector<RunningJob>& all,
                            uint64_t head) {
  std::vector<RunningJob> running;
  for (const RunningJob& r : all) {
    if (EndOrNever(r) != kNever) running.push_back(r);
  }
  std::sort(running.begin(), running.end(),
            [](const RunningJob& a, const RunningJob& b) { return EndOrNever(a) < EndOrNever(b); });
  auto fits_after = [&](size_t released) {
    auto probe = model.Clone();
    for (size_t i = 0; i < released; ++i) probe->Release(running[i].id);
    return probe->TryPlace(head) == FitResult::kPlaced;
  };
  size_t lo = 1, hi = running.size();
  if (running.empty() || !fits_after(hi)) return {};
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fits_after(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  Reservation r{EndOrNever(running[lo - 1]), false};
  for (size_t i = 0; i < lo; ++i) r.estimated = r.estimated || !running[i].ends_at_ms;
  return r;
}

}  // namespace

bool QueueBefore(const QueuedJob& a, const QueuedJob& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.rank != b.rank) return a.rank > b.rank;
  return a.seq < b.seq;
}

std::string_view WaitReasonName(WaitReason reason) {
  switch (reason) {
    case WaitReason::kHead: return "head";
    case WaitReason::kBehindHead: return "behind_head";
    case WaitReason::kWouldDelayHead: return "would_delay_head";
    case WaitReason::kNotConsidered: return "not_considered";
    case WaitReason::kNeverFits: return "never_fits";
    case WaitReason::kHeld: return "held";
    case WaitReason::kBorrowWait: return "borrow_wait";
  }
  return "head";
}

QueuePlan PlanQueue(const std::vector<QueuedJob>& queued, const std::vector<RunningJob>& running,
                    int64_t now_ms, CapacityModel& model, const PlanOptions& options) {
  QueuePlan plan;
  std::vector<RunningJob> started;  // Backfills of this pass.
  std::vector<QueueShape> failed;   // Minimal shapes that did not fit now.
  // For rule (b): the machine as it will be at the head's reservation time
  // (what ends by then released), plus the backfills of this pass that will
  // still run then. Built once per pass; each candidate probes a copy.
  std::unique_ptr<CapacityModel> at_reservation;
  const QueuedJob* head = nullptr;
  int64_t reservation = kNever;
  int checks_left = options.max_backfill_checks;

  auto wait = [&](const QueuedJob& j, WaitReason why) {
    plan.waiting.push_back({j.id, static_cast<int>(plan.waiting.size()) + 1, why});
  };
  auto remember_failure = [&](const QueueShape& s) {
    for (const QueueShape& f : failed) {
      if (s.Dominates(f)) return;
    }
    std::erase_if(failed, [&](const QueueShape& f) { return f.Dominates(s); });
    failed.push_back(s);
  };
  auto known_not_to_fit = [&](const QueueShape& s) {
    return std::any_of(failed.begin(), failed.end(),
                       [&](const QueueShape& f) { return s.Dominates(f); });
  };

  auto start = [&](const QueuedJob& job) {
    plan.start.push_back(job.id);
    RunningJob r{job.id, std::nullopt, std::nullopt};
    if (job.max_runtime) r.ends_at_ms = now_ms + job.max_runtime->count();
    if (job.estimate) r.expected_end_ms = now_ms + job.estimate->count();
    started.push_back(r);
    if (options.started) options.started(job.id);
  };

  for (const QueuedJob& job : queued) {
    if (options.held && options.held(job.id)) {
      wait(job, WaitReason::kHeld);
      continue;
    }
    const bool opportunistic = options.opportunistic && options.opportunistic(job.id);
    if (head == nullptr) {
      FitResult fit = (++plan.placements_tried, model.TryPlace(job.id));
      if (fit == FitResult::kPlaced) {
        start(job);
        continue;
      }
      if (fit == FitResult::kNever) {
        plan.never_fit.push_back(job.id);
        continue;
      }
      if (opportunistic) {
        // Borrowing is for idle capacity only: it reserves nothing.
        remember_failure(job.shape);
        wait(job, WaitReason::kBorrowWait);
        continue;
      }
      head = &job;
      plan.head = job.id;
      std::vector<RunningJob> all = running;
      all.insert(all.end(), started.begin(), started.end());
      if (options.use_estimates && !options.use_estimates(job.id)) {
        // Its reservation rests on deadlines alone, as without estimates.
        for (RunningJob& r : all) r.expected_end_ms.reset();
      }
      const Reservation found = ReservationTime(model, all, job.id);
      reservation = found.at;
      if (reservation != kNever) plan.head_reservation_ms = reservation;
      plan.reservation_estimated = found.estimated;
      at_reservation = model.Clone();
      for (const RunningJob& r : all) {
        // With an unknown (infinite) reservation everything running now
        // counts as ended by then: the head has to wait for it anyway.
        if (EndOrNever(r) <= reservation) at_reservation->Release(r.id);
      }
      remember_failure(job.shape);
      wait(job, WaitReason::kHead);
      continue;
    }
    const WaitReason behind = opportunistic ? WaitReason::kBorrowWait : WaitReason::kBehindHead;
    if (!options.backfill || known_not_to_fit(job.shape)) {
      wait(job, behind);
      continue;
    }
    // Rule (a) needs no probe: a job that ends before the reservation cannot
    // delay the head, whatever it takes.
    bool ends_in_time = job.max_runtime && reservation != kNever &&
                        now_ms + job.max_runtime->count() <= reservation;
    if (!ends_in_time && checks_left <= 0) {
      wait(job, WaitReason::kNotConsidered);
      continue;
    }
    // Place it for real; undo if it would delay the head. Most candidates do
    // not fit a busy machine, and this way they cost one placement, no copy.
    FitResult fit = (++plan.placements_tried, model.TryPlace(job.id));
    if (fit == FitResult::kNever) {
      plan.never_fit.push_back(job.id);
      continue;
    }
    if (fit == FitResult::kNotNow) {
      remember_failure(job.shape);
      wait(job, behind);
      continue;
    }
    if (!ends_in_time) {
      // Rule (b): the candidate still runs at the reservation; does the head
      // fit beside it and the earlier backfills?
      --checks_left;
      auto probe = at_reservation->Clone();
      bool head_fits = probe->Mirror(job.id, model) &&
                       probe->TryPlace(head->id) == FitResult::kPlaced;
      if (!head_fits) {
        model.Release(job.id);
        wait(job, WaitReason::kWouldDelayHead);
        continue;
      }
      at_reservation->Mirror(job.id, model);
    }
    start(job);
  }
  return plan;
}

}  // namespace gpuslice::core
