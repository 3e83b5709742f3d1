// Service: jobs as users see them. Submission (checks, limits), cancel,
// views and lists, logs, attaching a shell or `run -i` command, reporting
// its exit. Starting, recovery and the ledger are in service_state.cc; moving
// jobs along in service_lifecycle.cc. See service.h.

#include "daemon/jobs/service.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/launch/job_log.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Result;
using core::Status;

namespace {

// Free bytes on the file system of `dir` (the blocks root may use: the
// daemon's ledger may use them too); 0 when it cannot be told.
uint64_t FreeBytes(const std::string& dir) {
  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) != 0) return 0;
  return uint64_t(fs.f_bfree) * fs.f_frsize;
}

}  // namespace

std::string RedactEnvironment(std::string text, const std::vector<std::string>& env,
                              std::string_view owner) {
  if (text.size() < 6) return text;  // Nothing to find; most reasons are empty.
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.size() - eq - 1 < 6 || e.size() - eq - 1 > text.size()) {
      continue;
    }
    const std::string_view value = std::string_view(e).substr(eq + 1);
    if (!owner.empty() && owner.find(value) != std::string_view::npos) continue;
    for (size_t at; (at = text.find(value)) != std::string::npos;) {
      text.replace(at, value.size(), "$" + e.substr(0, eq));
    }
  }
  return text;
}

std::string Service::PublicText(uint64_t job_id, std::string text) const {
  auto it = table_.jobs().find(job_id);
  if (it == table_.jobs().end()) return text;
  return RedactEnvironment(std::move(text), it->second.env, it->second.user);
}

namespace {

// The suspension a component that makes room for the head asks for.
SuspendCause CauseOf(const SuspendToMakeRoom& why) {
  SuspendCause cause;
  cause.by = why.by;
  cause.preempted_for = why.preempted_for;
  cause.reclaimed_for = why.reclaimed_for;
  cause.move_to = why.move_to;
  cause.defrag_for = why.defrag_for;
  return cause;
}

}  // namespace

