#include "sim/checkpoint_channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

using layout::ProcessSlot;

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ms) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout_ms / 1000);
  ts.tv_nsec = static_cast<long>(timeout_ms % 1000 * 1000000);
  // Not FUTEX_PRIVATE: the word is in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

uint32_t OpOf(uint32_t word) { return word & layout::kCkptOpMask; }
uint32_t SeqOf(uint32_t word) { return word >> 16; }

}  // namespace

CheckpointChannel::CheckpointChannel(DeviceModel* model) : model_(model) {
  own_slot_ = model->slot();
  if (own_slot_ >= 0) {
    own_generation_ = SlotOf(own_slot_).generation.load(std::memory_order_acquire);
  }
}

core::Result<CheckpointTarget> CheckpointChannel::Find(pid_t pid) {
  model_->Reap();
  for (int i = 0; i < static_cast<int>(layout::kMaxProcesses); ++i) {
    const ProcessSlot& s = SlotOf(i);
    if (s.state.load(std::memory_order_acquire) != layout::kSlotLive) continue;
    if (model_->VisiblePidOf(s) != pid || !model_->SlotAlive(i)) continue;
    CheckpointTarget t;
    t.slot = i;
    t.generation = s.generation.load(std::memory_order_acquire);
    t.pid = pid;
    return t;
  }
  return core::NotFoundError("process " + std::to_string(pid) + " does not use the simulated GPU");
}

bool CheckpointChannel::Alive(const CheckpointTarget& target) const {
  const ProcessSlot& s = SlotOf(target.slot);
  return s.state.load(std::memory_order_acquire) == layout::kSlotLive &&
         s.generation.load(std::memory_order_acquire) == target.generation &&
         model_->SlotAlive(target.slot);
}

layout::CheckpointState CheckpointChannel::State(const CheckpointTarget& target) const {
  return static_cast<layout::CheckpointState>(
      SlotOf(target.slot).ckpt_state.load(std::memory_order_acquire));
}

pid_t CheckpointChannel::ServiceTid(const CheckpointTarget& target) const {
  return SlotOf(target.slot).ckpt_tid.load(std::memory_order_acquire);
}

