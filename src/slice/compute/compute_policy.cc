#include "slice/compute/compute_policy.h"

#include <algorithm>
#include <limits>

namespace gpuslice::slice {
namespace {

int64_t BucketCap(const SliceView& s, const PolicyParams& p) {
  return int64_t(s.share_milli * (p.burst_ns / 1000));
}

// A slice that comes back after being idle starts at the smallest virtual
// time of the slices already active, not below it: idle time is not saved
// up to be spent later (that would starve the others), and a
// work-conserving slice that ran alone on idle time owes nothing for it.
void Rejoin(std::span<SliceView> slices, size_t index) {
  uint64_t floor = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < slices.size(); ++i) {
    if (i != index && slices[i].Active() && slices[i].share_milli > 0) {
      floor = std::min(floor, slices[i].vtime);
    }
  }
  if (floor != std::numeric_limits<uint64_t>::max()) {
    slices[index].vtime = std::max(slices[index].vtime, floor);
  }
}

// Adds `elapsed` of wall time, `used` of GPU time in it, to a duty measured
// over kDutyWindowNs windows (`wall`, `gpu` accumulate the window). Rises at
// once (a slice whose work grows must not keep crowding the holder's kernels
// for long), falls by halves (one quiet window does not make a busy slice a
// co-runner).
// Returns whether a window was completed.
bool Measure(uint32_t& milli, uint64_t& wall, uint64_t& gpu, uint64_t elapsed, uint64_t used) {
  wall += elapsed;
  gpu += used;
  if (wall < kDutyWindowNs) return false;
  const uint32_t now = uint32_t(std::min<uint64_t>(gpu * 1000 / wall, 1000));
  milli = now >= milli ? now : (milli + now) / 2;
  wall = 0;
  gpu = 0;
  return true;
}

// Adds `elapsed` of wall time in which `s` could launch, the GPU time `used`
// in it and the GPU time the others reported in it (`others`), to its duty
// (SliceView::duty_milli): what it used of the time the others left it.
// Co-running beside a busy slice, a busy slice uses half the GPU: measured
// against the wall time, its duty fell by half and it went on co-running.
// A holder with nobody beside it (`alone`) also measures its host duty.
void MeasureDuty(SliceView& s, uint64_t now_ns, uint64_t elapsed, uint64_t used, uint64_t others,
                 bool alone) {
  Measure(s.duty_milli, s.duty_wall_ns, s.duty_gpu_ns, elapsed - std::min(others, elapsed), used);
  if (alone && Measure(s.host_duty_milli, s.host_wall_ns, s.host_gpu_ns, elapsed, used)) {
    s.host_measured_ns = now_ns;
  }
}

// Whether `s` may share the GPU with others at all: charged by the GPU time
// it reports (and trusted to), and measured to leave the GPU mostly idle, or
// where the caps hold the split (`capped`), gaps in it: as the holder
// (`host`) by a recent host duty, beside one by its duty.
bool CoRunnable(const SliceView& s, uint64_t now_ns, bool capped, bool host,
                const PolicyParams& p) {
  if (!s.live || s.share_milli == 0 || !s.ChargedByReports()) return false;
  if (!capped) return s.duty_milli < kCoRunMaxDutyMilli;
  if (!host) return s.duty_milli < kCoRunCappedMaxDutyMilli;
  return s.host_duty_milli < p.corun_capped_max_host_duty_milli && s.host_measured_ns != 0 &&
         now_ns - s.host_measured_ns <= kHostDutyMaxAgeNs;
}

// Whether the caps alone hold the split (kCoRunCappedMaxDutyMilli): every
// live slice with a share is hard, and the shares add up to at most 100%.
bool CapsHoldTheSplit(std::span<const SliceView> slices) {
  uint64_t shares = 0;
  for (const SliceView& s : slices) {
    if (!s.live || s.share_milli == 0) continue;
    if (s.mode != coord::kModeHard) return false;
    shares += s.share_milli;
  }
  return shares <= 1000;
}

}  // namespace

