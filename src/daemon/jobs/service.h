#pragma once

// The node daemon's state machine: jobs, the queue, what each job holds,
// launching and watching processes, restart recovery and degraded mode. The
// HTTP layer (api.h) calls it; it calls the seams (Clock, Inventory,
// Launcher, RegionStore) and the ledger. One thread: the daemon's event
// loop calls every method, so nothing here locks.
//
// Degraded: when the ledger cannot be opened or written, or the GPUs cannot
// be read, the service keeps serving reads (status, gpus, jobs it knows) and
// keeps watching running jobs, but refuses new work with kUnavailable and the
// reason, like watchman's poisoned state.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/jobs/dependency.h"
#include "core/jobs/job.h"
#include "core/placement/placement_policy.h"
#include "core/schedule/fair_share.h"
#include "core/schedule/preemption.h"
#include "core/schedule/queue.h"
#include "core/schedule/quota.h"
#include "daemon/base/clock.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/gpu_pools.h"
#include "daemon/config/policy_config.h"
#include "daemon/containers/container_jobs.h"
#include "daemon/control/job_processes.h"
#include "daemon/edits/job_edits.h"
#include "daemon/elastic/elastic_jobs.h"
#include "daemon/external/external_jobs.h"
#include "daemon/intake/job_intake.h"
#include "daemon/launch/cdi.h"
#include "daemon/launch/checkpointer.h"
#include "daemon/launch/launcher.h"
#include "daemon/launch/peer_process.h"
#include "daemon/live/live_changes.h"
#include "daemon/makeroom/defragmenter.h"
#include "daemon/makeroom/preemptions.h"
#include "daemon/node/inventory.h"
#include "daemon/node/process_table.h"
#include "daemon/placement/capacity.h"
#include "daemon/placement/memory_allowance.h"
#include "daemon/quotas/quota_keeper.h"
#include "daemon/ranking/queue_ranker.h"
#include "daemon/reads/job_reads.h"
#include "daemon/recovery/recovery.h"
#include "daemon/requests/caller.h"
#include "daemon/requests/job_query.h"
#include "daemon/requests/job_specs.h"
#include "daemon/requests/job_text.h"
#include "daemon/requests/job_view.h"
#include "daemon/setup/job_setup.h"
#include "daemon/shell/shell_jobs.h"
#include "daemon/store/degraded_mode.h"
#include "daemon/store/event_log.h"
#include "daemon/store/ledger.h"
#include "daemon/suspend/suspender.h"
#include "daemon/table/job_table.h"
#include "daemon/table/job_transitions.h"
#include "daemon/usage/foreign_use.h"
#include "daemon/usage/usage_book.h"
#include "daemon/waits/dependencies.h"
#include "daemon/waits/holds.h"
#include "daemon/watch/idle_reclaim.h"
#include "daemon/watch/watchdog.h"