Service::Service(ServiceOptions options, Clock& clock, Inventory& inventory, Launcher& launcher,
                 RegionStore& regions)
    : options_(std::move(options)),
      clock_(clock),
      inventory_source_(inventory),
      launcher_(launcher),
      regions_(regions),
      containers_(
          {options_.shim_path, options_.sim_lib_dir, options_.coord_dir, options_.cdi_dir,
           options_.podman, options_.docker, options_.podman_args, options_.docker_args},
          ContainerJobs::Jobs{
              .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
              .job_env = [this]() -> const std::vector<std::string>& { return options_.job_env; },
              .shared_gid = [this](const Job& job) { return external_.SharedGidOf(job); },
              .gpus_file =
                  [this](const Job& job) {
                    return IsElastic(job) ? JobDir(job.id) + "/gpus" : std::string();
                  },
              .limits_path =
                  [this](const std::string& region) { return regions_.LimitsPathOf(region); },
              .gids_of = SystemGidsOf,
              .for_each_running =
                  [this](const std::function<void(const Job&)>& visit) {
                    for (const auto& [id, l] : table_.live()) {
                      auto it = table_.jobs().find(id);
                      if (it != table_.jobs().end() && it->second.state == JobState::kRunning) {
                        visit(it->second);
                      }
                    }
                  },
          },
          launcher),
      external_(options_.external_gid_base,
                ExternalJobs::Jobs{
                    .for_each_running =
                        [this](const std::function<void(const Job&)>& visit) {
                          for (const auto& [id, job] : table_.jobs()) {
                            if (job.state == JobState::kRunning) visit(job);
                          }
                        },
                    .processes = [this]() -> ProcessTable& { return procs_.processes(); },
                    .finish =
                        [this](Job& job, JobState state, int exit_code, std::string reason) {
                          FinishJob(job, state, exit_code, std::move(reason));
                        },
                },
                launcher),
      degraded_(
          DegradedMode::Hooks{
              .now_ms = [this] { return clock_.NowMs(); },
              .free_bytes = [this] { return FreeBytes(options_.state_dir); },
              .save_job = [this](uint64_t id, std::optional<JobState> from) -> Status {
                if (!ledger_) return core::UnavailableError("no ledger");
                auto it = table_.jobs().find(id);
                if (it == table_.jobs().end()) return Status::Ok();
                return ledger_->SaveJob(it->second, from, clock_.NowMs());
              },
              .write_events = [this] { return events_.WriteUnsaved(); },
              .check_room = [this] { return regions_.CheckRoom(); },
              .record = [this](const std::string& kind,
                               const std::string& message) { RecordEvent(kind, 0, "", message); },
              .room_again = [this] { RequestSchedule(); },
          },
          options_.ledger_retry_ms),
      watchdog_(
          options_.rules, options_.sample_interval_ms, regions_,
          Watchdog::Hooks{
              .kill =
                  [this](const Job& job, const std::string& kind, const std::string& why) {
                    procs_.Kill(table_.jobs().at(job.id), table_.live().at(job.id), kind, why);
                  },
              .stop = [this](const Job& job) { procs_.Stop(job); },
              .resume = [this](const Job& job) { procs_.Continue(job); },
              .record =
                  [this](const std::string& kind, const Job& job, const std::string& message) {
                    RecordEvent(kind, job.id, job.user, message);
                  },
              .tell = [this](const Job& job,
                             const std::string& line) { procs_.AppendToStderr(job, line); },
              .context_size = [this](uint32_t gpu) { return usage_.ContextSizeOf(gpu); },
              .elastic = [](const Job& job) { return IsElastic(job); },
          }),
      idle_(options_.rules,
            IdleReclaim::Hooks{
                .paused = [this](const Job& job) { return table_.live().at(job.id).paused; },
                .pause = [this](const Job& job) -> Status {
                  SliceLimits limits = SliceLimitsOf(job);
                  limits.launches_paused = true;
                  GPUSLICE_RETURN_IF_ERROR(regions_.Update(job.region_path, limits));
                  table_.live().at(job.id).paused = true;
                  return Status::Ok();
                },
                .end =
                    [this](const Job& job, const std::string& reason) {
                      Live& l = table_.live().at(job.id);
                      l.ending = JobState::kCancelled;
                      l.ending_reason = reason;
                      l.kill_at_ms = clock_.NowMs() + options_.kill_grace_ms;
                      if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGTERM);
                      if (job.holder_pid > 0) external_.SignalHeld(job, SIGTERM);
                    },
                .suspend = [this](const Job& job, const std::string& idle) -> Status {
                  SuspendCause cause;
                  cause.by = "idle reclaim";
                  cause.idle_fallback = options_.rules.idle_suspend_fallback;
                  cause.idle_text = idle;
                  return suspender_.Suspend(table_.jobs().at(job.id), std::move(cause));
                },
                .record =
                    [this](const std::string& kind, const Job& job, const std::string& message) {
                      RecordEvent(kind, job.id, job.user, message);
                    },
                .tell = [this](const Job& job,
                               const std::string& line) { procs_.AppendToStderr(job, line); },
            }),
      quotas_(QuotaKeeper::Jobs{
                  .for_each_charged =
                      [this](const std::function<void(const Job&)>& visit) {
                        for (const auto& [id, l] : table_.live()) {
                          // A suspended job holds no GPU; it counts only if the
                          // admin says so.
                          if (table_.IsSuspended(id) && !options_.rules.suspended_counts_in_quota)
                            continue;
                          visit(table_.jobs()[id]);
                        }
                      },
                  .job = [this](uint64_t id) -> const Job& { return table_.jobs()[id]; },
                  .placed = [this](uint64_t id) { return capacity_->AllocationOf(id); },
                  .borrowable = [this](const Job& job) { return preemptions_.Borrowable(job); },
                  .groups_of = options_.groups_of ? options_.groups_of : SystemGroupsOf,
              },
              options_.rules.quota_borrowing),
      preemptions_(
          Preemptions::Jobs{
              .for_each_live =
                  [this](const std::function<void(const LiveJob&)>& visit) {
                    for (const auto& [id, l] : table_.live()) visit(*LiveJobOf(id));
                  },
              .live = [this](uint64_t id) { return LiveJobOf(id); },
              .job = [this](uint64_t id) -> const Job& { return table_.jobs()[id]; },
              .capacity = [this]() -> const core::CapacityModel& { return *capacity_; },
              .suspend =
                  [this](uint64_t id, const SuspendToMakeRoom& why) {
                    return suspender_.Suspend(table_.jobs()[id], CauseOf(why));
                  },
              .end =
                  [this](uint64_t id, JobState then, std::string reason, int64_t kill_at_ms,
                         bool hang_up) {
                    const Job& job = table_.jobs()[id];
                    Live& l = table_.live()[id];
                    l.ending = then;
                    l.ending_reason = std::move(reason);
                    l.kill_at_ms = kill_at_ms;
                    if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGTERM);
                    if (hang_up && job.mode == core::JobMode::kShell && job.pid > 0) {
                      (void)launcher_.SignalGroup(job.pid, SIGHUP);
                    }
                  },
              .record =
                  [this](std::string kind, uint64_t id, std::string user, std::string message) {
                    RecordEvent(std::move(kind), id, std::move(user), std::move(message));
                  },
          },
          Preemptions::Quotas{
              .borrowing = [this]() { return quotas_.borrowing() && !quotas_.empty(); },
              .borrowers = [this]() -> const std::set<uint64_t>& { return quotas_.borrowers(); },
              .guaranteed = [this](const Job& job) { return quotas_.Guaranteed(job); },
              .whole_gpu_bytes = [this]() { return quotas_.whole_gpu_bytes(); },
          },
          options_.rules, options_.checkpointer.get(), clock_),
      dependencies_(JobDependencies::Jobs{
          .find = [this](uint64_t id) -> const Job* {
            auto it = table_.jobs().find(id);
            return it == table_.jobs().end() ? nullptr : &it->second;
          },
          .load = [this](uint64_t id) -> Result<std::optional<Job>> {
            if (!ledger_)
              return core::UnavailableError("ledger unavailable: " + degraded_.reason());
            return ledger_->LoadJob(id);
          },
          .cancel =
              [this](uint64_t id, std::string reason) {
                FinishJob(table_.jobs().at(id), JobState::kCancelled, -1, std::move(reason));
              },
          // It may start now: the next Flush plans.
          .released = [this](uint64_t) { schedule_pending_ = true; },
      }),
      suspender_(
          Suspender::Jobs{
              .live = [this](uint64_t id) -> Job* {
                return table_.live().count(id) ? &table_.jobs()[id] : nullptr;
              },
              .ending =
                  [this](uint64_t id) {
                    return table_.live().count(id) && table_.live()[id].ending;
                  },
              .stopped = [this](uint64_t id) { return watchdog_.Stopped(id); },
              .change_state =
                  [this](Job& job, JobState to, std::string kind, std::string message) {
                    return ChangeState(job, to, std::move(kind), std::move(message));
                  },
              .persist = [this](const Job& job) { Persist(job, job.state); },
              .record_event =
                  [this](std::string kind, uint64_t id, std::string user, std::string message) {
                    RecordEvent(std::move(kind), id, std::move(user), std::move(message));
                  },
              .limits_of = [this](const Job& job) { return SliceLimitsOf(job); },
              .capacity = [this] { return capacity_.get(); },
              .degraded_reason = [this] { return degraded_.reason(); },
              .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
              .pool_of = [this](uint32_t gpu) -> const std::string& { return PoolOf(gpu); },
              .usage = [this](uint64_t id) { return usage_.Find(id); },
              .forget_usage = [this](uint64_t id) { usage_.Forget(id); },
              .processes = [this]() -> ProcessTable& { return procs_.processes(); },
              .append_to_stderr =
                  [this](const Job& job, const std::string& line) {
                    procs_.AppendToStderr(job, line);
                  },
              .suspend_failed =
                  [this](Job& job, const SuspendCause& cause) { AfterFailedSuspend(job, cause); },
              .resumed = [this](uint64_t id) { idle_.Resumed(id); },
              .resume_on_demand = [this] { return options_.rules.resume_on_demand; },
              .suspended =
                  [this] {
                    std::vector<Job*> out;
                    for (const auto& [id, l] : table_.live()) {
                      if (table_.IsSuspended(id)) out.push_back(&table_.jobs()[id]);
                    }
                    return out;
                  },
              .enqueue = [this](const Job& job,
                                int64_t asked_ms) { QueueResumeDemand(job, asked_ms); },
              .dequeue =
                  [this](uint64_t id) {
                    table_.Dequeue(id);
                    waiting_index_stale_ = true;
                  },
              .may_resume =
                  [this](const Job& job) {
                    // A queued job of higher priority would preempt it again at once.
                    if (std::any_of(table_.queue().begin(), table_.queue().end(),
                                    [&](const core::QueuedJob& q) {
                                      return q.priority > job.request.priority;
                                    })) {
                      return false;
                    }
                    // A job that would borrow over its group's quota again takes only
                    // idle capacity, as when it started: not while a job waits first
                    // in line.
                    return !(plan_head_ != 0 && !table_.queue().empty() &&
                             options_.rules.quota_borrowing && !quotas_.empty() &&
                             quotas_.WouldBorrow(job, clock_.NowMs()));
                  },
              .request_schedule = [this] { RequestSchedule(); },
          },
          clock_, regions_, options_.checkpointer, options_.suspend_lock_timeout_ms),
      ranker_(
          options_.rules.fair_share, options_.rules.runtime_estimates, clock_,
          QueueRanker::Hooks{
              .job = [this](uint64_t id) -> const Job& { return table_.jobs()[id]; },
              .for_each_live =
                  [this](const std::function<void(const Job&)>& visit) {
                    for (const auto& [id, l] : table_.live()) visit(table_.jobs()[id]);
                  },
              .live = [this](uint64_t id) { return table_.live().count(id) > 0; },
              .queue = [this]() -> std::vector<core::QueuedJob>& { return table_.queue(); },
              .resume_asked_ms = [this](uint64_t id) { return suspender_.ResumeAskedMs(id); },
              .waits_for_dependencies = [this](uint64_t id) { return dependencies_.Waits(id); },
              .gpu_memory =
                  [this](uint32_t index) {
                    uint64_t memory = 0;
                    for (const GpuInfo& g : inventory_.gpus) {
                      if (g.index == index) memory = g.memory_total;
                    }
                    return memory;
                  },
              .default_pool =
                  [this] { return capacity_ ? capacity_->pools().default_pool() : std::string(); },
              .pack_fractions =
                  [this](bool pack) {
                    if (capacity_) capacity_->set_pack_fractions(pack);
                  },
          }),
      defrag_(
          Defragmenter::Jobs{
              .find = [this](uint64_t id) -> const Job* {
                auto it = table_.jobs().find(id);
                return it == table_.jobs().end() ? nullptr : &it->second;
              },
              .live = [this](uint64_t id) { return LiveJobOf(id); },
              .can_move = [this](const Job& job) { return suspender_.CanMove(job); },
              .has_cuda_processes =
                  [this](const Job& job) {
                    auto pids = regions_.Pids(job.region_path);
                    return pids.ok() && !pids->empty();
                  },
              .plan =
                  [this](uint64_t head_id, uint32_t max_moves,
                         const std::function<bool(uint64_t)>& movable) {
                    return capacity_->PlanDefragFor(head_id, max_moves, movable);
                  },
              .suspend =
                  [this](uint64_t id, const SuspendToMakeRoom& why) {
                    return suspender_.Suspend(table_.jobs()[id], CauseOf(why));
                  },
              .record =
                  [this](std::string kind, uint64_t id, std::string user, std::string message) {
                    RecordEvent(std::move(kind), id, std::move(user), std::move(message));
                  },
          },
          options_.rules, options_.checkpointer.get(), clock_),
      elastic_(
          ElasticJobs::Jobs{
              .for_each_live =
                  [this](const std::function<void(const LiveJob&)>& visit) {
                    for (const auto& [id, l] : table_.live()) visit(*LiveJobOf(id));
                  },
              .job = [this](uint64_t id) -> const Job& { return table_.jobs()[id]; },
              .capacity = [this]() -> NodeCapacity& { return *capacity_; },
              .preempting = [this](uint64_t id) { return preemptions_.Preempting(id); },
              .fits_quotas =
                  [this](const Job& job, uint32_t count) {
                    if (quotas_.empty()) return true;
                    core::Allocation grown = job.allocation;
                    grown.gpu_indices.resize(count, 0);
                    core::QuotaDecision d = quotas_.Decide(
                        quotas_.OwnerOf(job), core::ChargeOfAllocation(job.request, grown),
                        quotas_.RunningUsage(job.id));
                    return d.verdict == core::QuotaVerdict::kFits;
                  },
              .apply =
                  [this](uint64_t id, uint32_t count, const std::string& why) {
                    return ApplyElastic(table_.jobs()[id], count, why);
                  },
              .schedule = [this]() { Schedule(); },
          },
          options_.rules, clock_) {}