bool Eligible(const SliceView& s) {
  if (!s.live || !s.waiting || s.share_milli == 0) return false;
  // A hard slice waits until its bucket holds a useful turn (a turn much
  // shorter than a hand-over is mostly overhead), or half a small bucket.
  // Not one back from idle with a request (SliceView::woke_ns): any tokens
  // do, it runs its request and pays back what that takes beyond them.
  // A slice asking exactly its share hovers near an empty bucket (any
  // error in its charge drains it), and its requests waited for 4 ms of
  // tokens each, ~13 ms at 30%.
  const PolicyParams p;
  const int64_t threshold =
      s.woke_ns != 0 ? 1 : std::min<int64_t>(int64_t(p.min_turn_ns), BucketCap(s, p) / 2);
  return s.mode == coord::kModeWorkConserving || s.tokens_ns >= std::max<int64_t>(threshold, 1);
}

namespace {

// Whether `s` launches beside the holder now and may go on as the holder:
// it has work, and a hard one has tokens left.
bool ActiveCoRunner(const SliceView& s) {
  return s.corun && s.Active() && s.share_milli > 0 &&
         (s.mode == coord::kModeWorkConserving || s.tokens_ns > 0);
}

// PickNext, where a slice co-running beside the holder also counts (it does
// not wait for a turn: it launches already).
int32_t PickNextOrCoRunner(std::span<const SliceView> slices, bool corunners) {
  int32_t best = -1;
  for (size_t i = 0; i < slices.size(); ++i) {
    const SliceView& s = slices[i];
    if (!Eligible(s) && !(corunners && ActiveCoRunner(s))) continue;
    if (best < 0) {
      best = int32_t(i);
      continue;
    }
    const SliceView& b = slices[size_t(best)];
    if (s.priority > b.priority || (s.priority == b.priority && s.vtime < b.vtime)) {
      best = int32_t(i);
    }
  }
  return best;
}

// How full a slice's token bucket is, in 1/1000 of its depth (<= 0: it
// used its share or more over the bucket's window).
int64_t FillMilli(const SliceView& s, const PolicyParams& p) {
  const int64_t cap = BucketCap(s, p);
  return cap <= 0 ? 0 : s.tokens_ns * 1000 / cap;
}

// Hand-off on demand (PolicyParams::handoff): the slice that takes the GPU
// from the holder now, or -1. A claimant came back from idle and waits for
// a turn since (SliceView::woke_ns; a co-runner launches already), has a
// share of its own, the holder's priority (a higher one preempts anyway)
// and tokens (it is within its share: demand beyond it waits for turns as
// before), and its bucket is not much emptier than the holder's (it did
// not use more of its share lately than the holder of its own). The holder
// has had its quantum, and is busy rather than serving a request handed
// off to it (a slice without a share is taken from whenever). The earliest
// back goes first. Two busy slices never claim from each other, so their
// turns stay long (a hand-over costs a drain).
int32_t Claimant(std::span<const SliceView> slices, const TurnView& turn, uint64_t now_ns,
                 const PolicyParams& p) {
  if (!p.handoff || turn.holder < 0 || now_ns - turn.start_ns < p.quantum_ns) return -1;
  const SliceView& h = slices[size_t(turn.holder)];
  if (turn.handed_off && !h.shareless) return -1;
  // Only between slices charged by the GPU time they report: a holder
  // charged the wall time its work is in flight (an older shim, or one the
  // audit distrusts) would pay for its drain beside the claimant's work,
  // and slices of an older shim lost 3 pp of their shares to a slice that
  // claimed the GPU and said it was idle as soon as it held it.
  if (!h.shareless && !h.ChargedByReports()) return -1;
  const int64_t holder_fill = h.shareless ? INT64_MIN / 2 : FillMilli(h, p);
  int32_t best = -1;
  for (size_t i = 0; i < slices.size(); ++i) {
    const SliceView& s = slices[i];
    if (int32_t(i) == turn.holder || s.woke_ns == 0 || s.corun || s.shareless ||
        !s.ChargedByReports() || s.share_milli == 0 || s.priority != h.priority ||
        s.tokens_ns <= 0 || !Eligible(s) ||
        FillMilli(s, p) + int64_t(p.handoff_margin_milli) < holder_fill) {
      continue;
    }
    if (best < 0 || s.woke_ns < slices[size_t(best)].woke_ns) best = int32_t(i);
  }
  return best;
}

}  // namespace

