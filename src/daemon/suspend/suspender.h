#pragma once

// Suspending, resuming and moving jobs through the CUDA driver's process
// checkpoint API (launch/checkpointer.h; docs/SUSPEND.md).
//
// Suspend: the job's CUDA processes are locked and checkpointed on a worker
// thread (the driver's calls block for as long as the copies take); when it
// is done the event loop (Finish) makes the job `suspended`: its slice's
// limits page says "no memory, no launches" (a process the suspension
// missed, or a new one, gets nothing on the GPU), and only then is its
// capacity released for the queue. Resume takes the capacity back first
// (the same GPUs, else, for a job that can move, another of its model and
// pool), restores the limits, then restores and unlocks the processes on a
// worker. A move is a suspension followed by a resume elsewhere: the slice
// is renamed to the new GPUs while its processes are checkpointed. Either
// way a failure leaves the job as it was, with the reason in Error() and an
// event.
//
// It owns each job's worker, the last failure, the processes that escaped a
// suspension, a suspended job's resume demand, and the checks of the
// processes a restart re-adopted; the jobs are the job table's (Service),
// reached through `Jobs`, and a job's state changes only through
// Jobs::change_state. One thread, as Service (the workers touch only their
// task and the checkpointer).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/policy_config.h"
#include "daemon/launch/checkpointer.h"
#include "daemon/node/inventory.h"
#include "daemon/node/process_table.h"
#include "daemon/placement/capacity.h"
#include "daemon/usage/usage_book.h"

namespace gpuslice::daemon {

// Why a job is suspended, and what happens when it cannot be.
struct SuspendCause {
  std::string by;  // "alice", "idle reclaim", "preemption by job 12".
  // Idle reclaim: what to do instead when the job cannot be suspended.
  std::optional<IdleAction> idle_fallback;
  std::string idle_text;
  // Preemption for this job: ended as before when it cannot be suspended;
  // resumed by the daemon once it fits again when it can.
  uint64_t preempted_for = 0;
  // A move (`gpuslice move`): the GPU to resume on once it is suspended.
  std::string move_to;
  // Automatic defragmentation: the job whose start the move is for.
  uint64_t defrag_for = 0;
  // Over-quota borrowing: the job within its group's quota that reclaims
  // this borrower's capacity (requeued instead when it cannot be
  // suspended and is restartable; else it runs on).
  uint64_t reclaimed_for = 0;
};

// A suspend or resume running on a worker thread (suspender.cc).
struct CheckpointTask;

class Suspender {
 public:
  // What it asks of the daemon.
  struct Jobs {
    // A running or suspended job of the job table; null for any other.
    std::function<core::Job*(uint64_t id)> live;
    // Being cancelled or timed out (what a worker finds then is moot).
    std::function<bool(uint64_t id)> ending;
    // Stopped by the watchdog: its processes cannot finish their GPU work.
    std::function<bool(uint64_t id)> stopped;
    // The one place a job's state changes (Service::ChangeState).
    std::function<bool(core::Job& job, core::JobState to, std::string kind, std::string message)>
        change_state;
    // Writes a job's row as it is now (its state unchanged).
    std::function<void(const core::Job& job)> persist;
    std::function<void(std::string kind, uint64_t id, std::string user, std::string message)>
        record_event;
    // The slice limits of a job as it is (JobSetup::SliceLimitsOf).
    std::function<SliceLimits(const core::Job& job)> limits_of;
    // The GPUs' capacity; null while the GPUs are unknown (and why).
    std::function<NodeCapacity*()> capacity;
    std::function<std::string()> degraded_reason;
    // What may be moved where: the GPUs, and a GPU's pool by index.
    std::function<const InventorySnapshot&()> inventory;
    std::function<const std::string&(uint32_t gpu_index)> pool_of;
    // The job's usage as of the last sample (null: none), forgotten once
    // it is suspended.
    std::function<const JobUsage*(uint64_t id)> usage;
    std::function<void(uint64_t id)> forget_usage;
    // The node's processes: owners, and signals to them.
    std::function<ProcessTable&()> processes;
    std::function<void(const core::Job& job, const std::string& line)> append_to_stderr;
    // A suspension that failed, after its event: what its cause does
    // instead (idle reclaim's fallback, preemption's end, a reclaim's
    // requeue, defragmentation's refusal).
    std::function<void(core::Job& job, const SuspendCause& cause)> suspend_failed;
    // Job `id` runs again after a resume (its idle episode starts afresh).
    std::function<void(uint64_t id)> resumed;
    // Resume on demand: whether the admin allows it, the suspended jobs (by
    // id), a job's demand entering the queue, asked at `asked_ms`, and
    // leaving it.
    std::function<bool()> resume_on_demand;
    std::function<std::vector<core::Job*>()> suspended;
    std::function<void(const core::Job& job, int64_t asked_ms)> enqueue;
    std::function<void(uint64_t id)> dequeue;
    // Whether suspended job `job` may take its room back by itself now
    // (nothing of higher priority waits, nor would it borrow over its
    // group's quota while a job waits first in line).
    std::function<bool(const core::Job& job)> may_resume;
    // Capacity came or went: the queue is planned again.
    std::function<void()> request_schedule;
  };