std::optional<LiveJob> Service::LiveJobOf(uint64_t id) {
  auto it = table_.live().find(id);
  if (it == table_.live().end()) return std::nullopt;
  const Live& l = it->second;
  return LiveJob{.job = &table_.jobs()[id],
                 .ending = l.ending.has_value(),
                 .checkpointing = suspender_.Busy(id),
                 .stopped = watchdog_.Stopped(id)};
}

Service::~Service() = default;

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

// "40s", "25m", "2h5m": rounded up to the second under a minute, else to
// the minute (a reason is read by people, not parsed).
std::string RoughDuration(int64_t ms) {
  ms = std::max<int64_t>(ms, 1000);
  const int64_t unit = ms < 60'000 ? 1000 : 60'000;
  return core::FormatDuration(std::chrono::milliseconds((ms + unit - 1) / unit * unit));
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
  if (const uint32_t queued = table_.QueuedOf(caller.uid);
      queued > 0 && queued >= options_.max_queued_jobs_per_user) {
    return core::ResourceExhaustedError(
        "user " + caller.user + " already has " + std::to_string(queued) +
        " queued jobs, the most one user may have (max_queued_jobs_per_user = " +
        std::to_string(options_.max_queued_jobs_per_user) +
        " in gpusliced's configuration, docs/CONFIG.md); wait for some to start or cancel some");
  }
  return Status::Ok();
}

