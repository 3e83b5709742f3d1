#include "daemon/makeroom/defragmenter.h"

#include <algorithm>

#include "core/strings.h"
#include "daemon/base/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

namespace {

constexpr int64_t kHourMs = 3600 * 1000;
// A job whose automatic move failed is not planned again for this long.
constexpr int64_t kRetryMs = kHourMs;
// The same head is planned for at most this often (a tick is 100 ms), as
// often as the queue is ranked.
constexpr int64_t kPlanEveryMs = 1000;

}  // namespace

bool Defragmenter::Movable(const Job& job, int64_t now) const {
  if (job.state != JobState::kRunning || job.mode == core::JobMode::kExternal) return false;
  if (job.allocation.gpu_uuids.size() != 1 || job.request.kind == core::RequestKind::kMig) {
    return false;
  }
  if (!jobs_.can_move(job).ok()) return false;  // A container, an elastic job.
  std::optional<LiveJob> l = jobs_.live(job.id);
  if (!l || l->checkpointing || l->ending || l->stopped) return false;
  // A job with no CUDA process cannot be suspended (docs/SUSPEND.md): the
  // processes the shim registered in its slice are its CUDA processes.
  if (!jobs_.has_cuda_processes(job)) return false;
  if (auto r = refused_until_.find(job.id); r != refused_until_.end() && now < r->second) {
    return false;
  }
  auto moved = moves_at_.find(job.id);
  if (moved != moves_at_.end()) {
    const auto recent = std::count_if(moved->second.begin(), moved->second.end(),
                                      [&](int64_t at) { return now - at < kHourMs; });
    if (recent >= static_cast<int64_t>(rules_.defragment_moves_per_hour)) return false;
  }
  return true;
}

bool Defragmenter::Defragment(uint64_t head_id) {
  const DefragMode mode = rules_.defragment;
  const int64_t now = clock_.NowMs();
  // Moves in flight are done once their job's worker is.
  std::erase_if(moving_, [&](uint64_t id) {
    std::optional<LiveJob> l = jobs_.live(id);
    return !l || !l->checkpointing;
  });
  for (auto& [id, times] : moves_at_) {
    while (!times.empty() && now - times.front() >= kHourMs) times.pop_front();
  }
  std::erase_if(moves_at_, [](const auto& e) { return e.second.empty(); });
  if (mode == DefragMode::kOff || head_id == 0 || !moving_.empty()) return false;
  if (!checkpointer_ || !checkpointer_->Available().ok()) return false;
  // Planned at most once a second for the same head: a tick is 100 ms.
  if (head_id == checked_head_ && now - checked_ms_ < kPlanEveryMs) return false;
  checked_head_ = head_id;
  checked_ms_ = now;
  hint_.clear();  // Only the head's is shown, and it is planned again now.
  const std::vector<NodeCapacity::MoveHint> moves =
      jobs_.plan(head_id, rules_.defragment_max_moves, [&](uint64_t id) {
        const Job* job = jobs_.find(id);
        return job && Movable(*job, now);
      });
  if (moves.empty()) return false;
  const Job& head = *jobs_.find(head_id);
  if (mode == DefragMode::kSuggest) {
    std::vector<std::string> steps;
    for (const auto& m : moves) {
      steps.push_back("gpuslice move " + std::to_string(m.job_id) + " --gpu " + m.to_uuid);
    }
    hint_[head_id] = std::string(moves.size() == 1 ? "; a move would let it start: "
                                                   : "; moves would let it start: ") +
                     core::Join(steps, ", then ");
    return false;
  }
  const std::string why = "to let job " + std::to_string(head_id) + " (" + head.request.Describe() +
                          ", first in line) start";
  std::vector<std::string> started;
  for (const auto& m : moves) {
    const Job& job = *jobs_.find(m.job_id);
    SuspendToMakeRoom cause;
    cause.by = "the daemon " + why;
    cause.move_to = m.to_uuid;
    cause.defrag_for = head_id;
    if (Status s = jobs_.suspend(m.job_id, cause); !s.ok()) {
      refused_until_[m.job_id] = now + kRetryMs;
      jobs_.record("move_failed", m.job_id, job.user, "automatic move " + why + ": " + s.message());
      continue;
    }
    moving_.insert(m.job_id);
    moves_at_[m.job_id].push_back(now);
    started.push_back("job " + std::to_string(m.job_id) + " to " + m.to_uuid);
  }
  if (started.empty()) return false;
  jobs_.record("defragmenting", head_id, head.user, "moving " + core::Join(started, ", "));
  LogInfo("defragmenting for job " + std::to_string(head_id) + ": moving " +
          core::Join(started, ", "));
  return true;
}

std::string Defragmenter::WaitingText(uint64_t head_id) const {
  // Last in the head's reason, so that the command a hint names ends the
  // line.
  if (!moving_.empty()) {
    std::vector<std::string> ids;
    for (uint64_t id : moving_) ids.push_back(std::to_string(id));
    return "; moving job(s) " + core::Join(ids, ", ") + " to make room";
  }
  // With defragment = suggest, the moves Defragment planned for the head
  // (with auto it makes them itself; with off it plans none).
  auto hint = hint_.find(head_id);
  return hint == hint_.end() ? "" : hint->second;
}

void Defragmenter::MoveFailed(uint64_t id, int64_t now_ms) {
  // Not planned again for a while: it would fail the same way.
  refused_until_[id] = now_ms + kRetryMs;
}

}  // namespace gpuslice::daemon
