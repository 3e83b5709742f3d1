// Service: the part that moves jobs along (scheduling, starting, watching,
// ending). See service.h.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

namespace {

// A shell job whose client never reports the shell's pid is given up.
constexpr int64_t kShellAttachTimeoutMs = 60'000;
// A group that vanished without a status file (re-adopted job) is ended
// after this long, exit status unknown.
constexpr int64_t kStatusGraceMs = 2'000;

}  // namespace

void Service::Tick() {
  if (usage_.Due(clock_.NowMs(), options_.sample_interval_ms)) {
    Sample();
    Reclaim();
  }
  suspender_.Finish();
  suspender_.RecheckRecovered();
  suspender_.ResumeWhenRoom();
  suspender_.WatchResumeRequests();
  WatchRunning();
  // Elastic jobs first: a shrink that lets the head start makes preempting
  // for it unnecessary.
  if (capacity_ && !degraded_.degraded())
    elastic_.Adjust(table_.queue().empty() ? 0 : reads_.plan_head());
  Schedule();
  table_.TrimHistory(options_.history, clock_.NowMs() - kKeepEndedMs);
  containers_.SyncCdi();
}

void Service::WatchRunning() {
  for (int64_t pid : launcher_.Reap()) {
    for (auto& [id, l] : table_.live()) {
      if (l.supervisor_pid == pid) l.supervisor_reaped = true;
    }
  }
  int64_t now = clock_.NowMs();
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : table_.live()) ids.push_back(id);
  for (uint64_t id : ids) {
    Job& job = table_.jobs()[id];
    Live& l = table_.live()[id];
    // Maximum run time.
    auto deadline = job.DeadlineMs();
    if (!l.ending && deadline && now >= *deadline) {
      l.ending = JobState::kTimedOut;
      l.ending_reason =
          "ran past its maximum run time of " + core::FormatDuration(*job.request.max_runtime);
      l.kill_at_ms = now + options_.kill_grace_ms;
      if (job.pid > 0) (void)launcher_.SignalGroup(job.pid, SIGTERM);
      if (job.mode == core::JobMode::kShell && job.pid > 0) {
        (void)launcher_.SignalGroup(job.pid, SIGHUP);
      }
      if (job.holder_pid > 0) external_.SignalHeld(job, SIGTERM);
    }
    if (l.ending && now >= l.kill_at_ms && job.pid > 0) {
      (void)launcher_.SignalGroup(job.pid, SIGKILL);
      l.kill_at_ms = INT64_MAX;
    }
    if (job.mode == core::JobMode::kExternal) {
      // Nothing of its own runs: it ends when released (Cancel), when its
      // holder is gone, or at its deadline (external/external_jobs.h).
      external_.Watch(job, l.ending, l.ending_reason, &l.kill_at_ms, now);
      continue;
    }
    JobState end_state = l.ending.value_or(JobState::kExited);
    if (end_state == JobState::kQueued) {
      // Preempted and restartable: back to the queue once its processes are
      // gone (a shell is never restartable).
      if (job.mode != core::JobMode::kShell && !launcher_.GroupAlive(job.pid) &&
          (l.supervisor_pid == 0 || l.supervisor_reaped ||
           ReadExitStatusFile(setup_.JobDir(id) + "/status"))) {
        Requeue(job, l.ending_reason + "; requeued");
      }
      continue;
    }
    if (job.mode == core::JobMode::kShell && l.in_cgroup && job.pid != 0) {
      // The job is its cgroup: it ends when the last of its processes does
      // (a background process the shell left, or a `setsid` escapee, keeps
      // it and its allocation), with the exit status the client reported.
      if (launcher_.GroupAlive(job.pid)) continue;
      if (shells_.AwaitExitReport(l, now)) continue;
      FinishJob(job, end_state, l.reported_exit.value_or(-1),
                l.ending ? l.ending_reason
                         : (l.reported_exit
                                ? ""
                                : (job.argv.empty() ? "the shell ended" : "the command ended")));
      continue;
    }
    if (job.mode == core::JobMode::kShell) {
      if (l.reported_exit) {
        FinishJob(job, end_state, *l.reported_exit, l.ending_reason);
      } else if (job.pid == 0 && now - job.started_ms > kShellAttachTimeoutMs) {
        FinishJob(job, JobState::kFailed, -1,
                  job.argv.empty() ? "the shell was never started by the client"
                                   : "the command was never started by the client (run -i)");
      } else if (job.pid != 0 && !launcher_.ProcessAlive(job.pid, job.pid_start_time)) {
        if (shells_.AwaitExitReport(l, now)) continue;
        FinishJob(job, end_state, -1,
                  l.ending ? l.ending_reason
                           : (job.argv.empty() ? "the shell ended" : "the command ended"));
      } else if (job.pid == 0 && l.ending) {
        FinishJob(job, end_state, -1, l.ending_reason);
      }
      continue;
    }
    if (launcher_.GroupAlive(job.pid)) continue;
    // Ended by us (cancel, deadline, policy): that reason; else what the
    // launcher can tell (the kernel's OOM killer for --host-mem).
    std::string reason = l.ending ? l.ending_reason : launcher_.EndNote(job.pid);
    auto code = ReadExitStatusFile(setup_.JobDir(id) + "/status");
    if (code) {
      FinishJob(job, end_state, *code, reason);
      continue;
    }
    if (l.supervisor_pid != 0 && !l.supervisor_reaped) continue;  // Status on its way.
    if (l.group_gone_ms == 0) l.group_gone_ms = now;
    if (now - l.group_gone_ms >= kStatusGraceMs || l.supervisor_pid != 0) {
      FinishJob(job, end_state, -1,
                !reason.empty() ? reason : "processes ended; exit status unknown");
    }
  }
}

