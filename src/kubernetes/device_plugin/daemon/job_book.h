#pragma once

// The device plugin's jobs: the external jobs it created in gpusliced, each
// with the device IDs the kubelet handed out for it. Kept in memory and, so
// that a restarted plugin loses nothing, in the jobs' labels in the daemon:
//
//   gpuslice.dev/device-plugin  the node name (whose plugin made the job)
//   gpuslice.dev/resource       the resource, e.g. gpuslice.dev/gpu-memory
//   gpuslice.dev/ids            the device IDs, compact: "<gpu uuid>:0-7,12"
//                               for fractions, "<uuid>,<uuid>" otherwise;
//                               longer than one label value (253 characters)
//                               it continues in gpuslice.dev/ids.1, .2, ...
//
// plus namespace, pod and container once the reconciler knows the holder.
// Thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "kubernetes/device_plugin/daemon/daemon_client.h"
#include "kubernetes/device_plugin/base/devices.h"

namespace gpuslice::kubernetes {

using Clock = std::chrono::steady_clock;

inline constexpr char kOwnerLabel[] = "gpuslice.dev/device-plugin";
inline constexpr char kResourceLabel[] = "gpuslice.dev/resource";
inline constexpr char kIdsLabel[] = "gpuslice.dev/ids";
inline constexpr size_t kMaxLabelValue = 253;

// The labels that record `ids` of `resource` (kIdsLabel and its
// continuations) and back. Decoding errors name the label.
Labels IdsLabels(const Resource& resource, const std::vector<std::string>& ids);
core::Result<std::vector<std::string>> IdsFromLabels(const Resource& resource,
                                                     const Labels& labels);

struct PluginJob {
  uint64_t id = 0;
  Resource resource;
  std::string gpu_uuid;  // Fractions: their GPU. Otherwise empty.
  std::vector<std::string> ids;
  Labels labels;  // As last set in the daemon.
  bool paused = false;
  uint32_t compute_milli = 0;
  Clock::time_point created;
  // Memory jobs: a share allocation was matched to it as its likely other
  // half (a pairing hint, in memory only; the reconciler decides).
  bool share_hinted = false;
};

// A plugin's job from the daemon's job object (recovery at start). Nullopt
// for jobs that are not this node's plugin's, or not running.
std::optional<PluginJob> PluginJobFrom(const JobInfo& job, const std::string& node,
                                       Clock::time_point now);

class JobBook {
 public:
  void Add(PluginJob job);
  void Remove(uint64_t id);
  std::vector<PluginJob> All() const;
  std::optional<PluginJob> Get(uint64_t id) const;
  // Jobs of `resource` holding any of `ids`.
  std::vector<uint64_t> Overlapping(const Resource& resource,
                                    const std::vector<std::string>& ids) const;
  void SetLabels(uint64_t id, const Labels& labels);
  void SetCompute(uint64_t id, uint32_t compute_milli);
  void SetResumed(uint64_t id);

  // Pairing hints for GetPreferredAllocation (preferred.h), one to one: a
  // gpu-share allocation on `gpu` pairs with the newest memory job there
  // that has no pod and no share yet, else waits for one (AddMemoryJob).
  void NoteShareAllocated(const std::string& gpu, Clock::time_point now, Clock::duration window);
  // Add() for a memory job, taking a waiting share hint on its GPU.
  void AddMemoryJob(PluginJob job, Clock::duration window);
  // GPUs to prefer, newest first, for the other half of a fraction
  // allocated within `window` before `now`: for gpu-memory the GPUs of such
  // share allocations, for gpu-share those of memory jobs without a pod yet.
  std::vector<std::string> PairingGpus(ResourceKind kind, Clock::time_point now,
                                       Clock::duration window) const;

 private:
  mutable std::mutex mu_;
  std::vector<PluginJob> jobs_;                                   // Guarded by mu_.
  std::deque<std::pair<std::string, Clock::time_point>> shares_;  // Guarded by mu_.
};

}  // namespace gpuslice::kubernetes
