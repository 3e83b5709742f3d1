#pragma once

// The node's capacity as the queue planner sees it (core::CapacityModel),
// over the placement core: one ClusterState node holding the GPUs that are
// not in MIG mode, plus a pool of MIG instances (allocatable units of their
// own, matched by profile). No placement algorithm lives here: fitting goes
// through core::Place with the configured policy.
//
// Policies: binpack, spread, and the fragmentation-aware ones (frag-aware,
// the default, and fgd), whose workload profile is learnt here from what this
// machine is asked for: every registered demand (queued and running) plus the
// last kRecentDemands that ended, rebuilt after a quarter of them changed.
//
// Demands: whole GPUs and fractions map through core::DemandFromRequest,
// except that a fraction with no compute share (--mem alone) shares compute
// uncapped, so it is placed with the smallest share (1 per-mille) instead of
// as a whole GPU; only its memory limits how many fit.
//
// Pools: the admin may split the GPUs into named pools (docs/CONFIG.md); a
// request is placed only on its pool's GPUs. Each GPU's model is interned as
// "model@pool", so a pool is a set of model indices and a request's pool is
// its demand's model mask: the placement core needs no notion of pools, and
// queue shapes of different pools never compare (PoolIndex).
//
// Its parts: the MIG instances (MigInstances), the foreign use charged to
// the GPUs (ForeignCharges), the pools (PoolIndex) and the bounds that turn
// most requests away without a placement (FreeBounds).

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/jobs/job.h"
#include "core/placement/move_proposal.h"
#include "core/placement/placement_model.h"
#include "core/placement/placement_policy.h"
#include "core/placement/placement_profile.h"
#include "core/schedule/queue.h"
#include "daemon/node/inventory.h"
#include "daemon/placement/foreign_charges.h"
#include "daemon/placement/free_bounds.h"
#include "daemon/placement/mig_instances.h"
#include "daemon/placement/pool_index.h"

namespace gpuslice::daemon {

class NodeCapacity : public core::CapacityModel {
 public:
  // Policies that need randomness (random-fit) are refused.
  // `pool_of` names each GPU's pool (same order as `gpus`; MIG instances are
  // in their GPU's pool); empty: one pool, `default_pool`, holds them all.
  static core::Result<std::unique_ptr<NodeCapacity>> Create(
      const std::vector<GpuInfo>& gpus, core::Policy policy,
      const std::vector<std::string>& pool_of = {}, const std::string& default_pool = "default");

  // Registers what job `id` asks for. Errors when the request cannot be
  // expressed (e.g. a MIG profile when no GPU is in MIG mode, a pool that
  // does not exist).
  core::Status SetDemand(uint64_t id, const core::ResourceRequest& request);
  // Live resize of a running fraction, on the GPU it holds: kResourceExhausted
  // (nothing changed) when that GPU cannot hold the new size beside the others.
  core::Status Resize(uint64_t id, const core::ResourceRequest& request);
  // Elastic jobs ("--gpus 1-4"): TryPlace gives one as many idle GPUs of its
  // pool as it can get, up to its maximum. SetElasticGpus grows a running
  // one onto idle GPUs of its node and pool (same island when known) or
  // shrinks it by giving back its last GPUs; kResourceExhausted (nothing
  // changed) when there is nothing to grow onto.
  core::Result<core::Allocation> SetElasticGpus(uint64_t id, uint32_t count);
  uint32_t IdleGpus() { return bounds_.Of(state_).idle_gpus; }
  // The pools, the default one, and how requests name them.
  const PoolIndex& pools() const { return pools_; }
  void ForgetDemand(uint64_t id);
  // kOutOfRange (never fits) with a message naming what is never enough.
  core::Status CouldEverFit(const core::ResourceRequest& request) const;
  // Takes what a running job holds (restart recovery). Errors when the
  // allocation does not match the GPUs or is already taken: then the ledger
  // and the machine disagree and the daemon reports it.
  core::Status Hold(uint64_t id, const core::Allocation& allocation);
  // The same for a job whose allocation the pools no longer allow (restart
  // recovery after the admin moved its GPUs to another pool, or removed its
  // pool): its demand is registered without a pool, so what it holds is
  // taken wherever it is (nothing new of its pool lands on GPUs outside it).
  // An empty allocation (a suspended job) only registers the demand.
  core::Status HoldOutsidePool(uint64_t id, const core::ResourceRequest& request,
                               const core::Allocation& allocation);

