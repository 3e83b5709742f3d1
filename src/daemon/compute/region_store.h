#pragma once

// A job's slice files, behind a seam. ShimRegionStore uses the shim's region
// and limits page libraries; tests use FakeRegionStore.
//
// Trust split (docs/SLICE_REGION.md): what the daemon decides
// (limits, shares, modes, priorities, pauses) goes to the slice's limits
// page, which only the daemon can write; what the job reports (usage,
// pids, counters) comes from its region, which the job owns. Nothing here
// ever takes a decision back from a region.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::slice {
class LimitsPage;
}

namespace gpuslice::daemon {

struct SliceLimits {
  uint64_t job_id = 0;
  uint32_t uid = 0;  // Owner of the region file (the job's user).
  uint32_t gid = 0;
  std::string name;
  std::vector<std::string> uuids;  // One entry per device of the slice.
  uint64_t memory_bytes_per_device = 0;
  uint32_t compute_milli = 0;  // 0: no compute share (not coordinated).
  // Over the share's cap when the GPU is otherwise idle (work-conserving),
  // or never (hard, the default).
  bool work_conserving = false;
  // The job's priority. Stored for every slice, whole-GPU and MIG ones too;
  // the shim orders slices by it when they take turns on a GPU.
  core::Priority priority = core::Priority::kNormal;
  // Idle reclaim's "stop launching new work": while set, the shim holds the
  // slice's new kernel launches (memory stays allocated).
  bool launches_paused = false;
  // Non-zero while the job is suspended and resumed on demand: the
  // suspension's id, which a process that wants the GPU asks with
  // (ResumeRequest; docs/SUSPEND.md). Written after the devices' controls.
  uint64_t suspension = 0;
  // The slice's own group (external jobs, whose processes run as a uid
  // nobody knows in advance): the region and the members file are then
  // root's, of this group, mode 0660, and the limits page names the group
  // so the shim accepts them (limits_layout.h). 0: none.
  uint32_t shared_gid = 0;
  // A part of a GPU asked for without a compute share: it takes turns at
  // the smallest share (compute_milli), work-conserving, and any slice with
  // a share takes the GPU from it on demand (slice::SliceView::shareless).
  bool no_share = false;
};

// One device of a slice: what the job's processes report, plus the limit
// the daemon set for it.
struct SliceUsage {
  std::string uuid;
  // The daemon's own limit for the device, from the limits page it wrote
  // (never from the job's region). kUnlimited (~0) when no page says: a
  // slice made by an older daemon, whose region holds its limits.
  uint64_t limit_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t refused_allocs = 0;  // Allocations the shim refused for the limit.
  uint64_t throttled_ns = 0;    // Time launches waited for their compute turn.
};

class RegionStore {
 public:
  virtual ~RegionStore() = default;
  // Creates the job's slice (its limits page and its region); returns the
  // region's path (for GPUSLICE_SLICE).
  // ResourceExhausted when the state disk has no room for it (ENOSPC): the
  // slice is then not made at all, and CheckRoom says when it may be.
  virtual core::Result<std::string> Create(const SliceLimits& limits) = 0;
  // Whether a slice would fit on the state disk now: Ok, or why not.
  virtual core::Status CheckRoom() { return core::Status::Ok(); }
  // Removes the slice whose region is `path`, limits page included.
  virtual core::Status Remove(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // Per device of the slice: what the job reports and the daemon's limit.
  virtual core::Result<std::vector<SliceUsage>> Usage(const std::string& path) = 0;
  // Pids of the processes that have the slice open (live process slots).
  virtual core::Result<std::vector<int32_t>> Pids(const std::string& path) = 0;
  // Live change of an existing slice: memory limit, compute share, mode,
  // priority and pause flag of every device in `limits.uuids`, written to
  // the limits page only. The devices themselves cannot change (a slice's
  // device list is fixed).
  virtual core::Status Update(const std::string& path, const SliceLimits& limits) = 0;
  // Moves the slice to other GPUs (a suspended job resumed elsewhere): each
  // (from, to) renames device `from` to `to`, keeping its index and its
  // controls, in the limits page (what the job's processes follow) and the
  // region. Called only while the slice's processes are checkpointed.
  // Unimplemented for a slice without a limits page (an older daemon's).
  virtual core::Status Move(const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& pairs,
                            const SliceLimits& after) = 0;
  // The slice's devices in its order, as its limits page names them now:
  // the GPUs its processes are on (or were on when they were checkpointed).
  virtual core::Result<std::vector<std::string>> Devices(const std::string& path) = 0;
  // The limits page of the slice whose region is `region_path` (for
  // GPUSLICE_LIMITS); empty for a slice that has none (one made by an older
  // daemon: its shim reads its limits from the region).
  virtual std::string LimitsPathOf(const std::string& region_path) const = 0;
  // Wall time (ns, cumulative since the slice was made) during which another
  // slice sharing one of its GPUs waited for its turn: the compute arbiter's
  // count; 0 without one. The compute watchdog holds a work-conserving slice
  // to its share only while others wanted the GPU.
  virtual uint64_t ContendedNs(const std::string& region_path) {
    (void)region_path;
    return 0;
  }
  // Wall time (ns, cumulative) during which the slice itself waited for its
  // turn while another slice held the GPU (the arbiter's count; 0 without
  // one): idle reclaim does not take a slice that waits for being idle.
  virtual uint64_t WaitedNs(const std::string& region_path) {
    (void)region_path;
    return 0;
  }
  // GPU time (ns, cumulative) the compute arbiter charged the slice, summed
  // over its GPUs; nullopt when no arbiter decides its turns (no arbiter, or
  // a slice without a share). The compute watchdog's audit compares it with
  // the use NVML measures.
  virtual std::optional<uint64_t> ChargedNs(const std::string& region_path) {
    (void)region_path;
    return std::nullopt;
  }
  // Resume on demand: the suspension id a process of the slice last asked
  // to be resumed with (RegionHeader::resume_request), 0 when none. The
  // job's own report, read as untrusted input: the caller honours it only
  // when it equals the slice's current suspension. 0 without a region of
  // ours (an older daemon's slice file). Every store implements it (a
  // wrapper that forgot would silently turn the feature off).
  virtual core::Result<uint64_t> ResumeRequest(const std::string& region_path) = 0;
  // The audit caught the slice using more than it was charged: the arbiter
  // disregards what its processes report and charges it the wall time of its
  // turns from now on. Nothing without an arbiter.
  virtual void DistrustReports(const std::string& region_path) { (void)region_path; }
};

// Slices under `dir` (the daemon's <state>/slices, created 0711: jobs of any
// user can reach their own slice, nobody can list them). One directory per
// slice, which the job cannot write (so it cannot rename or replace what is
// in it):
//   <dir>/job-<id>/          the daemon's, 0755
//   <dir>/job-<id>/limits    the daemon's decisions (slice::LimitsPage): the
//                            daemon's, 0644 (0444 when the daemon is not
//                            root: its jobs run as its own user, and the
//                            shim refuses a page its process could write)
//   <dir>/job-<id>/region    the job's reports (slice::Region): the job's
//                            user, 0600; the path Create returns
// Slices of an older daemon (one file, <dir>/job-<id>.slice, holding limits
// and reports) stay readable, updatable and removable, so a restarted
// daemon can re-adopt their jobs.
//
// Thread safety: every method may be called from any thread (the cache of
// open limits pages is guarded by a mutex).
class ShimRegionStore : public RegionStore {
 public:
  explicit ShimRegionStore(std::string dir);
  ~ShimRegionStore() override;
  core::Result<std::string> Create(const SliceLimits& limits) override;
  // Probes with a file of a slice's size, allocated, then removed.
  core::Status CheckRoom() override;
  core::Status Remove(const std::string& path) override;
  bool Exists(const std::string& path) override;
  core::Result<std::vector<SliceUsage>> Usage(const std::string& path) override;
  core::Result<std::vector<int32_t>> Pids(const std::string& path) override;
  core::Status Update(const std::string& path, const SliceLimits& limits) override;
  core::Status Move(const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& pairs,
                    const SliceLimits& after) override;
  core::Result<std::vector<std::string>> Devices(const std::string& path) override;
  std::string LimitsPathOf(const std::string& region_path) const override;
  // With pread, never through a mapping: the job owns the file and may
  // truncate it under a reader.
  core::Result<uint64_t> ResumeRequest(const std::string& region_path) override;

