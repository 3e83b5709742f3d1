#pragma once

// The scheduling policy of compute shares, as pure arithmetic over a
// snapshot of the slices on one GPU (no I/O, no clock, no shared memory), so
// that it can be tested exhaustively. coord.cc applies it to the
// coordination file under the decision lease. Design: docs/COMPUTE.md.
//
// The GPU is given to one slice at a time, in turns. A turn is open (the
// holder's processes launch), then closing (they stop launching and the
// work they queued drains), then the next slice gets the GPU. Every slice is
// charged the time from its turn's start until its work has drained, so
// the charge is GPU time measured by completion, not a guess from the launch
// rate. Overuse (a drain past the turn's end) is charged to the next period.
//
//   - order: higher priority first; within a priority, the smallest virtual
//     time (charged ns x 1000 / share), which divides the GPU in proportion
//     to the shares among the slices that want it;
//   - hard cap: a slice is eligible only while its token bucket (filled at
//     share x wall time, capped at share x burst) is positive, even alone;
//   - work-conserving: eligible whenever it has work; it may run on time
//     others leave idle, and loses the GPU at the end of the current turn
//     (<= turn_ns) when they come back;
//   - priority: a slice of higher priority that waits takes the GPU at once
//     (the holder stops launching at its next kernel boundary and drains).

#include <cstdint>
#include <span>

#include "slice/compute/coord_layout.h"