Job Service::NewJob(const Caller& caller, uint64_t id, core::ResourceRequest request,
                    core::JobMode mode) const {
  Job job;
  job.id = id;
  // The owner is the caller's credentials, never anything in the request.
  job.uid = caller.uid;
  job.gid = caller.gid;
  job.user = caller.user;
  job.request = std::move(request);
  job.mode = mode;
  job.submitted_ms = clock_.NowMs();
  return job;
}

Result<JobView> Service::Submit(const Caller& caller, SubmitSpec spec) {
  if (degraded())
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): not accepting new jobs");
  if (!caller.local) {
    return core::PermissionDeniedError(
        "jobs can only be submitted over the local socket, so they run as the caller");
  }
  GPUSLICE_RETURN_IF_ERROR(core::ValidateLabels(spec.labels));
  if (options_.slurm_only && !caller.admin) {
    // Only slurmstepd can make such a caller: its real uid is root while it
    // acts as the user, which no user's own process can be. The real uid is
    // the one read when the connection was accepted, and it counts only
    // while that process runs: a pid looked up now could be a root process
    // that took the pid of the user's, which ended.
    const bool stepd = caller.process && caller.process->identity().real_uid == 0;
    if (spec.mode != core::JobMode::kExternal || !spec.bound_to_caller || !stepd) {
      return core::PermissionDeniedError(
          "this node's GPUs are handed out by Slurm (slurm_only): ask for them with srun, "
          "sbatch or salloc (--gres=gpu:N, --gpu-mem, --gpu-share)");
    }
    GPUSLICE_RETURN_IF_ERROR(caller.process->CheckRunning());
  }
  if (spec.mode == core::JobMode::kExternal) return SubmitExternal(caller, std::move(spec));
  if (spec.paused || !spec.gpu_uuids.empty()) {
    return core::InvalidArgumentError(
        "paused and gpu_uuids are for external jobs (mode external) only");
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
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<uint64_t> pending, dependencies_.Check(spec.after));
  uint64_t id = table_.next_id();
  GPUSLICE_RETURN_IF_ERROR(capacity_->SetDemand(id, request));
  Status ever = capacity_->CouldEverFit(request);
  if (!ever.ok()) {
    capacity_->ForgetDemand(id);
    // Refused at once, never queued forever.
    return core::InvalidArgumentError(ever.message());
  }
  Job job = NewJob(caller, id, std::move(request), spec.mode);
  job.argv = std::move(spec.argv);
  job.cwd = std::move(spec.cwd);
  job.env = std::move(spec.env);
  job.restartable = spec.restartable;
  job.no_idle_reclaim = spec.no_idle_reclaim;
  job.after = std::move(spec.after);
  job.labels = std::move(spec.labels);
  if (Status c = containers_.CheckSpec(spec.image, spec.engine, spec.mode == core::JobMode::kShell,
                                       spec.cwd, &job);
      !c.ok()) {
    capacity_->ForgetDemand(id);
    return c;
  }
  if (Status q = CheckQuotaAtSubmit(job); !q.ok()) {
    capacity_->ForgetDemand(id);
    return q;
  }
  if (!Persist(job, std::nullopt)) {
    capacity_->ForgetDemand(id);
    return core::UnavailableError("daemon degraded (" + degraded_.reason() + "): job not accepted");
  }
  table_.Add(job);
  RecordEvent("submitted", id, job.user,
              job.request.Describe() +
                  (job.after.empty() ? "" : ", after " + core::FormatDependencies(job.after)));
  dependencies_.WaitFor(id, pending);
  Enqueue(table_.jobs()[id]);
  RequestSchedule();
  return View(table_.jobs()[id]);
}