  // External jobs (never queued): places job `id` now, on one of the GPUs
  // (or MIG instances, or their GPUs) named in `candidates` (empty: any of
  // its pool, by the policy). kFailedPrecondition saying what does not fit
  // when there is no room now; kNotFound for a UUID this machine lacks.
  core::Status PlaceOn(uint64_t id, const std::vector<std::string>& candidates);
  // A suspended job that asked to be resumed (resume on demand,
  // docs/SUSPEND.md), a waiting demand of the queue like any other: TryPlace
  // puts it back where it was (`own`, its allocation when it was
  // suspended), else on one of `elsewhere` (GPUs of its model and pool the
  // driver can restore it onto; empty: nowhere else), and answers kNotNow,
  // never kNever, when neither has room (a suspended job is not failed for
  // want of room). Its demand must be registered (SetDemand). Forgotten
  // with ForgetResumeTarget or ForgetDemand.
  void SetResumeTarget(uint64_t id, core::Allocation own, std::vector<std::string> elsewhere);
  void ForgetResumeTarget(uint64_t id) { resume_.erase(id); }
  bool HasResumeTarget(uint64_t id) const { return resume_.count(id) > 0; }
  // A move that would let job `head_id` (which does not fit now) start:
  // one running single-GPU job, for which `movable` says yes, moved to
  // another GPU (core::ProposeMove). Whole GPUs and fractions; not MIG.
  struct MoveHint {
    uint64_t job_id = 0;
    std::string to_uuid;
  };
  std::optional<MoveHint> ProposeMoveFor(uint64_t head_id,
                                         const std::function<bool(uint64_t)>& movable);
  // Automatic defragmentation (core::PlanDefrag): at most `max_moves`
  // moves of running single-GPU jobs for which `movable` says yes, each to
  // another GPU of its model and pool, after which job `head_id` fits;
  // empty when there are none. Whole GPUs and fractions; not MIG.
  std::vector<MoveHint> PlanDefragFor(uint64_t head_id, uint32_t max_moves,
                                      const std::function<bool(uint64_t)>& movable);
  // While jobs of whole GPUs wait, fractions are packed (binpack) so that
  // they keep GPUs idle for them (core::PlaceOptions::pack_fractions).
  void set_pack_fractions(bool pack) { options_.pack_fractions = pack; }
  bool pack_fractions() const { return options_.pack_fractions; }
  std::unique_ptr<core::CapacityModel> Clone() const override;
  core::FitResult TryPlace(uint64_t id) override;
  void Release(uint64_t id) override;
  bool Mirror(uint64_t id, const core::CapacityModel& source) override;

  // What a job placed here holds, in terms the launcher and the ledger use.
  std::optional<core::Allocation> AllocationOf(uint64_t id) const;
  // The shape the queue planner prunes with.
  core::QueueShape ShapeOf(uint64_t id) const;
  // Why a job that does not fit now waits, e.g. "needs 40 GiB + 30% on one
  // GPU; most free on one GPU: 20 GiB", followed by what processes outside
  // gpuslice hold on its pool's GPUs.
  std::string WhyNotNow(uint64_t id) const;

  // Foreign GPU use: memory that processes belonging to no job hold on the
  // GPU with inventory index `gpu_index` (NVML), charged like a slice of
  // its own so that nothing is placed where it cannot fit (and the GPU is
  // not idle for whole-GPU requests). `who` names them for WhyNotNow
  // ("pid 4242, user bob"). 0 clears it. The charge takes only what is free
  // (a job placed earlier keeps what it holds); the rest is charged as soon
  // as jobs give memory back. A GPU in MIG mode is charged per instance
  // (SetForeignMig); here it is ignored.
  void SetForeign(uint32_t gpu_index, uint64_t bytes, std::string who);
  // What is charged for foreign use on each GPU now, jobs' use over their
  // limits included (ForeignCharges::Charged, at most what was set).
  const ForeignCharges& foreign() const { return foreign_; }
  // Foreign use of the MIG instance with UUID `mig_uuid` ("MIG-..."): while
  // `who` names processes belonging to no job that run in it, it is not
  // handed to a job; "" frees it. An instance is placed whole, so any such
  // process takes it, whatever memory it holds (`bytes`, for WhyNotNow). A
  // job that holds the instance already keeps it (as with SetForeign); it
  // is not placed again until both are gone. Unknown UUIDs are ignored.
  void SetForeignMig(const std::string& mig_uuid, uint64_t bytes, std::string who);
  // The MIG instances: who holds one outside gpuslice (ForeignOf), whether a
  // job holds one (HeldByJob: foreign use there takes what the job was
  // promised).
  const MigInstances& mig() const { return mig_; }

