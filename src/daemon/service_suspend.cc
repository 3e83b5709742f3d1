// Service: suspending and resuming jobs through the driver's process
// checkpoint API (checkpointer.h; docs/SUSPEND.md).
//
// Suspend: the job's CUDA processes are locked and checkpointed on a worker
// thread (the driver's calls block for as long as the copies take); when it
// is done the event loop makes the job `suspended`: its slice's limits page
// says "no memory, no launches" (a process the suspension missed, or a new
// one, gets nothing on the GPU), and only then is its capacity released for
// the queue. Resume takes the capacity back first (the same GPUs; refused
// when they lack room), restores the limits, then restores and unlocks the
// processes on a worker. Either way a failure leaves the job as it was, with
// the reason in JobView::checkpoint_error and an event.

#include <signal.h>

#include <algorithm>
#include <atomic>

#include "core/strings.h"
#include "daemon/log.h"
#include "daemon/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

struct CheckpointTask {
  bool resume = false;
  SuspendCause cause;  // Suspensions.
  std::string by;
  int64_t started_ms = 0;
  std::thread thread;
  std::atomic<bool> done{false};
  CheckpointOutcome outcome;  // Written by the thread before `done`.
  ~CheckpointTask() {
    if (thread.joinable()) thread.join();
  }
};