int32_t PickNext(std::span<const SliceView> slices) { return PickNextOrCoRunner(slices, false); }

uint64_t TurnLength(const SliceView& s, const PolicyParams& p) {
  static_assert(sizeof(PolicyParams) > 0);
  if (s.mode == coord::kModeWorkConserving) return p.turn_ns;
  const int64_t tokens = std::max<int64_t>(s.tokens_ns, 0);
  return std::clamp<uint64_t>(uint64_t(tokens), p.min_turn_ns, p.turn_ns);
}

void Charge(SliceView& s, uint64_t ns) {
  s.tokens_ns -= int64_t(ns);
  s.charged_ns += ns;
  if (s.share_milli > 0) s.vtime += ns * 1000 / s.share_milli;
}

namespace {

Outcome AdvanceTurn(uint64_t now_ns, uint64_t last_ns, TurnView& turn, std::span<SliceView> slices,
                    const PolicyParams& p) {
  Outcome out;
  const uint64_t elapsed = now_ns > last_ns ? now_ns - last_ns : 0;
  const int32_t n = int32_t(slices.size());
  if (turn.holder >= n) turn = TurnView{};

  for (size_t i = 0; i < slices.size(); ++i) {
    SliceView& s = slices[i];
    if (!s.live) continue;
    // A newcomer starts with a full bucket: it may run a turn at once.
    if (s.charged_ns == 0 && s.tokens_ns == 0) s.tokens_ns = BucketCap(s, p);
    // Tokens accrue with wall time, up to the bucket's depth; overuse (a
    // negative balance) is paid back at the same rate.
    s.tokens_ns = std::min(s.tokens_ns + int64_t(s.share_milli * elapsed / 1000), BucketCap(s, p));
  }
  // Whether the holder keeps an eligible slice waiting (see
  // PolicyParams::charge_blocking_holder), and the GPU time the slices
  // charged by it reported since the last decision.
  bool others_wait = false;
  if (p.charge_blocking_holder && turn.state != coord::kTurnNone && turn.holder >= 0) {
    // A co-runner launches beside the holder: it does not wait for it.
    for (int32_t i = 0; i < n; ++i) {
      others_wait |= i != turn.holder && Eligible(slices[size_t(i)]) && !slices[size_t(i)].corun;
    }
  }
  const bool blocking = others_wait && turn.state == coord::kTurnOpen;
  // Whether anybody co-ran beside the holder in this interval (as the last
  // decision published it).
  bool anyone_corun = false;
  for (const SliceView& s : slices) anyone_corun |= s.live && s.corun;
  // A report first pays back what its slice was charged ahead of it (below):
  // only the rest is charged, and only the rest explains the GPU's time.
  uint64_t reported = 0;
  uint64_t reported_raw = 0;  // The same before the paying back: what the duties see.
  for (SliceView& s : slices) {
    s.reported_ns = 0;
    if (!s.live || !s.ChargedByReports()) continue;
    s.reported_ns = s.gpu_ns;
    reported_raw += s.gpu_ns;
    const uint64_t repaid = std::min(s.gpu_ns, s.prepaid_ns);
    s.prepaid_ns -= repaid;
    s.gpu_ns -= repaid;
    reported += s.gpu_ns;
  }
  // The arbiter cannot trust reported GPU time: the time a holder charged by
  // its reports keeps others waiting must be explained by somebody's
  // reports (its own or a drain of the others), within a slack for reports
  // that lag; the rest is charged to the holder (below). The sum runs over
  // decisions, so a report that comes in after the turn it belongs to still
  // explains it.
  int64_t unexplained = 0;
  if (p.charge_blocking_holder && others_wait && slices[size_t(turn.holder)].ChargedByReports()) {
    int64_t& u = turn.unexplained_ns;
    u = std::clamp<int64_t>(u + int64_t(elapsed) - int64_t(std::min<uint64_t>(reported, INT64_MAX)),
                            -kUnexplainedSlackNs, INT64_MAX / 2);
    if (u > kUnexplainedSlackNs) {
      unexplained = u - kUnexplainedSlackNs;
      u = kUnexplainedSlackNs;
    }
  } else if (p.charge_blocking_holder) {
    turn.unexplained_ns =
        std::clamp<int64_t>(turn.unexplained_ns - int64_t(std::min<uint64_t>(reported, INT64_MAX)),
                            -kUnexplainedSlackNs, kUnexplainedSlackNs);
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    SliceView& s = slices[i];
    if (!s.live) {
      s.was_inflight = false;
      continue;
    }
    // A slice is charged while it has work on the GPU: the holder during its
    // turn and its drain, and a slice still draining after it lost the GPU
    // (to a higher priority, or a drain timeout). Not while its turn is open
    // but nothing of it is queued yet (the hand-over: its launchers waking
    // up) or any more (between its steps): that time is nobody's GPU use,
    // and charging it made hard slices fall short of their shares.
    const bool holds = int32_t(i) == turn.holder && turn.state != coord::kTurnNone;
    uint64_t used = 0;  // GPU time it used in the interval, as it is charged.
    if (s.ChargedByReports()) {
      // What its processes say their work used, and, holding the GPU while
      // others wait, the time nobody's reports explain (above): a slice that
      // under-reports still pays for its turns, and an honest holder whose
      // turn began while the previous holder still drained (a preemption) does
      // not pay for the drain (that slice reports it, if late).
      // The unexplained time it pays now may be its own work that it reports
      // later (a 10 ms kernel counts when it completes): that much of its
      // later reports is not charged again (prepaid_ns). Without it a 30/70
      // pair of 10 ms kernels under the arbiter got 24/63% of the GPU.
      const uint64_t extra = holds ? uint64_t(unexplained) : 0;
      s.prepaid_ns = std::min(s.prepaid_ns + extra, kMaxPrepaidNs);
      const uint64_t ns = s.gpu_ns + extra;
      if (ns > 0) Charge(s, ns);
      // Its duty is what its work used, as reported: not the unexplained
      // time a holder pays while others wait (the wall time of its turn,
      // whatever it used), nor less the part of a report that pays that
      // back (a busy slice then measured 0.58).
      used = s.reported_ns;
    } else {
      const bool had_work = p.charge_from_previous_report ? s.was_inflight : s.inflight;
      if (had_work || (holds && (blocking || s.distrusted))) {
        Charge(s, elapsed);
        used = elapsed;
      }
    }
    if (holds || s.corun) {
      MeasureDuty(s, now_ns, elapsed, used, reported_raw - s.reported_ns, holds && !anyone_corun);
    }
    s.was_inflight = s.inflight;
    if (!s.Active() && !holds) {
      if (s.idle_since_ns == 0) s.idle_since_ns = now_ns;
      s.woke_ns = 0;
    } else if (s.idle_since_ns != 0 && !holds) {
      Rejoin(slices, i);
      s.idle_since_ns = 0;
      if (s.waiting && !s.corun) s.woke_ns = now_ns;
    }
    if (holds || s.corun) s.woke_ns = 0;
  }

  auto open = [&](int32_t next) {
    turn.holder = next;
    turn.state = next >= 0 ? coord::kTurnOpen : coord::kTurnNone;
    turn.start_ns = now_ns;
    turn.end_ns = next >= 0 ? now_ns + TurnLength(slices[size_t(next)], p) : now_ns;
    turn.handed_off = false;
    if (next >= 0) {
      slices[size_t(next)].idle_since_ns = 0;
      slices[size_t(next)].woke_ns = 0;
    }
    out.changed = true;
  };

  if (turn.holder >= 0) {
    SliceView& h = slices[size_t(turn.holder)];
    if (!h.live || h.share_milli == 0) {
      open(PickNext(slices));  // Holder died or left the coordination.
      return out;
    }
    if (turn.state == coord::kTurnOpen) {
      // Priority: a waiting slice of higher priority takes the GPU now.
      const int32_t next = PickNext(slices);
      if (next >= 0 && next != turn.holder && slices[size_t(next)].priority > h.priority) {
        open(next);
        out.preempted = true;
        return out;
      }
      if (const int32_t claimant = Claimant(slices, turn, now_ns, p); claimant >= 0) {
        open(claimant);
        turn.handed_off = true;
        out.preempted = true;
        return out;
      }
      if (h.Active()) {
        h.idle_since_ns = 0;
      } else if (h.idle_since_ns == 0) {
        h.idle_since_ns = now_ns;
      }
      // A turn handed off for a request ends soon after the request is
      // done: its holder comes back by claiming again, while each 0.5 ms of
      // grace after a request left the GPU idle (a busy neighbour lost 13
      // of its 66% beside a slice of 2 ms requests every 6.67 ms).
      const uint64_t grace = turn.handed_off ? p.handoff_idle_grace_ns : p.idle_grace_ns;
      const bool idle = !h.Active() && now_ns - h.idle_since_ns >= grace;
      const bool out_of_tokens = h.mode == coord::kModeHard && h.tokens_ns <= 0;
      if (now_ns >= turn.end_ns || idle || out_of_tokens) {
        // Alone and still entitled: extend instead of paying a hand-over.
        bool others = false;
        // Co-runners launch beside it already: no reason to hand over.
        for (int32_t i = 0; i < n; ++i) {
          others |= i != turn.holder && Eligible(slices[size_t(i)]) && !slices[size_t(i)].corun;
        }
        if (!others && !idle && !out_of_tokens) {
          turn.end_ns = now_ns + TurnLength(h, p);
          return out;
        }
        turn.state = coord::kTurnClosing;
        turn.end_ns = now_ns;
        out.changed = true;
      } else {
        return out;
      }
    }
    // Closing: hand over once the holder's work has drained (or was given
    // up on: a wedged process must not hold the GPU for the others). Not
    // before, even for slices charged by GPU time: the next slice's first
    // kernels would wait behind the drain, time-sliced with it, and a 30/70
    // pair of 10 ms kernels would get 16/64% of the GPU.
    // Except to a co-runner, at once: its work runs beside the drain
    // already. Sent back to wait for a turn of its own, it stopped launching
    // until a decision opened one (the GPU idled meanwhile), and a holder
    // whose tokens ran out beside it handed over 4x as often: a 30/70 pair
    // of 1 ms launch-then-synchronise loops took ~900 turns in 4 s and used
    // 0.52-0.94 of the GPU its split reaches without gpuslice.
    const int32_t next = PickNextOrCoRunner(slices, true);
    const bool heir = next >= 0 && next != turn.holder && slices[size_t(next)].corun;
    if (!heir && h.inflight && now_ns - turn.end_ns < p.drain_timeout_ns) return out;
    if (!h.Active()) h.idle_since_ns = now_ns;
    open(next);
    return out;
  }
  const int32_t next = PickNext(slices);
  if (next >= 0) open(next);
  return out;
}

// Who launches beside the holder (SliceView::corun): slices of its
// priority, each trusted and of low duty, while the duties of the holder and
// its co-runners add up to at most kCoRunMaxDutyMilli, or, under caps that
// hold the split, beside a holder of low recent host duty, every one whose
// duty is below kCoRunCappedMaxDutyMilli; those co-running
// already first (a co-runner is not dropped for a newcomer), then by
// virtual time. A hard slice co-runs while its tokens last (it starts with
// as many as a turn needs); one gone idle keeps it for the holder's idle
// grace, so a loop's CPU gaps between kernels do not cost it a decision.
// Higher priority stays exclusive: a co-runner never has a priority other
// than the holder's, and a slice that preempts the holder ends theirs.
void AssignCoRun(uint64_t now_ns, const TurnView& turn, std::span<SliceView> slices,
                 const PolicyParams& p, Outcome& out) {
  const int32_t h = turn.holder;
  const bool open = p.corun && h >= 0 && turn.state != coord::kTurnNone;
  // Two ways to launch beside the holder: within the duty budget (the duties
  // of the holder and its co-runners add up to at most kCoRunMaxDutyMilli),
  // or, under caps that hold the split, beside a holder of low recent host
  // duty (each slice's bucket is then its limit: no budget).
  const bool by_budget = open && CoRunnable(slices[size_t(h)], now_ns, false, /*host=*/true, p);
  const bool by_caps = open && CapsHoldTheSplit(slices) &&
                       CoRunnable(slices[size_t(h)], now_ns, true, /*host=*/true, p);
  int64_t budget = by_budget ? int64_t(kCoRunMaxDutyMilli) - slices[size_t(h)].duty_milli : 0;
  // How slice i may co-run now: 0 not, 1 within the budget, 2 under the caps.
  auto how = [&](size_t i) {
    const SliceView& s = slices[i];
    if (int32_t(i) == h || s.priority != slices[size_t(h)].priority) return 0;
    if (s.mode == coord::kModeHard && s.tokens_ns <= 0) return 0;
    if (!s.corun && !Eligible(s)) return 0;  // Starts only when it waits, with tokens.
    if (!s.Active() && (s.idle_since_ns == 0 || now_ns - s.idle_since_ns >= p.idle_grace_ns)) {
      return 0;
    }
    if (by_caps && CoRunnable(s, now_ns, true, /*host=*/false, p)) return 2;
    if (by_budget && CoRunnable(s, now_ns, false, /*host=*/false, p) &&
        int64_t(s.duty_milli) <= budget) {
      return 1;
    }
    return 0;
  };
  // Slices past the 64th never co-run (the board has 64, the file 32).
  const size_t count = std::min<size_t>(slices.size(), 64);
  uint64_t next = 0;
  auto in = [&](size_t i) { return ((next >> i) & 1) != 0; };
  if (by_budget || by_caps) {
    for (bool kept : {true, false}) {
      while (true) {
        int32_t best = -1;
        int best_how = 0;
        for (size_t i = 0; i < count; ++i) {
          if (in(i) || slices[i].corun != kept) continue;
          const int w = how(i);
          if (w == 0) continue;
          if (best < 0 || slices[i].vtime < slices[size_t(best)].vtime) {
            best = int32_t(i);
            best_how = w;
          }
        }
        if (best < 0) break;
        next |= uint64_t{1} << best;
        if (best_how == 1) budget -= slices[size_t(best)].duty_milli;
      }
    }
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const bool corun = i < count && in(i);
    if (slices[i].corun != corun) out.corun_changed = true;
    slices[i].corun = corun;
    if (corun) slices[i].woke_ns = 0;  // It launches: nothing to claim.
  }
}

}  // namespace

Outcome Advance(uint64_t now_ns, uint64_t last_ns, TurnView& turn, std::span<SliceView> slices,
                const PolicyParams& p) {
  Outcome out = AdvanceTurn(now_ns, last_ns, turn, slices, p);
  AssignCoRun(now_ns, turn, slices, p, out);
  return out;
}

}  // namespace gpuslice::slice
