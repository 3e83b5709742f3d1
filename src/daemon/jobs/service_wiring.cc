// Service: its construction, which wires the components it owns to the job
// table and to each other (the callbacks each component asks through; see
// the component table in docs/ARCHITECTURE.md). See service.h.

#include <sys/statvfs.h>

#include <string>

#include "daemon/base/log.h"
#include "daemon/jobs/service.h"

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

// Writes a live job's new size (an elastic step, a resize) to the ledger,
// when there is one; a failed write degrades the daemon until it is retried.
void SaveResize(Ledger* ledger, DegradedMode& degraded, const Job& job, int64_t now_ms) {
  if (ledger == nullptr) return;
  if (Status s = ledger->SaveResize(job, now_ms); !s.ok()) {
    degraded.Degrade("ledger write failed: " + s.message());
  }
}

// Job `id` as the components that make room for the head see it
// (makeroom/live_job.h); unset when it is neither running nor suspended.
std::optional<LiveJob> LiveJobIn(JobTable& table, const Suspender& suspender,
                                 const Watchdog& watchdog, uint64_t id) {
  auto it = table.live().find(id);
  if (it == table.live().end()) return std::nullopt;
  const LiveState& l = it->second;
  return LiveJob{.job = &table.jobs()[id],
                 .ending = l.ending.has_value(),
                 .checkpointing = suspender.Busy(id),
                 .stopped = watchdog.Stopped(id)};
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
                    return IsElastic(job) ? setup_.JobDir(job.id) + "/gpus" : std::string();
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
      setup_(
          {.jobs_dir = options_.state_dir + "/jobs",
           .shim_path = options_.shim_path,
           .sim_lib_dir = options_.sim_lib_dir,
           .coord_dir = options_.coord_dir,
           .resume_on_demand = options_.rules.resume_on_demand},
          JobSetup::Hooks{
              .job_env = [this]() -> const std::vector<std::string>& { return options_.job_env; },
              .simulated = [this] { return inventory_.simulated(); },
          },
          table_, regions_, external_, containers_, launcher_),
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
                  SliceLimits limits = setup_.SliceLimitsOf(job);
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
              options_.rules.quota_borrowing,
              QuotaKeeper::Records{
                  .ledger = [this] { return ledger_.get(); },
                  .degraded_reason = [this] { return degraded_.reason(); },
                  .now_ms = [this] { return clock_.NowMs(); },
                  .record_event =
                      [this](std::string kind, std::string user, std::string message) {
                        RecordEvent(std::move(kind), 0, std::move(user), std::move(message));
                      },
                  .schedule = [this] { Schedule(); },
              }),
      preemptions_(
          Preemptions::Jobs{
              .for_each_live =
                  [this](const std::function<void(const LiveJob&)>& visit) {
                    for (const auto& [id, l] : table_.live())
                      visit(*LiveJobIn(table_, suspender_, watchdog_, id));
                  },
              .live = [this](uint64_t id) { return LiveJobIn(table_, suspender_, watchdog_, id); },
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
              .limits_of = [this](const Job& job) { return setup_.SliceLimitsOf(job); },
              .capacity = [this] { return capacity_.get(); },
              .degraded_reason = [this] { return degraded_.reason(); },
              .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
              .pool_of = [this](uint32_t gpu) -> const std::string& { return pools_.PoolOf(gpu); },
              .usage = [this](uint64_t id) { return usage_.Find(id); },
              .forget_usage = [this](uint64_t id) { usage_.Forget(id); },
              .processes = [this]() -> ProcessTable& { return procs_.processes(); },
              .append_to_stderr =
                  [this](const Job& job, const std::string& line) {
                    procs_.AppendToStderr(job, line);
                  },
              .suspend_failed =
                  [this](Job& job, const SuspendCause& cause) {
                    live_.AfterFailedSuspend(job, cause);
                  },
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
                    reads_.MarkStale();
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
                    return !(reads_.plan_head() != 0 && !table_.queue().empty() &&
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
              .live = [this](uint64_t id) { return LiveJobIn(table_, suspender_, watchdog_, id); },
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
                    for (const auto& [id, l] : table_.live())
                      visit(*LiveJobIn(table_, suspender_, watchdog_, id));
                  },
              .job = [this](uint64_t id) -> Job& { return table_.jobs()[id]; },
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
              .fits_quotas_with =
                  [this](const Job& job, const core::Allocation& allocation) {
                    if (quotas_.empty()) return true;
                    return quotas_
                               .Decide(quotas_.OwnerOf(job),
                                       core::ChargeOfAllocation(job.request, allocation),
                                       quotas_.RunningUsage(job.id))
                               .verdict == core::QuotaVerdict::kFits;
                  },
              .schedule = [this]() { Schedule(); },
              .limits_of = [this](const Job& job) { return setup_.SliceLimitsOf(job); },
              .save_resize =
                  [this](const Job& job) {
                    SaveResize(ledger_.get(), degraded_, job, clock_.NowMs());
                  },
              .no_room = [this](const std::string& reason) { degraded_.NoRoom(reason); },
              .job_dir = [this](uint64_t id) { return setup_.JobDir(id); },
              .signal_group = [this](int64_t pgid,
                                     int signal) { (void)launcher_.SignalGroup(pgid, signal); },
              .record =
                  [this](std::string kind, uint64_t id, std::string user, std::string message) {
                    RecordEvent(std::move(kind), id, std::move(user), std::move(message));
                  },
          },
          options_.rules, clock_, regions_),
      reads_(
          table_, clock_, options_.state_dir + "/jobs", options_.rules.default_pool,
          JobReads::Jobs{
              .flush = [this] { Flush(); },
              .transitions = [this](uint64_t id) -> Result<std::vector<Transition>> {
                if (!ledger_)
                  return core::UnavailableError("ledger unavailable: " + degraded_.reason());
                return ledger_->Transitions(id);
              },
              .pool_of = [this](uint32_t gpu) -> const std::string& { return pools_.PoolOf(gpu); },
              .suspend_flags = [this](uint64_t id) { return suspender_.Flags(id); },
              .idle = [this](uint64_t id) { return idle_.Flagged(id); },
              .watchdog_flags =
                  [this](uint64_t id, std::vector<std::string>* flags) {
                    watchdog_.AppendFlags(id, flags);
                  },
              .borrowing = [this](uint64_t id) { return quotas_.borrowers().count(id) > 0; },
              .dependencies = [this](const Job& job) { return dependencies_.ViewsOf(job); },
              .usage = [this](uint64_t id) { return usage_.Of(id); },
              .checkpoint_error = [this](uint64_t id) { return suspender_.Error(id); },
              .fair_share = [this](const Job& job) { return ranker_.ShownFactorOf(job); },
              .resume_asked_ms = [this](uint64_t id) { return suspender_.ResumeAskedMs(id); },
              .why_not_now = [this](uint64_t id) { return capacity_->WhyNotNow(id); },
              .preempt_text = [this](uint64_t head) { return preemptions_.WaitingText(head); },
              .head_start = [this]() -> std::optional<JobReads::HeadStart> {
                const std::optional<int64_t>& expected = ranker_.head_expected_start_ms();
                if (!expected) return std::nullopt;
                return JobReads::HeadStart{*expected, ranker_.head_estimated()};
              },
              .defrag_text = [this](uint64_t head) { return defrag_.WaitingText(head); },
              .borrow_reason = [this](uint64_t id) { return quotas_.BorrowReason(id); },
              .quota_wait = [this](uint64_t id) { return quotas_.WaitReason(id); },
              .waits_for_dependencies = [this](uint64_t id) { return dependencies_.Waits(id); },
              .dependency_text = [this](const Job& job) { return dependencies_.WaitingText(job); },
          }),
      edits_(table_, *this, holds_, dependencies_,
             JobEdits::Jobs{
                 .health =
                     [this] {
                       return JobEdits::Health{.degraded = degraded_.degraded(),
                                               .ledger = ledger_ != nullptr,
                                               .reason = degraded_.reason()};
                     },
                 .view = [this](const Job& job) { return reads_.View(job); },
                 .could_ever_fit =
                     [this](const core::ResourceRequest& request) {
                       return capacity_->CouldEverFit(request);
                     },
                 .set_demand =
                     [this](uint64_t id, const core::ResourceRequest& request) {
                       return capacity_->SetDemand(id, request);
                     },
                 .check_quota = [this](const Job& job) { return intake_.CheckQuotaAtSubmit(job); },
                 .enqueue = [this](const Job& job) { Enqueue(job); },
                 .update_slice =
                     [this](const Job& job) {
                       return regions_.Update(job.region_path, setup_.SliceLimitsOf(job));
                     },
             }),
      intake_(
          JobIntake::Options{
              .slurm_only = options_.slurm_only,
              .max_queued_jobs_per_user = options_.max_queued_jobs_per_user,
              .max_env_bytes = options_.max_env_bytes,
              .max_argv_bytes = options_.max_argv_bytes,
              .access = options_.rules.access,
          },
          JobIntake::Hooks{
              .capacity = [this]() -> NodeCapacity& { return *capacity_; },
              .enqueue = [this](const Job& job) { Enqueue(job); },
              .start = [this](Job& job) { StartJob(job); },
              .view = [this](const Job& job) { return reads_.View(job); },
          },
          table_, *this, degraded_, containers_, external_, dependencies_, quotas_, setup_,
          regions_, clock_),
      live_(
          table_, suspender_, quotas_, regions_, *this, options_.rules, clock_,
          LiveChanges::Hooks{
              .view = [this](const Job& job) { return reads_.View(job); },
              .change_priority =
                  [this](const Caller& caller, Job& job, core::Priority priority) {
                    return edits_.ChangePriority(caller, job, priority);
                  },
              .limits_of = [this](const Job& job) { return setup_.SliceLimitsOf(job); },
              .take_turns =
                  [](const Job& job, SliceLimits* limits) {
                    JobSetup::TakeTurnsWithoutAShare(job, limits);
                  },
              .capacity = [this] { return capacity_.get(); },
              .inventory = [this]() -> const InventorySnapshot& { return inventory_; },
              .pool_of = [this](uint32_t gpu) -> const std::string& { return pools_.PoolOf(gpu); },
              .degraded = [this] { return degraded_.degraded(); },
              .degraded_reason = [this] { return degraded_.reason(); },
              .save_resize =
                  [this](const Job& job) {
                    SaveResize(ledger_.get(), degraded_, job, clock_.NowMs());
                  },
              .resize_elastic =
                  [this](Job& job, uint32_t count, const std::string& why) {
                    return elastic_.Apply(job, count, why);
                  },
              .unpaused = [this](uint64_t id) { idle_.Unpaused(id, usage_.Find(id)); },
              .idle_fallback = [this](Job& job, IdleAction action,
                                      const std::string& idle) { idle_.Act(job, action, idle); },
              .end_for_preemption =
                  [this](Job& job, uint64_t head) { preemptions_.EndForPreemption(job, head); },
              .requeue_for_reclaim =
                  [this](Job& job, uint64_t head) { preemptions_.RequeueForReclaim(job, head); },
              .move_failed = [this](uint64_t id,
                                    int64_t now_ms) { defrag_.MoveFailed(id, now_ms); },
          }),
      shells_(table_, launcher_, *this,
              ShellJobs::Hooks{.watch_running = [this] { WatchRunning(); }}),
      recovery_(
          Recovery::Options{.state_dir = options_.state_dir,
                            .history = options_.history,
                            .keep_ended_ms = kKeepEndedMs,
                            .find_job_groups = options_.find_job_groups},
          Recovery::Hooks{
              .capacity = [this]() -> NodeCapacity& { return *capacity_; },
              .forget_start = [this](Job& job) { ForgetStart(job); },
              .enqueue = [this](const Job& job) { Enqueue(job); },
              .rewait = [this](const Job& job) { return dependencies_.Rewait(job); },
              .hold = [this](uint64_t id) { holds_.Hold(id); },
              .recover_suspension = [this](Job& job) { suspender_.Recover(job); },
              .outside_pool_text = [this](const Job& job) { return reads_.OutsidePoolText(job); },
              .job_dir = [this](uint64_t id) { return setup_.JobDir(id); },
          },
          table_, *this, launcher_, regions_, clock_) {}

Service::~Service() = default;

}  // namespace gpuslice::daemon
