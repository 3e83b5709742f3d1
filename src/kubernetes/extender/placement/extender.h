#pragma once

// The scheduler extender's decisions: filter (where a pod's gpuslice asks
// fit now), prioritize (where they fragment the cluster least) and bind
// (hold the chosen GPUs, tell the pod and the API server). It reads only the
// latest Snapshot (node_state.h) published by the poller and the
// allocations it assumed at bind; no I/O on the filter and prioritize path.
//
// Placement is the core's (src/core/placement/placement_policy.h): the nodes' reports
// become one core::ClusterState (GPUs in MIG mode are counted apart, as
// free instances per profile, like the daemon does), rebuilt when a new
// snapshot arrives or an assumption changes, and every candidate node is
// scored in one pass with core::ScoreNodes under the frag-aware policy and
// a workload profile learnt from the pods the extender has seen (as the
// daemon learns its own; until a GPU ask is known it packs).
//
// Thread-safe: one mutex around the decisions (kube-scheduler asks about
// one pod at a time); bind's network calls run outside it.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/placement/placement_model.h"
#include "core/placement/placement_policy.h"
#include "core/placement/placement_profile.h"
#include "core/status.h"
#include "kubernetes/extender/placement/extender_json.h"
#include "kubernetes/extender/kube/kube_api.h"
#include "kubernetes/extender/kube/node_state.h"
#include "kubernetes/extender/placement/pod_request.h"

namespace gpuslice::kubernetes {

inline constexpr const char* kAnnotationAssignedNode = "gpuslice.dev/assigned-node";
inline constexpr const char* kAnnotationAssignedGpus = "gpuslice.dev/assigned-gpus";

struct ExtenderOptions {
  // A node whose last good report is older than this fails filter.
  int64_t stale_after_ms = 5000;
  // An allocation assumed at bind is dropped after this, or as soon as a
  // newer report of its node shows it.
  int64_t assume_ttl_ms = 30000;
  core::Policy policy = core::kDefaultPolicy;
};

// One part of a bound pod the extender holds on a GPU until the node's
// report shows it.
struct Assumed {
  std::string pod;  // "ns/name"
  std::string node;
  std::string gpu_uuid;
  int64_t at_ms = 0;
  // What is held: a fraction or a whole GPU (demand), or MIG instances.
  core::Demand demand;
  std::string mig_profile;
  uint32_t mig_count = 0;
  // The GPU as its report showed it at bind, to tell when a report shows
  // the pod's share arrived.
  uint64_t base_memory = 0;
  uint32_t base_milli = 0;
  uint32_t base_mig_free = 0;
  // The node's whole-GPU count and allocated totals a report must reach
  // to show this part (and the same bind's parts before it) on any of the
  // node's GPUs: the device plugin may give the pod another GPU than the
  // one the extender chose, which the GPU's own line would never show.
  uint32_t node_whole_needed = 0;
  uint64_t node_memory_needed = 0;
  uint64_t node_milli_needed = 0;
};

class Extender {
 public:
  using NowFn = std::function<int64_t()>;  // Milliseconds, monotonic enough.
  // `api` may be null (no annotation, no Binding: tests of the decisions).
  Extender(ExtenderOptions options, NowFn now, KubeApi* api);

  // The poller's latest snapshot; replaces the previous one.
  void Publish(SnapshotPtr snapshot);
  SnapshotPtr snapshot() const;

  FilterAnswer Filter(const PodRequest& pod, const std::vector<std::string>& nodes);
  // Scores 0..kMaxExtenderPriority per node, in `nodes` order: the node the
  // policy prefers most gets the maximum; nodes where the pod does not fit,
  // and every node for a pod without gpuslice asks, get 0.
  std::vector<int64_t> Prioritize(const PodRequest& pod, const std::vector<std::string>& nodes);
  // Places the pod (remembered from filter, or read from the API server) on
  // `args.node`, holds its GPUs, annotates the pod with them and POSTs the
  // Binding. Errors name what failed; nothing stays held after an error.
  core::Status Bind(const BindingArgs& args);

