#include "sim/time_slicer.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

// Waiters wake at least this often to check that the holder still lives.
constexpr uint64_t kPollNs = 5000000;
// A live holder refreshes its heartbeat at every slice (<= one quantum). One
// that has not for this long (stopped, or stuck in a debugger) loses the unit.
constexpr uint64_t kStaleHeartbeatNs = 500000000;

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000ull);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000ull);
  // Not FUTEX_PRIVATE: the word is in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be 32-bit");

TimeSlicer::TimeSlicer(DeviceModel* model, uint32_t unit)
    : model_(model),
      unit_(unit),
      arbiter_(&model->state()->unit_state[unit].arbiter),
      slot_(model->slot()) {}

void TimeSlicer::SetWaiting(bool waiting) {
  uint64_t bit = 1ull << (slot_ % 64);
  if (waiting) {
    arbiter_->waiting[slot_ / 64].fetch_or(bit, std::memory_order_acq_rel);
  } else {
    arbiter_->waiting[slot_ / 64].fetch_and(~bit, std::memory_order_acq_rel);
  }
}

int TimeSlicer::NextWaiter() const {
  const int n = static_cast<int>(layout::kMaxProcesses);
  for (int k = 1; k < n; ++k) {
    int s = (slot_ + k) % n;
    if (arbiter_->waiting[s / 64].load(std::memory_order_acquire) & (1ull << (s % 64))) return s;
  }
  return -1;
}

void TimeSlicer::HandTo(int slot, uint64_t at_ns) {
  holding_ = false;
  // Published by the release store of `holder` below.
  arbiter_->holder_since_ns.store(at_ns, std::memory_order_relaxed);
  arbiter_->holder.store(slot < 0 ? 0 : static_cast<uint32_t>(slot) + 1, std::memory_order_release);
  arbiter_->handoffs.fetch_add(1, std::memory_order_relaxed);
  FutexWakeAll(&arbiter_->holder);
}

// Evicts `holder` if it is dead or silent for too long.
void TimeSlicer::CheckHolder(uint32_t holder) {
  int slot = static_cast<int>(holder) - 1;
  uint64_t beat = arbiter_->holder_heartbeat_ns.load(std::memory_order_acquire);
  bool stale = beat != 0 && MonotonicNs() > beat + kStaleHeartbeatNs;
  if (!stale && model_->SlotAlive(slot)) return;
  if (arbiter_->holder.compare_exchange_strong(holder, 0, std::memory_order_acq_rel)) {
    if (!model_->SlotAlive(slot)) {
      arbiter_->waiting[slot / 64].fetch_and(~(1ull << (slot % 64)), std::memory_order_acq_rel);
    }
    FutexWakeAll(&arbiter_->holder);
  }
}

uint64_t TimeSlicer::Acquire(uint64_t ready_ns) {
  const uint32_t me = static_cast<uint32_t>(slot_) + 1;
  SetWaiting(true);
  uint64_t waited_since = MonotonicNs();
  bool handed = false;
  while (true) {
    uint32_t h = arbiter_->holder.load(std::memory_order_acquire);
    if (h == me) {  // Handed to us.
      handed = true;
      break;
    }
    if (h == 0) {
      if (arbiter_->holder.compare_exchange_strong(h, me, std::memory_order_acq_rel)) break;
      continue;
    }
    FutexWait(&arbiter_->holder, h, kPollNs);
    if (MonotonicNs() - waited_since >= kPollNs) {
      CheckHolder(h);
      waited_since = MonotonicNs();
    }
  }
  holding_ = true;
  uint64_t now = MonotonicNs();
  uint64_t start = now;
  const uint64_t since = arbiter_->holder_since_ns.load(std::memory_order_relaxed);
  if (handed) {
    start = std::max(std::min(since, now), now - std::min(now, kMaxLagNs));
  } else if (ready_ns != 0) {
    // Free: since `since` (its release). Our work was ready at `ready_ns`.
    start = std::max({std::min(std::max(ready_ns, since), now), now - std::min(now, kMaxLagNs)});
  }
  quantum_start_ns_ = start;
  arbiter_->holder_since_ns.store(start, std::memory_order_relaxed);
  arbiter_->holder_heartbeat_ns.store(now, std::memory_order_release);
  return start;
}

bool TimeSlicer::MaybeYield(uint64_t cursor_ns, uint64_t* resume_ns) {
  const uint32_t me = static_cast<uint32_t>(slot_) + 1;
  arbiter_->holder_heartbeat_ns.store(MonotonicNs(), std::memory_order_release);
  if (arbiter_->holder.load(std::memory_order_acquire) != me) {
    // Evicted while stopped: queue up again.
    holding_ = false;
    *resume_ns = Acquire();
    return true;
  }
  // The quantum is measured on the GPU's timeline, like the kernels.
  if (cursor_ns < quantum_start_ns_ + model_->quantum_ns()) return false;
  int next = NextWaiter();
  if (next < 0) {
    quantum_start_ns_ = cursor_ns;  // Nobody waits: a fresh quantum.
    return false;
  }
  HandTo(next, cursor_ns);  // Our waiting bit stays set: we still have kernels.
  *resume_ns = Acquire();
  return true;
}

void TimeSlicer::Release(uint64_t cursor_ns) {
  if (!holding_) return;
  SetWaiting(false);
  HandTo(NextWaiter(), std::min(cursor_ns, MonotonicNs()));
}

}  // namespace gpuslice::sim