namespace gpuslice::slice {

struct PolicyParams {
  uint64_t turn_ns = 20'000'000;            // Longest turn.
  uint64_t min_turn_ns = 4'000'000;         // Shortest turn a hard slice is given.
  uint64_t burst_ns = 100'000'000;          // Token bucket depth, in wall time.
  uint64_t idle_grace_ns = 500'000;         // A holder idle this long gives the GPU up.
  uint64_t drain_timeout_ns = 250'000'000;  // Stop waiting for a drain after this.
  // The daemon's arbiter, which cannot trust what a slice reports: the holder
  // of an open turn is also charged the wall time during which another slice
  // waits for the GPU, whether it reports work in flight or not. A slice
  // that under-reports (or holds its turn idle) then pays for the time it
  // keeps others off the GPU, and gains no turns from lying. Off for the
  // cooperative file, where every slice runs our shim: there the time a
  // holder has nothing queued is charged to nobody (docs/COMPUTE.md).
  bool charge_blocking_holder = false;
  // Charge the time from one decision to the next to a slice that had work
  // in flight at the first of the two (what it reported then), rather than
  // at the second. The daemon's arbiter decides on its own clock and is rung
  // when a slice's work starts and when it drains, so a decision falls on
  // each edge: charged from the previous report, a slice pays from the
  // moment its work started to the moment it said it drained. Charged from
  // the current report, it also paid for the wake-up between the opening of
  // its turn and its first launch, and for the whole interval before a
  // drain: 230 us per turn, 4-6 pp of a lone 50% hard slice.
  bool charge_from_previous_report = false;
  // Slices of the holder's priority whose work leaves the GPU
  // mostly idle (launch-then-synchronise loops, small requests) launch
  // beside the holder (SliceView::corun) instead of waiting for a turn of
  // their own: exclusive turns left a pair of such loops at 0.58-0.70 of
  // what the same two processes reach without gpuslice, since only work of
  // two slices that overlaps can fill one loop's CPU gaps with the other's
  // kernels. Only slices charged by the GPU time they report co-run (two
  // slices in flight at once cannot both be charged the wall time). On for
  // the daemon's arbiter and for the cooperative file.
  bool corun = false;
  // The host duty below which a holder has co-runners under caps that hold
  // the split (kCoRunCappedMaxHostDutyMilli, where it is explained). The
  // daemon's arbiter keeps that limit: its slices are different users'
  // jobs, and above it a co-runner that hides its GPU time was hosted by
  // busy slices and took their GPU. The cooperative file raises it
  // (kCoRunOwnSlicesMaxHostDutyMilli): all its slices are one user's own
  // processes (the file is that user's, 0600), so a slice that hides its
  // GPU time only takes its own user's.
  uint32_t corun_capped_max_host_duty_milli = 900;
  // Hand-off on demand: a slice with a share that comes back
  // from idle within its share (a request arrives) takes the GPU, once the
  // holder has had `quantum_ns` of its turn, from a holder of its priority
  // that is busy rather than back from idle itself: see Claimant in
  // compute_policy.cc. The holder stops launching at its next kernel
  // boundary and its queued work drains beside the new holder's, as for a
  // higher priority. Without it a turn ends only when the holder's turn,
  // tokens or work run out (up to turn_ns): a slice of 2 ms requests every
  // 6.67 ms with a 30% share beside a busy slice without one got 6% of the
  // GPU, its requests waiting out the busy slice's 20 ms turns.
  bool handoff = true;
  uint64_t quantum_ns = 1'000'000;
  // A claimant's token bucket may be this much (in 1/1000 of the buckets'
  // depths) less full than the holder's: a claimant that used more of its
  // share lately than the holder did of its own waits for turns.
  uint32_t handoff_margin_milli = 250;
  // A holder of a turn handed off on demand idle this long gives the GPU up
  // (idle_grace_ns for other turns): long enough for the CPU gap of a
  // launch-then-synchronise loop, short enough that the GPU does not idle
  // after each request.
  uint64_t handoff_idle_grace_ns = 100'000;
};

// Co-running (PolicyParams::corun): the duty of the holder and its
// co-runners together stays at or below this (in 1/1000 of their wall
// time): the GPU then idles often enough that their work rarely waits
// behind each other's, and each is charged, and held to, what it used.
inline constexpr uint32_t kCoRunMaxDutyMilli = 700;
// Co-running under caps that hold the split: when every live slice on the
// GPU with a share is hard and their shares add up to at most 100%, the
// token buckets keep each at its share whatever the GPU does with their
// overlapping work, so a holder whose host duty (SliceView::host_duty_milli)
// is below kCoRunCappedMaxHostDutyMilli has beside it every slice of its
// priority whose duty is below kCoRunCappedMaxDutyMilli, without the
// kCoRunMaxDutyMilli budget. A 30/70 pair of 200 us launch-then-synchronise
// loops (duty ~0.7 each on the simulated GPU) kept exclusive turns and used
// 0.78-0.91 of what the same two processes reach at that split without
// gpuslice. Slices that keep the GPU busy (free-running) keep exclusive
// turns: they leave no gaps to fill. A co-running loop's duty reads higher
// than its host duty (the GPU time the holder reports leaves it less time
// to measure against: 0.82-0.89 for the 200 us loop), hence the two limits.
inline constexpr uint32_t kCoRunCappedMaxHostDutyMilli = 900;
static_assert(PolicyParams{}.corun_capped_max_host_duty_milli == kCoRunCappedMaxHostDutyMilli);
// The cooperative file's limit (PolicyParams::corun_capped_max_host_duty_milli).
// A 30/70 pair of 1 ms launch-then-synchronise loops reads host duties of
// 0.87-1.0, below 0.9 only now and then, so it kept exclusive turns most of
// the time, and exclusive turns cannot beat one loop's ceiling (90.7-94.5%
// of the GPU) where the two loops reach 95.0-97.2% at that split without
// gpuslice: the pair used 94.2-95.6% with 0.9, 94.8-96.4% with 0.95. At 0.97
// free-running loops of 20 us kernels co-ran now and then and lost (their
// pair 92.2-97.2% against 94.8-97.5%); at 0.95 they did not (93.5-97.0%
// against 93.0-97.2%).
inline constexpr uint32_t kCoRunOwnSlicesMaxHostDutyMilli = 950;
// A host duty older than this does not count: the holder's co-runners are
// dropped until it has held the GPU alone for a window again. A co-runner
// that reports nothing is never out of tokens, so without it a holder whose
// host duty was once low would have it beside it for good, however busy.
inline constexpr uint64_t kHostDutyMaxAgeNs = 200'000'000;
inline constexpr uint32_t kCoRunCappedMaxDutyMilli = 950;
// A slice's duty is measured over this much of the wall time it may launch
// (holding the GPU or co-running).
inline constexpr uint64_t kDutyWindowNs = 20'000'000;

// One slice as the decision sees it.
struct SliceView {
  bool live = false;      // Has a live member.
  bool waiting = false;   // A member waits to launch.
  bool inflight = false;  // A member has work not known to be complete.
  uint32_t share_milli = 0;
  coord::Mode mode = coord::kModeHard;
  uint32_t priority = 1;  // 0 low, 1 normal, 2 high.
  int64_t tokens_ns = 0;
  uint64_t vtime = 0;
  uint64_t charged_ns = 0;
  uint64_t idle_since_ns = 0;  // 0: active.
  // `inflight` as of the previous decision (charge_from_previous_report):
  // kept by the caller from one Advance to the next.
  bool was_inflight = false;
  // Every live process of the slice reports the GPU time its work
  // used (timed on the GPU's clock, docs/COMPUTE.md), and `gpu_ns` is what
  // they reported since the previous decision. Such a slice is charged that
  // GPU time rather than the wall time its work was in flight: a loop of
  // short kernels with CPU gaps between them (launch, synchronise) paid for
  // the gaps and got under half its share. Slices whose processes do not
  // report it (an older shim) keep the wall-time charge.
  bool gpu_time = false;
  uint64_t gpu_ns = 0;
  // Set by Advance: `gpu_ns` as reported, before any of it paid back
  // `prepaid_ns` (0 for a slice not charged by its reports).
  uint64_t reported_ns = 0;
  // Unexplained time it was charged as a holder (TurnView::unexplained_ns)
  // that its own later reports pay back rather than add to: GPU time it
  // reports late is not charged twice. A report that pays it back explains
  // nothing more, so a slice that reports late to win its prepayment back
  // gains nothing. Kept by the caller.
  uint64_t prepaid_ns = 0;
  // The daemon's audit found that the slice used more of the GPU than it was
  // charged (NVML's per-process use against the arbiter's charge, the
  // compute watchdog's window; docs/SECURITY.md): its reports are ignored
  // (ChargedByReports) and it is charged the wall time of every
  // decision interval in which it holds the GPU, open or closing, whether
  // others wait or not. A slice that hides its work then pays for its turns,
  // and a hard one stays at its share even where nobody else wants the GPU.
  bool distrusted = false;
  // A slice without a share of its own (a part of a GPU asked for without
  // one): the daemon registers it at the smallest share, work-conserving,
  // so it runs on what the slices with shares leave; a slice with a share
  // that waits within its share takes the GPU from it on demand
  // (PolicyParams::handoff), and it never takes the GPU from one.
  bool shareless = false;
  // When it last came back from idle (it waits for the GPU again), as long
  // as it has not held or co-run on the GPU since; 0 otherwise. A slice
  // back with a request is what hand-off on demand serves first. Kept by
  // the caller.
  uint64_t woke_ns = 0;
  // Co-running (PolicyParams::corun): the slice may launch beside the
  // holder, as decided by the last Advance (kept by the caller, and
  // published to its processes). Its GPU time is charged from its reports
  // like anybody's; a hard slice stops co-running when its tokens run out.
  bool corun = false;
  // Its duty: the GPU time it reported per wall time it could launch (as
  // the holder, or co-running) that the others' reports left it, in 1/1000,
  // measured over kDutyWindowNs of that time (duty_wall_ns, duty_gpu_ns
  // accumulate the current window); 1000 until measured. Rises at once,
  // falls by halves. Kept by the caller.
  uint32_t duty_milli = 1000;
  uint64_t duty_wall_ns = 0;
  uint64_t duty_gpu_ns = 0;
  // Its host duty: the same, measured only while it held the GPU with
  // nobody beside it (host_wall_ns, host_gpu_ns accumulate the window). A
  // co-runner that hides what it uses takes GPU time from the holder and so
  // lowers the holder's duty: measured with co-runners beside it, a busy
  // holder looked idle enough to have more of them, and a 20% slice that
  // reported nothing took the two 40% slices' GPU down to 22% each. Only a
  // holder of low host duty has co-runners under caps that hold the split.
  uint32_t host_duty_milli = 1000;
  uint64_t host_wall_ns = 0;
  uint64_t host_gpu_ns = 0;
  uint64_t host_measured_ns = 0;  // When a window of it last completed; 0: never.

