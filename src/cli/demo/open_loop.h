#pragma once

// The demo worker's load: requests of a fixed amount of GPU work that arrive
// on a fixed schedule (an open loop), the way requests reach a service
// whether or not the previous one is done. A request that arrives while the
// previous one still runs starts as soon as that one completes (late); its
// wait counts in its latency, which runs from its arrival to its completion.
//
// Pure bookkeeping: times are nanoseconds on whatever clock the caller uses,
// so that it is tested without a GPU or a real clock. Not thread-safe: one
// worker loop owns it.

#include <cstdint>
#include <vector>

namespace gpuslice::cli {

// What a run of requests came to.
struct OpenLoopSummary {
  uint64_t offered = 0;      // Requests that arrived before the end.
  uint64_t served = 0;       // Of those, completed.
  uint64_t late = 0;         // Started after their arrival: the previous one still ran.
  uint64_t max_late_ns = 0;  // The longest a request waited to start.
  // served / offered: the fraction of the offered GPU time (every request
  // is the same work) that was delivered; 0 when nothing was offered.
  double delivered = 0;
  // Arrival-to-completion latency of the served requests (nearest rank);
  // 0 when none was served.
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

class OpenLoop {
 public:
  // Request i arrives at start_ns + i * period_ns; those arriving before
  // end_ns are offered. period_ns must be positive.
  OpenLoop(uint64_t start_ns, uint64_t period_ns, uint64_t end_ns);

  // The period a request of `work_ns` of GPU work needs for a demand of
  // `duty_milli` per mille of the GPU's time (1000: back to back).
  static uint64_t PeriodFor(uint64_t work_ns, uint32_t duty_milli);

  uint64_t Arrival(uint64_t i) const { return start_ns_ + i * period_ns_; }
  bool Offered(uint64_t i) const { return Arrival(i) < end_ns_; }

  // Request i (recorded in order, each once) started at `started_ns` and
  // completed at `done_ns`.
  void Record(uint64_t i, uint64_t started_ns, uint64_t done_ns);

  OpenLoopSummary Summarize() const;

 private:
  uint64_t start_ns_, period_ns_, end_ns_;
  uint64_t late_ = 0, max_late_ns_ = 0, prev_done_ns_ = 0;
  std::vector<uint64_t> latencies_ns_;
};

}  // namespace gpuslice::cli