namespace gpuslice::daemon {

// The groups (names) a user belongs to, from the system's group database:
// `gid` and the supplementary groups (getgrouplist). For group quotas.
std::vector<std::string> SystemGroupsOf(const std::string& user, uint32_t gid);
// The same as gids (the primary one included).
std::vector<uint32_t> SystemGidsOf(const std::string& user, uint32_t gid);

struct ServiceOptions {
  std::string state_dir;
  std::string shim_path;             // libgpuslice.so preloaded into jobs.
  std::string sim_lib_dir;           // Prepended to jobs' LD_LIBRARY_PATH when simulated.
  std::vector<std::string> job_env;  // "K=V" forced into every job (e.g. GPUSLICE_SIM_*).
  // GPUSLICE_COORD_DIR for jobs (coord_dir.h): slices of all users on one GPU
  // coordinate their compute shares there. "": the shim's per-user default.
  std::string coord_dir;
  // CDI specs of running jobs (cdi.h): where container engines read them.
  // "": none written.
  std::string cdi_dir;
  // ServerConfig::slurm_only: a user (not an admin) may only ask for an
  // external job bound to a process whose real uid is root that acts for
  // them (slurmstepd with its privileges dropped: the SPANK plugin).
  bool slurm_only = false;
  // ServerConfig::external_gid_base; 0: external slices get no group.
  uint32_t external_gid_base = 0;
  // Container jobs: the engines' clients and the admin's words for `run`.
  std::string podman = "/usr/bin/podman";
  std::string docker = "/usr/bin/docker";
  std::vector<std::string> podman_args;
  std::vector<std::string> docker_args;
  std::optional<uint32_t> admin_gid;
  core::Policy policy = core::kDefaultPolicy;  // frag-aware
  bool backfill = true;
  int64_t kill_grace_ms = 5000;  // SIGTERM, then SIGKILL after this.
  size_t history = 1000;         // Finished jobs kept in memory for `ps --all`.
  // Pools, preemption, watchdog, idle reclaim (policy_config.h).
  PolicyConfig rules;
  // A user's groups for group quotas; unset: SystemGroupsOf (tests fake it).
  std::function<std::vector<std::string>(const std::string& user, uint32_t gid)> groups_of;
  // Usage sampling (Service::Sample): how often, and the GPU use under which a
  // running job counts as idle (JobUsage::low_use_ms, jobs.idle_ms).
  int64_t sample_interval_ms = 1000;
  double idle_threshold_pct = 30.0;
  // Owners, process groups and signals of GPU processes (the watchdog and
  // foreign use); null: /proc (tests give a FakeProcessTable).
  ProcessTable* processes = nullptr;
  // What one user may hold in the queue and one job may carry (unbounded,
  // 10,000 queued jobs with a 7.4 MB environment each take the daemon to
  // 907 MiB). Config keys of the same names (docs/CONFIG.md).
  uint32_t max_queued_jobs_per_user = 500;
  uint64_t max_env_bytes = 256 << 10;
  uint64_t max_argv_bytes = 256 << 10;
  // How often a failed ledger write is retried (degraded until it succeeds).
  int64_t ledger_retry_ms = 2000;
  // The process groups of job `job`'s processes, found by its identity
  // (job_finder.h), for a launch the daemon did not see finish. Unset:
  // FindProcessGroupsByEnv over /proc. Tests fake it; cgroups may replace it.
  std::function<std::vector<int64_t>(const core::Job& job)> find_job_groups;
  // Suspend and resume (suspend/suspender.h): the driver's process checkpoint
  // API; null: jobs cannot be suspended (kUnimplemented says so).
  std::shared_ptr<Checkpointer> checkpointer;
  // How long a suspension waits for a process's GPU work in flight before it
  // gives up (the job then runs on, and the failure is reported).
  uint32_t suspend_lock_timeout_ms = 10000;
};

class Service : public JobTransitions {
 public:
  Service(ServiceOptions options, Clock& clock, Inventory& inventory, Launcher& launcher,
          RegionStore& regions);
  ~Service();

  // Opens the ledger, reads the inventory and recovers live jobs. Problems
  // make the service degraded rather than failing; the returned Status is an
  // error only for what the daemon cannot run without (the state directory).
  core::Status Start();

  // Taking in submissions (intake/job_intake.h): `intake().Submit(...)`.
  JobIntake& intake() { return intake_; }
  // `exit_code`: an external job's owner releasing it says how the work it
  // held ended (a Slurm step's exit status); refused for other jobs.
  core::Status Cancel(const Caller& caller, uint64_t id,
                      std::optional<int> exit_code = std::nullopt);
  // What a job looks like to users: views, lists, pages, the summary, a
  // job's history and logs, event text (reads/job_reads.h).
  JobReads& reads() { return reads_; }

  // Housekeeping, called by the event loop on a timer and on SIGCHLD: reaps
  // processes, ends jobs whose processes are gone, enforces maximum run
  // times and kill deadlines, starts what now fits.
  void Tick();
  // Runs a queue plan that submissions deferred (see RequestSchedule). The
  // event loop calls it every few milliseconds; cheap when nothing waits.
  void Flush();
  // Resume on demand (Suspender::WatchResumeRequests; docs/SUSPEND.md):
  // queues, as a waiting demand, each suspended job whose processes asked
  // during this suspension. The event loop calls it every 10 ms (and Tick
  // does); nothing to do for a job already waiting.
  void WatchResumeRequests() { suspender_.WatchResumeRequests(); }

  // Events: every decision worth telling a user (docs/DAEMON.md lists the
  // kinds). Stored in the ledger; counted per kind for the metrics.
  void RecordEvent(std::string kind, uint64_t job_id, std::string user,
                   std::string message) override;
  // The events recorded, and counts per kind (store/event_log.h).
  const EventLog& events() const { return events_; }

  // Usage as of the last sample (Sample runs from Tick once per
  // sample_interval_ms): each job's, the GPUs', and started jobs' queue
  // waits (usage/usage_book.h).
  const UsageBook& usage() const { return usage_; }
  // GPU processes outside gpuslice, as of the last sample (charged to their
  // GPUs in placement; docs/DAEMON.md, "Foreign GPU use").
  const ForeignUse& foreign() const { return foreign_; }
  // Samples now (Tick calls it when due; tests call it directly).
  void Sample();

