// Service: the pass after each usage sample (service_usage.cc) that hands
// each running job to the watchdog (watch/watchdog.h) and idle reclaim
// (watch/idle_reclaim.h); a job's flags.
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

std::vector<std::string> Service::FlagsOf(uint64_t id) const {
  std::vector<std::string> flags;
  auto l = table_.live().find(id);
  if (l == table_.live().end()) return flags;
  flags = suspender_.Flags(id);
  if (idle_.Flagged(id)) flags.push_back("idle");
  if (l->second.paused) flags.push_back("paused");
  watchdog_.AppendFlags(id, &flags);
  if (quotas_.borrowers().count(id)) flags.push_back("borrowing");
  if (l->second.ending && l->second.ending_reason.rfind("preempted", 0) == 0) {
    flags.push_back("preempted");
  }
  if (auto j = table_.jobs().find(id);
      j != table_.jobs().end() && !OutsidePoolText(j->second).empty()) {
    flags.push_back("outside_pool");
  }
  return flags;
}

std::string Service::OutsidePoolText(const core::Job& job) const {
  const std::string& pool =
      job.request.pool.empty() ? options_.rules.default_pool : job.request.pool;
  std::string moved;
  for (uint32_t g : job.allocation.gpu_indices) {
    if (PoolOf(g) == pool) continue;
    moved +=
        (moved.empty() ? "GPU " : ", GPU ") + std::to_string(g) + " is in pool '" + PoolOf(g) + "'";
  }
  if (moved.empty()) return "";
  return "outside its pool '" + pool + "' since the configuration changed: " + moved +
         "; it runs on where it is, and nothing new of pool '" + pool + "' is placed there";
}

}  // namespace gpuslice::daemon