void Service::Enqueue(const Job& job) {
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  q.seq = job.id;
  q.max_runtime = job.request.max_runtime;
  q.estimate = ranker_.EstimateOf(job);
  q.shape = capacity_->ShapeOf(job.id);
  q.rank = ranker_.RankOfArrival(job);
  table_.Enqueue(q, job.uid);
}

Status Service::Cancel(const Caller& caller, uint64_t id, std::optional<int> exit_code) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (exit_code && job.mode != core::JobMode::kExternal) {
    return core::InvalidArgumentError(
        "exit_code: only the release of an external job (a Slurm step's slice) says how its "
        "work ended; job " +
        std::to_string(id) + " records its own");
  }
  if (degraded() && !ledger_) {
    return core::UnavailableError("daemon degraded (" + degraded_.reason() +
                                  "): cannot record a cancel");
  }
  std::string who =
      "cancelled by " + (caller.user.empty() ? std::to_string(caller.uid) : caller.user);
  if (job.state == JobState::kQueued) {
    FinishJob(job, JobState::kCancelled, -1, who);
    Schedule();
    return Status::Ok();
  }
  if (job.state != JobState::kRunning && job.state != JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " has already ended (" +
                                         std::string(core::JobStateName(job.state)) + ")");
  }
  if (job.mode == core::JobMode::kExternal && !external_.HeldProcesses(job).empty()) {
    // A bound job whose processes still run (an admin cancels a Slurm step's
    // slice): they are ended as a launched job's are, then the slice goes.
    Live& l = table_.live()[id];
    if (!l.ending) {
      l.ending = JobState::kCancelled;
      l.ending_reason = who;
      l.kill_at_ms = clock_.NowMs() + options_.kill_grace_ms;
      external_.SignalHeld(job, SIGTERM);
    }
    return Status::Ok();
  }
  if (job.mode == core::JobMode::kExternal) {
    // Released: its slice goes now. Nothing was killed, so it exited, with
    // the status its owner reports (a Slurm step's, so a failed step does
    // not show exit 0), else 0.
    FinishJob(job, JobState::kExited, exit_code.value_or(0),
              "released by " + (caller.user.empty() ? std::to_string(caller.uid) : caller.user));
    Schedule();
    return Status::Ok();
  }
  Live& l = table_.live()[id];
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
  JobView v{job, 0, "", std::nullopt, {}, dependencies_.ViewsOf(job), ""};
  if (job.state == JobState::kRunning || job.state == JobState::kSuspended) {
    if (job.state == JobState::kRunning) v.usage = usage_.Of(job.id);
    v.flags = FlagsOf(job.id);
    v.checkpoint_error = suspender_.Error(job.id);
  }
  if (job.IsLive()) {
    if (auto factor = ranker_.ShownFactorOf(job)) v.fair_share = *factor;
  }
  // A suspended job waits in the queue too once its processes asked to be
  // resumed (resume on demand).
  const bool resume_demand =
      job.state == JobState::kSuspended && suspender_.ResumeAskedMs(job.id) != 0;
  if (job.state != JobState::kQueued && !resume_demand) return v;
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
        v.waiting_for += preemptions_.WaitingText(job.id);
        if (const auto& expected = ranker_.head_expected_start_ms();
            job.id == plan_head_ && expected) {
          v.expected_start_ms = expected;
          v.waiting_for +=
              "; expected to start in about " + RoughDuration(*expected - clock_.NowMs()) +
              (ranker_.head_estimated() ? " (by run-time estimates)" : " (by maximum run times)");
        }
        // Last, so that the command a hint names ends the line.
        v.waiting_for += defrag_.WaitingText(job.id);
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
      case core::WaitReason::kBorrowWait: {
        const std::string* b = quotas_.BorrowReason(job.id);
        v.waiting_for = "borrowing over its group's quota (" +
                        (b == nullptr ? std::string("over quota") : *b) +
                        "): waits for idle capacity: " + capacity_->WhyNotNow(job.id);
        break;
      }
      case core::WaitReason::kHeld: {
        if (job.hold != core::HoldKind::kNone) {
          v.waiting_for = JobHolds::WaitingText(job);
          break;
        }
        if (dependencies_.Waits(job.id)) {
          v.waiting_for = dependencies_.WaitingText(job);
          break;
        }
        const std::string* q = quotas_.WaitReason(job.id);
        v.waiting_for = "quota: " + (q == nullptr ? std::string("over quota") : *q);
        break;
      }
    }
  }
  if (resume_demand) {
    v.waiting_for = "waiting for GPU memory to resume on demand" +
                    (v.waiting_for.empty() ? std::string() : ": " + v.waiting_for);
  }
  return v;
}