namespace {

std::string Who(const Caller& caller) {
  return caller.user.empty() ? "uid " + std::to_string(caller.uid) : caller.user;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

std::vector<int64_t> Service::ProcessesOf(const Job& job) {
  std::vector<int64_t> candidates;
  if (!job.region_path.empty()) {
    if (auto pids = regions_.Pids(job.region_path); pids.ok()) {
      candidates.insert(candidates.end(), pids->begin(), pids->end());
    }
  }
  if (auto u = usage_.find(job.id); u != usage_.end()) {
    candidates.insert(candidates.end(), u->second.pids.begin(), u->second.pids.end());
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  // The slice's process list is the job's to write: only processes that run
  // as the job's owner are the daemon's to suspend for it.
  std::vector<int64_t> out;
  for (int64_t pid : candidates) {
    if (pid <= 0) continue;
    auto owner = Processes().OwnerOf(pid);
    if (owner && owner->uid == job.uid) out.push_back(pid);
  }
  return out;
}

Status Service::Suspend(const Caller& caller, uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return core::NotFoundError("no job " + std::to_string(id));
  Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state == JobState::kSuspended) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is suspended already");
  }
  auto l = live_.find(id);
  if (job.state != JobState::kRunning || l == live_.end()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running job can be suspended");
  }
  SuspendCause cause;
  cause.by = Who(caller);
  return StartSuspend(job, l->second, cause);
}

Status Service::CanCheckpoint(const Job& job, const Live& l, const char* verb) const {
  if (!options_.checkpointer) {
    return core::UnimplementedError(std::string("this daemon cannot ") + verb +
                                    " jobs: it has no CUDA driver with the process checkpoint API");
  }
  GPUSLICE_RETURN_IF_ERROR(options_.checkpointer->Available());
  const std::string name = "job " + std::to_string(job.id);
  if (l.checkpoint) {
    return core::FailedPreconditionError(name + " is being " +
                                         (l.resuming ? "resumed" : "suspended") + " already");
  }
  if (l.ending) return core::FailedPreconditionError(name + " is ending");
  return Status::Ok();
}

void Service::RunCheckpointTask(Job& job, Live& l, std::shared_ptr<CheckpointTask> task,
                                std::function<CheckpointOutcome(Checkpointer&)> work) {
  task->started_ms = clock_.NowMs();
  std::shared_ptr<Checkpointer> cp = options_.checkpointer;
  task->thread = std::thread([task = task.get(), cp, work = std::move(work)] {
    task->outcome = work(*cp);
    task->done.store(true, std::memory_order_release);
  });
  l.resuming = task->resume;
  l.checkpoint = std::move(task);
  l.checkpoint_error.clear();
  LogInfo("job " + std::to_string(job.id) + (l.resuming ? ": resuming" : ": suspending") +
          ", asked by " + l.checkpoint->by);
}

Status Service::StartSuspend(Job& job, Live& l, SuspendCause cause) {
  GPUSLICE_RETURN_IF_ERROR(CanCheckpoint(job, l, "suspend"));
  const std::string name = "job " + std::to_string(job.id);
  if (job.mode == core::JobMode::kExternal) {
    // Its processes are started and owned by Slurm or Kubernetes: a
    // suspension would leave them holding a step or a pod that cannot run.
    return core::FailedPreconditionError(
        name + " is an external job (Slurm or Kubernetes): its engine owns its processes");
  }
  if (l.stopped) {
    return core::FailedPreconditionError(name +
                                         " is stopped by the watchdog: its processes cannot "
                                         "finish the GPU work a suspension waits for");
  }
  auto task = std::make_shared<CheckpointTask>();
  task->by = cause.by;
  task->cause = std::move(cause);
  RunCheckpointTask(job, l, std::move(task),
                    [pids = ProcessesOf(job), timeout = options_.suspend_lock_timeout_ms](
                        Checkpointer& cp) { return SuspendProcesses(cp, pids, timeout); });
  return Status::Ok();
}

Status Service::StartResume(Job& job, Live& l, const std::string& by) {
  GPUSLICE_RETURN_IF_ERROR(CanCheckpoint(job, l, "resume"));
  const std::string name = "job " + std::to_string(job.id);
  if (!capacity_) return core::UnavailableError("the GPUs are unknown: " + degraded_reason_);
  // Its room first, so that nothing is placed there while it is restored.
  if (Status held = capacity_->Hold(job.id, job.allocation); !held.ok()) {
    std::string why = held.message();
    if (held.code() == core::StatusCode::kFailedPrecondition ||
        held.code() == core::StatusCode::kResourceExhausted) {
      why = capacity_->WhyNotNow(job.id);
    }
    return core::FailedPreconditionError(name + " cannot resume now: its GPUs (" +
                                         core::Join(job.allocation.gpu_uuids, ", ") +
                                         ") lack room for its slice: " + why);
  }
  // The limits come back before the processes do.
  Job running = job;
  running.state = JobState::kRunning;
  if (Status s = regions_.Update(job.region_path, SliceLimitsOf(running)); !s.ok()) {
    capacity_->Release(job.id);
    return s.WithContext(name + ": restoring its slice's limits");
  }
  auto task = std::make_shared<CheckpointTask>();
  task->resume = true;
  task->by = by;
  RunCheckpointTask(job, l, std::move(task), [pids = ProcessesOf(job)](Checkpointer& cp) {
    return ResumeProcesses(cp, pids, {});
  });
  return Status::Ok();
}

void Service::FinishCheckpoints() {
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : live_) {
    if (l.checkpoint && l.checkpoint->done.load(std::memory_order_acquire)) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    Job& job = jobs_[id];
    Live& l = live_[id];
    std::shared_ptr<CheckpointTask> task = std::move(l.checkpoint);
    task->thread.join();
    const CheckpointOutcome& out = task->outcome;
    const int64_t now = clock_.NowMs();
    const std::string name = "job " + std::to_string(id);
    const std::string took = Seconds(now - task->started_ms);
    if (l.ending) continue;  // Being cancelled or timed out meanwhile: that wins.
    if (!task->resume) {
      const SuspendCause& cause = task->cause;
      if (!out.status.ok()) {
        l.checkpoint_error = "suspend failed: " + out.status.message();
        std::string instead =
            cause.idle_fallback
                ? "; " + std::string(IdleActionName(*cause.idle_fallback)) + " instead"
            : cause.preempted_for != 0 ? "; ended instead"
                                       : "; it runs on";
        RecordEvent("suspend_failed", id, job.user,
                    l.checkpoint_error + " (asked by " + task->by + ")" + instead);
        if (cause.idle_fallback) {
          ActOnIdle(job, l, *cause.idle_fallback, cause.idle_text);
        } else if (cause.preempted_for != 0 && jobs_.count(cause.preempted_for)) {
          EndForPreemption(job, l, cause.preempted_for);
        }
        continue;
      }
      JobState from = job.state;
      job.state = JobState::kSuspended;
      job.suspended_since_ms = now;
      job.resume_when_fits = cause.preempted_for != 0;
      job.reason = "suspended by " + task->by;
      // Closed before its capacity goes: a process the suspension missed
      // (or a new one) may allocate nothing and launch nothing meanwhile.
      if (Status s = regions_.Update(job.region_path, SliceLimitsOf(job)); !s.ok()) {
        LogWarn(name + ": cannot close its slice while suspended: " + s.message());
      }
      if (capacity_) capacity_->Release(id);
      usage_.erase(id);
      Persist(job, from);
      RecordEvent("suspended", id, job.user,
                  "by " + task->by + ": " + std::to_string(out.pids.size()) +
                      " CUDA processes checkpointed to host memory in " + took +
                      "; its GPUs are free for others");
      RequestSchedule();
      continue;
    }
    if (!out.status.ok()) {
      // Still wholly suspended (ResumeProcesses put back what it did): its
      // room goes back to the queue and its slice is closed again.
      l.checkpoint_error = "resume failed: " + out.status.message();
      if (Status s = regions_.Update(job.region_path, SliceLimitsOf(job)); !s.ok()) {
        LogWarn(name + ": cannot close its slice again: " + s.message());
      }
      if (capacity_) capacity_->Release(id);
      std::string next = "; it stays suspended";
      if (job.resume_when_fits) {
        // The daemon's own retries would fail the same way every tick: its
        // owner resumes it by hand once the cause is gone.
        job.resume_when_fits = false;
        Persist(job, job.state);
        next += " until resumed by hand";
      }
      RecordEvent("resume_failed", id, job.user,
                  l.checkpoint_error + " (asked by " + task->by + ")" + next);
      RequestSchedule();
      continue;
    }
    JobState from = job.state;
    job.suspended_total_ms += now - job.suspended_since_ms;
    job.suspended_since_ms = 0;
    job.state = JobState::kRunning;
    job.resume_when_fits = false;
    job.reason.clear();
    l.idle_flagged = l.idle_acted = false;
    l.escaped.clear();
    Persist(job, from);
    RecordEvent("resumed", id, job.user,
                "by " + task->by + ": " + std::to_string(out.pids.size()) +
                    " CUDA processes restored onto " + core::Join(job.allocation.gpu_uuids, ", ") +
                    " in " + took);
  }
}

