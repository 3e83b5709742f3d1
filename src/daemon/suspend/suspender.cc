#include "daemon/suspend/suspender.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "core/placement/relocation.h"
#include "core/strings.h"
#include "daemon/base/log.h"

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

Suspender::Suspender(Jobs jobs, Clock& clock, RegionStore& regions,
                     std::shared_ptr<Checkpointer> checkpointer, uint32_t lock_timeout_ms)
    : jobs_(std::move(jobs)),
      clock_(clock),
      regions_(regions),
      checkpointer_(std::move(checkpointer)),
      lock_timeout_ms_(lock_timeout_ms) {}

Suspender::~Suspender() = default;

const Suspender::Record* Suspender::Find(uint64_t id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

bool Suspender::Busy(uint64_t id) const {
  const Record* r = Find(id);
  return r != nullptr && r->task != nullptr;
}

std::vector<std::string> Suspender::Flags(uint64_t id) const {
  std::vector<std::string> flags;
  const Record* r = Find(id);
  if (r == nullptr) return flags;
  if (r->task) flags.push_back(r->resuming ? "resuming" : "suspending");
  if (r->resume_asked_ms != 0) flags.push_back("resume_asked");
  return flags;
}

std::string Suspender::Error(uint64_t id) const {
  const Record* r = Find(id);
  return r == nullptr ? "" : r->error;
}

int64_t Suspender::ResumeAskedMs(uint64_t id) const {
  const Record* r = Find(id);
  return r == nullptr ? 0 : r->resume_asked_ms;
}

void Suspender::Forget(uint64_t id) {
  records_.erase(id);
  recheck_at_.erase(id);
}

uint64_t Suspender::SuspensionId(const Job& job) {
  // When it was suspended: a new value for every suspension (one takes far
  // longer than a millisecond), kept in the ledger, so a request made
  // before a daemon restart still names the suspension it was made in, and
  // one left from an earlier suspension never matches.
  return job.suspended_since_ms > 0 ? static_cast<uint64_t>(job.suspended_since_ms) : 1;
}

std::vector<int64_t> Suspender::ProcessesOf(const Job& job) {
  std::vector<int64_t> candidates;
  if (!job.region_path.empty()) {
    if (auto pids = regions_.Pids(job.region_path); pids.ok()) {
      candidates.insert(candidates.end(), pids->begin(), pids->end());
    }
  }
  if (const JobUsage* u = jobs_.usage(job.id)) {
    candidates.insert(candidates.end(), u->pids.begin(), u->pids.end());
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  // The slice's process list is the job's to write: only processes that run
  // as the job's owner are the daemon's to suspend for it.
  std::vector<int64_t> out;
  for (int64_t pid : candidates) {
    if (pid <= 0) continue;
    auto owner = jobs_.processes().OwnerOf(pid);
    if (owner && owner->uid == job.uid) out.push_back(pid);
  }
  return out;
}

Status Suspender::CanCheckpoint(const Job& job, const char* verb) const {
  if (!checkpointer_) {
    return core::UnimplementedError(std::string("this daemon cannot ") + verb +
                                    " jobs: it has no CUDA driver with the process checkpoint API");
  }
  GPUSLICE_RETURN_IF_ERROR(checkpointer_->Available());
  const std::string name = "job " + std::to_string(job.id);
  if (const Record* r = Find(job.id); r != nullptr && r->task) {
    return core::FailedPreconditionError(name + " is being " +
                                         (r->resuming ? "resumed" : "suspended") + " already");
  }
  if (jobs_.ending(job.id)) return core::FailedPreconditionError(name + " is ending");
  return Status::Ok();
}

void Suspender::Run(const Job& job, std::shared_ptr<CheckpointTask> task,
                    std::function<CheckpointOutcome(Checkpointer&)> work) {
  task->started_ms = clock_.NowMs();
  std::shared_ptr<Checkpointer> cp = checkpointer_;
  task->thread = std::thread([task = task.get(), cp, work = std::move(work)] {
    task->outcome = work(*cp);
    task->done.store(true, std::memory_order_release);
  });
  Record& r = records_[job.id];
  r.resuming = task->resume;
  r.task = std::move(task);
  r.error.clear();
  LogInfo("job " + std::to_string(job.id) + (r.resuming ? ": resuming" : ": suspending") +
          ", asked by " + r.task->by);
}

Status Suspender::Suspend(Job& job, SuspendCause cause) {
  GPUSLICE_RETURN_IF_ERROR(CanCheckpoint(job, "suspend"));
  const std::string name = "job " + std::to_string(job.id);
  if (job.mode == core::JobMode::kExternal) {
    // Its processes are started and owned by Slurm or Kubernetes: a
    // suspension would leave them holding a step or a pod that cannot run.
    return core::FailedPreconditionError(
        name + " is an external job (Slurm or Kubernetes): its engine owns its processes");
  }
  if (jobs_.stopped(job.id)) {
    return core::FailedPreconditionError(name +
                                         " is stopped by the watchdog: its processes cannot "
                                         "finish the GPU work a suspension waits for");
  }
  auto task = std::make_shared<CheckpointTask>();
  task->by = cause.by;
  task->cause = std::move(cause);
  Run(job, std::move(task),
      [pids = ProcessesOf(job), timeout = lock_timeout_ms_](Checkpointer& cp) {
        return SuspendProcesses(cp, pids, timeout);
      });
  return Status::Ok();
}

Status Suspender::Resume(Job& job, const std::string& by, const std::vector<std::string>& onto,
                         bool placed, bool on_demand) {
  NodeCapacity* capacity = jobs_.capacity();
  if (Status s = CanCheckpoint(job, "resume"); !s.ok()) {
    if (placed && capacity) capacity->Release(job.id);
    return s;
  }
  const std::string name = "job " + std::to_string(job.id);
  if (!capacity) return core::UnavailableError("the GPUs are unknown: " + jobs_.degraded_reason());
  // Its room first, so that nothing is placed there while it is restored.
  core::Allocation target;
  if (placed) {
    std::optional<core::Allocation> a = capacity->AllocationOf(job.id);
    if (!a) return core::InternalError(name + ": placed to resume, but its allocation is unknown");
    target = *a;
  } else {
    GPUSLICE_ASSIGN_OR_RETURN(target, PlaceForResume(job, onto));
  }
  // Where its processes are: the GPUs its slice names now (a move renames
  // them), which the ledger's allocation also says unless a move was cut
  // short by a restart (Recover).
  std::vector<std::string> now = job.allocation.gpu_uuids;
  if (auto devices = regions_.Devices(job.region_path); devices.ok()) now = *devices;
  core::Result<core::Relocation> rel = core::Relocate(now, target.gpu_uuids);
  if (!rel.ok()) {
    capacity->Release(job.id);
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
    if (Status s = regions_.Move(job.region_path, rel->moves, jobs_.limits_of(running)); !s.ok()) {
      capacity->Release(job.id);
      return s.WithContext(name + ": moving its slice to " + core::Join(placed_on.gpu_uuids, ", "));
    }
  }
  if (Status s = regions_.Update(job.region_path, jobs_.limits_of(running)); !s.ok()) {
    if (!rel->moves.empty())
      (void)regions_.Move(job.region_path, Reversed(rel->moves), jobs_.limits_of(job));
    capacity->Release(job.id);
    return s.WithContext(name + ": restoring its slice's limits");
  }
  auto task = std::make_shared<CheckpointTask>();
  task->resume = true;
  task->on_demand = on_demand;
  task->by = by;
  task->before = job.allocation;
  task->moves = rel->moves;
  job.allocation = placed_on;
  // Whoever resumes it, a demand it had in the queue is moot now.
  DropResumeDemand(job.id);
  // The driver wants every GPU the process is on named once anything moves.
  std::vector<GpuRemap> remap;
  if (!rel->moves.empty()) {
    for (size_t i = 0; i < now.size(); ++i) remap.push_back({now[i], placed_on.gpu_uuids[i]});
  }
  Run(job, std::move(task), [pids = ProcessesOf(job), remap](Checkpointer& cp) {
    return ResumeProcesses(cp, pids, remap);
  });
  return Status::Ok();
}

void Suspender::Finish() {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : records_) {
    if (r.task && r.task->done.load(std::memory_order_acquire)) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    Record& r = records_[id];
    std::shared_ptr<CheckpointTask> task = std::move(r.task);
    task->thread.join();
    Job* found = jobs_.live(id);
    if (found == nullptr) continue;  // No longer the job table's to change.
    Job& job = *found;
    const CheckpointOutcome& out = task->outcome;
    const int64_t now = clock_.NowMs();
    const std::string name = "job " + std::to_string(id);
    const std::string took = Seconds(now - task->started_ms);
    if (jobs_.ending(id)) continue;  // Being cancelled or timed out meanwhile: that wins.
    NodeCapacity* capacity = jobs_.capacity();
    if (!task->resume) {
      const SuspendCause& cause = task->cause;
      if (!out.status.ok()) {
        r.error = "suspend failed: " + out.status.message();
        const bool requeue = cause.reclaimed_for != 0 && job.restartable;
        std::string instead =
            cause.idle_fallback
                ? "; " + std::string(IdleActionName(*cause.idle_fallback)) + " instead"
            : cause.preempted_for != 0 ? "; ended instead"
            : requeue                  ? "; requeued instead"
                                       : "; it runs on";
        jobs_.record_event("suspend_failed", id, job.user,
                           r.error + " (asked by " + task->by + ")" + instead);
        // What it does instead may end the job (and forget its record).
        jobs_.suspend_failed(job, cause);
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
      if (Status s = regions_.Update(job.region_path, jobs_.limits_of(closed)); !s.ok()) {
        LogWarn(name + ": cannot close its slice while suspended: " + s.message());
      }
      if (capacity) capacity->Release(id);
      jobs_.forget_usage(id);
      jobs_.change_state(job, JobState::kSuspended, "suspended",
                         "by " + task->by + ": " + std::to_string(out.pids.size()) +
                             " CUDA processes checkpointed to host memory in " + took +
                             (cause.move_to.empty() ? "; its GPUs are free for others"
                                                    : "; moving to " + cause.move_to));
      if (!cause.move_to.empty()) {
        // Nothing was placed since its capacity went (this loop has not
        // yielded): the target, else its own GPU, is still free for it.
        Status moved = Resume(job, task->by, {cause.move_to});
        if (!moved.ok()) {
          Status back = Resume(job, task->by);
          records_[id].error = "move failed: " + moved.message();
          jobs_.record_event(
              "move_failed", id, job.user,
              moved.message() + (back.ok() ? "; resuming where it was"
                                           : "; it stays suspended: " + back.message()));
        }
      }
      jobs_.request_schedule();
      continue;
    }
    if (!out.status.ok()) {
      // Still wholly suspended (ResumeProcesses put back what it did): its
      // room goes back to the queue and its slice is closed again.
      r.error = "resume failed: " + out.status.message();
      job.allocation = task->before;
      if (!task->moves.empty()) {
        // ResumeProcesses put its processes back on their old GPUs.
        if (Status s = regions_.Move(job.region_path, Reversed(task->moves), jobs_.limits_of(job));
            !s.ok()) {
          LogWarn(name + ": cannot move its slice back: " + s.message());
        }
      }
      if (Status s = regions_.Update(job.region_path, jobs_.limits_of(job)); !s.ok()) {
        LogWarn(name + ": cannot close its slice again: " + s.message());
      }
      if (capacity) capacity->Release(id);
      std::string next = "; it stays suspended";
      if (job.resume_when_fits || task->on_demand) {
        // The daemon's own retries would fail the same way every tick: its
        // owner resumes it by hand once the cause is gone. Its processes'
        // request stays in their region; it is not honoured again for this
        // suspension.
        if (job.resume_when_fits) {
          job.resume_when_fits = false;
          jobs_.persist(job);
        }
        if (task->on_demand) r.resume_refused = SuspensionId(job);
        next += " until resumed by hand";
      }
      jobs_.record_event("resume_failed", id, job.user,
                         r.error + " (asked by " + task->by + ")" + next);
      jobs_.request_schedule();
      continue;
    }
    job.suspended_total_ms += now - job.suspended_since_ms;
    job.suspended_since_ms = 0;
    job.resume_when_fits = false;
    job.reason.clear();
    jobs_.resumed(id);
    r.escaped.clear();
    jobs_.change_state(job, JobState::kRunning, "resumed",
                       "by " + task->by + ": " + std::to_string(out.pids.size()) +
                           " CUDA processes restored onto " +
                           core::Join(job.allocation.gpu_uuids, ", ") + " in " + took);
    if (!task->moves.empty()) {
      std::vector<std::string> what;
      for (const auto& [from, to] : task->moves) what.push_back(from + " -> " + to);
      jobs_.record_event("moved", id, job.user, "by " + task->by + ": " + core::Join(what, ", "));
    }
    if (task->before.gpu_uuids != job.allocation.gpu_uuids) {
      jobs_.request_schedule();  // Its old room.
    }
  }
}

void Suspender::ResumeWhenRoom() {
  if (!jobs_.capacity() || !jobs_.degraded_reason().empty()) return;
  std::vector<Job*> jobs;
  for (Job* job : jobs_.suspended()) {
    if (job->resume_when_fits && !Busy(job->id) && !jobs_.ending(job->id)) jobs.push_back(job);
  }
  if (jobs.empty()) return;
  // Higher priority first, then the longest suspended.
  std::sort(jobs.begin(), jobs.end(), [](const Job* x, const Job* y) {
    if (x->request.priority != y->request.priority)
      return x->request.priority > y->request.priority;
    return x->suspended_since_ms < y->suspended_since_ms;
  });
  for (Job* job : jobs) {
    if (!jobs_.may_resume(*job)) continue;
    // Quiet when there is no room yet: it is tried again every tick.
    if (Status s = Resume(*job, "the daemon (room again)"); !s.ok()) continue;
  }
}

void Suspender::WatchResumeRequests() {
  if (!jobs_.resume_on_demand() || !jobs_.capacity() || !jobs_.degraded_reason().empty()) return;
  std::vector<Job*> asked;
  for (Job* job : jobs_.suspended()) {
    if (Busy(job->id) || jobs_.ending(job->id) || ResumeAskedMs(job->id) != 0) continue;
    const uint64_t suspension = SuspensionId(*job);
    if (const Record* r = Find(job->id); r != nullptr && r->resume_refused == suspension) continue;
    // The job's own report, which only its processes can write: it decides
    // nothing but "this job, this suspension, wants its GPU back". Any other
    // value (a stale request, a job's scribbles) is ignored.
    core::Result<uint64_t> request = regions_.ResumeRequest(job->region_path);
    if (request.ok() && *request == suspension) asked.push_back(job);
  }
  for (Job* job : asked) AskResume(*job);
  if (!asked.empty()) jobs_.request_schedule();
}

void Suspender::AskResume(Job& job) {
  // Back where it was if that has room, else where the driver can move it
  // (a GPU of its model and pool), as a resume by hand.
  std::vector<std::string> elsewhere;
  if (CanMove(job).ok()) elsewhere = MoveCandidates(job);
  jobs_.capacity()->SetResumeTarget(job.id, job.allocation, std::move(elsewhere));
  const int64_t asked_ms = clock_.NowMs();
  records_[job.id].resume_asked_ms = asked_ms;
  jobs_.enqueue(job, asked_ms);
  jobs_.record_event("resume_asked", job.id, job.user,
                     "a CUDA call of one of its processes asked to resume it; it waits in the "
                     "queue for room on " +
                         core::Join(job.allocation.gpu_uuids, ", ") +
                         (CanMove(job).ok() ? " or another GPU of its model" : ""));
}

void Suspender::ResumeOnDemand(Job& job) {
  const uint64_t id = job.id;
  NodeCapacity* capacity = jobs_.capacity();
  capacity->ForgetResumeTarget(id);
  Record& r = records_[id];
  if (jobs_.ending(id)) {
    // Cancelled while it waited: its room goes back, it is not resumed.
    capacity->Release(id);
    r.resume_asked_ms = 0;
    return;
  }
  const std::string by = "its own CUDA call (on demand, after " +
                         Seconds(clock_.NowMs() - r.resume_asked_ms) + " in the queue)";
  if (Status s = Resume(job, by, {}, /*placed=*/true, /*on_demand=*/true); !s.ok()) {
    // Its room went back (Resume); the request is not honoured again for
    // this suspension.
    r.resume_asked_ms = 0;
    r.resume_refused = SuspensionId(job);
    r.error = "resume failed: " + s.message();
    jobs_.record_event(
        "resume_failed", id, job.user,
        r.error + " (asked by " + by + "); it stays suspended until resumed by hand");
  }
}

void Suspender::DropResumeDemand(uint64_t id) {
  auto it = records_.find(id);
  if (it == records_.end() || it->second.resume_asked_ms == 0) return;
  jobs_.dequeue(id);
  if (NodeCapacity* capacity = jobs_.capacity()) capacity->ForgetResumeTarget(id);
  it->second.resume_asked_ms = 0;
}

void Suspender::Recover(Job& job) {
  RecoverProcesses(job);
  recheck_at_[job.id] = clock_.NowMs() + lock_timeout_ms_ + 2000;
}

void Suspender::RecoverProcesses(Job& job) {
  if (!checkpointer_ || !checkpointer_->Available().ok()) return;
  Checkpointer& cp = *checkpointer_;
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
      s = cp.Lock(pid, lock_timeout_ms_);
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
  if (s.ok()) s = regions_.Move(job.region_path, back->moves, jobs_.limits_of(job));
  LogInfo(name + ": a move the daemon's restart cut short; its slice " +
          (s.ok() ? "names " + core::Join(job.allocation.gpu_uuids, ", ") + " again"
                  : "could not be put back: " + s.message()));
}

void Suspender::RecheckRecovered() {
  if (recheck_at_.empty()) return;
  const int64_t now = clock_.NowMs();
  for (auto it = recheck_at_.begin(); it != recheck_at_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const uint64_t id = it->first;
    it = recheck_at_.erase(it);
    Job* job = jobs_.live(id);
    // A suspend or resume this daemon began since owns the processes now.
    if (job == nullptr || Busy(id) || jobs_.ending(id)) continue;
    RecoverProcesses(*job);
  }
}

void Suspender::WatchSuspended(Job& job, const JobUsage& use) {
  if (Busy(job.id)) return;  // Being resumed: its processes come back now.
  for (const auto& [gpu, bytes] : use.nvml_memory_by_gpu) {
    (void)gpu;
    if (bytes == 0) continue;
    // Its processes on the GPU: NVML lists none of a checkpointed process.
    for (int32_t pid : use.pids) {
      if (const Record* r = Find(job.id); r != nullptr && r->escaped.count(pid)) continue;
      auto st = checkpointer_ ? checkpointer_->StateOf(pid)
                              : core::Result<GpuProcessState>(core::NotFoundError(""));
      if (st.ok() && *st == GpuProcessState::kCheckpointed) continue;
      if (!st.ok() && st.status().code() == core::StatusCode::kNotFound) continue;
      records_[job.id].escaped.insert(pid);
      (void)jobs_.processes().SignalIfOwnedBy(pid, job.uid, SIGKILL);
      jobs_.record_event("suspend_violation", job.id, job.user,
                         "process " + std::to_string(pid) +
                             " used the GPU while its job was suspended; it was killed");
      jobs_.append_to_stderr(job, "process " + std::to_string(pid) + " used the GPU while job " +
                                      std::to_string(job.id) + " was suspended: killed");
    }
  }
}

Status Suspender::CanMove(const Job& job) const {
  const std::string name = "job " + std::to_string(job.id);
  if (!job.image.empty()) {
    return core::FailedPreconditionError(name +
                                         " runs in a container, which reaches only the device "
                                         "nodes of the GPUs it started on");
  }
  if (job.request.kind == core::RequestKind::kWholeGpus &&
      job.request.gpus_min != job.request.gpus_max) {
    return core::FailedPreconditionError(name +
                                         " is elastic: it changes GPUs by growing and "
                                         "shrinking, not by moving");
  }
  return Status::Ok();
}

std::vector<std::string> Suspender::MoveCandidates(const Job& job) const {
  // GPUs of the model and pool of those it has: the driver restores a
  // process only onto a GPU of the same kind, and a job stays in its pool.
  const InventorySnapshot& inventory = jobs_.inventory();
  std::vector<std::string> models, pools;
  for (uint32_t index : job.allocation.gpu_indices) {
    for (const GpuInfo& g : inventory.gpus) {
      if (g.index != index) continue;
      models.push_back(g.model);
      pools.push_back(jobs_.pool_of(g.index));
    }
  }
  std::vector<std::string> out;
  for (const GpuInfo& g : inventory.gpus) {
    if (std::find(models.begin(), models.end(), g.model) == models.end()) continue;
    if (std::find(pools.begin(), pools.end(), jobs_.pool_of(g.index)) == pools.end()) continue;
    out.push_back(g.uuid);
  }
  return out;
}

core::Result<core::Allocation> Suspender::PlaceForResume(Job& job,
                                                         const std::vector<std::string>& onto) {
  NodeCapacity* capacity = jobs_.capacity();
  const std::string name = "job " + std::to_string(job.id);
  std::vector<std::string> candidates = onto;
  if (onto.empty()) {
    // Its own GPUs first.
    Status held = capacity->Hold(job.id, job.allocation);
    if (held.ok()) return job.allocation;
    std::string why = held.message();
    if (held.code() == core::StatusCode::kFailedPrecondition ||
        held.code() == core::StatusCode::kResourceExhausted) {
      why = capacity->WhyNotNow(job.id);
    }
    const std::string own = name + " cannot resume now: its GPUs (" +
                            core::Join(job.allocation.gpu_uuids, ", ") +
                            ") lack room for its slice: " + why;
    if (!CanMove(job).ok()) return core::FailedPreconditionError(own);
    candidates = MoveCandidates(job);
    if (Status placed = capacity->PlaceOn(job.id, candidates); !placed.ok()) {
      return core::FailedPreconditionError(own +
                                           "; nor does any other GPU of its model have "
                                           "room");
    }
  } else if (Status placed = capacity->PlaceOn(job.id, candidates); !placed.ok()) {
    return core::FailedPreconditionError(name + " cannot move to " + core::Join(onto, ", ") + ": " +
                                         placed.message());
  }
  std::optional<core::Allocation> a = capacity->AllocationOf(job.id);
  if (!a) {
    capacity->Release(job.id);
    return core::InternalError(name + ": placed, but its allocation is unknown");
  }
  return *a;
}

}  // namespace gpuslice::daemon