Result<JobView> Service::Get(uint64_t id) {
  Flush();
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  return View(it->second);
}

std::vector<JobView> Service::List(bool include_finished) {
  Flush();
  std::vector<JobView> out;
  for (const auto& [id, job] : table_.jobs()) {
    if (include_finished || job.IsLive()) out.push_back(View(job));
  }
  return out;
}

namespace {

// Calls `visit` with the jobs of `table` that may pass `q` (JobTable::
// VisitCandidates): running and suspended jobs only come from the live
// jobs alone.
void VisitCandidates(const JobTable& table, const JobQuery& q,
                     const std::function<bool(const Job&)>& visit) {
  const bool held_states_only =
      !q.states.empty() && std::all_of(q.states.begin(), q.states.end(), [](JobState s) {
        return s == JobState::kRunning || s == JobState::kSuspended;
      });
  table.VisitCandidates(q.after_id, q.users, held_states_only, visit);
}

}  // namespace

JobPage Service::Query(const JobQuery& q) {
  Flush();
  JobPage page;
  const std::string& default_pool = options_.rules.default_pool;
  VisitCandidates(table_, q, [&](const Job& job) {
    if (!JobMatches(job, q, default_pool)) return true;
    if (q.limit != 0 && page.jobs.size() == q.limit) {
      // One more matches: the page is full, and the next one starts here.
      page.next_cursor = page.jobs.back().job.id;
      return false;
    }
    page.jobs.push_back(View(job));
    return true;
  });
  return page;
}

