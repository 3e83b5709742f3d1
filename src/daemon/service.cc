#include "daemon/service.h"

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
#include <fstream>

#include "daemon/job_finder.h"
#include "daemon/job_log.h"
#include "daemon/log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

std::string RedactEnvironment(std::string text, const std::vector<std::string>& env) {
  if (text.size() < 6) return text;  // Nothing to find; most reasons are empty.
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.size() - eq - 1 < 6 || e.size() - eq - 1 > text.size()) {
      continue;
    }
    const std::string_view value = std::string_view(e).substr(eq + 1);
    for (size_t at; (at = text.find(value)) != std::string::npos;) {
      text.replace(at, value.size(), "$" + e.substr(0, eq));
    }
  }
  return text;
}

std::string Service::PublicText(uint64_t job_id, std::string text) const {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return text;
  return RedactEnvironment(std::move(text), it->second.env);
}

Service::Service(ServiceOptions options, Clock& clock, Inventory& inventory, Launcher& launcher,
                 RegionStore& regions)
    : options_(std::move(options)),
      clock_(clock),
      inventory_source_(inventory),
      launcher_(launcher),
      regions_(regions) {}

Service::~Service() = default;

void Service::Degrade(const std::string& reason) {
  const bool write_failed = reason.rfind("ledger write failed", 0) == 0;
  if (write_failed && !ledger_write_failed_) {
    // Recoverable: MaintainLedger retries and leaves degraded mode.
    ledger_write_failed_ = true;
    ledger_failed_ms_ = clock_.NowMs();
    ledger_retry_at_ms_ = ledger_failed_ms_ + options_.ledger_retry_ms;
  }
  if (degraded_reason_.empty()) {
    degraded_reason_ = reason;
    LogError("degraded: " + reason + " (serving reads, refusing new work)");
    if (write_failed) {
      RecordEvent("degraded", 0, "",
                  reason + "; refusing new work, retrying every " +
                      core::FormatDuration(std::chrono::milliseconds(options_.ledger_retry_ms)));
    }
  }
}

bool Service::Persist(const Job& job, std::optional<JobState> from) {
  if (!ledger_) return false;
  Status s = ledger_->SaveJob(job, from, clock_.NowMs());
  if (!s.ok()) {
    // The row in the ledger still has the state of the first unsaved change.
    unsaved_jobs_.emplace(job.id, from);
    Degrade("ledger write failed: " + s.message());
    return false;
  }
  return true;
}

void Service::MaintainLedger() {
  if (!ledger_write_failed_ || !ledger_ || clock_.NowMs() < ledger_retry_at_ms_) return;
  ledger_retry_at_ms_ = clock_.NowMs() + options_.ledger_retry_ms;
  // Jobs first (they are the truth after a crash), oldest id first; stop at
  // the first failure and try again later.
  while (!unsaved_jobs_.empty()) {
    auto it = unsaved_jobs_.begin();
    auto job = jobs_.find(it->first);
    if (job != jobs_.end()) {
      Status s = ledger_->SaveJob(job->second, it->second, clock_.NowMs());
      if (!s.ok()) return;
    }
    unsaved_jobs_.erase(it);
  }
  while (!unsaved_events_.empty()) {
    if (!ledger_->AddEvent(unsaved_events_.front()).ok()) return;
    unsaved_events_.erase(unsaved_events_.begin());
  }
  ledger_write_failed_ = false;
  if (degraded_reason_.rfind("ledger write failed", 0) == 0) degraded_reason_.clear();
  const std::string down =
      core::FormatDuration(std::chrono::milliseconds(clock_.NowMs() - ledger_failed_ms_));
  LogInfo("ledger writable again after " + down + (degraded() ? "" : "; accepting new work"));
  RecordEvent("recovered", 0, "",
              "ledger writable again after " + down +
                  (degraded() ? "; still degraded: " + degraded_reason_ : "; accepting new work"));
}

std::string Service::JobDir(uint64_t id) const {
  return options_.state_dir + "/jobs/" + std::to_string(id);
}

