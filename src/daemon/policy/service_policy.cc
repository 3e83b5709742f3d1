// Service: quotas, a job's priority and requeueing a preempted job (live
// resize: live/live_changes.h). See
// service.h and docs/DAEMON.md ("Policies"); whom preemption ends is
// makeroom/preemptions.h's.

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/base/log.h"
#include "daemon/config/config_check.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

std::vector<uint32_t> SystemGidsOf(const std::string& user, uint32_t gid) {
  std::vector<gid_t> gids(64);
  int n = static_cast<int>(gids.size());
  if (!user.empty() && getgrouplist(user.c_str(), gid, gids.data(), &n) < 0) {
    gids.resize(static_cast<size_t>(n));
    if (getgrouplist(user.c_str(), gid, gids.data(), &n) < 0) n = 0;
  }
  if (user.empty()) {
    gids = {gid};
    n = 1;
  }
  gids.resize(static_cast<size_t>(std::max(n, 0)));
  if (std::find(gids.begin(), gids.end(), gid) == gids.end()) gids.push_back(gid);
  return std::vector<uint32_t>(gids.begin(), gids.end());
}

std::vector<std::string> SystemGroupsOf(const std::string& user, uint32_t gid) {
  std::vector<std::string> out;
  for (gid_t g : SystemGidsOf(user, gid)) {
    struct group grp;
    struct group* found = nullptr;
    std::vector<char> buf(16384);
    if (getgrgid_r(g, &grp, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      out.emplace_back(found->gr_name);
    }
  }
  return out;
}

void Service::Requeue(Job& job, std::string reason) {
  if (capacity_) capacity_->Release(job.id);
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    Status s = regions_.Remove(job.region_path);
    if (!s.ok()) LogWarn("job " + std::to_string(job.id) + ": " + s.message());
  }
  if (!job.image.empty()) containers_.RemoveContainer(job);  // Its name is free for the next run.
  table_.live().erase(job.id);
  suspender_.Forget(job.id);
  usage_.Forget(job.id);
  watchdog_.Forget(job.id);
  idle_.Forget(job.id);
  job.reason = std::move(reason);
  job.pid = 0;
  job.pid_start_time = 0;
  job.region_path.clear();
  job.allocation = core::Allocation();
  job.started_ms = 0;
  // The next run's supervisor writes a new status; an old one would end it.
  unlink((setup_.JobDir(job.id) + "/status").c_str());
  ChangeState(job, JobState::kQueued, "requeued", job.reason);
  LogInfo("job " + std::to_string(job.id) + " requeued: " + job.reason);
  Enqueue(job);
}

}  // namespace gpuslice::daemon
