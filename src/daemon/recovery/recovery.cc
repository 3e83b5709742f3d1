// Recovery: the state directory's modes, and the jobs the ledger recorded
// taken back after a restart (re-adoption, jobs that ended or were being
// started while the daemon was down). See recovery.h.

#include "daemon/recovery/recovery.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/node/job_finder.h"
#include "daemon/store/ledger.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

Status Recovery::SecureStateDir() {
  // Layout v2 (DESIGN, docs/DAEMON.md): others may traverse the state
  // directory to reach the slice files named in a job's environment, but not
  // list it; the ledger and job directories are the daemon's alone (the
  // ledger holds every job's environment). An install made by an
  // older gpusliced (0755, 0644) is fixed here, at every start.
  if (mkdir(options_.state_dir.c_str(), 0711) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create state directory " + options_.state_dir);
  }
  struct stat st;
  if (stat(options_.state_dir.c_str(), &st) != 0) {
    return ErrnoError(errno, "stat state directory " + options_.state_dir);
  }
  if (st.st_uid != geteuid()) {
    return core::PermissionDeniedError(
        "state directory " + options_.state_dir + " belongs to uid " + std::to_string(st.st_uid) +
        ", not to the daemon's user (uid " + std::to_string(geteuid()) + ")");
  }
  if (chmod(options_.state_dir.c_str(), 0711) != 0) {
    return ErrnoError(errno, "chmod 0711 " + options_.state_dir);
  }
  std::string jobs_dir = options_.state_dir + "/jobs";
  if (mkdir(jobs_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create " + jobs_dir);
  }
  if (chmod(jobs_dir.c_str(), 0700) != 0) return ErrnoError(errno, "chmod 0700 " + jobs_dir);
  if (DIR* d = opendir(jobs_dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string dir = jobs_dir + "/" + e->d_name;
      struct stat js;
      if (lstat(dir.c_str(), &js) == 0 && S_ISDIR(js.st_mode) && (js.st_mode & 077) != 0) {
        (void)chmod(dir.c_str(), 0700);
      }
    }
    closedir(d);
  }
  return RestrictLedgerFiles(options_.state_dir + "/ledger.db");
}

void Recovery::Recover(std::vector<Job> all) {
  // Finished jobs: keep the most recent for `ps --all`.
  std::vector<Job> live;
  for (Job& j : all) {
    if (j.IsLive()) {
      live.push_back(std::move(j));
    } else {
      table_.Add(std::move(j));
    }
  }
  int adopted = 0, ended = 0, requeued = 0;
  std::vector<uint64_t> outside_pool;  // Held outside the pool they asked for.
  for (Job& j : live) {
    uint64_t id = j.id;
    Job& job = table_.Add(std::move(j));
    const bool external = job.mode == core::JobMode::kExternal;
    if (job.state == JobState::kRunning && job.mode != core::JobMode::kShell && !external &&
        job.pid == 0 && !ResolveInterruptedLaunch(job)) {
      ++ended;
      continue;
    }
    Status d = hooks_.capacity().SetDemand(id, job.request);
    if (job.state == JobState::kQueued) {
      Status ever = d.ok() ? hooks_.capacity().CouldEverFit(job.request) : d;
      if (!ever.ok()) {
        transitions_.FinishJob(job, JobState::kFailed, -1,
                               "no longer fits this machine: " + ever.message());
        continue;
      }
      if (auto broken = hooks_.rewait(job)) {
        transitions_.FinishJob(job, JobState::kCancelled, -1, std::move(*broken));
        ++ended;
        continue;
      }
      if (job.hold != core::HoldKind::kNone) hooks_.hold(id);
      hooks_.enqueue(job);
      ++requeued;
      continue;
    }
    // Running: take back exactly what the ledger says it holds. Suspended:
    // nothing (it takes its room back when resumed).
    const bool suspended = job.state == JobState::kSuspended;
    Status held = !d.ok()     ? d
                  : suspended ? Status::Ok()
                              : hooks_.capacity().Hold(id, job.allocation);
    if (!held.ok()) {
      // The configuration may have moved its GPUs to another pool, or
      // removed its pool, while it ran: it keeps what it holds, so a pool
      // change does not kill a running job at the restart. What cannot
      // be held at all (a GPU gone, taken twice) still fails it below.
      Status outside = hooks_.capacity().HoldOutsidePool(
          id, job.request, suspended ? core::Allocation{} : job.allocation);
      if (outside.ok()) {
        held = outside;
        outside_pool.push_back(id);
      }
    }
    // Its cgroup, when it was started (or attached) in one, says whether it
    // lives.
    const bool in_cgroup = job.pid > 0 && launcher_.Adopt(id, job.pid);
    // An external job lives until its owner releases it.
    bool alive = external ? true
                 : job.mode == core::JobMode::kShell && !in_cgroup
                     ? launcher_.ProcessAlive(job.pid, job.pid_start_time)
                     : launcher_.GroupAlive(job.pid);
    if (!held.ok()) {
      if (alive) (void)launcher_.SignalGroup(job.pid, SIGKILL);
      transitions_.FinishJob(job, JobState::kFailed, -1,
                             "allocation could not be restored after a restart: " + held.message());
      ++ended;
      continue;
    }
    LiveState l;
    l.in_cgroup = job.mode == core::JobMode::kShell && in_cgroup;
    if (!alive) {
      // Ended while the daemon was down; the supervisor left the status.
      auto code = ReadExitStatusFile(hooks_.job_dir(id) + "/status");
      transitions_.FinishJob(job, JobState::kExited, code.value_or(-1),
                             code ? launcher_.EndNote(job.pid)
                                  : "ended while the daemon was down; exit status unknown");
      ++ended;
      continue;
    }
    if (!job.region_path.empty() && !regions_.Exists(job.region_path)) {
      LogWarn("job " + std::to_string(id) + ": slice region " + job.region_path +
              " is gone; its processes keep their mapping");
    }
    table_.live()[id] = l;
    if (!external) {
      hooks_.recover_suspension(job);
    }
    ++adopted;
  }
  // Processes in the cgroup of a job that is not running now (started by a
  // daemon that died before recording it, so the job is queued again) would
  // run twice: end them.
  std::vector<uint64_t> running;
  for (const auto& [id, l] : table_.live()) running.push_back(id);
  for (const std::string& stray : launcher_.EndStrays(running)) {
    LogWarn("killed the processes of cgroup " + stray + ": no running job of this daemon owns it");
  }
  for (uint64_t id : outside_pool) {
    auto it = table_.jobs().find(id);
    if (it == table_.jobs().end() || !it->second.IsLive()) continue;
    const std::string why = hooks_.outside_pool_text(it->second);
    LogWarn("job " + std::to_string(id) + ": " + why);
    transitions_.RecordEvent("outside_pool", id, it->second.user, why);
  }
  // Finished jobs are trimmed only now: the dependencies of queued jobs were
  // judged above against all of them.
  table_.TrimHistory(options_.history, clock_.NowMs() - options_.keep_ended_ms);
  if (!live.empty()) {
    LogInfo("recovered from the ledger: " + std::to_string(adopted) +
            " running job(s) re-adopted, " + std::to_string(ended) + " ended while down, " +
            std::to_string(requeued) + " queued");
  }
}

bool Recovery::ResolveInterruptedLaunch(Job& job) {
  const std::string id = std::to_string(job.id);
  auto find = [&]() {
    return options_.find_job_groups
               ? options_.find_job_groups(job)
               : FindProcessGroupsByEnv(JobIdentityEnv(job.id, job.region_path));
  };
  std::vector<int64_t> groups = find();
  const std::string dir = hooks_.job_dir(job.id);
  struct stat st;
  const bool began = stat((dir + "/stdout").c_str(), &st) == 0;
  // The log files are opened before the supervisor forks: a launch that
  // began may still be between fork and exec (the daemon's environment, not
  // yet the job's); give it a moment to exec before deciding.
  for (int i = 0; groups.empty() && began && i < 20 && !ReadExitStatusFile(dir + "/status"); ++i) {
    usleep(50'000);
    groups = find();
  }
  if (!groups.empty()) {
    job.pid = groups.front();
    job.pid_start_time = ProcessStartTime(job.pid);
    if (groups.size() > 1) {
      LogWarn("job " + id + ": processes in " + std::to_string(groups.size()) +
              " process groups; tracking group " + std::to_string(job.pid));
    }
    transitions_.Persist(job, JobState::kRunning);
    transitions_.RecordEvent(
        "adopted", job.id, job.user,
        "the daemon stopped while starting it; found running as process group " +
            std::to_string(job.pid) + ", not started again");
    return true;
  }
  if (auto code = ReadExitStatusFile(dir + "/status")) {
    transitions_.FinishJob(job, JobState::kExited, *code,
                           "ran while the daemon was down (its start was not recorded)");
    return false;
  }
  if (!began) {
    // Nothing of it ever ran: the slice was made, the launch never began.
    hooks_.forget_start(job);
    job.reason = "the daemon stopped before starting it; queued again";
    transitions_.ChangeState(job, JobState::kQueued, "requeued", job.reason);
    return true;
  }
  transitions_.FinishJob(
      job, JobState::kFailed, -1,
      "the daemon stopped while starting it and no process of it is left; not started "
      "again, so that it can never run twice (resubmit it)");
  return false;
}

}  // namespace gpuslice::daemon