Status Service::SecureStateDir() {
  // Layout v2 (DESIGN, docs/DAEMON.md): others may traverse the state
  // directory to reach the slice files named in a job's environment, but not
  // list it; the ledger and job directories are the daemon's alone (the
  // ledger holds every job's environment, issue 13). An install made by an
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
  cdi_ = CdiSpecs(options_.cdi_dir);

  auto inv = inventory_source_.Read();
  if (!inv.ok()) {
    Degrade("cannot read the GPUs: " + inv.status().message());
  } else {
    inventory_ = *inv;
    LogInfo("GPUs from " +
            (inventory_.simulated() ? std::string("the SIMULATED GPU (no NVIDIA "
                                                  "driver found): ")
                                    : std::string("NVML: ")) +
            inventory_.library + ", " + std::to_string(inventory_.gpus.size()) + " GPU(s)");
  }
  std::vector<std::string> pool_of;
  GPUSLICE_RETURN_IF_ERROR(ResolvePools(&pool_of));
  auto cap =
      NodeCapacity::Create(inventory_.gpus, options_.policy, pool_of, options_.rules.default_pool);
  if (!cap.ok()) return cap.status();
  capacity_ = std::move(*cap);
  for (const GpuInfo& g : inventory_.gpus) {
    if (min_gpu_memory_ == 0 || g.memory_total < min_gpu_memory_) min_gpu_memory_ = g.memory_total;
  }

  std::string ledger_path = options_.state_dir + "/ledger.db";
  auto ledger = Ledger::Open(ledger_path);
  if (!ledger.ok()) {
    Degrade("ledger unreadable: " + ledger.status().message());
    return Status::Ok();
  }
  ledger_ = std::move(*ledger);
  auto max_id = ledger_->MaxJobId();
  auto live = ledger_->LoadJobs(/*live_only=*/false);
  if (!max_id.ok() || !live.ok()) {
    Degrade("ledger unreadable: " + (!max_id.ok() ? max_id.status() : live.status()).message());
    ledger_.reset();
    return Status::Ok();
  }
  next_id_ = *max_id + 1;
  if (auto quotas = ledger_->LoadQuotas(); quotas.ok()) {
    for (const auto& [who, quota] : *quotas) quotas_.Set(who, quota);
  } else {
    Degrade("ledger unreadable: " + quotas.status().message());
  }
  if (auto counts = ledger_->EventCountsByKind(); counts.ok()) {
    for (auto& [kind, n] : *counts) event_counts_[kind] = n;
  }
  Recover(std::move(*live));
  Schedule();
  SyncCdi();
  return Status::Ok();
}

void Service::Recover(std::vector<Job> all) {
  // Finished jobs: keep the most recent for `ps --all`.
  std::vector<Job> live;
  for (Job& j : all) {
    if (j.IsLive()) {
      live.push_back(std::move(j));
    } else {
      jobs_[j.id] = std::move(j);
    }
  }
  int adopted = 0, ended = 0, requeued = 0;
  for (Job& j : live) {
    uint64_t id = j.id;
    jobs_[id] = std::move(j);
    Job& job = jobs_[id];
    if (job.state == JobState::kRunning && job.mode != core::JobMode::kShell && job.pid == 0 &&
        !ResolveInterruptedLaunch(job)) {
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
      if (auto broken = RewaitAfterRestart(job)) {
        FinishJob(job, JobState::kCancelled, -1, std::move(*broken));
        ++ended;
        continue;
      }
      Enqueue(job);
      ++requeued;
      continue;
    }
    // Running: take back exactly what the ledger says it holds.
    Status held = d.ok() ? capacity_->Hold(id, job.allocation) : d;
    // Its cgroup, when it was started (or attached) in one, says whether it
    // lives.
    const bool in_cgroup = job.pid > 0 && launcher_.Adopt(id, job.pid);
    bool alive = job.mode == core::JobMode::kShell && !in_cgroup
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
      auto code = ReadExitStatusFile(JobDir(id) + "/status");
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
    live_[id] = l;
    ++adopted;
  }
  // Processes in the cgroup of a job that is not running now (started by a
  // daemon that died before recording it, so the job is queued again) would
  // run twice: end them.
  std::vector<uint64_t> running;
  for (const auto& [id, l] : live_) running.push_back(id);
  for (const std::string& stray : launcher_.EndStrays(running)) {
    LogWarn("killed the processes of cgroup " + stray + ": no running job of this daemon owns it");
  }
  // Finished jobs are trimmed only now: the dependencies of queued jobs were
  // judged above against all of them.
  TrimHistory();
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
  const std::string dir = JobDir(job.id);
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
    if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
      (void)regions_.Remove(job.region_path);
    }
    job.region_path.clear();
    job.allocation = {};
    job.started_ms = 0;
    job.state = JobState::kQueued;
    job.reason = "the daemon stopped before starting it; queued again";
    Persist(job, JobState::kRunning);
    RecordEvent("requeued", job.id, job.user, job.reason);
    return true;
  }
  FinishJob(job, JobState::kFailed, -1,
            "the daemon stopped while starting it and no process of it is left; not started "
            "again, so that it can never run twice (resubmit it)");
  return false;
}