  // Memory that jobs' processes hold on the GPU beyond their limits there
  // (NVML; a process that escaped the shim, before the watchdog ends it):
  // charged at once, together with the GPU's foreign use and as it is (only
  // what is free; the rest as jobs give memory back), so that placement
  // never promises it to another job. `who` names the jobs for WhyNotNow
  // ("job 12"). 0 clears it. Ignored on a GPU in MIG mode.
  void SetOverLimit(uint32_t gpu_index, uint64_t bytes, std::string who);
  // The GPU's memory that no job holds in placement (its total less what
  // jobs were given): what foreign use and jobs' use over their limits can
  // take before they take memory a job was promised. 0 for an unknown GPU.
  uint64_t UnpromisedBytes(uint32_t gpu_index) const;

  const core::ClusterState& state() const { return state_; }
  // The profile the fragmentation-aware policies use now (null before the
  // first placement that needed one, or with other policies).
  const core::WorkloadProfile* profile() const { return profile_.get(); }

  // Ended demands the learnt profile remembers.
  static constexpr size_t kRecentDemands = 256;
  // The learnt profile keeps at most this many shapes, the most frequent.
  static constexpr size_t kMaxProfileShapes = 16;

 private:
  struct Held {
    core::Placement placement;  // For GPU demands.
    int mig = -1;               // Index into mig_ for MIG demands.
  };
  struct DemandEntry {
    core::ResourceRequest request;
    core::Demand demand;
    bool ever_fits = true;  // CouldEverFit, decided once at SetDemand.
    std::string pool;       // "" when the machine has one pool.
  };
  using DemandTable = std::unordered_map<uint64_t, DemandEntry>;

  NodeCapacity() = default;
  // What a held job's placement holds: its demand, with an elastic job's
  // current GPU count.
  static core::Demand HeldDemand(const DemandEntry& e, const Held& h);
  // The flat position of the GPU with inventory index `gpu_index`; nullopt
  // for a GPU in MIG mode or none.
  std::optional<size_t> FlatOf(uint32_t gpu_index) const;
  // Running single-GPU-or-more jobs as the move planners see them, by id.
  std::vector<core::PlacedTask> PlacedTasks(const std::function<bool(uint64_t)>& movable) const;
  // The placement options moves are planned with (no fragmentation cache).
  core::PlaceOptions MoveOptions();
  // Rebuilds profile_ when it is missing or stale; keeps the old one (or
  // none) when no GPU demand is known.
  void EnsureProfile();

  core::ClusterState state_;
  core::PlaceOptions options_;
  // Flat GPU position (node * kMaxGpusPerNode + GPU) -> inventory GPU
  // (non-MIG GPUs only). Immutable after Create, so clones share it.
  std::shared_ptr<std::vector<GpuInfo>> node_gpus_ = std::make_shared<std::vector<GpuInfo>>();
  MigInstances mig_;
  PoolIndex pools_;
  // Shared with clones: clones only read it, and live no longer than one
  // planning pass, during which no demand is added.
  std::shared_ptr<DemandTable> demands_ = std::make_shared<DemandTable>();
  std::unordered_map<uint64_t, Held> held_;
  FreeBounds bounds_;
  // The learnt workload profile (shared with clones, immutable).
  std::shared_ptr<const core::WorkloadProfile> profile_;
  // Resume demands (SetResumeTarget), copied into clones with the rest.
  struct ResumeTarget {
    core::Allocation own;
    std::vector<std::string> elsewhere;
  };
  core::FitResult TryResume(uint64_t id, const ResumeTarget& target);
  std::unordered_map<uint64_t, ResumeTarget> resume_;
  ForeignCharges foreign_;
  std::deque<core::Demand> recent_;    // Demands that ended, newest last.
  size_t profile_changes_ = 0;         // Demands added or ended since the build.
  // Each node's fragmentation under profile_, by node version (copied into
  // clones with the state it describes).
  core::FragmentationCache frag_cache_;
};

}  // namespace gpuslice::daemon