  // After a failed ledger write (disk full...): every ledger_retry_ms, and at
  // once when the state disk has 1 MiB more room than at the failure, writes
  // what could not be written; when that succeeds, leaves degraded mode and
  // says so in an event. Likewise, once a slice could not be made for lack
  // of room, it checks the room on each call (a statvfs while the disk stays
  // full) and leaves that state when a slice fits. The event loop calls it
  // on its timer; cheap when the ledger and the disk are fine.
  void MaintainLedger();

  // Whether new work is refused, and why (store/degraded_mode.h).
  const DegradedMode& degraded_mode() const { return degraded_; }
  // How jobs' processes are tracked (cgroups, or process groups and why).
  std::string job_tracking() const { return launcher_.Tracking(); }
  const InventorySnapshot& inventory() const { return inventory_; }
  Inventory& inventory_source() { return inventory_source_; }
  const ServiceOptions& options() const { return options_; }
  // Variables forced into every job's environment (e.g. GPUSLICE_SIM_*).
  void set_job_env(std::vector<std::string> env) { options_.job_env = std::move(env); }
  RegionStore& regions() { return regions_; }
  // The job table, read-only (counts, every live job, slices per GPU).
  const JobTable& table() const { return table_; }
  // What a job is given to run in its slice: its environment, slice
  // limits, directory, container view and cgroup (setup/job_setup.h).
  const JobSetup& setup() const { return setup_; }

  // Live resize, suspend, resume and move of a running or suspended job
  // (live/live_changes.h).
  LiveChanges& live() { return live_; }
  // Shell jobs and run -i: the client reports the process's pid once
  // started, and its exit (shell/shell_jobs.h).
  ShellJobs& shells() { return shells_; }

  // Policies (service_policy.cc, service_reclaim.cc; docs/DAEMON.md).
  // Quotas: admins set and remove them; anyone lists them
  // (quotas/quota_keeper.h).
  QuotaKeeper& quotas() { return quotas_; }
  // Changes to a job's request by its owner or an admin: hold, release,
  // update of a queued job, labels (edits/job_edits.h).
  JobEdits& edits() { return edits_; }
  // The daemon's clock (Unix milliseconds).
  int64_t NowMs() const { return clock_.NowMs(); }
  // Each GPU's pool (by inventory index): the default pool unless the
  // admin put it in another (config/gpu_pools.h).
  const GpuPools& pools() const { return pools_; }

 private:
  // What the job table keeps of a running or suspended job (table/job_table.h).
  using Live = LiveState;

  // Persists a change of `job` from state `from`; degrades on failure.
  bool Persist(const core::Job& job, std::optional<core::JobState> from) override;
  // The one place a job's state changes (docs/DAEMON.md, "Events"):
  // refuses an illegal change (logged; false, nothing changed), sets the
  // state, writes the job's row and the transition to the ledger (its
  // reason is job.reason: set the job's other fields first), then records
  // the event `kind` with `message`. An empty `kind` records none: only
  // StartJob's launch intent, whose "started" event follows once the launch
  // has a pid. False also when the ledger write failed (degraded; retried).
  bool ChangeState(core::Job& job, core::JobState to, std::string kind,
                   std::string message) override;
  // Puts a job whose launch intent could not be recorded back in the queue.
  // A job placed but not started: its slice removed, its allocation and
  // start forgotten (the capacity it took is the caller's to release).
  void ForgetStart(core::Job& job);
  void UndoStart(core::Job& job);
  // Finished jobs that ended this recently stay in memory beyond `history`,
  // so a client polling for an exit code always finds it.
  static constexpr int64_t kKeepEndedMs = 10 * 60 * 1000;
  void Schedule() override;
  // Plans now when that is cheap or has not happened for a while; otherwise
  // leaves it to Flush. With thousands of jobs waiting, planning after every
  // submission would make submissions O(queue) each; batching keeps them
  // O(1) and delays a start by at most one Flush period.
  void RequestSchedule() override;
  void StartJob(core::Job& job);
  void FinishJob(core::Job& job, core::JobState state, int exit_code, std::string reason) override;
  void WatchRunning();
  void Enqueue(const core::Job& job);

  // A preempted restartable job goes back to the queue.
  void Requeue(core::Job& job, std::string reason);
  // Idle reclaim and the watchdog, after each sample.
  void Reclaim();
  // Resume on demand (suspend/suspender.h): a suspended job's demand to be
  // resumed enters the queue as a job submitted now would.
  void QueueResumeDemand(const core::Job& job, int64_t asked_ms);
  // Fair share at start (service_schedule.cc): the ranker's book seeded
  // with the ledger's history, read as `gpuslice usage` reads it.
  void SeedFairShare();

