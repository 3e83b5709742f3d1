#include "core/queue.h"

#include <algorithm>

namespace gpuslice::core {
namespace {

constexpr int64_t kNever = INT64_MAX;

int64_t EndOrNever(const RunningJob& r) { return r.ends_at_ms.value_or(kNever); }

// The head's reservation: the smallest end time T such that, with every
// running job ending by T released, the head fits. kNever when that needs a
// job with no known end (or never happens). Only jobs with a known end can
// give a finite answer, so only they are searched; fitting is monotone in the
// set released, so a binary search over them (sorted by end) finds it.
int64_t ReservationTime(const CapacityModel& model, const std::vector<RunningJob>& all,
                        uint64_t head) {
  std::vector<RunningJob> running;
  for (const RunningJob& r : all) {
    if (r.ends_at_ms) running.push_back(r);
  }
  std::sort(running.begin(), running.end(), [](const RunningJob& a, const RunningJob& b) {
    return *a.ends_at_ms < *b.ends_at_ms;
  });
  auto fits_after = [&](size_t released) {
    auto probe = model.Clone();
    for (size_t i = 0; i < released; ++i) probe->Release(running[i].id);
    return probe->TryPlace(head) == FitResult::kPlaced;
  };
  size_t lo = 1, hi = running.size();
  if (running.empty() || !fits_after(hi)) return kNever;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fits_after(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return *running[lo - 1].ends_at_ms;
}

}  // namespace

bool QueueBefore(const QueuedJob& a, const QueuedJob& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
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
    std::optional<int64_t> end;
    if (job.max_runtime) end = now_ms + job.max_runtime->count();
    started.push_back({job.id, end});
    if (options.started) options.started(job.id);
  };

  for (const QueuedJob& job : queued) {
    if (options.held && options.held(job.id)) {
      wait(job, WaitReason::kHeld);
      continue;
    }
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
      head = &job;
      plan.head = job.id;
      std::vector<RunningJob> all = running;
      all.insert(all.end(), started.begin(), started.end());
      reservation = ReservationTime(model, all, job.id);
      if (reservation != kNever) plan.head_reservation_ms = reservation;
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
    if (!options.backfill || known_not_to_fit(job.shape)) {
      wait(job, WaitReason::kBehindHead);
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
      wait(job, WaitReason::kBehindHead);
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