void Service::UndoStart(Job& job) {
  unsaved_jobs_.erase(job.id);
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    (void)regions_.Remove(job.region_path);
  }
  job.region_path.clear();
  job.allocation = {};
  job.started_ms = 0;
  job.state = JobState::kQueued;
  capacity_->Release(job.id);
  Enqueue(job);
}

void Service::TrimHistory() {
  // Oldest finished first; jobs that ended in the last ten minutes stay, so a
  // client polling for an exit code always finds it.
  std::vector<std::pair<int64_t, uint64_t>> finished;
  for (const auto& [id, job] : jobs_) {
    if (!job.IsLive()) finished.emplace_back(job.ended_ms, id);
  }
  if (finished.size() <= options_.history) return;
  std::sort(finished.begin(), finished.end());
  int64_t keep_after = clock_.NowMs() - 10 * 60 * 1000;
  size_t excess = finished.size() - options_.history;
  for (size_t i = 0; i < excess && finished[i].first < keep_after; ++i) {
    jobs_.erase(finished[i].second);
  }
}

Status Service::CheckOwner(const Caller& caller, const Job& job) const {
  if (caller.admin || (caller.local && caller.uid == job.uid)) return Status::Ok();
  return core::PermissionDeniedError("job " + std::to_string(job.id) + " belongs to " + job.user +
                                     "; only its owner, root or the admin group may "
                                     "do this");
}

namespace {

// The parent pid of `pid` (/proc/<pid>/status PPid), or -1.
int64_t ParentOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PPid:", 0) == 0) return std::atoll(line.c_str() + 5);
  }
  return -1;
}

uint64_t TotalBytes(const std::vector<std::string>& v) {
  uint64_t n = 0;
  for (const std::string& s : v) n += s.size() + 1;  // + the NUL execve counts.
  return n;
}

}  // namespace

Status Service::CheckSubmitLimits(const Caller& caller, const SubmitSpec& spec) const {
  const uint64_t env = TotalBytes(spec.env), argv = TotalBytes(spec.argv);
  if (env > options_.max_env_bytes) {
    return core::InvalidArgumentError(
        "the job's environment is " + core::FormatBytes(env) + ", over the limit of " +
        core::FormatBytes(options_.max_env_bytes) +
        " (max_env_bytes in gpusliced's configuration, docs/CONFIG.md); pass large data in a "
        "file instead");
  }
  if (argv > options_.max_argv_bytes) {
    return core::InvalidArgumentError(
        "the job's command line is " + core::FormatBytes(argv) + ", over the limit of " +
        core::FormatBytes(options_.max_argv_bytes) +
        " (max_argv_bytes in gpusliced's configuration, docs/CONFIG.md)");
  }
  auto q = queued_by_uid_.find(caller.uid);
  if (q != queued_by_uid_.end() && q->second >= options_.max_queued_jobs_per_user) {
    return core::ResourceExhaustedError(
        "user " + caller.user + " already has " + std::to_string(q->second) +
        " queued jobs, the most one user may have (max_queued_jobs_per_user = " +
        std::to_string(options_.max_queued_jobs_per_user) +
        " in gpusliced's configuration, docs/CONFIG.md); wait for some to start or cancel some");
  }
  return Status::Ok();
}

