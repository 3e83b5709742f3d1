#pragma once

// The daemon's clock, behind a seam so tests can move time by hand.

#include <chrono>
#include <cstdint>

namespace gpuslice::daemon {

class Clock {
 public:
  virtual ~Clock() = default;
  // Unix epoch milliseconds (wall clock: stored in the ledger, shown to users).
  virtual int64_t NowMs() const = 0;
};

class RealClock : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1'700'000'000'000) : now_ms_(now_ms) {}
  // Each read returns the time, then moves it on by `step_ms` (0: it
  // stands still): work that reads the clock several times sees time pass,
  // as it does on a real, busy machine.
  int64_t NowMs() const override {
    const int64_t now = now_ms_;
    now_ms_ += step_ms_;
    return now;
  }
  void Advance(int64_t ms) { now_ms_ += ms; }
  void set_step_ms(int64_t step_ms) { step_ms_ = step_ms; }

 private:
  mutable int64_t now_ms_;
  int64_t step_ms_ = 0;
};

}  // namespace gpuslice::daemon