 private:
  // The slice directory `region_path` lives in, when it is one of ours
  // (<dir>/job-<id>/region); empty for an older daemon's slice file.
  std::string SliceDirOf(const std::string& region_path) const;
  // Runs `fn` on the daemon's writable mapping of a limits page, under mu_.
  // The mapping is opened once and kept until ForgetPage (a page a daemon
  // that is not root made 0444 is opened by lifting its write bit, which is
  // best done rarely).
  core::Status WithPage(const std::string& limits_path,
                        const std::function<core::Status(slice::LimitsPage&)>& fn);
  void ForgetPage(const std::string& limits_path);

  std::string dir_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<slice::LimitsPage>> pages_;  // Guarded by mu_.
};

// In memory. Paths: "/fake/slice-<id>" for the region, "/fake/limits-<id>"
// for its limits page.
class FakeRegionStore : public RegionStore {
 public:
  core::Result<std::string> Create(const SliceLimits& limits) override {
    if (!room.ok()) return room;
    std::string path = "/fake/slice-" + std::to_string(limits.job_id);
    regions[path] = limits;
    return path;
  }
  core::Status Remove(const std::string& path) override {
    if (regions.erase(path) == 0) return core::NotFoundError("no region " + path);
    return core::Status::Ok();
  }
  core::Status CheckRoom() override { return room; }
  bool Exists(const std::string& path) override { return regions.count(path) > 0; }
  core::Result<std::vector<SliceUsage>> Usage(const std::string& path) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    std::vector<SliceUsage> u;
    for (const std::string& id : it->second.uuids) {
      SliceUsage su;
      su.uuid = id;
      su.limit_bytes = it->second.memory_bytes_per_device;
      su.used_bytes = used.count(path) ? used[path] : 0;
      su.peak_bytes = su.used_bytes;
      u.push_back(su);
    }
    return u;
  }
  core::Result<std::vector<int32_t>> Pids(const std::string& path) override {
    if (!regions.count(path)) return core::NotFoundError("no region " + path);
    return pids.count(path) ? pids[path] : std::vector<int32_t>{};
  }
  core::Status Update(const std::string& path, const SliceLimits& limits) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    updates.emplace_back(path, limits);
    SliceLimits next = limits;
    next.uuids = it->second.uuids;
    it->second = next;
    return core::Status::Ok();
  }
  core::Status Move(const std::string& path,
                    const std::vector<std::pair<std::string, std::string>>& pairs,
                    const SliceLimits& after) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    if (!move_error.ok()) return move_error;
    for (const auto& [from, to] : pairs) {
      auto at = std::find(it->second.uuids.begin(), it->second.uuids.end(), from);
      if (at == it->second.uuids.end()) return core::NotFoundError("no device " + from);
      *at = to;
    }
    (void)after;
    moves.emplace_back(path, pairs);
    return core::Status::Ok();
  }
  core::Result<std::vector<std::string>> Devices(const std::string& path) override {
    auto it = regions.find(path);
    if (it == regions.end()) return core::NotFoundError("no region " + path);
    return it->second.uuids;
  }
  std::string LimitsPathOf(const std::string& region_path) const override {
    const std::string prefix = "/fake/slice-";
    if (region_path.rfind(prefix, 0) != 0) return "";
    return "/fake/limits-" + region_path.substr(prefix.size());
  }

  uint64_t ContendedNs(const std::string& region_path) override {
    auto it = contended.find(region_path);
    return it == contended.end() ? 0 : it->second;
  }
  uint64_t WaitedNs(const std::string& region_path) override {
    auto it = waited.find(region_path);
    return it == waited.end() ? 0 : it->second;
  }
  std::optional<uint64_t> ChargedNs(const std::string& region_path) override {
    auto it = charged.find(region_path);
    if (it == charged.end()) return std::nullopt;
    return it->second;
  }
  void DistrustReports(const std::string& region_path) override {
    distrusted.push_back(region_path);
  }
  core::Result<uint64_t> ResumeRequest(const std::string& region_path) override {
    if (!regions.count(region_path)) return core::NotFoundError("no region " + region_path);
    ++resume_reads;
    auto it = resume_requests.find(region_path);
    return it == resume_requests.end() ? uint64_t{0} : it->second;
  }

  std::map<std::string, SliceLimits> regions;
  // Set by tests: not Ok, a full state disk (Create and CheckRoom fail with it).
  core::Status room;
  // Set by tests: per region, the arbiter's contended time (ContendedNs).
  std::map<std::string, uint64_t> contended;
  std::map<std::string, uint64_t> waited;   // Likewise, WaitedNs.
  std::map<std::string, uint64_t> charged;  // Likewise, ChargedNs.
  std::vector<std::string> distrusted;      // Every DistrustReports, in order.
  // Set by tests: what a slice's processes wrote as their resume request;
  // and how often the daemon read one.
  std::map<std::string, uint64_t> resume_requests;
  uint64_t resume_reads = 0;
  // Every Update, as asked (devices and limits), in order.
  std::vector<std::pair<std::string, SliceLimits>> updates;
  // Every Move, in order; set move_error to make the next ones fail.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> moves;
  core::Status move_error;
  // Set by tests: per region, bytes used on each device and the live pids.
  std::map<std::string, uint64_t> used;
  std::map<std::string, std::vector<int32_t>> pids;
};

}  // namespace gpuslice::daemon
