#include "cli/demo/open_loop.h"

#include <algorithm>

namespace gpuslice::cli {

OpenLoop::OpenLoop(uint64_t start_ns, uint64_t period_ns, uint64_t end_ns)
    : start_ns_(start_ns), period_ns_(period_ns > 0 ? period_ns : 1), end_ns_(end_ns) {}

uint64_t OpenLoop::PeriodFor(uint64_t work_ns, uint32_t duty_milli) {
  if (duty_milli == 0) duty_milli = 1;
  // Rounded to the nearest nanosecond: 2 ms at 30% is 6,666,667 ns, so that
  // 2 s hold 300 arrivals, not a 301st at 1.9999998 s.
  return std::max<uint64_t>(1, (work_ns * 1000 + duty_milli / 2) / duty_milli);
}

void OpenLoop::Record(uint64_t i, uint64_t started_ns, uint64_t done_ns) {
  // Late: it arrived while the previous request still ran, so it could not
  // start on time. (A start a few microseconds after the arrival is the
  // host's timer, not a queue, and is not counted.)
  const uint64_t arrival = Arrival(i);
  if (!latencies_ns_.empty() && prev_done_ns_ > arrival) {
    ++late_;
    if (started_ns > arrival) max_late_ns_ = std::max(max_late_ns_, started_ns - arrival);
  }
  prev_done_ns_ = done_ns;
  latencies_ns_.push_back(done_ns > arrival ? done_ns - arrival : 0);
}

OpenLoopSummary OpenLoop::Summarize() const {
  OpenLoopSummary s;
  s.offered = end_ns_ > start_ns_ ? (end_ns_ - start_ns_ + period_ns_ - 1) / period_ns_ : 0;
  s.served = latencies_ns_.size();
  s.late = late_;
  s.max_late_ns = max_late_ns_;
  s.delivered = s.offered == 0 ? 0 : static_cast<double>(s.served) / static_cast<double>(s.offered);
  if (latencies_ns_.empty()) return s;
  std::vector<uint64_t> sorted = latencies_ns_;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest latency that at least q of the requests
  // did not exceed.
  auto rank = [&sorted](uint64_t percent) {
    size_t n = sorted.size();
    size_t k = static_cast<size_t>((percent * n + 99) / 100);
    return sorted[std::clamp<size_t>(k, 1, n) - 1];
  };
  s.p50_ns = rank(50);
  s.p99_ns = rank(99);
  s.max_ns = sorted.back();
  return s;
}

}  // namespace gpuslice::cli
