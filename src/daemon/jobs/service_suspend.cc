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

#include "core/placement/relocation.h"
#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;
using core::Status;

struct CheckpointTask {
  bool resume = false;
  bool on_demand = false;  // A resume its own processes asked for.
  SuspendCause cause;      // Suspensions.
  std::string by;
  int64_t started_ms = 0;
  std::thread thread;
  std::atomic<bool> done{false};
  CheckpointOutcome outcome;  // Written by the thread before `done`.
  // Resumes: the allocation before, and the slice devices that changed GPU
  // (empty: resumed where it was), to put back when the restore fails.
  core::Allocation before;
  std::vector<std::pair<std::string, std::string>> moves;
  ~CheckpointTask() {
    if (thread.joinable()) thread.join();
  }
};

namespace {

std::string Who(const Caller& caller) {
  return caller.user.empty() ? "uid " + std::to_string(caller.uid) : caller.user;
}

std::vector<std::pair<std::string, std::string>> Reversed(
    const std::vector<std::pair<std::string, std::string>>& moves) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [from, to] : moves) out.emplace_back(to, from);
  return out;
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
  if (const JobUsage* u = usage_.Find(job.id)) {
    candidates.insert(candidates.end(), u->pids.begin(), u->pids.end());
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
  if (watchdog_.Stopped(job.id)) {
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

Status Service::StartResume(Job& job, Live& l, const std::string& by,
                            const std::vector<std::string>& onto, bool placed) {
  if (Status s = CanCheckpoint(job, l, "resume"); !s.ok()) {
    if (placed && capacity_) capacity_->Release(job.id);
    return s;
  }
  const std::string name = "job " + std::to_string(job.id);
  if (!capacity_) return core::UnavailableError("the GPUs are unknown: " + degraded_reason_);
  // Its room first, so that nothing is placed there while it is restored.
  core::Allocation target;
  if (placed) {
    std::optional<core::Allocation> a = capacity_->AllocationOf(job.id);
    if (!a) return core::InternalError(name + ": placed to resume, but its allocation is unknown");
    target = *a;
  } else {
    GPUSLICE_ASSIGN_OR_RETURN(target, PlaceForResume(job, onto));
  }
  // Where its processes are: the GPUs its slice names now (a move renames
  // them), which the ledger's allocation also says unless a move was cut
  // short by a restart (RecoverCheckpoints).
  std::vector<std::string> now = job.allocation.gpu_uuids;
  if (auto devices = regions_.Devices(job.region_path); devices.ok()) now = *devices;
  core::Result<core::Relocation> rel = core::Relocate(now, target.gpu_uuids);
  if (!rel.ok()) {
    capacity_->Release(job.id);
    return rel.status().WithContext(name);
  }
  core::Allocation placed_on = target;
  for (size_t i = 0; i < rel->order.size(); ++i) {
    placed_on.gpu_indices[i] = target.gpu_indices[rel->order[i]];
    placed_on.gpu_uuids[i] = target.gpu_uuids[rel->order[i]];
  }
  Job running = job;
  running.state = JobState::kRunning;
  running.allocation = placed_on;
  // The slice moves, then its limits come back, before the processes do.
  if (!rel->moves.empty()) {
    if (Status s = regions_.Move(job.region_path, rel->moves, SliceLimitsOf(running)); !s.ok()) {
      capacity_->Release(job.id);
      return s.WithContext(name + ": moving its slice to " + core::Join(placed_on.gpu_uuids, ", "));
    }
  }
  if (Status s = regions_.Update(job.region_path, SliceLimitsOf(running)); !s.ok()) {
    if (!rel->moves.empty())
      (void)regions_.Move(job.region_path, Reversed(rel->moves), SliceLimitsOf(job));
    capacity_->Release(job.id);
    return s.WithContext(name + ": restoring its slice's limits");
  }
  auto task = std::make_shared<CheckpointTask>();
  task->resume = true;
  task->by = by;
  task->before = job.allocation;
  task->moves = rel->moves;
  job.allocation = placed_on;
  // Whoever resumes it, a demand it had in the queue is moot now.
  DropResumeDemand(job.id, l);
  // The driver wants every GPU the process is on named once anything moves.
  std::vector<GpuRemap> remap;
  if (!rel->moves.empty()) {
    for (size_t i = 0; i < now.size(); ++i) remap.push_back({now[i], placed_on.gpu_uuids[i]});
  }
  RunCheckpointTask(job, l, std::move(task), [pids = ProcessesOf(job), remap](Checkpointer& cp) {
    return ResumeProcesses(cp, pids, remap);
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
        const bool requeue = cause.reclaimed_for != 0 && job.restartable;
        std::string instead =
            cause.idle_fallback
                ? "; " + std::string(IdleActionName(*cause.idle_fallback)) + " instead"
            : cause.preempted_for != 0 ? "; ended instead"
            : requeue                  ? "; requeued instead"
                                       : "; it runs on";
        RecordEvent("suspend_failed", id, job.user,
                    l.checkpoint_error + " (asked by " + task->by + ")" + instead);
        if (cause.idle_fallback) {
          idle_.Act(job, *cause.idle_fallback, cause.idle_text);
        } else if (cause.preempted_for != 0 && jobs_.count(cause.preempted_for)) {
          EndForPreemption(job, l, cause.preempted_for);
        } else if (requeue) {
          RequeueForReclaim(job, l, cause.reclaimed_for);
        }
        if (cause.defrag_for != 0) {
          // Not planned again for a while: it would fail the same way.
          defrag_refused_until_[id] = now + 3600 * 1000;
        }
        continue;
      }
      job.suspended_since_ms = now;
      // The daemon resumes it by itself once it fits: a preemption victim, a
      // borrower whose capacity was reclaimed, and a job being moved (should
      // the resume on its new GPU never happen, say the daemon restarts in
      // between, it comes back wherever it fits rather than stay suspended).
      job.resume_when_fits =
          cause.preempted_for != 0 || cause.reclaimed_for != 0 || !cause.move_to.empty();
      job.reason = "suspended by " + task->by;
      // Closed before its capacity goes: a process the suspension missed
      // (or a new one) may allocate nothing and launch nothing meanwhile.
      // The limits of the job as suspended (a copy: its state changes below).
      Job closed = job;
      closed.state = JobState::kSuspended;
      if (Status s = regions_.Update(job.region_path, SliceLimitsOf(closed)); !s.ok()) {
        LogWarn(name + ": cannot close its slice while suspended: " + s.message());
      }
      if (capacity_) capacity_->Release(id);
      usage_.Forget(id);
      ChangeState(job, JobState::kSuspended, "suspended",
                  "by " + task->by + ": " + std::to_string(out.pids.size()) +
                      " CUDA processes checkpointed to host memory in " + took +
                      (cause.move_to.empty() ? "; its GPUs are free for others"
                                             : "; moving to " + cause.move_to));
      if (!cause.move_to.empty()) {
        // Nothing was placed since its capacity went (this loop has not
        // yielded): the target, else its own GPU, is still free for it.
        Status moved = StartResume(job, l, task->by, {cause.move_to});
        if (!moved.ok()) {
          Status back = StartResume(job, l, task->by);
          l.checkpoint_error = "move failed: " + moved.message();
          RecordEvent("move_failed", id, job.user,
                      moved.message() + (back.ok() ? "; resuming where it was"
                                                   : "; it stays suspended: " + back.message()));
        }
      }
      RequestSchedule();
      continue;
    }
    if (!out.status.ok()) {
      // Still wholly suspended (ResumeProcesses put back what it did): its
      // room goes back to the queue and its slice is closed again.
      l.checkpoint_error = "resume failed: " + out.status.message();
      job.allocation = task->before;
      if (!task->moves.empty()) {
        // ResumeProcesses put its processes back on their old GPUs.
        if (Status s = regions_.Move(job.region_path, Reversed(task->moves), SliceLimitsOf(job));
            !s.ok()) {
          LogWarn(name + ": cannot move its slice back: " + s.message());
        }
      }
      if (Status s = regions_.Update(job.region_path, SliceLimitsOf(job)); !s.ok()) {
        LogWarn(name + ": cannot close its slice again: " + s.message());
      }
      if (capacity_) capacity_->Release(id);
      std::string next = "; it stays suspended";
      if (job.resume_when_fits || task->on_demand) {
        // The daemon's own retries would fail the same way every tick: its
        // owner resumes it by hand once the cause is gone. Its processes'
        // request stays in their region; it is not honoured again for this
        // suspension.
        if (job.resume_when_fits) {
          job.resume_when_fits = false;
          Persist(job, job.state);
        }
        if (task->on_demand) l.resume_refused = SuspensionId(job);
        next += " until resumed by hand";
      }
      RecordEvent("resume_failed", id, job.user,
                  l.checkpoint_error + " (asked by " + task->by + ")" + next);
      RequestSchedule();
      continue;
    }
    job.suspended_total_ms += now - job.suspended_since_ms;
    job.suspended_since_ms = 0;
    job.resume_when_fits = false;
    job.reason.clear();
    idle_.Resumed(id);
    l.escaped.clear();
    ChangeState(job, JobState::kRunning, "resumed",
                "by " + task->by + ": " + std::to_string(out.pids.size()) +
                    " CUDA processes restored onto " + core::Join(job.allocation.gpu_uuids, ", ") +
                    " in " + took);
    if (!task->moves.empty()) {
      std::vector<std::string> what;
      for (const auto& [from, to] : task->moves) what.push_back(from + " -> " + to);
      RecordEvent("moved", id, job.user, "by " + task->by + ": " + core::Join(what, ", "));
    }
    if (task->before.gpu_uuids != job.allocation.gpu_uuids) RequestSchedule();  // Its old room.
  }
}

void Service::RecoverCheckpoints(Job& job) {
  if (!options_.checkpointer || !options_.checkpointer->Available().ok()) return;
  Checkpointer& cp = *options_.checkpointer;
  const bool suspended = job.state == JobState::kSuspended;
  const std::string name = "job " + std::to_string(job.id);
  bool on_slice_gpus = false;  // A process of a suspended job was restored.
  bool checkpointed = false;
  for (int64_t pid : ProcessesOf(job)) {
    auto st = cp.StateOf(pid);
    if (!st.ok()) continue;
    Status s;
    if (suspended && *st == GpuProcessState::kCheckpointed) {
      checkpointed = true;
      continue;
    } else if (suspended && *st == GpuProcessState::kLocked) {
      // A resume cut short: back to checkpointed, as the ledger says.
      on_slice_gpus = true;
      s = cp.Checkpoint(pid);
    } else if (suspended && *st == GpuProcessState::kRunning) {
      // A resume cut short after its unlock: suspended again, rather than
      // ended as a process that used the GPU while suspended.
      on_slice_gpus = true;
      s = cp.Lock(pid, options_.suspend_lock_timeout_ms);
      if (s.ok()) s = cp.Checkpoint(pid);
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
    LogInfo(name + ": process " + std::to_string(pid) + " was " +
            std::string(GpuProcessStateName(*st)) +
            " by a suspend or resume the daemon's restart "
            "cut short; " +
            (s.ok() ? "put back" : "could not be put back: " + s.message()));
  }
  if (!suspended) return;
  // A resume onto other GPUs cut short: the slice names the new GPUs (it is
  // renamed before the restore), the ledger the old ones. Processes that
  // were restored are on the new GPUs, so the slice keeps naming them (the
  // next resume moves them from there); if none was, they never left, and
  // the slice goes back to the old names.
  auto devices = regions_.Devices(job.region_path);
  if (!devices.ok() || *devices == job.allocation.gpu_uuids || on_slice_gpus) {
    if (on_slice_gpus && checkpointed && devices.ok() && *devices != job.allocation.gpu_uuids) {
      LogWarn(name + ": a move cut short left some of its processes on " +
              core::Join(job.allocation.gpu_uuids, ", ") + " and some on " +
              core::Join(*devices, ", ") + "; resuming it may fail");
    }
    return;
  }
  auto back = core::Relocate(*devices, job.allocation.gpu_uuids);
  Status s = back.status();
  if (s.ok()) s = regions_.Move(job.region_path, back->moves, SliceLimitsOf(job));
  LogInfo(name + ": a move the daemon's restart cut short; its slice " +
          (s.ok() ? "names " + core::Join(job.allocation.gpu_uuids, ", ") + " again"
                  : "could not be put back: " + s.message()));
}

void Service::RecheckRecoveredCheckpoints() {
  const int64_t now = clock_.NowMs();
  for (auto it = recheck_checkpoints_at_.begin(); it != recheck_checkpoints_at_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const uint64_t id = it->first;
    it = recheck_checkpoints_at_.erase(it);
    auto l = live_.find(id);
    // A suspend or resume this daemon began since owns the processes now.
    if (l == live_.end() || l->second.checkpoint || l->second.ending) continue;
    RecoverCheckpoints(jobs_[id]);
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
    // A job that would borrow over its group's quota again takes only idle
    // capacity, as when it started: not while a job waits first in line.
    if (plan_head_ != 0 && !queue_.empty() && options_.rules.quota_borrowing && !quotas_.empty()) {
      if (quotas_.WouldBorrow(job, clock_.NowMs())) continue;
    }
    // Quiet when there is no room yet: it is tried again every tick.
    if (Status s = StartResume(job, live_[id], "the daemon (room again)"); !s.ok()) continue;
  }
}

uint64_t Service::SuspensionId(const Job& job) {
  // When it was suspended: a new value for every suspension (one takes far
  // longer than a millisecond), kept in the ledger, so a request made
  // before a daemon restart still names the suspension it was made in, and
  // one left from an earlier suspension never matches.
  return job.suspended_since_ms > 0 ? static_cast<uint64_t>(job.suspended_since_ms) : 1;
}

void Service::WatchResumeRequests() {
  if (!options_.rules.resume_on_demand || !capacity_ || degraded()) return;
  std::vector<uint64_t> asked;
  for (const auto& [id, l] : live_) {
    const Job& job = jobs_[id];
    if (job.state != JobState::kSuspended || l.checkpoint || l.ending || l.resume_asked_ms != 0) {
      continue;
    }
    const uint64_t suspension = SuspensionId(job);
    if (l.resume_refused == suspension) continue;
    // The job's own report, which only its processes can write: it decides
    // nothing but "this job, this suspension, wants its GPU back". Any other
    // value (a stale request, a job's scribbles) is ignored.
    core::Result<uint64_t> request = regions_.ResumeRequest(job.region_path);
    if (request.ok() && *request == suspension) asked.push_back(id);
  }
  for (uint64_t id : asked) AskResume(jobs_[id], live_[id]);
  if (!asked.empty()) RequestSchedule();
}

void Service::AskResume(Job& job, Live& l) {
  // Back where it was if that has room, else where the driver can move it
  // (a GPU of its model and pool), as a resume by hand.
  std::vector<std::string> elsewhere;
  if (CanMove(job).ok()) elsewhere = MoveCandidates(job);
  capacity_->SetResumeTarget(job.id, job.allocation, std::move(elsewhere));
  core::QueuedJob q;
  q.id = job.id;
  q.priority = job.request.priority;
  // It arrives now, behind every job submitted so far: it takes the newest
  // one's sequence number and goes in after it (upper_bound), so that asking
  // never jumps the queue, whatever the job's id.
  q.seq = next_id_ > 1 ? next_id_ - 1 : 0;
  q.shape = capacity_->ShapeOf(job.id);
  // Pinned to its own GPUs first: its failure to fit says nothing about
  // another job's shape, nor theirs about it.
  q.shape.constraint = (uint64_t{1} << 63) | job.id;
  // Ranked like a job submitted now (fair share, no age yet), so that it
  // neither jumps ahead of nor falls behind jobs already ranked.
  l.resume_asked_ms = clock_.NowMs();
  q.rank = RankOf(job, l.resume_asked_ms);
  queue_.insert(std::upper_bound(queue_.begin(), queue_.end(), q, core::QueueBefore), q);
  ++queued_by_uid_[job.uid];
  RecordEvent("resume_asked", job.id, job.user,
              "a CUDA call of one of its processes asked to resume it; it waits in the queue "
              "for room on " +
                  core::Join(job.allocation.gpu_uuids, ", ") +
                  (CanMove(job).ok() ? " or another GPU of its model" : ""));
}

void Service::ResumeOnDemand(uint64_t id) {
  Job& job = jobs_[id];
  Live& l = live_[id];
  capacity_->ForgetResumeTarget(id);
  if (l.ending) {
    // Cancelled while it waited: its room goes back, it is not resumed.
    capacity_->Release(id);
    l.resume_asked_ms = 0;
    return;
  }
  const std::string by = "its own CUDA call (on demand, after " +
                         Seconds(clock_.NowMs() - l.resume_asked_ms) + " in the queue)";
  if (Status s = StartResume(job, l, by, {}, /*placed=*/true); !s.ok()) {
    // Its room went back (StartResume); the request is not honoured again
    // for this suspension.
    l.resume_asked_ms = 0;
    l.resume_refused = SuspensionId(job);
    l.checkpoint_error = "resume failed: " + s.message();
    RecordEvent(
        "resume_failed", id, job.user,
        l.checkpoint_error + " (asked by " + by + "); it stays suspended until resumed by hand");
    return;
  }
  l.checkpoint->on_demand = true;
}

void Service::DropResumeDemand(uint64_t id, Live& l) {
  if (l.resume_asked_ms == 0) return;
  Dequeue(id);
  if (capacity_) capacity_->ForgetResumeTarget(id);
  l.resume_asked_ms = 0;
  waiting_index_stale_ = true;
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