  bool Active() const { return live && (waiting || inflight); }
  // Charged by the GPU time it reports: its processes report it, and the
  // audit has not found the reports short.
  bool ChargedByReports() const { return gpu_time && !distrusted; }
};

struct TurnView {
  int32_t holder = -1;
  coord::TurnState state = coord::kTurnNone;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  // The arbiter's check on reported GPU time (charge_blocking_holder): the
  // wall time in which a slice charged by its reports held the GPU while
  // others waited, less all the GPU time the slices reported, within
  // [-kUnexplainedSlackNs, kUnexplainedSlackNs]; what goes above is charged
  // to the holder. Kept by the caller from one Advance to the next.
  int64_t unexplained_ns = 0;
  // The turn was handed off on demand (PolicyParams::handoff): it serves a
  // slice's request and is not itself claimed by another at its priority.
  bool handed_off = false;
};

// What Advance did.
struct Outcome {
  bool changed = false;    // holder or state changed (wake the waiters).
  bool preempted = false;  // A higher priority slice took the GPU.
  bool corun_changed = false;  // Some slice's SliceView::corun changed (wake the waiters).
};

// How far the GPU's unexplained time (TurnView::unexplained_ns) may run
// ahead of, or behind, the reports before a holder pays for it: what a
// report may lag (a batch counts when it is seen complete, a drain runs on
// into the next turn).
inline constexpr int64_t kUnexplainedSlackNs = 1'000'000;
// The most GPU time a slice may have been charged ahead of its reports
// (SliceView::prepaid_ns): the token bucket's depth.
inline constexpr uint64_t kMaxPrepaidNs = 100'000'000;

// May `s` be given the GPU now?
bool Eligible(const SliceView& s);

// The slice to run next, or -1: the highest priority among the eligible,
// then the smallest virtual time, then the lowest index.
int32_t PickNext(std::span<const SliceView> slices);

// Length of a turn for `s`: turn_ns, or what a hard slice's tokens allow
// (at least min_turn_ns).
uint64_t TurnLength(const SliceView& s, const PolicyParams& p);

// Charges `ns` of GPU time to `s`: tokens and virtual time.
void Charge(SliceView& s, uint64_t ns);

// Moves the schedule from `last_ns` to `now_ns`: fills token buckets,
// charges the slices that held or drained on the GPU, and opens, extends,
// closes or hands over the turn.
Outcome Advance(uint64_t now_ns, uint64_t last_ns, TurnView& turn, std::span<SliceView> slices,
                const PolicyParams& p);

}  // namespace gpuslice::slice
