#pragma once

// The clocks the simulator uses. CLOCK_MONOTONIC is system-wide on Linux, so
// monotonic instants can be compared between processes (the arbiter does);
// wall-clock microseconds are what NVML timestamps are made of.

#include <errno.h>
#include <time.h>

#include <cstdint>

namespace gpuslice::sim {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t UnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000ull + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

// Sleeps until the monotonic instant `deadline_ns` (absolute, so a sequence
// of short sleeps does not accumulate wake-up latency). Returns at once if
// the deadline has passed.
inline void SleepUntilNs(uint64_t deadline_ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1000000000ull);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1000000000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace gpuslice::sim
