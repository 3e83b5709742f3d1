// Service: the pass after each usage sample (service_usage.cc) that hands
// each running job to the watchdog (watch/watchdog.h) and idle reclaim
// (watch/idle_reclaim.h); `gpuslice resume` of a paused job.
// See docs/DAEMON.md ("Idle reclaim", "Enforcement watchdog").

#include <fcntl.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

void Service::Reclaim() {
  bool someone_waits = !table_.queue().empty();
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : table_.live()) ids.push_back(id);
  for (uint64_t id : ids) {
    const JobUsage* u = usage_.Find(id);
    if (u == nullptr || u->sampled_ms == 0) continue;
    Job& job = table_.jobs()[id];
    Live& l = table_.live()[id];
    if (l.ending) {
      // A stopped job being ended must run to take its SIGTERM.
      watchdog_.LetEnd(job);
      continue;
    }
    const JobUsage& use = *u;
    if (job.state == JobState::kSuspended) {
      suspender_.WatchSuspended(job, use);
      continue;  // Holds no GPU: neither idle nor over any limit.
    }
    if (suspender_.Busy(id)) continue;  // Being suspended: its processes are locked.

    // The watchdog (watch/watchdog.h).
    if (watchdog_.Watch(job, use)) continue;
    if (watchdog_.Stopped(id)) continue;  // Frozen by the watchdog, not idle.

    // Idle reclaim (watch/idle_reclaim.h).
    idle_.Watch(job, use, someone_waits);
  }
}

Status Service::Resume(const Caller& caller, uint64_t id) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  auto l = table_.live().find(id);
  if (job.state == JobState::kSuspended && l != table_.live().end()) {
    return suspender_.Resume(job, caller.user.empty() ? std::to_string(caller.uid) : caller.user);
  }
  if (l == table_.live().end() || !l->second.paused) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is not paused");
  }
  SliceLimits limits = setup_.SliceLimitsOf(job);
  limits.launches_paused = false;
  GPUSLICE_RETURN_IF_ERROR(regions_.Update(job.region_path, limits));
  l->second.paused = false;
  idle_.Unpaused(id, usage_.Find(id));
  RecordEvent("resumed", id, job.user,
              "launches allowed again by " +
                  (caller.user.empty() ? std::to_string(caller.uid) : caller.user));
  return Status::Ok();
}

}  // namespace gpuslice::daemon
