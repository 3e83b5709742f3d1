// Service: keeping state. Start (the state directory, the ledger, the
// inventory), recovery from the ledger after a restart (re-adoption, jobs that
// ended or were being started while the daemon was down), the ledger's upkeep
// and degraded mode, and trimming finished jobs from memory. See service.h.

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"
#include "daemon/node/job_finder.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

bool Service::Persist(const Job& job, std::optional<JobState> from) {
  if (!ledger_) return false;
  Status s = ledger_->SaveJob(job, from, clock_.NowMs());
  if (!s.ok()) {
    degraded_.Unsaved(job.id, from, s.message());
    return false;
  }
  return true;
}

bool Service::ChangeState(Job& job, JobState to, std::string kind, std::string message) {
  const JobState from = job.state;
  if (!core::CanTransition(from, to)) {
    LogError("job " + std::to_string(job.id) + ": illegal transition " +
             std::string(core::JobStateName(from)) + " -> " + std::string(core::JobStateName(to)));
    return false;
  }
  job.state = to;
  const bool saved = Persist(job, from);
  if (!kind.empty()) RecordEvent(std::move(kind), job.id, job.user, std::move(message));
  return saved;
}

void Service::MaintainLedger() { degraded_.Maintain(); }

Status Service::SecureStateDir() {
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

Status Service::Start() {
  GPUSLICE_RETURN_IF_ERROR(SecureStateDir());
  containers_.OpenCdi();

  auto inv = inventory_source_.Read();
  if (!inv.ok()) {
    degraded_.Degrade("cannot read the GPUs: " + inv.status().message());
  } else {
    inventory_ = *inv;
    LogInfo("GPUs from " +
            (inventory_.simulated() ? std::string("the SIMULATED GPU (no NVIDIA "
                                                  "driver found): ")
                                    : std::string("NVML: ")) +
            inventory_.library + ", " + std::to_string(inventory_.gpus.size()) + " GPU(s)");
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<std::string> pool_of,
                            pools_.Resolve(options_.rules, inventory_.gpus));
  auto cap =
      NodeCapacity::Create(inventory_.gpus, options_.policy, pool_of, options_.rules.default_pool);
  if (!cap.ok()) return cap.status();
  capacity_ = std::move(*cap);
  for (const GpuInfo& g : inventory_.gpus) {
    quotas_.NoteGpuMemory(g.memory_total);
  }

  std::string ledger_path = options_.state_dir + "/ledger.db";
  auto ledger = Ledger::Open(ledger_path);
  if (!ledger.ok()) {
    degraded_.Degrade("ledger unreadable: " + ledger.status().message());
    return Status::Ok();
  }
  ledger_ = std::move(*ledger);
  auto max_id = ledger_->MaxJobId();
  auto live = ledger_->LoadJobs(/*live_only=*/false);
  if (!max_id.ok() || !live.ok()) {
    degraded_.Degrade("ledger unreadable: " +
                      (!max_id.ok() ? max_id.status() : live.status()).message());
    ledger_.reset();
    return Status::Ok();
  }
  table_.ContinueIdsAfter(*max_id);
  if (auto quotas = ledger_->LoadQuotas(); quotas.ok()) {
    for (const auto& [who, quota] : *quotas) quotas_.Set(who, quota);
  } else {
    degraded_.Degrade("ledger unreadable: " + quotas.status().message());
  }
  events_.LoadCounts();
  Recover(std::move(*live));
  SeedFairShare();
  ranker_.Rerank(/*force=*/true);
  Schedule();
  containers_.SyncCdi();
  return Status::Ok();
}

void Service::Recover(std::vector<Job> all) {
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
    Status d = capacity_->SetDemand(id, job.request);
    if (job.state == JobState::kQueued) {
      Status ever = d.ok() ? capacity_->CouldEverFit(job.request) : d;
      if (!ever.ok()) {
        FinishJob(job, JobState::kFailed, -1, "no longer fits this machine: " + ever.message());
        continue;
      }
      if (auto broken = dependencies_.Rewait(job)) {
        FinishJob(job, JobState::kCancelled, -1, std::move(*broken));
        ++ended;
        continue;
      }
      if (job.hold != core::HoldKind::kNone) holds_.Hold(id);
      Enqueue(job);
      ++requeued;
      continue;
    }
    // Running: take back exactly what the ledger says it holds. Suspended:
    // nothing (it takes its room back when resumed).
    const bool suspended = job.state == JobState::kSuspended;
    Status held = !d.ok() ? d : suspended ? Status::Ok() : capacity_->Hold(id, job.allocation);
    if (!held.ok()) {
      // The configuration may have moved its GPUs to another pool, or
      // removed its pool, while it ran: it keeps what it holds, so a pool
      // change does not kill a running job at the restart. What cannot
      // be held at all (a GPU gone, taken twice) still fails it below.
      Status outside = capacity_->HoldOutsidePool(id, job.request,
                                                  suspended ? core::Allocation{} : job.allocation);
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
      FinishJob(job, JobState::kFailed, -1,
                "allocation could not be restored after a restart: " + held.message());
      ++ended;
      continue;
    }
    Live l;
    l.in_cgroup = job.mode == core::JobMode::kShell && in_cgroup;
    if (!alive) {
      // Ended while the daemon was down; the supervisor left the status.
      auto code = ReadExitStatusFile(setup_.JobDir(id) + "/status");
      FinishJob(job, JobState::kExited, code.value_or(-1),
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
      suspender_.Recover(job);
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
    const std::string why = reads_.OutsidePoolText(it->second);
    LogWarn("job " + std::to_string(id) + ": " + why);
    RecordEvent("outside_pool", id, it->second.user, why);
  }
  // Finished jobs are trimmed only now: the dependencies of queued jobs were
  // judged above against all of them.
  table_.TrimHistory(options_.history, clock_.NowMs() - kKeepEndedMs);
  if (!live.empty()) {
    LogInfo("recovered from the ledger: " + std::to_string(adopted) +
            " running job(s) re-adopted, " + std::to_string(ended) + " ended while down, " +
            std::to_string(requeued) + " queued");
  }
}

bool Service::ResolveInterruptedLaunch(Job& job) {
  const std::string id = std::to_string(job.id);
  auto find = [&]() {
    return options_.find_job_groups
               ? options_.find_job_groups(job)
               : FindProcessGroupsByEnv(JobIdentityEnv(job.id, job.region_path));
  };
  std::vector<int64_t> groups = find();
  const std::string dir = setup_.JobDir(job.id);
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
    Persist(job, JobState::kRunning);
    RecordEvent("adopted", job.id, job.user,
                "the daemon stopped while starting it; found running as process group " +
                    std::to_string(job.pid) + ", not started again");
    return true;
  }
  if (auto code = ReadExitStatusFile(dir + "/status")) {
    FinishJob(job, JobState::kExited, *code,
              "ran while the daemon was down (its start was not recorded)");
    return false;
  }
  if (!began) {
    // Nothing of it ever ran: the slice was made, the launch never began.
    ForgetStart(job);
    job.reason = "the daemon stopped before starting it; queued again";
    ChangeState(job, JobState::kQueued, "requeued", job.reason);
    return true;
  }
  FinishJob(job, JobState::kFailed, -1,
            "the daemon stopped while starting it and no process of it is left; not started "
            "again, so that it can never run twice (resubmit it)");
  return false;
}

void Service::ForgetStart(Job& job) {
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    (void)regions_.Remove(job.region_path);
  }
  job.region_path.clear();
  job.allocation = {};
  job.started_ms = 0;
}

void Service::UndoStart(Job& job) {
  degraded_.DropUnsaved(job.id);
  ForgetStart(job);
  // Not a transition: the launch intent's ledger write failed and is
  // dropped above, so the ledger and the events never saw it leave the
  // queue. The one assignment of a job's state outside ChangeState.
  job.state = JobState::kQueued;
  capacity_->Release(job.id);
  Enqueue(job);
}

}  // namespace gpuslice::daemon
