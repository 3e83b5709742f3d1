#pragma once

// Automatic defragmentation (docs/DAEMON.md, "Placement and the queue"):
// when the head of the queue does not fit but would once running
// single-GPU jobs moved to other GPUs (the placement core's plan,
// NodeCapacity::PlanDefragFor), `defragment = auto` moves them (each is
// suspended and resumed on its new GPU), and `suggest` only says which
// `gpuslice move` would. Moves lose no work, so the daemon tries them (and
// waits for them) before it preempts anyone.
//
// It owns the moves in flight, how often each job moved in the last hour,
// the jobs whose move failed (not planned again for an hour), and the
// suggestions per head: the jobs are the daemon's job table's (Service),
// read through `Jobs`; a move's suspension is Service's, asked through
// `Jobs` too. One thread, as Service.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/config/policy_config.h"
#include "daemon/launch/checkpointer.h"
#include "daemon/makeroom/live_job.h"
#include "daemon/placement/capacity.h"

namespace gpuslice::daemon {

class Defragmenter {
 public:
  // What it asks of the job table.
  struct Jobs {
    // A job of the table; null when there is none.
    std::function<const core::Job*(uint64_t id)> find;
    // Job `id` when it is running or suspended; unset otherwise.
    std::function<std::optional<LiveJob>(uint64_t id)> live;
    // Whether `job` can move at all (Service::CanMove: not a container,
    // not an elastic job).
    std::function<core::Status(const core::Job& job)> can_move;
    // Whether `job` has processes the driver can suspend: those the shim
    // registered in its slice (a job with no CUDA process cannot be
    // suspended, docs/SUSPEND.md).
    std::function<bool(const core::Job& job)> has_cuda_processes;
    // The placement core's moves (at most `max_moves`, of jobs `movable`
    // allows) after which head `head_id` fits; empty when there are none.
    std::function<std::vector<NodeCapacity::MoveHint>(
        uint64_t head_id, uint32_t max_moves, const std::function<bool(uint64_t id)>& movable)>
        plan;
    // Starts suspending running job `id` to resume it on `why.move_to` (a
    // worker thread does it); an error when it cannot start.
    std::function<core::Status(uint64_t id, const SuspendToMakeRoom& why)> suspend;
    // Records an event (Service::RecordEvent).
    std::function<void(std::string kind, uint64_t job_id, std::string user, std::string message)>
        record;
  };

  // `rules`: the mode and its limits (defragment, defragment_max_moves,
  // defragment_moves_per_hour); `checkpointer`: the driver's checkpoint
  // API, null when the daemon has none. Both outlive it.
  Defragmenter(Jobs jobs, const PolicyConfig& rules, Checkpointer* checkpointer, Clock& clock)
      : jobs_(std::move(jobs)), rules_(rules), checkpointer_(checkpointer), clock_(clock) {}

  // For head `head_id` (0: none) that does not fit: plans moves (at most
  // once a second for the same head) and, with `auto`, starts them, or,
  // with `suggest`, keeps the commands for the head's reason. True when
  // moves were started. Forgets the moves whose worker is done first.
  bool Defragment(uint64_t head_id);
  // Whether moves it started are still in flight (nothing else starts
  // meanwhile: the room they free is the head's).
  bool moving() const { return !moving_.empty(); }
  // For the head's reason: "; moving job(s) 3 to make room" while moves
  // are in flight, else (suggest) "; a move would let it start: gpuslice
  // move 7 --gpu GPU-..." (or "moves would ...: ..., then ..."); "" when
  // neither.
  std::string WaitingText(uint64_t head_id) const;
  // Job `id`'s automatic move failed at `now_ms` (its suspension did): it
  // is not planned again for an hour, as it would fail the same way.
  void MoveFailed(uint64_t id, int64_t now_ms);

 private:
  // Whether running job `job` may be moved now: one GPU, not MIG, not
  // external, movable at all, not busy, ending or stopped, with CUDA
  // processes; not refused lately, nor moved too often in the last hour.
  bool Movable(const core::Job& job, int64_t now) const;

  Jobs jobs_;
  const PolicyConfig& rules_;
  Checkpointer* checkpointer_;
  Clock& clock_;
  std::set<uint64_t> moving_;                                   // Jobs being moved for the head.
  std::unordered_map<uint64_t, std::deque<int64_t>> moves_at_;  // Per job, last hour.
  std::unordered_map<uint64_t, int64_t> refused_until_;         // A move that failed.
  std::unordered_map<uint64_t, std::string> hint_;              // suggest: head -> text.
  uint64_t checked_head_ = 0;
  int64_t checked_ms_ = 0;
};

}  // namespace gpuslice::daemon
