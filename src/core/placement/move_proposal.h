#pragma once

// Moves that let a waiting job start ("defragment"): when the job
// first in line does not fit, one running single-GPU task moved to another
// GPU may free the room it needs (a GPU made idle for a whole-GPU job, or
// enough of one GPU for a fraction). The daemon can carry such a move out
// without losing work (a suspension and a resume elsewhere; docs/SUSPEND.md);
// the replay (`gpuslice-replay --moves`) reports how often one would have
// helped on a trace.

#include <cstdint>
#include <optional>
#include <span>

#include "core/placement/placement_model.h"
#include "core/placement/placement_policy.h"
#include "core/status.h"

namespace gpuslice::core {

// A task that holds resources now, as the proposer sees it.
struct PlacedTask {
  uint64_t id = 0;
  Demand demand;
  Placement placement;
  bool movable = true;  // False: never proposed (an external job, say).
};

struct MoveProposal {
  uint64_t task_id = 0;
  Placement from;  // The moved task's placement now ...
  Placement to;    // ... and after the move.
  Placement head;  // Where the waiting demand then goes.
};

struct MoveOptions {
  // At most this many candidate moves are tried per call, cheapest first
  // (least GPU memory and compute to move), so the cost stays bounded on a
  // large cluster.
  uint32_t max_tries = 64;
};

// One move of one single-GPU task in `tasks` after which `head` fits
// (placed by `options`' policy), or nullopt when none does. Only tasks on a
// GPU whose freeing would give `head` room are tried. `state` is not
// changed. Errors: a task whose demand or placement does not match `state`.
Result<std::optional<MoveProposal>> ProposeMove(const ClusterState& state, const Demand& head,
                                                std::span<const PlacedTask> tasks,
                                                const PlaceOptions& options,
                                                const MoveOptions& move_options = {});

}  // namespace gpuslice::core
