#include "shim/gate/compute_gate_markers.h"

#include <algorithm>

namespace gpuslice::shim::gate {

Fns g_fns;
slice::Turns* g_coord = nullptr;

namespace {

constexpr int kMaxMarkers = 16;

struct Marker {
  CUevent event = nullptr;
  uint64_t seq = 0;        // Record order, from 1.
  uint64_t chain_seq = 0;  // The marker its batch queued right behind (same thread, same stream).
  int64_t launches = 0;
  uint64_t granted_ns = 0;  // When the batch it closes was granted.
  uint64_t recorded_ns = 0;
  bool contended = false;  // GateCredits::contended of its batch.
};

}  // namespace

std::mutex g_mu;
Marker g_markers[kMaxMarkers];  // Ring, oldest first. Guarded by g_mu.
int g_marker_head = 0, g_marker_count = 0;
uint64_t g_last_complete_ns = 0;
// Estimated GPU time of one launch. Starts at a whole batch, so the first
// launches take the slow path one by one (each with a marker) until the
// markers have taught the real figure: a process of 10 ms kernels never
// queues a batch of them unseen.
double g_ns_per_launch = double(kTargetBatchNs);
// Samples of the per-launch time come from the GPU's own clock when they
// can: the elapsed time between a marker and the one its batch queued
// behind (events with timing). Measured on the CPU instead (from the grant,
// or the previous completion, to the poll that saw the completion), a
// sample includes the poll's lateness: with short batches on a loaded
// machine that doubled the estimate, batches shrank to one launch and the
// queue ran dry between polls. CPU samples are used only while no timed
// sample came in the last kCpuSampleAfter markers (a thread that launches
// and synchronises never queues behind its own marker).
constexpr int kCpuSampleAfter = 8;
uint64_t g_next_seq = 1;           // Guarded by g_mu.
uint64_t g_popped_seq = 0;         // Newest marker seen complete. Guarded by g_mu.
CUevent g_popped_event = nullptr;  // Its event, kept for the next elapsed time. Guarded by g_mu.
int g_markers_since_timed = kCpuSampleAfter;  // Guarded by g_mu.
std::atomic<int64_t> g_unmarked{0};           // Launches granted, not yet covered by a marker.
// When the work granted so far should be done by the estimate: each grant
// queues behind what is already queued. Guarded by g_mu.
uint64_t g_expected_done_ns = 0;

namespace {

// The GPU time a launch takes, timed on the GPU's clock by a
// bracket, two events around one launch of each batch (its first: the one
// that took the slow path). The slice is charged the GPU time its batches
// used: a batch timed between two markers (it queued behind the previous
// one) at most that span, otherwise its launches x this estimate. The span
// alone is not enough: it holds the gaps in which the CPU did not keep the
// queue fed, and a launch-then-synchronise loop never queues behind its own
// marker; charging the wall time in flight billed those gaps, and a hard 30%
// slice of 20 us kernels got 0.14 of the GPU. On an idle stream the bracket
// also holds the time from its first event to the launch reaching the GPU
// (microseconds), so the estimate errs high, on the side of the cap.
//
// Its first event completes when it is recorded if the stream is idle then
// (a loop that synchronises after each launch), and the launch reaches the
// GPU only after the CPU has made the launch call: the bracket held that
// call too, 5-7 us on the simulated GPU of a busy 2-core machine, which
// charged a loop of 20 us kernels 25-48% more than it used (and the same
// bias, relative, hurts any short kernel). So when its first event was
// complete by the time the launch call returned, the CPU time from that
// event's record to the return (`cpu_gap_ns`, an upper bound of the part
// of the bracket before the launch) is taken off the sample. When it was
// not (work queued before it), the bracket starts when that work ends,
// after the launch was queued: nothing to take off.
//
// That holds only if the kernel started after the launch call returned. A
// thread descheduled after its launch reached the GPU (on the simulated GPU,
// the launcher preempted by the engine thread its launch woke) returns
// late, and the gap then holds kernel time too: on a 2-core machine with
// another process busy, idle brackets held launch calls of ~13 us against
// 0.3-0.7 us for the others, their samples read 13.5 us for 20 us kernels,
// the estimate fell to 13-16 us, and a hard 30% slice got 35-37% of the GPU.
// So a sample whose launch call took much longer than the fastest calls
// seen (`call_ns` against g_min_call_ns) is uncertain: the kernel took
// between the sample with the gap taken off and without it, and such a
// sample only moves the estimate into that interval.
//
// Nor does a first event still pending at the launch call's return always
// mean work of this process queued before it. Nothing of the process was
// queued when the bracket opened, the event waits for the GPU itself. With
// no other slice on the GPU that is only the GPU (or the simulated GPU's
// engine thread) not having got to it yet: it was stamped at its record, as
// on an idle stream, and the call is taken off. With another slice on the
// GPU it may wait behind that slice's work, which ended just then (a GPU
// switches contexts when it ends; the simulated GPU, when that process's
// engine thread gets the CPU back), and be stamped anywhere between its
// record and the launch's arrival: the kernel took between the sample with
// the whole call taken off and the sample as it is, so such a sample is
// uncertain. Counted as certain (as it is), co-running pairs of 20 us
// loops were charged 1.30 x the GPU time they used (1.01-1.02 now) once the
// simulated GPU stopped starting work before it was submitted. Counted as
// uncertain alone on the GPU too, nearly every sample of a lone 20 us loop
// was, the estimate stayed where its first sample put it (22-23 us in some
// runs), and a hard 30% slice under the arbiter got 0.87-0.91 of its share.
struct Bracket {
  CUevent start = nullptr;
  CUevent end = nullptr;
  uint64_t cpu_gap_ns = 0;
  uint64_t call_ns = 0;    // From the first event's record to the launch call's return.
  bool uncertain = false;  // Pending first event, nothing of ours before it, others on the GPU.
};
// When this thread's open bracket's first event was recorded (MonotonicNs).
thread_local uint64_t t_bracket_opened_ns __attribute__((tls_model("initial-exec"))) = 0;
// Whether work of this process may have been queued on the GPU when this
// thread's open bracket was opened (see Bracket).
thread_local bool t_bracket_behind_own __attribute__((tls_model("initial-exec"))) = false;
constexpr int kMaxBrackets = 8;
Bracket g_brackets[kMaxBrackets];  // Pending, unordered. Guarded by g_mu.
int g_bracket_count = 0;           // Guarded by g_mu.
double g_kernel_ns = 0;            // 0: no bracket timed yet. Guarded by g_mu.
int g_kernel_samples = 0;          // Guarded by g_mu.
// A sample beyond this many times the estimate (the thread was descheduled
// between the first event and the launch) counts as this many, once the
// estimate has a few samples: a change of kernels still gets through in a
// few batches.
constexpr double kKernelSampleClip = 2.0;
// The lower end of the last sample (its time less the part that may not
// have been the kernel's; see Bracket). A sample moves the estimate up only
// as far as this one went too: another slice's work can get onto the GPU
// between a bracket's events after the check in CloseBracket (the other
// process granted, launched and ran its kernels while this one's launch
// waited for the CPU, or for the GPU), and the sample then holds that work
// as well, less nothing: co-running pairs of 20 us loops read a few samples
// of 35-72 us among their ~20 us ones, certain or not, the estimate rose to
// 22-31 us for a few hundred ms at a time, and one run in three was charged
// 1.08-1.21 x what it used (1.265 in CI). Such work lands in a sample now
// and then; kernels that really got longer show in every sample, and the
// estimate follows them one sample later. 0: none yet. Guarded by g_mu.
double g_last_low = 0;
// The fastest launch calls seen (a minimum that drifts up by 1/256 of the
// difference per call, so that it follows a machine that got slower), and
// how much longer than it a call may take and still give a certain sample.
double g_min_call_ns = 0;  // 0: none seen yet. Guarded by g_mu.
constexpr double kCertainCallFactor = 2.0;
constexpr double kCertainCallSlackNs = 2000;
// Once the estimate has kBracketWarmup samples, one batch in kBracketEvery is
// bracketed: a bracket costs two more events per batch, and the estimate is
// an average that moves slowly.
constexpr int kBracketWarmup = 8;
constexpr uint32_t kBracketEvery = 4;
uint32_t g_grants = 0;  // Guarded by g_mu.

// Learns the per-launch GPU time from the brackets that completed. Needs g_mu.
void PollBracketsLocked() {
  int kept = 0;
  for (int i = 0; i < g_bracket_count; ++i) {
    const Bracket b = g_brackets[i];
    if (g_fns.event_query(b.end) == CUDA_ERROR_NOT_READY) {
      g_brackets[kept++] = b;
      continue;
    }
    float ms = 0;
    if (g_fns.event_elapsed(&ms, b.start, b.end) == CUDA_SUCCESS && ms >= 0) {
      const double call = double(b.call_ns);
      g_min_call_ns = g_min_call_ns == 0 || call < g_min_call_ns
                          ? call
                          : g_min_call_ns + (call - g_min_call_ns) / 256;
      const double raw = double(ms) * 1e6;
      double sample = std::max(raw - double(b.cpu_gap_ns), 0.0);
      const bool certain =
          !b.uncertain &&
          (b.cpu_gap_ns == 0 || call <= kCertainCallFactor * g_min_call_ns + kCertainCallSlackNs);
      // Up only as far as the sample before went too (see g_last_low).
      const double up_to = std::max(g_last_low, g_kernel_ns);
      g_last_low = sample;
      if (!certain && g_kernel_samples > 0) {
        // Only into [sample, raw] (see Bracket), at the usual pace.
        const double target = std::min(std::clamp(g_kernel_ns, sample, raw), up_to);
        g_kernel_ns = 0.8 * g_kernel_ns + 0.2 * target;
        g_fns.event_destroy(b.start);
        g_fns.event_destroy(b.end);
        continue;
      }
      if (g_kernel_samples == 0) {
        g_kernel_ns = sample;
      } else {
        if (g_kernel_samples >= 4) sample = std::min(sample, kKernelSampleClip * g_kernel_ns);
        g_kernel_ns = 0.8 * g_kernel_ns + 0.2 * std::min(sample, up_to);
      }
      ++g_kernel_samples;
    }
    g_fns.event_destroy(b.start);
    g_fns.event_destroy(b.end);
  }
  g_bracket_count = kept;
}

// The GPU time a completed batch of `launches` used: what its markers timed
// (`timed_ns`, 0: not timed), at most its launches at the bracketed
// per-launch time. Needs g_mu.
uint64_t BatchGpuNsLocked(int64_t launches, double timed_ns) {
  if (g_kernel_samples == 0) {
    return uint64_t(timed_ns > 0 ? timed_ns : double(launches) * g_ns_per_launch);
  }
  const double estimate = double(launches) * g_kernel_ns;
  return uint64_t(timed_ns > 0 ? std::min(timed_ns, estimate) : estimate);
}

// Creates an event (with timing or without) and records it on `stream`
// (the per-thread default stream's entry point for a _ptsz launch); null
// when the driver refuses either.
// `*recording_ns`, if given, is when the record call began.
CUevent RecordEvent(CUstream stream, bool per_thread, bool timed,
                    uint64_t* recording_ns = nullptr) {
  CUevent ev = nullptr;
  if (g_fns.event_create(&ev, timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return nullptr;
  }
  if (recording_ns != nullptr) *recording_ns = slice::MonotonicNs();
  const CUresult r = per_thread && g_fns.event_record_ptsz != nullptr
                         ? g_fns.event_record_ptsz(ev, stream)
                         : g_fns.event_record(ev, stream);
  if (r != CUDA_SUCCESS) {
    g_fns.event_destroy(ev);
    return nullptr;
  }
  return ev;
}

}  // namespace

// Pops completed markers and refines the per-launch estimate. Needs g_mu.
void PollMarkersLocked(uint64_t now) {
  PollBracketsLocked();
  while (g_marker_count > 0) {
    Marker& mk = g_markers[g_marker_head];
    if (g_fns.event_query(mk.event) == CUDA_ERROR_NOT_READY) break;
    // Completed (or an error: the context is gone; either way not queued).
    // The batch ran from when it was queued, or from when the batch before
    // it completed if that was later (it waited behind it): measuring from
    // the marker's recording instead made the estimate too short. A marker
    // recorded long after its batch was granted (the thread synchronised or
    // computed in between) may have completed long before this poll: it
    // teaches nothing.
    float ms = 0;
    const bool timed = mk.launches > 0 && mk.chain_seq != 0 && mk.chain_seq == g_popped_seq &&
                       g_popped_event != nullptr && g_fns.event_elapsed != nullptr &&
                       g_fns.event_elapsed(&ms, g_popped_event, mk.event) == CUDA_SUCCESS && ms > 0;
    g_coord->AddGpuNs(BatchGpuNsLocked(mk.launches, timed && !mk.contended ? double(ms) * 1e6 : 0));
    if (timed) {
      const double sample = double(ms) * 1e6 / double(mk.launches);
      g_ns_per_launch = 0.7 * g_ns_per_launch + 0.3 * sample;
      g_markers_since_timed = 0;
    } else if (++g_markers_since_timed >= kCpuSampleAfter) {
      g_markers_since_timed = kCpuSampleAfter;
      const uint64_t from = std::max(g_last_complete_ns, mk.granted_ns);
      const double expected = double(mk.launches) * g_ns_per_launch;
      const bool prompt = double(mk.recorded_ns - mk.granted_ns) <= 2 * expected;
      if (mk.launches > 0 && now > from && prompt) {
        const double sample = double(now - from) / double(mk.launches);
        g_ns_per_launch = 0.7 * g_ns_per_launch + 0.3 * sample;
      }
    }
    g_last_complete_ns = now;
    if (g_popped_event != nullptr) g_fns.event_destroy(g_popped_event);
    g_popped_event = mk.event;
    g_popped_seq = mk.seq;
    mk = Marker{};
    g_marker_head = (g_marker_head + 1) % kMaxMarkers;
    --g_marker_count;
  }
}

// Records a marker after this thread's launches on `stream`. Needs g_mu.
void MarkLocked(CUstream stream, bool per_thread, uint64_t now) {
  const int64_t launched = t_gate.batch;
  // Launches the batch really made: a gate that closed under it voided the
  // rest of its credits.
  const int64_t used = launched - std::clamp<int64_t>(t_gate.credits, 0, launched);
  const uint64_t granted = t_gate.granted_ns;
  const bool contended = t_gate.contended;
  const bool chained =
      t_gate.chain_seq != 0 && t_gate.last_stream == stream && t_gate.last_per_thread == per_thread;
  const uint64_t chain_seq = chained ? t_gate.chain_seq : 0;
  t_gate.batch = 0;
  t_gate.credits = 0;
  t_gate.chain_seq = 0;
  t_gate.mark_at = -1;
  if (t_gate.bracket != nullptr) {  // Its first launch never came back to close it.
    g_fns.event_destroy(t_gate.bracket);
    t_gate.bracket = nullptr;
  }
  if (launched == 0) return;
  g_unmarked.fetch_sub(launched, std::memory_order_relaxed);
  t_gate.last_seq = 0;
  if (used == 0) return;                      // Nothing of it was queued.
  if (g_marker_count == kMaxMarkers) return;  // Covered by the next one.
  CUevent ev = RecordEvent(stream, per_thread, g_fns.event_elapsed != nullptr);
  if (ev == nullptr) return;
  const uint64_t seq = g_next_seq++;
  g_markers[(g_marker_head + g_marker_count) % kMaxMarkers] =
      Marker{ev, seq, chain_seq, used, granted, now, contended};
  ++g_marker_count;
  t_gate.last_seq = seq;
  t_gate.last_stream = stream;
  t_gate.last_per_thread = per_thread;
}

bool BracketDueLocked() {
  return g_kernel_samples < kBracketWarmup || ++g_grants % kBracketEvery == 0;
}

bool InflightLocked(uint64_t now) {
  if (g_marker_count > 0) return true;
  if (g_unmarked.load(std::memory_order_relaxed) <= 0) return false;
  // Launches after the last marker of a thread that has not come back to
  // the gate (it synchronises, say): assume they run for their estimated
  // time after what was queued before them.
  return now < g_expected_done_ns;
}

bool Capturing(CUstream stream, bool per_thread) {
  auto fn = per_thread && g_fns.is_capturing_ptsz != nullptr ? g_fns.is_capturing_ptsz
                                                             : g_fns.is_capturing;
  if (fn == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return fn(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Records the event that opens a batch's bracket, on the stream of its
// first launch, as the last thing before that launch. False: no bracket
// (no timing events, or the driver refused).
bool OpenBracket(CUstream stream, bool per_thread, bool behind_own) {
  if (g_fns.event_elapsed == nullptr) return false;
  t_bracket_behind_own = behind_own;
  // From before the record call: the event may be stamped anywhere in it,
  // and the call may take long (on the simulated GPU of a 2-core machine,
  // the executor thread it wakes preempted the caller for ~6 us after the
  // stamp); timed from the call's return, that part stayed in the sample and
  // 20 us kernels read 26-27 us.
  t_gate.bracket = RecordEvent(stream, per_thread, /*timed=*/true, &t_bracket_opened_ns);
  return t_gate.bracket != nullptr;
}

// Closes this thread's open bracket right behind its launch on `stream`.
void CloseBracket(CUstream stream, bool per_thread) {
  CUevent start = t_gate.bracket;
  t_gate.bracket = nullptr;
  // See Bracket: was the stream idle when the bracket opened?
  const uint64_t gap = slice::MonotonicNs() - t_bracket_opened_ns;
  const bool idle = g_fns.event_query(start) == CUDA_SUCCESS;
  // Pending with nothing of ours before it: waiting for the GPU, not for us;
  // stamped at its record unless another slice's context held the GPU.
  const bool waited_for_gpu = !idle && !t_bracket_behind_own;
  const bool uncertain = waited_for_gpu && g_coord->OthersOnGpu();
  // Another slice's work may have reached the GPU since the grant (a
  // co-runner's next batch): the bracket would time its slices of the GPU
  // too. Co-running pairs of 20 us loops learnt 31-38 us kernels without
  // this second look.
  CUevent end = Capturing(stream, per_thread) || g_coord->OthersInflight()
                    ? nullptr
                    : RecordEvent(stream, per_thread, true);
  if (end != nullptr) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_bracket_count < kMaxBrackets) {
      g_brackets[g_bracket_count++] =
          Bracket{start, end, idle || waited_for_gpu ? gap : 0, gap, uncertain};
      return;
    }
  }
  if (end != nullptr) g_fns.event_destroy(end);
  g_fns.event_destroy(start);
}

void ResetMarkersAfterFork() {
  new (&g_mu) std::mutex();
  g_marker_count = 0;
  g_marker_head = 0;
  g_unmarked.store(0, std::memory_order_relaxed);
  g_expected_done_ns = 0;
  g_next_seq = 1;
  g_popped_seq = 0;
  g_popped_event = nullptr;  // The parent's context's: not ours to destroy.
  g_markers_since_timed = kCpuSampleAfter;
  g_bracket_count = 0;  // The parent's events: not ours to destroy.
  g_kernel_ns = 0;
  g_kernel_samples = 0;
  g_last_low = 0;
  g_min_call_ns = 0;
  g_grants = 0;
}

}  // namespace gpuslice::shim::gate