void Service::RequestSchedule() {
  int64_t now = clock_.NowMs();
  if (table_.queue().size() < 64 || now - last_schedule_ms_ >= 20) {
    Schedule();
  } else {
    schedule_pending_ = true;
  }
}

void Service::Flush() {
  if (schedule_pending_) Schedule();
}

void Service::Schedule() {
  schedule_pending_ = false;
  last_schedule_ms_ = clock_.NowMs();
  reads_.MarkStale();
  // No room for a slice: nothing could start, and nothing is preempted for
  // a job that could not start either (DegradedMode::Maintain schedules again).
  if (degraded_.no_room()) return;
  if (table_.queue().empty() || !capacity_) {
    // Nothing waits; the head stays as the last plan left it (read only
    // while something waits).
    reads_.SetPlan({}, reads_.plan_head());
    ranker_.ClearReservation();
    if (capacity_) capacity_->set_pack_fractions(false);
    return;
  }
  // Fair share and age (at most once a second), then the queue in order.
  ranker_.Rerank(false);
  ranker_.UpdatePacking();
  const int64_t now = clock_.NowMs();
  std::vector<core::RunningJob> running;
  for (const auto& [id, l] : table_.live()) {
    if (table_.IsSuspended(id)) continue;  // Holds nothing to free.
    running.push_back(ranker_.PlanEntryOf(table_.jobs()[id], now));
  }
  core::PlanOptions opt;
  // While the daemon moves jobs to make room for the head, nothing else
  // starts: the room a move frees is the head's.
  opt.backfill = options_.backfill && !defrag_.moving();
  quotas_.HoldForQuotas(&opt);
  if (opt.held) {
    // A suspended job's resume demand is not held for quotas (nor is a
    // resume by hand): it had its slice already.
    opt.held = [this, quota = std::move(opt.held)](uint64_t id) {
      return !table_.IsSuspended(id) && quota(id);
    };
  }
  if (dependencies_.AnyWaits() || holds_.any()) {
    // A job waiting for its dependencies, or held (`gpuslice hold`), is
    // held like a quota wait: it takes nothing and is never the head, so it
    // delays no one (and it is not counted against its quota while it waits).
    opt.held = [this, quota = std::move(opt.held)](uint64_t id) {
      return holds_.Holds(id) || dependencies_.Waits(id) || (quota && quota(id));
    };
  }
  core::QueuePlan plan = core::PlanQueue(table_.queue(), running, now, *capacity_, opt);
  // An event when a job starts waiting for a quota (or its reason
  // changes), not on every pass.
  quotas_.RecordWaits([this](uint64_t id, const std::string& reason) {
    RecordEvent("quota_wait", id, table_.jobs()[id].user, reason);
  });
  for (uint64_t id : plan.never_fit) {
    table_.Dequeue(id);
    if (table_.IsSuspended(id)) continue;  // A resume demand is never failed (TryResume).
    FinishJob(table_.jobs()[id], JobState::kFailed, -1, "can never fit on this machine's GPUs");
  }
  for (uint64_t id : plan.start) {
    if (degraded_.no_room()) break;  // The rest stay queued.
    table_.Dequeue(id);
    if (table_.IsSuspended(id)) {
      suspender_.ResumeOnDemand(table_.jobs()[id]);  // Placed where its processes can be restored.
      continue;
    }
    elastic_.FitToQuotas(table_.jobs()[id]);
    StartJob(table_.jobs()[id]);
  }
  reads_.SetPlan(std::move(plan.waiting), plan.head);
  ranker_.SetReservation(plan.head_reservation_ms, plan.reservation_estimated);
  if (degraded_.no_room()) return;  // Nobody is preempted for a job that cannot start.
  preemptions_.Forget();
  // Preemption, moves and reclaim act for a job that waits to start, not for
  // a suspended job that waits to resume: that one gave its room up already.
  if (plan.head != 0 && table_.jobs().count(plan.head) && !table_.IsSuspended(plan.head)) {
    // Moves lose no work: tried (and waited for) before ending or
    // suspending anyone.
    const bool moving = defrag_.Defragment(plan.head) || defrag_.moving();
    if (!moving) {
      preemptions_.Preempt(plan.head);
      preemptions_.Reclaim(plan.head);
    }
  }
}

