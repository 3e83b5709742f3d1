#pragma once

// The reconciler's decisions (pure): from what the kubelet says each
// container holds (the PodResources API) and the plugin's jobs, the actions
// that bring the daemon in line. The caller (reconciler.h) carries them out
// in order and, when an action for a job fails, skips that job's later ones.
//
//   - a job whose IDs a container holds gets its labels namespace, pod and
//     container (dcgm-exporter's names, for metrics and `gpuslice ps`);
//   - a gpu-memory job: when its container also holds gpu-share IDs on the
//     same GPU, its compute share becomes that percentage; then it is
//     resumed. Without a share it is resumed after `settle` (its container's
//     other Allocate calls come within milliseconds, so one that has no share
//     by then has none), with no compute share of its own;
//   - gpu-share on another GPU than the container's memory, or gpu-share
//     without gpu-memory, is reported (the extender refuses such pods, so
//     this is a pod that went around it);
//   - a job whose IDs no container holds is released, but only once it is
//     `release_grace` old: the kubelet lists a container only after its
//     admission is recorded, which is after Allocate.

#include <chrono>
#include <compare>
#include <map>
#include <string>
#include <vector>

#include "kubernetes/device_plugin/daemon/job_book.h"

namespace gpuslice::kubernetes {

struct ContainerKey {
  std::string ns;
  std::string pod;
  std::string container;
  std::string ToString() const { return ns + "/" + pod + "/" + container; }
  friend auto operator<=>(const ContainerKey&, const ContainerKey&) = default;
  friend bool operator==(const ContainerKey&, const ContainerKey&) = default;
};

// One container and the gpuslice.dev device IDs it holds, by resource name.
struct ContainerHolding {
  ContainerKey key;
  std::map<std::string, std::vector<std::string>> ids;
};

struct ReconcileOptions {
  Clock::duration release_grace = std::chrono::seconds(30);
  Clock::duration settle = std::chrono::seconds(1);
};

struct Action {
  enum class Kind { kSetLabels, kResizeCompute, kResume, kRelease, kReport };
  Kind kind = Kind::kReport;
  uint64_t job = 0;            // 0 for a report about a container without a job.
  Labels labels;               // kSetLabels: the job's full label set.
  uint32_t compute_milli = 0;  // kResizeCompute.
  std::string message;         // Why (logged); for kReport the problem.
  friend bool operator==(const Action&, const Action&) = default;
};

std::vector<Action> Reconcile(const std::vector<ContainerHolding>& containers,
                              const std::vector<PluginJob>& jobs, Clock::time_point now,
                              const ReconcileOptions& options);

}  // namespace gpuslice::kubernetes
