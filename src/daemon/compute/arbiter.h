#pragma once

// The compute arbiter (docs/COMPUTE.md, "Arbitration by the daemon"): the
// daemon decides whose turn it is on each GPU; jobs only report.
//
// Per GPU a board (`<coord dir>/gpu-<uuid>.board`, written only here, read
// only by jobs) carries the turn and each slice's standing; per slice a
// members file (`<slices dir>/job-<id>/members`, the job's, 0600) carries
// what its processes report: waiting, work in flight, heartbeat, and a
// doorbell. The arbiter reads those reports with pread(2) as untrusted
// input, runs the policy of slice/compute/compute_policy.h over them with the shares
// and priorities the daemon gave (Register/Update, from the job's
// allocation), and writes the board, waking the launchers on every change.
//
// What a slice writes can only change the flags of its own slice, so only its
// own turns: the holder of an open turn is charged its wall time while
// another slice waits (PolicyParams::charge_blocking_holder), whatever it
// reports.
//
// Threads: one per GPU, started when the first slice of that GPU registers.
// It sleeps in futex_waitv(2) on the doorbells of its slices (and a private
// word that Register/Drop ring), at most kArbiterBeatNs, or the active tick
// while a slice is active (the quiet tick while the open turn needs no
// decision: GpuArbiter::QuietTurn); two decisions are at least min_tick_gap_ns apart,
// so a slice that rings its doorbell in a loop makes the arbiter decide
// sooner, never more often than that. Register/Update/Drop may be called
// from one other thread (the Service's); everything they share with a GPU's
// thread is under that GPU's mutex.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/compute/region_store.h"
#include "slice/compute/compute_policy.h"
#include "slice/compute/coord_board_layout.h"

namespace gpuslice::daemon {

struct ArbiterOptions {
  std::string coord_dir;   // Boards: <coord_dir>/gpu-<uuid>.board; empty: none (shares refused).
  std::string slices_dir;  // Members files: <slices_dir>/job-<id>/members.
  slice::PolicyParams params = [] {
    slice::PolicyParams p;
    p.charge_blocking_holder = true;
    p.charge_from_previous_report = true;  // The launchers ring on both edges.
    p.corun = true;  // Slices of low duty launch beside the holder.
    // A closing holder that claims work in flight holds the others off for
    // at most this long (charged to it). Below the token bucket's depth
    // (burst_ns), so the waiting slices lose none of their accrual to it:
    // with 250 ms, a slice that claimed to drain forever took ~5 pp from
    // hard neighbours whose buckets filled while they waited.
    p.drain_timeout_ns = 50'000'000;
    return p;
  }();
  uint64_t active_tick_ns = 200'000;  // Decision cadence while a slice is active.
  // ... while the open turn is quiet: its holder and co-runners
  // have tokens to spare and nobody else has work. A 20 us
  // launch-then-synchronise loop alone shares 2 cores with this thread and
  // its own gate thread: at the active cadence it reached 0.82-0.87 of what
  // it reaches without gpuslice, 0.87-0.97 with both at 1 ms.
  uint64_t quiet_tick_ns = slice::board::kQuietTickNs;
  uint64_t min_tick_gap_ns = 25'000;  // Doorbell rate limit.
  // Board mode: 0644 when the daemon is root; 0444 otherwise (its jobs run
  // as itself and must not find the board writable by them).
  mode_t board_mode = 0644;
  bool threads = true;  // False: nothing runs by itself (tests call Tick).
  int nice = -10;       // The threads' nice value (when the daemon may set it).
};

class GpuArbiter;
struct MembersHandle;

class Arbiter {
 public:
  explicit Arbiter(ArbiterOptions options);
  ~Arbiter();
  Arbiter(const Arbiter&) = delete;
  Arbiter& operator=(const Arbiter&) = delete;

  // Takes back the slices recorded on the boards in the coordination
  // directory (a restarted daemon: the region store's Create is not called
  // for re-adopted jobs). A slice whose members file is gone, or belongs to
  // another uid than the board records, is dropped. Call once, first.
  core::Status Recover();

  // A new slice (the region store's Create): its members file, and an entry
  // on the board of each of its devices that has a compute share. Replaces
  // whatever was registered for the same job.
  core::Status Register(const SliceLimits& limits);
  // A live change (the region store's Update): share, mode, priority and
  // pause of the devices listed in `limits.uuids` (others are unchanged).
  core::Status Update(const SliceLimits& limits);
  // The slice moved (a suspended job resumed on other GPUs): off the board
  // of each `from`, onto the board of its `to` under the same device index,
  // with `limits` (whose uuids are the slice's devices after the move). Its
  // members file stays: the job's processes keep reporting into it.
  core::Status Move(const SliceLimits& limits,
                    const std::vector<std::pair<std::string, std::string>>& pairs);
  // The slice is gone: off every board; its members file removed.
  void Drop(uint64_t job_id);

  // Wall time (ns) during which another slice on one of the job's GPUs
  // waited for its turn while this one was registered (summed over its
  // GPUs). See RegionStore::ContendedNs.
  uint64_t ContendedNs(uint64_t job_id) const;
  // Wall time (ns) during which the job's slice waited for its turn while
  // another held the GPU (summed over its GPUs). See RegionStore::WaitedNs.
  uint64_t WaitedNs(uint64_t job_id) const;

  // GPU time (ns, cumulative) the job's slice was charged, summed over its
  // GPUs; nullopt when it is on no board. See RegionStore::ChargedNs.
  std::optional<uint64_t> ChargedNs(uint64_t job_id) const;
  // From now on the job's reports are ignored and it is charged the wall
  // time of its turns (slice::SliceView::distrusted), on every GPU it is
  // registered on, now or after an update or a move, until it is dropped.
  // See RegionStore::DistrustReports.
  void DistrustReports(uint64_t job_id);

  std::string MembersPath(uint64_t job_id) const;
  std::string BoardPath(const std::string& uuid) const;
  std::vector<uint64_t> Jobs() const;

  // One decision on `uuid`'s board at `now_ns` (CLOCK_MONOTONIC). For tests
  // (options.threads false). Returns how long the thread would sleep before
  // the next one unless rung (the beat, the quiet or the active tick); 0
  // when no such board.
  uint64_t TickForTest(const std::string& uuid, uint64_t now_ns);

 private:
  core::Result<GpuArbiter*> Gpu(const std::string& uuid);  // Needs mu_.
  // The job's members file: the one already open, else (`reuse`) the one at
  // its path, else a new one. Needs mu_.
  core::Result<std::shared_ptr<MembersHandle>> Members(const SliceLimits& limits, bool reuse);

  ArbiterOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<GpuArbiter>> gpus_;     // Guarded by mu_.
  std::map<uint64_t, std::shared_ptr<MembersHandle>> members_;  // Guarded by mu_.
  // Jobs whose reports are disregarded (DistrustReports), so that an update
  // or a move onto other GPUs keeps it. Not kept across a daemon restart:
  // the audit catches the slice again within a window. Guarded by mu_.
  std::set<uint64_t> distrusted_;
};

}  // namespace gpuslice::daemon