void Service::StartJob(Job& job) {
  auto alloc = capacity_->AllocationOf(job.id);
  if (!alloc) {
    FinishJob(job, JobState::kFailed, -1, "internal: placed without an allocation");
    return;
  }
  job.allocation = *alloc;
  job.started_ms = clock_.NowMs();
  auto region = regions_.Create(setup_.SliceLimitsOf(job));
  if (!region.ok() && region.status().code() == core::StatusCode::kResourceExhausted) {
    // No room on the state disk: the job waits in the queue, as
    // do those after it, until there is; never lost. An external job is
    // never queued: its caller gets the reason.
    degraded_.NoRoom("no room for job slices on the state disk (" + region.status().message() +
                     ")");
    if (job.mode != core::JobMode::kExternal) {
      ForgetStart(job);
      capacity_->Release(job.id);
      Enqueue(job);
      return;
    }
  }
  if (!region.ok()) {
    // It never left the queue: failed from there (FinishJob gives back the
    // capacity the plan took), so its history has no start it never made.
    FinishJob(job, JobState::kFailed, -1, "cannot create the slice: " + region.status().message());
    return;
  }
  job.region_path = *region;
  Live l;
  const bool launched = job.mode != core::JobMode::kShell && job.mode != core::JobMode::kExternal;
  if (!launched) {
    ChangeState(job, JobState::kRunning, "started", JobSetup::StartedText(job));
    // Nothing to launch: an external job's processes come from elsewhere
    // and find the slice through its CDI device or the environment it
    // hands out; a shell job's client reports its shell (Attach).
    if (job.mode == core::JobMode::kExternal) containers_.WriteCdi(job);
  } else {
    // Crash safety (a job launched before it is recorded would run twice): the
    // launch intent (running, its slice, no pid yet) is durable before any
    // process exists, so a restart looks for the job's processes instead of
    // starting it again (recovery/recovery.h). Its "started"
    // event follows the launch, with its pid.
    if (!ChangeState(job, JobState::kRunning, /*kind=*/"", "")) {
      UndoStart(job);
      return;
    }
    std::string dir = setup_.JobDir(job.id);
    mkdir(dir.c_str(), 0700);
    if (IsElastic(job)) WriteGpusFile(job, setup_.JobDir(job.id));
    // Its CDI device exists before its first process: a job that is
    // `podman run --device gpuslice.dev/slice=$GPUSLICE_JOB_ID ...` finds it.
    containers_.WriteCdi(job);
    LaunchSpec spec;
    spec.argv = job.argv;
    spec.cwd = job.cwd;
    spec.env = setup_.JobEnvironment(job);
    spec.uid = job.uid;
    spec.gid = job.gid;
    spec.stdout_path = dir + "/stdout";
    spec.stderr_path = dir + "/stderr";
    spec.status_path = dir + "/status";
    spec.job_id = job.id;
    spec.host_limits = {job.request.host_cpu_milli, job.request.host_memory_bytes};
    if (!job.image.empty()) {
      // A container job: its leader is the engine's client, as root, with
      // a clean environment; the slice goes in as the engine's flags.
      auto argv = containers_.Argv(job);
      if (!argv.ok()) {
        table_.live()[job.id] = l;
        FinishJob(job, JobState::kFailed, 126,
                  "cannot run its container: " + argv.status().message());
        return;
      }
      spec.argv = std::move(*argv);
      spec.env = ContainerJobs::EngineEnvironment();
      spec.engine_as_root = true;
    }
    auto ref = launcher_.Launch(spec);
    if (!ref.ok()) {
      table_.live()[job.id] = l;
      int code = ref.status().code() == core::StatusCode::kNotFound ? 127 : 126;
      // The reason is public (ps, events, the status page): not the PATH
      // or any other value of the owner's environment.
      FinishJob(job, JobState::kFailed, code,
                RedactEnvironment(ref.status().message(), spec.env, job.user));
      return;
    }
    job.pid = ref->pid;
    job.pid_start_time = ref->start_time;
    l.supervisor_pid = ref->supervisor_pid;
  }
  table_.live()[job.id] = l;
  if (launched) {
    Persist(job, JobState::kRunning);  // Its pid.
    RecordEvent("started", job.id, job.user, JobSetup::StartedText(job));
  }
  usage_.ObserveQueueWait(job.started_ms - job.submitted_ms);
  LogInfo("job " + std::to_string(job.id) + " (" + job.user + ", " + job.request.Describe() +
          ") started on " + (job.allocation.gpu_uuids.empty() ? "-" : job.allocation.gpu_uuids[0]) +
          (job.pid ? ", pid " + std::to_string(job.pid) : ""));
}

