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
  int64_t NowMs() const override { return now_ms_; }
  void Advance(int64_t ms) { now_ms_ += ms; }

 private:
  int64_t now_ms_;
};

}  // namespace gpuslice::daemon