  // `checkpointer` null: no job can be suspended (kUnimplemented says so).
  // `lock_timeout_ms`: how long a suspension waits for a process's GPU work
  // in flight before it gives up.
  Suspender(Jobs jobs, Clock& clock, RegionStore& regions,
            std::shared_ptr<Checkpointer> checkpointer, uint32_t lock_timeout_ms);
  ~Suspender();  // Waits for the workers still running.
  Suspender(const Suspender&) = delete;
  Suspender& operator=(const Suspender&) = delete;

  // Starts a suspension of running job `job` on a worker; an error when it
  // cannot start (no checkpoint API, a worker busy with it, an external or
  // stopped job).
  core::Status Suspend(core::Job& job, SuspendCause cause);
  // Resumes suspended job `job`: on `onto` (a move) when given, else on its
  // own GPUs, else on any GPU of its model and pool with room; `placed`:
  // where the queue plan placed it (the capacity it holds now), given back
  // on failure; `on_demand`: its own processes asked.
  core::Status Resume(core::Job& job, const std::string& by,
                      const std::vector<std::string>& onto = {}, bool placed = false,
                      bool on_demand = false);
  // What both refuse: no checkpoint API, a worker busy with it, its end.
  core::Status CanCheckpoint(const core::Job& job, const char* verb) const;
  // What cannot move at all (a container, an elastic job), and the GPUs a
  // job may move to (of the model and pool of those it has).
  core::Status CanMove(const core::Job& job) const;
  std::vector<std::string> MoveCandidates(const core::Job& job) const;

  // Applies the outcome of the workers that are done (from Tick).
  void Finish();
  // Resumes suspended jobs the daemon resumes by itself (a preemption
  // victim, a reclaimed borrower, a move cut short) once their GPUs, or
  // others of their model and pool, have room again: higher priority
  // first, then the longest suspended (from Tick).
  void ResumeWhenRoom();
  // Resume on demand (docs/SUSPEND.md): reads the resume request of each
  // suspended job's slice (one pread) and queues, as a waiting demand, each
  // job whose processes asked during this suspension. The event loop calls
  // it every 10 ms (and Tick does); nothing to do for a job already waiting.
  void WatchResumeRequests();
  // The queue plan placed job `job`'s demand (the capacity it holds now):
  // resumed there, unless it is ending; a failure is not retried for this
  // suspension.
  void ResumeOnDemand(core::Job& job);
  // Restart recovery: processes a suspend or resume left half done (the
  // worker died with the daemon) are put back to what the ledger says, and
  // checked again (RecheckRecovered) once a lock asked for before the
  // restart has had its time to land.
  void Recover(core::Job& job);
  void RecheckRecovered();
  // A suspended job whose processes use the GPU anyway (a process the
  // suspension missed, or one the user restored through the driver): they
  // are ended, each once, with an event (after each sample).
  void WatchSuspended(core::Job& job, const JobUsage& use);
  // The processes of `job` that may be CUDA processes: those of its slice
  // and those NVML attributes to it, that run as its owner (never another
  // user's process, whatever the slice says).
  std::vector<int64_t> ProcessesOf(const core::Job& job);

  // A worker is busy with job `id`.
  bool Busy(uint64_t id) const;
  // "suspending" or "resuming" while busy, "resume_asked" while its demand
  // waits in the queue.
  std::vector<std::string> Flags(uint64_t id) const;
  // Why the last suspend, resume or move of job `id` failed ("": none).
  std::string Error(uint64_t id) const;

  // Resume on demand: what identifies the job's current suspension in its
  // limits page (SliceLimits::suspension), and when its processes' demand
  // entered the queue (0: none waits).
  static uint64_t SuspensionId(const core::Job& job);
  int64_t ResumeAskedMs(uint64_t id) const;

  // Job `id` ended or went back to the queue: its record goes (a worker
  // still busy with it is waited for).
  void Forget(uint64_t id);

 private:
  using Moves = std::vector<std::pair<std::string, std::string>>;
  // What it keeps per running or suspended job.
  struct Record {
    std::shared_ptr<CheckpointTask> task;  // Suspend or resume in progress.
    bool resuming = false;                 // What `task` does.
    std::string error;                     // Why the last one failed.
    // Processes that used the GPU while the job was suspended, and ended.
    std::set<int64_t> escaped;
    // Resume on demand: when its processes' request put it in the queue (0:
    // not waiting), and the suspension whose on-demand resume failed (its
    // requests are not honoured again: its owner resumes it by hand).
    int64_t resume_asked_ms = 0;
    uint64_t resume_refused = 0;
  };

  const Record* Find(uint64_t id) const;
  // Runs `work` on a worker thread for `task` (Finish applies it).
  void Run(const core::Job& job, std::shared_ptr<CheckpointTask> task,
           std::function<CheckpointOutcome(Checkpointer&)> work);
  // Queues job `job`'s demand to be resumed, and drops it (a resume by
  // any other way makes it moot).
  void AskResume(core::Job& job);
  void DropResumeDemand(uint64_t id);
  // The capacity a resume takes (held on return).
  core::Result<core::Allocation> PlaceForResume(core::Job& job,
                                                const std::vector<std::string>& onto);
  // The checkpointer's part of Recover.
  void RecoverProcesses(core::Job& job);

  Jobs jobs_;
  Clock& clock_;
  RegionStore& regions_;
  std::shared_ptr<Checkpointer> checkpointer_;
  uint32_t lock_timeout_ms_;
  std::map<uint64_t, Record> records_;
  std::map<uint64_t, int64_t> recheck_at_;  // Job id -> when.
};

}  // namespace gpuslice::daemon