void Service::FinishJob(Job& job, JobState state, int exit_code, std::string reason) {
  JobState from = job.state;
  if (!core::CanTransition(from, state)) {
    LogError("job " + std::to_string(job.id) + ": illegal transition " +
             std::string(core::JobStateName(from)) + " -> " +
             std::string(core::JobStateName(state)));
    return;
  }
  // A queued job, or a suspended one waiting in the queue to resume.
  if (from == JobState::kQueued || from == JobState::kSuspended) table_.Dequeue(job.id);
  holds_.Release(job.id);
  if (capacity_) {
    capacity_->Release(job.id);
    capacity_->ForgetDemand(job.id);
  }
  if (!job.region_path.empty() && regions_.Exists(job.region_path)) {
    core::Status s = regions_.Remove(job.region_path);
    if (!s.ok()) LogWarn("job " + std::to_string(job.id) + ": " + s.message());
  }
  containers_.RemoveCdi(job.id);
  if (!job.image.empty()) containers_.RemoveContainer(job);
  // Its processes are gone (or being killed): the cgroup goes too.
  if (job.pid > 0) launcher_.Release(job.pid);  // Untracked (no cgroup): nothing.
  table_.live().erase(job.id);
  suspender_.Forget(job.id);
  usage_.Forget(job.id);
  watchdog_.Forget(job.id);
  idle_.Forget(job.id);
  job.exit_code = exit_code;
  job.reason = std::move(reason);
  job.ended_ms = clock_.NowMs();
  // The event kind is the end state: exited, cancelled, timed_out, failed.
  std::string what = exit_code >= 0 ? "exit " + std::to_string(exit_code) : std::string();
  if (!job.reason.empty()) what += (what.empty() ? "" : ": ") + job.reason;
  ChangeState(job, state, std::string(core::JobStateName(state)), std::move(what));
  LogInfo("job " + std::to_string(job.id) + " " + std::string(core::JobStateName(state)) +
          (exit_code >= 0 ? " (exit " + std::to_string(exit_code) + ")" : "") +
          (job.reason.empty() ? "" : ": " + job.reason));
  // Jobs waiting for this one: released, or cancelled (--after ID:ok).
  dependencies_.Release(job.id);
}

}  // namespace gpuslice::daemon