  ServiceOptions options_;
  // Every job in memory, the live jobs' state, the queue and their indexes
  // (table/job_table.h). Declared first: the components' callbacks read it.
  JobTable table_;
  Clock& clock_;
  Inventory& inventory_source_;
  Launcher& launcher_;
  RegionStore& regions_;
  std::unique_ptr<Ledger> ledger_;
  InventorySnapshot inventory_;
  // CDI specs of running jobs and container jobs
  // (containers/container_jobs.h); specs are written from Start() on.
  ContainerJobs containers_;
  // External jobs' checks, slice groups, holders and end
  // (external/external_jobs.h).
  ExternalJobs external_;
  // What a job is given to run in its slice (setup/job_setup.h).
  JobSetup setup_;
  std::unique_ptr<NodeCapacity> capacity_;
  // Why new work is refused, if it is, and the failed ledger writes and
  // lack of room for slices it heals from (store/degraded_mode.h).
  DegradedMode degraded_;

  bool schedule_pending_ = false;
  int64_t last_schedule_ms_ = 0;

  // Events (store/event_log.h; in memory only when the ledger is unavailable).
  EventLog events_{ledger_, [this](const core::Status& s) {
                     degraded_.Degrade("ledger write failed: " + s.message());
                   }};
  // Usage sampling: each job's usage, the GPUs', context sizes
  // (usage/usage_book.h).
  UsageBook usage_;
  // What the daemon does to a job's processes (stop, continue, kill, a line
  // in its log) and which job a GPU process is (control/job_processes.h).
  JobProcesses procs_{
      options_.state_dir + "/jobs",
      options_.processes,
      table_,
      launcher_,
      regions_,
      usage_,
      external_,
      clock_,
      {.slice_limits = [this](const core::Job& job) { return setup_.SliceLimitsOf(job); },
       .record_event =
           [this](std::string kind, uint64_t id, std::string user, std::string message) {
             RecordEvent(std::move(kind), id, std::move(user), std::move(message));
           }}};
  // GPU processes outside gpuslice: charged, reported, ended after each
  // sample (usage/foreign_use.h).
  ForeignUse foreign_{{[this](const std::string& user, const std::string& message) {
                         RecordEvent("foreign_process", 0, user, message);
                       },
                       [this]() -> ProcessTable& { return procs_.processes(); }}};
  // The enforcement watchdog: each running job's watch state, and what it
  // does about a breach (watch/watchdog.h).
  Watchdog watchdog_;
  // Idle reclaim: each running job's idle episode, and what is done about
  // it (watch/idle_reclaim.h).
  IdleReclaim idle_;

  // Policies.
  // Quotas, whom jobs are charged to, and the queue's quota verdicts
  // (quotas/quota_keeper.h).
  QuotaKeeper quotas_;
  // Preemption and the reclaim of borrowed capacity: whom each head ends
  // or suspends, and why it cannot (makeroom/preemptions.h).
  Preemptions preemptions_;
  // Which pool each GPU is in, resolved at start (config/gpu_pools.h).
  GpuPools pools_{options_.rules.default_pool};

  // Which queued jobs wait for which (--after; waits/dependencies.h).
  JobDependencies dependencies_;
  // Which queued jobs are held by `gpuslice hold` (waits/holds.h).
  JobHolds holds_;
  // Suspensions, resumes and moves: each job's checkpoint worker and what
  // it left (suspend/suspender.h).
  Suspender suspender_;

  // Scheduling.
  // The queue's order (fair share and age), run-time estimates, packing and
  // the last plan's reservation (ranking/queue_ranker.h).
  QueueRanker ranker_;
  // Automatic moves for the head: in flight, per job per hour, refused,
  // suggested (makeroom/defragmenter.h).
  Defragmenter defrag_;
  // When each running elastic job last grew or shrank, and the steps
  // (elastic/elastic_jobs.h).
  ElasticJobs elastic_;

  // What a job looks like to users, and the last plan's waiting board
  // (reads/job_reads.h). Last: its callbacks read the components above.
  JobReads reads_;
  // Changes to a job's request by its owner or an admin
  // (edits/job_edits.h).
  JobEdits edits_;
  // Taking in submissions: their checks, limits, quotas and first steps
  // (intake/job_intake.h). Declared last: it reads most of the above.
  JobIntake intake_;
  // Live resize, suspend, resume and move, and a failed suspension's
  // fallbacks (live/live_changes.h).
  LiveChanges live_;
  // Shell jobs' attach and exit report (shell/shell_jobs.h).
  ShellJobs shells_;
  // The state directory's modes, and the jobs the ledger recorded taken
  // back at start: the crash-safe launch rules (recovery/recovery.h).
  Recovery recovery_;
};

}  // namespace gpuslice::daemon
