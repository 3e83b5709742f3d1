#pragma once

// Models of slices on one GPU driven by the compute policy, shared by its
// tests (compute_policy_test.cc, compute_policy_corun_test.cc).

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "slice/compute/compute_policy.h"

namespace gpuslice::slice::policy_test {

inline constexpr uint64_t kMs = 1'000'000;

inline SliceView Slice(uint32_t milli, coord::Mode mode = coord::kModeHard, uint32_t priority = 1) {
  SliceView v;
  v.share_milli = milli;
  v.mode = mode;
  v.priority = priority;
  return v;
}

// A GPU that runs the slices' queued work in submission order
// (work a new holder queues waits behind the old holder's drain), with
// slices charged by the GPU time they report. A slice with `duty` 1 keeps
// `depth_ns` queued while its turn is open (free-running); one with a duty
// below 1 launches a kernel only once the previous one ended, so it keeps
// the GPU busy that fraction of its turn (launch, synchronise, CPU gap).
struct QueueModel {
  std::vector<SliceView> slices;
  std::vector<double> duty;
  TurnView turn;
  PolicyParams params;
  uint64_t now = 0;
  uint64_t step_ns = 20'000;
  uint64_t depth_ns = 1'000'000;
  bool report = true;  // Slices report GPU time (SliceView::gpu_time).
  // A new holder's first launch comes this long after its turn opened.
  uint64_t wake_ns = 100'000;
  std::vector<uint64_t> queued, gpu_ns, open_ns;
  std::deque<std::pair<size_t, uint64_t>> fifo;  // (slice, ns) in submission order.
  // Slice i under-reports: says it waits, reports no GPU time and nothing in
  // flight, and uses its turns as the others do.
  int liar = -1;
  // The liar's reports are disregarded (the daemon's audit caught it).
  bool distrust_liar = false;

  QueueModel(std::vector<SliceView> s, std::vector<double> d)
      : slices(std::move(s)),
        duty(std::move(d)),
        queued(slices.size(), 0),
        gpu_ns(slices.size(), 0),
        open_ns(slices.size(), 0) {
    for (auto& v : slices) v.live = true;
  }

  void Run(uint64_t duration_ns) {
    const uint64_t end = now + duration_ns;
    while (now < end) {
      const uint64_t last = now;
      now += step_ns;
      uint32_t running = 0;
      for (size_t i = 0; i < slices.size(); ++i) {
        if (!Runs(i)) continue;
        ++running;
        if (slices[i].corun && slices[i].priority != slices[size_t(turn.holder)].priority) {
          ++corun_across_priorities;
        }
        open_ns[i] += step_ns;
        // Its launcher wakes up (a co-runner launches at once).
        if (!slices[i].corun && now < turn.start_ns + wake_ns) continue;
        uint64_t add = 0;
        if (duty[i] >= 1) {
          add = depth_ns > queued[i] ? depth_ns - queued[i] : 0;
        } else if (queued[i] == 0) {
          add = uint64_t(double(step_ns) * duty[i]);
        }
        if (add > 0) {
          queued[i] += add;
          fifo.push_back({i, add});
        }
      }
      std::vector<uint64_t> ran(slices.size(), 0);
      for (uint64_t budget = step_ns; budget > 0 && !fifo.empty();) {
        auto& [who, ns] = fifo.front();
        const uint64_t take = std::min(budget, ns);
        ran[who] += take;
        queued[who] -= take;
        budget -= take;
        ns -= take;
        if (ns == 0) fifo.pop_front();
      }
      if (running > 1) corun_ns += step_ns;
      for (size_t i = 0; i < slices.size(); ++i) {
        gpu_ns[i] += ran[i];
        const bool open = Runs(i);
        SliceView& v = slices[i];
        v.distrusted = distrust_liar && int(i) == liar;
        v.gpu_time = report;
        v.gpu_ns = int(i) == liar ? 0 : ran[i];
        v.waiting = int(i) == liar || !open;
        // A synchronising loop's batch is in flight while it runs (the shim
        // covers its whole batch); a queue is in flight until it drained.
        v.inflight = int(i) != liar && (queued[i] > 0 || (open && duty[i] < 1));
      }
      const Outcome out = Advance(now, last, turn, slices, params);
      if (out.changed && turn.state == coord::kTurnOpen) ++turns;
    }
  }

  // Slice i may launch: it holds an open turn, or co-runs beside the holder
  // (SliceView::corun, as the last decision published it).
  bool Runs(size_t i) const {
    const bool open = int32_t(i) == turn.holder && turn.state == coord::kTurnOpen;
    return open || (slices[i].corun && turn.state != coord::kTurnNone);
  }

  double Share(size_t i, uint64_t total) const { return double(gpu_ns[i]) / double(total); }
  uint64_t turns = 0;
  uint64_t corun_ns = 0;                 // Time more than one slice could launch.
  uint64_t corun_across_priorities = 0;  // Steps a co-runner's priority was not the holder's.
};

// The arbiter's parameters (daemon/arbiter.h).
inline PolicyParams ArbiterParams(bool corun = true) {
  PolicyParams p;
  p.charge_blocking_holder = true;
  p.charge_from_previous_report = true;
  p.corun = corun;
  return p;
}

}  // namespace gpuslice::slice::policy_test
