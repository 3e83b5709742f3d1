#pragma once

// Placement policies and the one function that applies them:
//
//   Place(state, demand, options) -> Result<Placement>
//
// Pure: it reads the state and returns where the demand should go (node and
// GPUs); the caller applies it with ClusterState::Allocate. The node daemon
// and the cluster replay call exactly this code. docs/PLACEMENT.md describes
// each policy, what it optimises and its cost per decision.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/placement/placement_model.h"
#include "core/placement/placement_profile.h"
#include "core/placement/placement_random.h"
#include "core/status.h"

namespace gpuslice::core {

enum class Policy : uint8_t {
  // Baselines of the FGD paper (Weng et al., ATC'23), scored as its
  // Kubernetes simulator scores them: integer node scores 0..100. Like every
  // policy here, ties go to the first node in cluster order.
  kRandomFit,      // Any feasible node, any feasible GPU.
  kBestFit,        // Least CPU+GPU left over.
  kDotProduct,     // Smallest dot product of free resources and the request.
  kGpuPacking,     // Shared GPUs first, then used nodes, then idle nodes.
  kGpuClustering,  // Keep tasks of one kind (shared, 1-GPU, 8-GPU...) together.
  kFgd,            // Fragmentation gradient descent (needs a profile).
  // Ours: fragmentation-aware (needs a profile); exact and deterministic.
  kFragAware,
  // The daemon's simple policies; deterministic.
  kBinpack,  // Fill the fullest node and GPU that fit.
  kSpread,   // Use the emptiest node and GPU.
};

// Ours is the default everywhere: the replay tool and the daemon.
inline constexpr Policy kDefaultPolicy = Policy::kFragAware;

struct PolicyInfo {
  Policy policy;
  std::string_view name;  // The CLI spelling: "random-fit", "fgd", ...
  bool needs_profile;     // Requires PlaceOptions::profile.
  bool needs_rng;         // Requires PlaceOptions::rng.
  std::string_view summary;
};
std::span<const PolicyInfo> AllPolicies();
const PolicyInfo& InfoOf(Policy policy);
std::string_view PolicyName(Policy policy);
// Accepts the names of AllPolicies(); the error lists them.
Result<Policy> ParsePolicy(std::string_view name);

struct PlaceOptions {
  Policy policy = kDefaultPolicy;
  // The expected workload; required by kFgd and kFragAware, ignored by others.
  const WorkloadProfile* profile = nullptr;
  // Random source; required by kRandomFit only.
  PlacementRng* rng = nullptr;
  // Optional, for kFgd and kFragAware: remembers each node's fragmentation
  // between decisions on the same state and profile (see
  // FragmentationCache), about halving their cost. Same placements with or
  // without it.
  FragmentationCache* frag_cache = nullptr;
  // Parts of a GPU go where the most is used already (binpack), whatever the
  // policy: the queue sets it while jobs of whole GPUs wait, so that
  // fractions keep together and leave GPUs idle for them.
  bool pack_fractions = false;
};

// Chooses a node and GPUs for `demand`. Errors:
//   kInvalidArgument     the demand is malformed, or the policy lacks its
//                        profile or rng;
//   kResourceExhausted   it does not fit now (it could fit an emptier state);
//   kOutOfRange          it could never fit this cluster, even empty (e.g. 9
//                        GPUs on 8-GPU nodes, or a model no node has).
// Allocation-free; cost O(nodes x GPUs per node), times the profile size for
// the fragmentation-aware policies (see docs/PLACEMENT.md).
Result<Placement> Place(const ClusterState& state, const Demand& demand,
                        const PlaceOptions& options);

// One node's best option for a demand, as Place weighs it.
struct NodeOption {
  bool fits = false;    // The demand fits this node now.
  double score = 0;     // Higher is better; compares nodes of one call only.
  Placement placement;  // Node and GPUs, when it fits.
};

// Every node's best option for `demand` in one pass: out[i] for node i
// (out.size() must equal state.size()). Place picks the first node with the
// highest score among those that fit, so this is Place's view of each node,
// for callers that rank nodes themselves (the Kubernetes scheduler
// extender's prioritize verb). Errors: kInvalidArgument as Place; a demand
// that fits nowhere is not an error (every fits is false). random-fit scores
// every node 0. Same cost as Place; allocation-free.
Status ScoreNodes(const ClusterState& state, const Demand& demand, const PlaceOptions& options,
                  std::span<NodeOption> out);

// Ok if some node of `state`, were it empty, could hold `demand`; otherwise
// kOutOfRange naming the resource that is never enough.
Status CouldEverFit(const ClusterState& state, const Demand& demand);

}  // namespace gpuslice::core
