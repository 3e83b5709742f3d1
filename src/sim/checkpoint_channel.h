#pragma once

// The checkpoint request channel of a process slot (docs/SIMULATOR.md,
// "Checkpoint and restore"): how one process (the requester, typically the
// node daemon) asks another (the target) to lock, checkpoint, restore or
// unlock its simulated GPU state. Only the target can touch its device
// memory, so a service thread in the target's simulated driver executes the
// requests; the requester posts one in the target's ProcessSlot and waits for
// the answer. Both sides meet on futex words in the MAP_SHARED state file.
//
// Requesters are serialised per target: a request is posted only while the
// channel is free (checked and written under the state file's robust mutex,
// so a requester that dies while posting leaves nothing half-done); the
// target answers, and the requester frees the channel once it has read the
// answer. A requester that died before that is noticed by the next one,
// which frees the channel itself. Requesters must be registered processes
// (cuInit), the target's slot is what they name them by.
//
// Thread safety: any thread of any process; one service thread per process.

#include <sys/types.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sim/device_model.h"
#include "sim/state_layout.h"

namespace gpuslice::sim {

struct CheckpointRequest {
  layout::CheckpointOp op = layout::kCkptOpNone;
  uint32_t timeout_ms = 0;  // kCkptOpLock: 0 waits as long as it takes.
  // kCkptOpRestore: the GPUs to move to; empty: stay.
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // (old unit, new unit).
};

// A target, as a requester finds it.
struct CheckpointTarget {
  int slot = -1;
  uint64_t generation = 0;  // Of the slot's claim: tells a reused slot apart.
  pid_t pid = 0;            // In the requester's PID namespace.
};

class CheckpointChannel {
 public:
  // `model`'s registered slot (if any) is the caller's own: the requester's
  // identity, or the target's channel on the service side.
  explicit CheckpointChannel(DeviceModel* model);

  // The live process that the caller's namespace names `pid`. kNotFound when
  // no process of the simulated GPU has that pid (dead ones are reaped).
  core::Result<CheckpointTarget> Find(pid_t pid);
  // Whether `target` still runs (same slot claim, process alive).
  bool Alive(const CheckpointTarget& target) const;
  layout::CheckpointState State(const CheckpointTarget& target) const;
  // The service thread's tid in the target's namespace; 0: none (an older
  // build of the driver that serves no requests).
  pid_t ServiceTid(const CheckpointTarget& target) const;

  // Posts `request` (after any other requester's has been answered) and
  // waits for the answer: the code the target's service thread answered
  // with (a CUresult). Errors: kNotFound when the target exits before
  // answering (noticed within kPollMs); kDeadlineExceeded when a lock with a
  // timeout was not taken up by the target within timeout_ms + kGraceMs (the
  // target is stopped, say): the request is then withdrawn, nothing changed.
  core::Result<uint32_t> Call(const CheckpointTarget& target, const CheckpointRequest& request);

  // Service side, in the target process (its own registered slot). Blocks
  // until a request is posted and takes it; `*seq` identifies it for Answer.
  // Returns op kCkptOpNone once the process has unregistered (exit).
  CheckpointRequest Next(uint32_t* seq);
  // Answers the request taken last and frees the channel for the next one.
  void Answer(uint32_t seq, uint32_t code);
  // Publishes this process's service thread (`tid`) and state.
  void SetServiceTid(pid_t tid);
  void SetState(layout::CheckpointState state);

  static constexpr uint64_t kPollMs = 20;
  static constexpr uint64_t kGraceMs = 1000;

 private:
  layout::ProcessSlot& SlotOf(int slot) const { return model_->state()->slots[slot]; }

  DeviceModel* model_;
  int own_slot_ = -1;
  uint64_t own_generation_ = 0;
};

}  // namespace gpuslice::sim
