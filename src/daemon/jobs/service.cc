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

std::string Service::PublicText(uint64_t job_id, std::string text) const {
  auto it = table_.jobs().find(job_id);
  if (it == table_.jobs().end()) return text;
  return RedactEnvironment(std::move(text), it->second.env, it->second.user);
}

namespace {

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

}  // namespace gpuslice::daemon
