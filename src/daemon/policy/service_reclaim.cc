// Service: the pass after each usage sample (service_usage.cc) that hands
// each running job to the watchdog (watch/watchdog.h) and idle reclaim
// (watch/idle_reclaim.h) (a job's flags: reads/job_reads.h).
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

}  // namespace gpuslice::daemon
