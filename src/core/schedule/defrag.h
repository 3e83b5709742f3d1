#pragma once

// Automatic defragmentation: when the job first in line does not
// fit, a few running single-GPU tasks moved to other GPUs may make the room
// it needs: GPUs made idle for a job of whole GPUs, enough of one GPU for a
// fraction. ProposeMove (move_proposal.h) finds one such move; PlanDefrag
// finds a set of at most `max_moves`, cheapest first. The daemon carries the
// moves out (a suspension and a resume on the new GPU, docs/SUSPEND.md); the
// queue replay applies them to its model.
//
// How: for a whole-GPU demand of k GPUs, each node's GPUs that the demand may
// use are ranked by what freeing them costs (idle: nothing; else the movable
// tasks on them: their number, then their GPU memory; a GPU with anything
// that cannot move is out), and the k cheapest of one island (when islands
// are known) are freed. For a fraction, each GPU it may use sheds its
// largest movable tasks until it has room. Either way the demand is then
// placed there and the moved tasks are placed again by the policy, anywhere
// but there; the first candidate (cheapest first) for which all of that
// works is the plan. Bounded: at most `max_tries` candidates are tried.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/placement/move_proposal.h"
#include "core/placement/placement_model.h"
#include "core/placement/placement_policy.h"
#include "core/status.h"

namespace gpuslice::core {

struct DefragOptions {
  uint32_t max_moves = 2;   // Tasks moved for one demand, at most.
  uint32_t max_tries = 16;  // Candidates (node and GPUs to free) tried.
};

struct DefragPlan {
  // Each task to move: its placement now and after (MoveProposal::head is
  // the demand's placement, as in `head` below).
  std::vector<MoveProposal> moves;
  Placement head;              // Where the demand goes once they moved.
  uint64_t moved_gpu_mem = 0;  // GPU memory the moves carry, in all.
};

// A set of moves of movable single-GPU tasks in `tasks` after which `head`
// fits (nullopt when there is none within the options, or `head` asks for
// no GPU). `state` is not changed. Errors: a task whose placement does not
// match `state`, an invalid demand.
Result<std::optional<DefragPlan>> PlanDefrag(const ClusterState& state, const Demand& head,
                                             std::span<const PlacedTask> tasks,
                                             const PlaceOptions& options,
                                             const DefragOptions& defrag = {});

}  // namespace gpuslice::core
