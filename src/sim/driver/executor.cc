#include "sim/driver/executor.h"

#include <algorithm>

#include "sim/sim_clock.h"

namespace gpuslice::sim::driver {

Executor::Executor(DeviceModel* model, uint32_t unit)
    : model_(model), unit_(unit), slicer_(model, unit), cursor_(MonotonicNs()) {
  thread_ = std::thread([this] { Loop(); });
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t Executor::Submit(Work work) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = ++submitted_;
    queue_.emplace_back(seq, std::move(work));
  }
  work_cv_.notify_one();
  return seq;
}

void Executor::RunInOrder(const std::function<void()>& action) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty() && !running_) {
      // Idle: nothing can start while we hold mu_, so running here keeps
      // the order and saves a thread round trip.
      action();
      return;
    }
  }
  Work w;
  w.action = action;
  WaitFor(Submit(std::move(w)));
}

bool Executor::Done(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= seq;
}

void Executor::WaitFor(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= seq; });
}

uint64_t Executor::last_submitted() {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

void Executor::RunKernel(uint64_t cost_ns) {
  if (!slicer_.holding()) cursor_ = std::max(cursor_, slicer_.Acquire());
  const uint64_t quantum = model_->quantum_ns();
  uint64_t remaining = cost_ns;
  while (remaining > 0) {
    uint64_t step = std::min(remaining, quantum);
    cursor_ += step;
    SleepUntilNs(cursor_);
    remaining -= step;
    model_->AddBusy(unit_, step);
    uint64_t back = 0;
    if (slicer_.MaybeYield(cursor_, &back)) cursor_ = std::max(cursor_, back);
  }
  model_->MaybeSample();
}

void Executor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (queue_.empty()) {
      // Idle: let other processes have the unit while we wait.
      lock.unlock();
      slicer_.Release(cursor_);
      lock.lock();
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopped and drained.
      // The timeline resumes now, not where it stopped.
      cursor_ = std::max(cursor_, MonotonicNs());
    }
    auto [seq, work] = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    switch (work.kind) {
      case Work::Kind::kKernel:
        RunKernel(work.cost_ns);
        break;
      case Work::Kind::kAction:
        work.action();
        break;
      case Work::Kind::kWait:
        // Do not hold the unit while blocked on another device's work.
        slicer_.Release(cursor_);
        work.wait_on->WaitFor(work.wait_seq);
        cursor_ = std::max(cursor_, MonotonicNs());
        break;
    }
    lock.lock();
    running_ = false;
    completed_ = seq;
    done_cv_.notify_all();
  }
}

}  // namespace gpuslice::sim::driver