Result<JobView> Service::Submit(const Caller& caller, SubmitSpec spec) {
  if (degraded())
    return core::UnavailableError("daemon degraded (" + degraded_reason_ +
                                  "): not accepting new jobs");
  if (!caller.local) {
    return core::PermissionDeniedError(
        "jobs can only be submitted over the local socket, so they run as the caller");
  }
  GPUSLICE_ASSIGN_OR_RETURN(core::ResourceRequest request, core::BuildRequest(spec.fields));
  if (spec.mode != core::JobMode::kShell && spec.argv.empty()) {
    return core::InvalidArgumentError("no command given (gpuslice run [options] -- cmd args...)");
  }
  if (spec.cwd.empty() || spec.cwd[0] != '/') {
    return core::InvalidArgumentError("cwd must be an absolute path, got '" + spec.cwd + "'");
  }
  for (const std::string& e : spec.env) {
    if (e.find('=') == std::string::npos || e[0] == '=') {
      return core::InvalidArgumentError("env entry '" + e.substr(0, 64) + "' is not KEY=value");
    }
  }
  GPUSLICE_RETURN_IF_ERROR(CheckSubmitLimits(caller, spec));
  if (spec.restartable && spec.mode == core::JobMode::kShell) {
    return core::InvalidArgumentError(
        "--restartable: a shell or a command run by the client (run -i) cannot be restarted by "
        "the daemon");
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<uint64_t> pending, CheckDependencies(spec.after));
  uint64_t id = next_id_;
  GPUSLICE_RETURN_IF_ERROR(capacity_->SetDemand(id, request));
  Status ever = capacity_->CouldEverFit(request);
  if (!ever.ok()) {
    capacity_->ForgetDemand(id);
    // Refused at once, never queued forever.
    return core::InvalidArgumentError(ever.message());
  }
  Job job;
  job.id = id;
  job.uid = caller.uid;
  job.gid = caller.gid;
  job.user = caller.user;
  job.request = std::move(request);
  job.mode = spec.mode;
  job.argv = std::move(spec.argv);
  job.cwd = std::move(spec.cwd);
  job.env = std::move(spec.env);
  job.restartable = spec.restartable;
  job.after = std::move(spec.after);
  job.submitted_ms = clock_.NowMs();
  if (Status c = CheckContainerSpec(spec, &job); !c.ok()) {
    capacity_->ForgetDemand(id);
    return c;
  }
  if (Status q = CheckQuotaAtSubmit(job); !q.ok()) {
    capacity_->ForgetDemand(id);
    return q;
  }
  if (!Persist(job, std::nullopt)) {
    capacity_->ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_reason_ + "): job not accepted");
  }
  ++next_id_;
  jobs_[id] = job;
  RecordEvent("submitted", id, job.user,
              job.request.Describe() +
                  (job.after.empty() ? "" : ", after " + core::FormatDependencies(job.after)));
  WaitFor(id, pending);
  Enqueue(jobs_[id]);
  RequestSchedule();
  return View(jobs_[id]);
}

void Service::Enqueue(const Job& job) {
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  q.seq = job.id;
  q.max_runtime = job.request.max_runtime;
  q.shape = capacity_->ShapeOf(job.id);
  auto pos = std::upper_bound(queue_.begin(), queue_.end(), q, core::QueueBefore);
  queue_.insert(pos, q);
  ++queued_by_uid_[job.uid];
}

void Service::Dequeue(uint64_t id) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&](const core::QueuedJob& q) { return q.id == id; });
  if (it == queue_.end()) return;
  queue_.erase(it);
  auto job = jobs_.find(id);
  if (job == jobs_.end()) return;
  auto n = queued_by_uid_.find(job->second.uid);
  if (n != queued_by_uid_.end() && --n->second == 0) queued_by_uid_.erase(n);
}

