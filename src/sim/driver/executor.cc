#include "sim/driver/executor.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>

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
    work.submitted_ns = MonotonicNs();
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

bool Executor::DoneOnTimeline(uint64_t seq, uint64_t now_ns, uint64_t* end_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  *end_ns = 0;
  if (completed_ >= seq) return true;
  const uint64_t end = kernel_end_ns_.load(std::memory_order_acquire);
  if (!running_ || end == 0 || now_ns < end) return false;
  // The running kernel is due; what follows it up to `seq` must be instant.
  for (const auto& [s, w] : queue_) {
    if (s > seq) break;
    if (!w.instant) return false;
  }
  *end_ns = end;
  return true;
}

void Executor::WaitFor(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= seq; });
}

bool Executor::WaitFor(uint64_t seq, uint64_t deadline_ns) {
  if (deadline_ns == 0) {
    WaitFor(seq);
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (completed_ < seq) {
    uint64_t now = MonotonicNs();
    if (now >= deadline_ns) return false;
    done_cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
  }
  return true;
}

void Executor::Rebind(uint32_t unit) {
  Work w;
  w.action = [this, unit] {
    // On the executor's thread, the only user of slicer_.
    slicer_.Release(cursor_);
    unit_.store(unit, std::memory_order_relaxed);
    slicer_ = TimeSlicer(model_, unit);
  };
  WaitFor(Submit(std::move(w)));
}

uint64_t Executor::last_submitted() {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

void Executor::RunKernel(uint64_t cost_ns) {
  // The unit changes hands between kernels and at quantum boundaries within
  // one, never after a kernel's last step: a GPU signals a kernel's end (and
  // processes the event records queued right behind it) before it switches
  // to another context. Yielding there would hold the ended kernel's
  // completion behind the other process's quantum: two co-running loops of
  // 1 ms kernels would each see its synchronisations return a whole kernel
  // of the other late, look idle to the compute arbiter meanwhile, and lose
  // its turns (a hard 30% slice got 23-28% beside a 70% one).
  uint64_t back = 0;
  if (!slicer_.holding()) {
    cursor_ = std::max(cursor_, slicer_.Acquire(cursor_));
  } else if (slicer_.MaybeYield(cursor_, &back)) {
    cursor_ = std::max(cursor_, back);
  }
  const uint64_t quantum = model_->quantum_ns();
  uint64_t remaining = cost_ns;
  while (remaining > 0) {
    uint64_t step = std::min(remaining, quantum);
    cursor_ += step;
    if (step == remaining) kernel_end_ns_.store(cursor_, std::memory_order_release);
    SleepUntilNs(cursor_);
    remaining -= step;
    model_->AddBusy(unit(), step);
    if (remaining > 0 && slicer_.MaybeYield(cursor_, &back)) cursor_ = std::max(cursor_, back);
  }
  model_->meter().MaybeSample();
}

void Executor::Loop() {
  // Kernels end on the GPU's timeline: with the default 50 us timer slack,
  // this thread saw them end (and completed the events behind them) up to
  // 50 us late, which a GPU does not.
  prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
  tls_passes_checkpoint_gate = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (queue_.empty()) {
      // Idle: let other processes have the unit while we wait.
      lock.unlock();
      slicer_.Release(cursor_);
      lock.lock();
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopped and drained.
    }
    // Work starts on the timeline where the previous work ended or when it
    // was submitted, whichever is later: not when this thread woke up (a GPU
    // starts queued work within microseconds, and this thread's wake-up,
    // tens of us and more on a busy machine, is not GPU time: counted from
    // it, every burst of work finished that much late), and never before it
    // was submitted. For every item, not only after this thread waited idle:
    // an event recorded after the previous kernel ended but before this
    // thread got back to an empty queue was stamped at that kernel's end, up
    // to the launcher's whole wake-up earlier than its record, and the shim's
    // brackets timed 20 us kernels at 22.6-25.3 us.
    cursor_ = std::max(cursor_, std::min(queue_.front().second.submitted_ns, MonotonicNs()));
    auto [seq, work] = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    kernel_end_ns_.store(0, std::memory_order_relaxed);
    lock.unlock();
    switch (work.kind) {
      case Work::Kind::kKernel:
        RunKernel(work.cost_ns);
        break;
      case Work::Kind::kAction:
        // An event's timestamp is written by the GPU when it processes this
        // context's queue, which it does only while the context holds the
        // GPU: with another process's kernel running, a record on an idle
        // stream is stamped when the unit passes to this process, not when
        // it was submitted. Stamped at submission, an event pair around a
        // kernel also timed the wait behind the other process's kernel, and
        // a process that times its kernels (the shim's brackets) learnt
        // kernels a third longer than they ran.
        if (work.instant && !slicer_.holding()) {
          cursor_ = std::max(cursor_, slicer_.Acquire(cursor_));
        }
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
    kernel_end_ns_.store(0, std::memory_order_relaxed);
    completed_ = seq;
    done_cv_.notify_all();
  }
}

}  // namespace gpuslice::sim::driver