JobSummary Service::Summary(const JobQuery& q) {
  Flush();
  JobSummaryBuilder builder;
  const std::string& default_pool = options_.rules.default_pool;
  JobQuery from_start = q;
  from_start.after_id = 0;
  VisitCandidates(table_, from_start, [&](const Job& job) {
    if (JobMatches(job, q, default_pool)) {
      builder.Add(job, job.request.pool.empty() ? default_pool : job.request.pool);
    }
    return true;
  });
  JobSummary out;
  out.counts = builder.counts();
  out.groups = builder.Take();
  out.groups_total = out.groups.size();
  if (q.limit != 0 && out.groups.size() > q.limit) out.groups.resize(q.limit);
  // Only each group's first member gets a view (its position and reason).
  for (const JobGroup& g : out.groups) out.first.push_back(View(table_.jobs().at(g.ids.front())));
  return out;
}

Result<std::vector<Transition>> Service::History(uint64_t id) {
  if (!ledger_) return core::UnavailableError("ledger unavailable: " + degraded_.reason());
  return ledger_->Transitions(id);
}

Result<LogChunk> Service::ReadLog(const Caller& caller, uint64_t id, const std::string& stream,
                                  uint64_t offset, uint64_t limit) const {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
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
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
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
  if (!caller.admin) {
    // The calling process as pinned at accept: its parent link read, then
    // proved by its pidfd to be still running, so that the pid compared
    // was the caller's and no newcomer's.
    if (!caller.process || ParentOf(pid) != caller.process->pid()) {
      return core::PermissionDeniedError("process " + std::to_string(pid) +
                                         " is not a child of the calling process");
    }
    GPUSLICE_RETURN_IF_ERROR(caller.process->CheckRunning());
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
  table_.live()[id].in_cgroup = launcher_.UsesCgroups();
  job.pid = pid;
  job.pid_start_time = ProcessStartTime(pid);
  Persist(job, JobState::kRunning);
  return Status::Ok();
}

Status Service::ReportExit(const Caller& caller, uint64_t id, int exit_code) {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, it->second));
  if (it->second.mode != core::JobMode::kShell) {
    return core::FailedPreconditionError(
        "only shell jobs and run -i commands report their own exit");
  }
  auto l = table_.live().find(id);
  if (l == table_.live().end()) return Status::Ok();  // Already ended.
  l->second.reported_exit = exit_code;
  WatchRunning();
  Schedule();
  return Status::Ok();
}

}  // namespace gpuslice::daemon
