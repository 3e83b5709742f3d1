#pragma once

// What the device plugin advertises to the kubelet, derived from the node's
// GPUs as gpusliced reports them (GET /v1/gpus): the resources, their device
// IDs and health, and the way back from a set of IDs to the GPU they name.
// Pure: no I/O, no threads.
//
// Resources and IDs (docs/KUBERNETES-device-plugin.md):
//   gpuslice.dev/gpu            one ID per GPU not in MIG mode: its UUID
//   gpuslice.dev/gpu-memory     one ID per whole GiB of such a GPU: <uuid>-mem-<k>
//   gpuslice.dev/gpu-share      100 IDs per such GPU (percent): <uuid>-share-<k>
//   gpuslice.dev/mig-<profile>  one ID per MIG instance: its MIG UUID
// The kubelet counts IDs, so "gpu-memory: 8" is 8 GiB and "gpu-share: 30" is
// 30% of one GPU; which IDs it picks only says on which GPU.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::kubernetes {

inline constexpr std::string_view kResourceDomain = "gpuslice.dev/";
inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr int kSharesPerGpu = 100;

enum class ResourceKind { kGpu, kGpuMemory, kGpuShare, kMig };

// One resource the plugin may serve. `mig_profile` is set for kMig only.
struct Resource {
  ResourceKind kind = ResourceKind::kGpu;
  std::string mig_profile;

  // "gpuslice.dev/gpu-memory", "gpuslice.dev/mig-1g.10gb".
  std::string Name() const;
  // The name without the domain ("gpu-memory"): socket and job names.
  std::string ShortName() const;
  bool IsFraction() const {
    return kind == ResourceKind::kGpuMemory || kind == ResourceKind::kGpuShare;
  }
  friend bool operator==(const Resource&, const Resource&) = default;
  friend auto operator<=>(const Resource&, const Resource&) = default;
};

// Accepts what Resource::Name() writes; errors name the input.
core::Result<Resource> ParseResourceName(std::string_view name);

// A MIG instance as the daemon lists it.
struct MigUnit {
  std::string uuid;
  std::string profile;
};

// A slice on a GPU as the daemon lists it; memory_limit 0 or compute_milli
// 1000 is a whole GPU.
struct SliceShape {
  uint64_t memory_limit = 0;
  uint32_t compute_milli = 0;
  bool Whole() const { return memory_limit == 0 || compute_milli >= 1000; }
};

// One GPU of the node as the daemon reports it. Free amounts are what the
// daemon's slices (and processes outside gpuslice) leave, for placement.
struct NodeGpu {
  uint32_t index = 0;
  std::string uuid;
  std::string model;
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
  uint32_t milli_free = 1000;  // Compute left, per mille of the GPU.
  int island = -1;
  bool mig_enabled = false;
  bool healthy = true;
  std::string health_reason;
  std::vector<MigUnit> mig;
  std::vector<SliceShape> slices;
  uint64_t foreign_memory = 0;  // Held by processes outside gpuslice.

  // Whole GiB of memory: the number of gpu-memory IDs.
  uint32_t MemoryUnits() const { return static_cast<uint32_t>(memory_total / kGiB); }
};

struct Inventory {
  std::vector<NodeGpu> gpus;

  const NodeGpu* Find(std::string_view uuid) const;
  // The GPU holding MIG instance `mig_uuid`, or null.
  const NodeGpu* ParentOfMig(std::string_view mig_uuid) const;
};

// Reads the reply of GET /v1/gpus. Errors when the shape is not the daemon's
// (a missing uuid, a non-array). A GPU without `healthy` (a daemon from before
// health reporting) counts as healthy.
core::Result<Inventory> InventoryFromJson(const nlohmann::json& reply);

struct Device {
  std::string id;
  bool healthy = true;
  friend bool operator==(const Device&, const Device&) = default;
};

// Every resource this node has (none without a matching GPU or MIG
// instance), in a stable order, with its devices in a stable order.
std::map<Resource, std::vector<Device>> AdvertisedDevices(const Inventory& inventory);

// The ID of unit `k` of a fraction resource on GPU `uuid`.
std::string FractionId(ResourceKind kind, std::string_view uuid, uint32_t k);

// What one device ID names: the GPU (or MIG instance) and, for fractions,
// the unit number.
struct ParsedId {
  std::string uuid;   // GPU UUID; for kMig the MIG instance's UUID.
  int64_t unit = -1;  // Fractions: k of <uuid>-mem-<k>; -1 otherwise.
};
core::Result<ParsedId> ParseDeviceId(ResourceKind kind, std::string_view id);

// The IDs of one request that lie on one GPU (or are one MIG instance).
struct IdGroup {
  std::string uuid;
  std::vector<std::string> ids;  // In the order given.
};

// Groups `ids` by the GPU they name, GPUs in order of first appearance.
// Errors on an ID that is not one of `kind`'s or a duplicate.
core::Result<std::vector<IdGroup>> GroupByGpu(ResourceKind kind,
                                              const std::vector<std::string>& ids);

// For fractions: the one GPU all `ids` lie on, else an error naming the GPUs
// and how many IDs each holds (a fraction cannot span GPUs).
core::Result<IdGroup> OnOneGpu(const Resource& resource, const std::vector<std::string>& ids);

// The unit numbers of `ids` (all of one fraction resource) as compact ranges,
// "0-7,12", and back. Used to keep a job's IDs in its labels.
std::string EncodeUnits(std::vector<int64_t> units);
core::Result<std::vector<int64_t>> DecodeUnits(std::string_view text);

}  // namespace gpuslice::kubernetes