void Service::RecoverCheckpoints(Job& job) {
  if (!options_.checkpointer || !options_.checkpointer->Available().ok()) return;
  Checkpointer& cp = *options_.checkpointer;
  const bool suspended = job.state == JobState::kSuspended;
  for (int64_t pid : ProcessesOf(job)) {
    auto st = cp.StateOf(pid);
    if (!st.ok()) continue;
    Status s;
    if (suspended && *st == GpuProcessState::kLocked) {
      // A resume cut short: back to checkpointed, as the ledger says.
      s = cp.Checkpoint(pid);
    } else if (!suspended && *st == GpuProcessState::kCheckpointed) {
      // A suspension cut short (running in the ledger, capacity held):
      // restored and running again.
      s = cp.Restore(pid, {});
      if (s.ok()) s = cp.Unlock(pid);
    } else if (!suspended && *st == GpuProcessState::kLocked) {
      s = cp.Unlock(pid);
    } else {
      continue;
    }
    LogInfo("job " + std::to_string(job.id) + ": process " + std::to_string(pid) + " was " +
            std::string(GpuProcessStateName(*st)) +
            " by a suspend or resume the daemon's restart "
            "cut short; " +
            (s.ok() ? "put back" : "could not be put back: " + s.message()));
  }
}

void Service::ResumeWhenRoom() {
  if (!capacity_ || degraded()) return;
  std::vector<uint64_t> ids;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (job.state == JobState::kSuspended && job.resume_when_fits && !l.checkpoint && !l.ending) {
      ids.push_back(id);
    }
  }
  if (ids.empty()) return;
  // Higher priority first, then the longest suspended.
  std::sort(ids.begin(), ids.end(), [&](uint64_t a, uint64_t b) {
    const Job &x = jobs_[a], &y = jobs_[b];
    if (x.request.priority != y.request.priority) return x.request.priority > y.request.priority;
    return x.suspended_since_ms < y.suspended_since_ms;
  });
  for (uint64_t id : ids) {
    Job& job = jobs_[id];
    // A queued job of higher priority would preempt it again at once.
    bool outranked = std::any_of(queue_.begin(), queue_.end(), [&](const core::QueuedJob& q) {
      return q.priority > job.request.priority;
    });
    if (outranked) continue;
    // Quiet when there is no room yet: it is tried again every tick.
    if (Status s = StartResume(job, live_[id], "the daemon (room again)"); !s.ok()) continue;
  }
}

void Service::WatchSuspended(Job& job, Live& l, const JobUsage& use) {
  if (l.checkpoint) return;  // Being resumed: its processes come back now.
  for (const auto& [gpu, bytes] : use.nvml_memory_by_gpu) {
    (void)gpu;
    if (bytes == 0) continue;
    // Its processes on the GPU: NVML lists none of a checkpointed process.
    for (int32_t pid : use.pids) {
      if (l.escaped.count(pid)) continue;
      auto st = options_.checkpointer ? options_.checkpointer->StateOf(pid)
                                      : core::Result<GpuProcessState>(core::NotFoundError(""));
      if (st.ok() && *st == GpuProcessState::kCheckpointed) continue;
      if (!st.ok() && st.status().code() == core::StatusCode::kNotFound) continue;
      l.escaped.insert(pid);
      (void)Processes().SignalIfOwnedBy(pid, job.uid, SIGKILL);
      RecordEvent("suspend_violation", job.id, job.user,
                  "process " + std::to_string(pid) +
                      " used the GPU while its job was suspended; it was killed");
      AppendToStderr(job, "process " + std::to_string(pid) + " used the GPU while job " +
                              std::to_string(job.id) + " was suspended: killed");
    }
  }
}

}  // namespace gpuslice::daemon