core::Result<uint32_t> CheckpointChannel::Call(const CheckpointTarget& target,
                                               const CheckpointRequest& request) {
  const int me = model_->slot();
  if (me < 0) return core::FailedPreconditionError("the requester is not registered");
  ProcessSlot& s = SlotOf(target.slot);
  const ProcessSlot& mine = SlotOf(me);
  const uint32_t owner = static_cast<uint32_t>(me) + 1;
  const auto owner_generation =
      static_cast<uint32_t>(mine.generation.load(std::memory_order_relaxed));
  auto gone = [&] {
    return core::NotFoundError("process " + std::to_string(target.pid) + " exited");
  };

  // Post, once the channel is free.
  uint32_t posted = 0;
  while (posted == 0) {
    if (!Alive(target)) return gone();
    model_->Lock();
    uint32_t cur = s.ckpt_request.load(std::memory_order_acquire);
    if (OpOf(cur) != layout::kCkptOpNone && (cur & layout::kCkptAnswered) != 0) {
      // Answered, but its requester never freed the channel: it died.
      const uint32_t o = s.ckpt_owner;
      const ProcessSlot& os = SlotOf(static_cast<int>(o - 1));
      bool owner_lives = o != 0 && o <= layout::kMaxProcesses &&
                         static_cast<uint32_t>(os.generation.load(std::memory_order_relaxed)) ==
                             s.ckpt_owner_generation &&
                         model_->SlotAlive(static_cast<int>(o - 1));
      if (!owner_lives) cur = SeqOf(cur) << 16;
    }
    if (OpOf(cur) == layout::kCkptOpNone) {
      uint32_t seq = (SeqOf(cur) + 1) & 0xffff;
      if (seq == 0) seq = 1;
      s.ckpt_timeout_ms = request.timeout_ms;
      s.ckpt_owner = owner;
      s.ckpt_owner_generation = owner_generation;
      for (uint32_t u = 0; u < layout::kMaxUnits; ++u) {
        s.units[u].remap_to.store(0, std::memory_order_relaxed);
      }
      for (const auto& [from, to] : request.pairs) {
        s.units[from].remap_to.store(to + 1, std::memory_order_relaxed);
      }
      posted = seq << 16 | request.op;
      s.ckpt_request.store(posted, std::memory_order_release);  // Publishes the fields above.
    }
    model_->Unlock();
    if (posted != 0) {
      FutexWakeAll(&s.ckpt_request);
    } else {
      FutexWait(&s.ckpt_request, cur, kPollMs);
    }
  }

  // Wait for the answer.
  const uint32_t seq = SeqOf(posted);
  uint64_t deadline_ns = 0;
  if (request.op == layout::kCkptOpLock && request.timeout_ms > 0) {
    deadline_ns = MonotonicNs() + (uint64_t{request.timeout_ms} + kGraceMs) * 1000000;
  }
  while (true) {
    uint32_t r = s.ckpt_response.load(std::memory_order_acquire);
    if ((r & 0xffff) == seq) {
      uint32_t answered = posted | layout::kCkptTaken | layout::kCkptAnswered;
      if (s.ckpt_request.compare_exchange_strong(answered, seq << 16, std::memory_order_acq_rel)) {
        FutexWakeAll(&s.ckpt_request);
      }
      return r >> 16;
    }
    if (!Alive(target)) return gone();
    if (deadline_ns != 0 && MonotonicNs() > deadline_ns) {
      uint32_t expected = posted;  // Not taken yet: withdraw it.
      if (s.ckpt_request.compare_exchange_strong(expected, seq << 16, std::memory_order_acq_rel)) {
        FutexWakeAll(&s.ckpt_request);
        return core::DeadlineExceededError("process " + std::to_string(target.pid) +
                                           " did not take up the lock request");
      }
      deadline_ns = 0;  // Taken: the target answers within its timeout.
    }
    FutexWait(&s.ckpt_response, r, kPollMs);
  }
}

CheckpointRequest CheckpointChannel::Next(uint32_t* seq) {
  ProcessSlot& s = SlotOf(own_slot_);
  while (true) {
    if (s.generation.load(std::memory_order_acquire) != own_generation_) {
      return CheckpointRequest();  // The process unregistered (exit).
    }
    uint32_t cur = s.ckpt_request.load(std::memory_order_acquire);
    if (OpOf(cur) != layout::kCkptOpNone && (cur & layout::kCkptTaken) == 0 &&
        s.ckpt_request.compare_exchange_strong(cur, cur | layout::kCkptTaken,
                                               std::memory_order_acq_rel)) {
      CheckpointRequest req;
      req.op = static_cast<layout::CheckpointOp>(OpOf(cur));
      req.timeout_ms = s.ckpt_timeout_ms;
      if (req.op == layout::kCkptOpRestore) {
        for (uint32_t u = 0; u < model_->unit_count(); ++u) {
          uint32_t to = s.units[u].remap_to.load(std::memory_order_relaxed);
          if (to != 0) req.pairs.emplace_back(u, to - 1);
        }
      }
      *seq = SeqOf(cur);
      return req;
    }
    FutexWait(&s.ckpt_request, cur, 1000);
  }
}

void CheckpointChannel::Answer(uint32_t seq, uint32_t code) {
  ProcessSlot& s = SlotOf(own_slot_);
  // Answered before the response, so the requester that sees its response
  // finds the flag it clears.
  s.ckpt_request.fetch_or(layout::kCkptAnswered, std::memory_order_acq_rel);
  s.ckpt_response.store(code << 16 | seq, std::memory_order_release);
  FutexWakeAll(&s.ckpt_response);
  FutexWakeAll(&s.ckpt_request);
}

void CheckpointChannel::SetServiceTid(pid_t tid) {
  SlotOf(own_slot_).ckpt_tid.store(tid, std::memory_order_release);
}

void CheckpointChannel::SetState(layout::CheckpointState state) {
  SlotOf(own_slot_).ckpt_state.store(state, std::memory_order_release);
}

}  // namespace gpuslice::sim
