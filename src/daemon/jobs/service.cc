// Service: jobs as users see them. Cancel, views and lists, logs, attaching
// a shell or `run -i` command, reporting its exit (taking in a submission is
// intake/job_intake.h's). Starting, recovery and the ledger are in
// service_state.cc; moving jobs along in service_lifecycle.cc. See service.h.

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

}  // namespace

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
  GPUSLICE_ASSIGN_OR_RETURN(LogRead read,
                            ReadJobLog(setup_.JobDir(id) + "/" + stream, offset, limit));
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