Status Service::Cancel(const Caller& caller, uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (degraded() && !ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_reason_ +
                                  "): cannot record a cancel");
  }
  std::string who =
      "cancelled by " + (caller.user.empty() ? std::to_string(caller.uid) : caller.user);
  if (job.state == JobState::kQueued) {
    FinishJob(job, JobState::kCancelled, -1, who);
    Schedule();
    return Status::Ok();
  }
  if (job.state != JobState::kRunning) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " has already ended (" +
                                         std::string(core::JobStateName(job.state)) + ")");
  }
  Live& l = live_[id];
  if (!l.ending) {
    l.ending = JobState::kCancelled;
    l.ending_reason = who;
    l.kill_at_ms = clock_.NowMs() + options_.kill_grace_ms;
    (void)launcher_.SignalGroup(job.pid, SIGTERM);
    if (job.mode == core::JobMode::kShell) (void)launcher_.SignalGroup(job.pid, SIGHUP);
  }
  return Status::Ok();
}

JobView Service::View(const Job& job) {
  JobView v{job, 0, "", std::nullopt, {}, DependenciesOf(job)};
  if (job.state == JobState::kRunning) {
    v.usage = UsageOf(job.id);
    v.flags = FlagsOf(job.id);
  }
  if (job.state != JobState::kQueued) return v;
  if (waiting_index_stale_) {
    waiting_index_.clear();
    waiting_index_.reserve(last_waiting_.size());
    for (size_t i = 0; i < last_waiting_.size(); ++i) waiting_index_[last_waiting_[i].id] = i;
    waiting_index_stale_ = false;
  }
  auto w = waiting_index_.find(job.id);
  if (w != waiting_index_.end()) {
    const core::WaitingJob& wj = last_waiting_[w->second];
    v.queue_position = wj.position;
    std::string head = std::to_string(plan_head_);
    switch (wj.reason) {
      case core::WaitReason::kHead: {
        v.waiting_for = "first in line: " + capacity_->WhyNotNow(job.id);
        if (auto p = preempting_.find(job.id); p != preempting_.end()) {
          std::string ids;
          for (uint64_t id : p->second) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
          v.waiting_for += "; preempting job(s) " + ids;
        } else if (auto n = preempt_note_.find(job.id); n != preempt_note_.end()) {
          v.waiting_for += "; cannot preempt: " + n->second;
        }
        break;
      }
      case core::WaitReason::kBehindHead:
        v.waiting_for = "behind job " + head + ": " + capacity_->WhyNotNow(job.id);
        break;
      case core::WaitReason::kWouldDelayHead:
        v.waiting_for = "fits now, but starting it would delay job " + head + " (first in line)";
        break;
      case core::WaitReason::kNotConsidered:
        v.waiting_for = "behind job " + head + "; not yet considered for backfill";
        break;
      case core::WaitReason::kNeverFits:
        v.waiting_for = "can never fit";
        break;
      case core::WaitReason::kHeld: {
        if (waiting_on_.count(job.id) > 0) {
          v.waiting_for = WaitingForDependencies(job);
          break;
        }
        auto q = quota_wait_.find(job.id);
        v.waiting_for =
            "quota: " + (q == quota_wait_.end() ? std::string("over quota") : q->second);
        break;
      }
    }
  }
  return v;
}

Result<JobView> Service::Get(uint64_t id) {
  Flush();
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  return View(it->second);
}

std::vector<JobView> Service::List(bool include_finished) {
  Flush();
  std::vector<JobView> out;
  for (const auto& [id, job] : jobs_) {
    if (include_finished || job.IsLive()) out.push_back(View(job));
  }
  return out;
}

Result<std::vector<Transition>> Service::History(uint64_t id) {
  if (!ledger_) return core::UnavailableError("ledger unavailable: " + degraded_reason_);
  return ledger_->Transitions(id);
}

size_t Service::running_count() const { return live_.size(); }

std::map<uint32_t, std::vector<uint64_t>> Service::SlicesByGpu() const {
  std::map<uint32_t, std::vector<uint64_t>> out;
  for (const auto& [id, l] : live_) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    for (uint32_t g : it->second.allocation.gpu_indices) out[g].push_back(id);
  }
  return out;
}

