#pragma once

// What a pod asks of gpuslice, read from the Pod object kube-scheduler sends
// (or the API server returns): per container, the extended resources
//   gpuslice.dev/gpu-memory   GiB of one GPU's memory (integer)
//   gpuslice.dev/gpu-share    percent of one GPU's compute (1-100)
//   gpuslice.dev/gpu          whole GPUs
//   gpuslice.dev/mig-<prof>   MIG instances of profile <prof> ("mig-1g.10gb")
// and the annotation gpuslice.dev/priority: high | normal | low.
//
// Rules (docs/KUBERNETES-extender.md):
// - A resource is read from resources.limits, else from resources.requests
//   (Kubernetes copies limits into requests for extended resources and
//   refuses pods where they differ, so limits are the truth when present).
// - A container with gpu-memory is a fraction of ONE GPU: memory plus share
//   on the same GPU; without gpu-share its compute is uncapped and it is
//   placed with the smallest share (1 per-mille), as the daemon does; a
//   share of 100 is a whole GPU. gpu-share without gpu-memory is refused:
//   the shim cannot bound a slice with no memory limit.
// - gpu (whole GPUs) and MIG resources cannot be mixed with a fraction in one
//   container.
// - Init containers run one at a time before the app containers and release
//   what they held, so they are not summed with the app containers: each
//   must fit the node on its own (checked at filter), and only the app
//   containers are placed and held.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/placement/placement_model.h"
#include "core/status.h"

namespace gpuslice::kubernetes {

inline constexpr const char* kResourcePrefix = "gpuslice.dev/";
inline constexpr const char* kResourceGpuMemory = "gpuslice.dev/gpu-memory";
inline constexpr const char* kResourceGpuShare = "gpuslice.dev/gpu-share";
inline constexpr const char* kResourceGpu = "gpuslice.dev/gpu";
inline constexpr const char* kResourceMigPrefix = "gpuslice.dev/mig-";
inline constexpr const char* kAnnotationPriority = "gpuslice.dev/priority";

// One container's ask. Exactly one of: a fraction (gpu_mem_bytes > 0), whole
// GPUs (whole_gpus > 0), MIG instances (mig_count > 0), or nothing.
struct ContainerAsk {
  std::string name;
  uint64_t gpu_mem_bytes = 0;
  uint32_t share_milli = 0;  // 0: no share asked (uncapped).
  uint32_t whole_gpus = 0;
  std::string mig_profile;  // "1g.10gb"
  uint32_t mig_count = 0;

  bool empty() const { return gpu_mem_bytes == 0 && whole_gpus == 0 && mig_count == 0; }
  // The placement core's demand for a fraction or whole GPUs (not MIG).
  core::Demand ToDemand() const;
};

struct PodRequest {
  std::string name;
  std::string ns;
  std::string uid;
  std::string priority = "normal";
  std::vector<ContainerAsk> containers;       // App containers with an ask.
  std::vector<ContainerAsk> init_containers;  // Init containers with an ask.
  // Set when the pod asks for gpuslice resources in a way gpuslice cannot
  // honour; filter then fails every node with it.
  std::string invalid;

  // Any gpuslice.dev/ resource at all (valid or not).
  bool uses_gpuslice = false;
};

// Reads a Pod object. Errors only when `pod` is not a Pod-shaped object;
// a pod whose asks are wrong comes back with `invalid` set.
core::Result<PodRequest> ParsePod(const nlohmann::json& pod);

// A Kubernetes quantity of an extended resource as an integer: "8", "2k",
// "1Ki", or a JSON integer. Fractions ("500m", "1.5") are refused.
core::Result<uint64_t> ParseIntegerQuantity(const nlohmann::json& q);

}  // namespace gpuslice::kubernetes