  // What is held now (for tests and the log).
  std::vector<Assumed> AssumedNow();
  // The GPUs chosen per container at the last successful Bind of `pod`
  // ("ns/name"): the value of the gpuslice.dev/assigned-gpus annotation.
  static std::string AssignedGpusJson(const std::map<std::string, std::vector<std::string>>& m);

 private:
  struct NodeView {
    std::string name;
    std::vector<std::string> gpu_uuids;  // Per core GPU index.
    // What the report shows held on each GPU (same index): a hold counts
    // only the part of its pod the report does not show yet.
    std::vector<uint64_t> reported_memory;
    std::vector<uint32_t> reported_milli;
    std::map<std::string, uint32_t> mig_free;    // After assumptions.
    std::map<std::string, std::string> mig_gpu;  // Profile -> a GPU with one free.
    int64_t received_ms = 0;                     // Of its report: staleness without the snapshot.
    bool degraded = false;
  };
  struct View {
    core::ClusterState state;
    std::vector<NodeView> nodes;
    std::unordered_map<std::string, uint32_t> index;
    core::FragmentationCache cache;
    uint64_t generation = 0;
    uint64_t assumed_version = 0;
  };
  // Per view node, what the pod would get there.
  struct Evaluation {
    std::vector<uint8_t> fits;
    std::vector<uint8_t> never;  // Could never fit this node, even empty.
    std::vector<double> score;
    std::vector<std::string> reason;
  };
  // One container's place on one node.
  struct ContainerPlace {
    const ContainerAsk* ask = nullptr;
    core::Placement placement;  // Fractions and whole GPUs.
    std::string mig_gpu;        // MIG.
  };

  // The view for the current snapshot and assumptions (mu_ held).
  View& CurrentView();
  // The core model of `snap` with `assumed` held on top (no lock needed).
  static std::unique_ptr<View> BuildView(const Snapshot& snap, const std::vector<Assumed>& assumed,
                                         uint64_t assumed_version);
  static void ApplyAssumed(View& view, const Assumed& a);
  void ExpireAssumed(const Snapshot& snap);
  void LearnDemands(const PodRequest& pod);
  const core::WorkloadProfile* Profile();
  core::PlaceOptions PlaceOptionsNow(core::FragmentationCache* cache);
  // The pod on every node of the view, one pass per container ask.
  Evaluation Evaluate(View& view, const PodRequest& pod);
  // Evaluate's answer, shared by pods that ask the same (replicas of one
  // workload, and filter then prioritize of one pod) while the view and
  // the profile stay the same.
  const Evaluation& CachedEvaluation(View& view, const PodRequest& pod);
  // The pod's containers on view node `index`, or why not (mu_ held).
  core::Result<std::vector<ContainerPlace>> PlaceOn(View& view, const PodRequest& pod,
                                                    uint32_t index);
  // Why node `name` cannot be used at all now (unknown, stale, degraded), or "".
  std::string Unusable(const Snapshot& snap, const std::string& name, int64_t now) const;
  void RememberPod(const PodRequest& pod);

  const ExtenderOptions options_;
  const NowFn now_;
  KubeApi* const api_;

  mutable std::mutex mu_;
  SnapshotPtr snapshot_;
  std::unique_ptr<View> view_;
  std::vector<Assumed> assumed_;
  uint64_t assumed_version_ = 1;
  // The learnt workload: recent pods' GPU asks (as the daemon learns its).
  std::deque<core::Demand> recent_;
  std::deque<std::string> recent_pods_;
  size_t profile_changes_ = 0;
  std::shared_ptr<const core::WorkloadProfile> profile_;
  // Pods seen at filter, for bind (which names the pod only).
  std::unordered_map<std::string, PodRequest> pods_;
  std::deque<std::string> pod_order_;
  // Evaluations by what the pod asks (CachedEvaluation), valid for one
  // view and profile.
  std::map<std::string, Evaluation> evals_;
  uint64_t evals_generation_ = 0, evals_assumed_ = 0;
  const core::WorkloadProfile* evals_profile_ = nullptr;
};

}  // namespace gpuslice::kubernetes