Result<LogChunk> Service::ReadLog(const Caller& caller, uint64_t id, const std::string& stream,
                                  uint64_t offset, uint64_t limit) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  const Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (stream != "stdout" && stream != "stderr") {
    return core::InvalidArgumentError("stream must be stdout or stderr, not '" + stream + "'");
  }
  LogChunk chunk;
  chunk.state = job.state;
  chunk.exit_code = job.exit_code;
  chunk.next_offset = offset;
  // Offsets count the job's output since it started, across trims of a
  // capped log (job_log.h).
  limit = std::min<uint64_t>(limit, 4u << 20);
  GPUSLICE_ASSIGN_OR_RETURN(LogRead read, ReadJobLog(JobDir(id) + "/" + stream, offset, limit));
  chunk.data = std::move(read.data);
  chunk.next_offset = read.next_offset;
  return chunk;
}

Status Service::Attach(const Caller& caller, uint64_t id, int64_t pid) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.mode != core::JobMode::kShell) {
    return core::FailedPreconditionError(
        "only shell jobs and run -i commands are attached by the client");
  }
  if (job.state != JobState::kRunning || job.pid != 0) {
    return core::FailedPreconditionError("job " + std::to_string(id) +
                                         " is not waiting for its client to start it");
  }
  // The pid must be the caller's own process and (unless an admin calls) a
  // child of the calling process itself: the client's held command, never
  // any other process (moved into the job's cgroup, `cancel` would end it).
  // A pidfd names the process checked: if it ended and its pid were reused
  // (by someone else's process) before the cgroup write, the probe after
  // the write fails.
  struct stat st;
  std::string proc = "/proc/" + std::to_string(pid);
  if (pid <= 0 || stat(proc.c_str(), &st) != 0) {
    return core::InvalidArgumentError("no process " + std::to_string(pid));
  }
  const int pidfd = int(syscall(SYS_pidfd_open, pid_t(pid), 0));
  if (pidfd < 0) return core::InvalidArgumentError("no process " + std::to_string(pid));
  struct PidFd {
    int fd;
    ~PidFd() { close(fd); }
  } holder{pidfd};
  if (stat(proc.c_str(), &st) != 0 || (st.st_uid != caller.uid && !caller.admin)) {
    return core::PermissionDeniedError("process " + std::to_string(pid) + " is not yours");
  }
  if (!caller.admin && ParentOf(pid) != caller.pid) {
    return core::PermissionDeniedError("process " + std::to_string(pid) +
                                       " is not a child of the calling process");
  }
  // Into the job's cgroup before it runs anything (the client holds it until
  // this answers): a `setsid` child cannot leave the job, cancel ends all of
  // it, and --cpus/--host-mem apply. Refused, the client does not start it.
  GPUSLICE_RETURN_IF_ERROR(launcher_.AttachProcess(
      id, pid, {job.request.host_cpu_milli, job.request.host_memory_bytes}));
  if (syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0) {
    LogWarn("job " + std::to_string(id) + ": process " + std::to_string(pid) +
            " ended while it was being attached; its pid may name another process now");
    return core::FailedPreconditionError("process " + std::to_string(pid) +
                                         " ended while it was being attached");
  }
  live_[id].in_cgroup = launcher_.UsesCgroups();
  job.pid = pid;
  job.pid_start_time = ProcessStartTime(pid);
  Persist(job, JobState::kRunning);
  return Status::Ok();
}

Status Service::ReportExit(const Caller& caller, uint64_t id, int exit_code) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, it->second));
  if (it->second.mode != core::JobMode::kShell) {
    return core::FailedPreconditionError(
        "only shell jobs and run -i commands report their own exit");
  }
  auto l = live_.find(id);
  if (l == live_.end()) return Status::Ok();  // Already ended.
  l->second.reported_exit = exit_code;
  WatchRunning();
  Schedule();
  return Status::Ok();
}

}  // namespace gpuslice::daemon
