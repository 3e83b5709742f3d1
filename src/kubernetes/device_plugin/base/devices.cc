#include "kubernetes/device_plugin/base/devices.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace gpuslice::kubernetes {

namespace {

constexpr std::string_view kMemInfix = "-mem-";
constexpr std::string_view kShareInfix = "-share-";
constexpr std::string_view kMigPrefix = "mig-";

std::string_view InfixOf(ResourceKind kind) {
  return kind == ResourceKind::kGpuMemory ? kMemInfix : kShareInfix;
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

// A MIG profile as a resource name may carry it: "1g.10gb", "1g.5gb+me".
bool IsProfileText(std::string_view p) {
  if (p.empty() || p.size() > 40) return false;
  for (char c : p) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string Resource::ShortName() const {
  switch (kind) {
    case ResourceKind::kGpu:
      return "gpu";
    case ResourceKind::kGpuMemory:
      return "gpu-memory";
    case ResourceKind::kGpuShare:
      return "gpu-share";
    case ResourceKind::kMig:
      return std::string(kMigPrefix) + mig_profile;
  }
  return "gpu";
}

std::string Resource::Name() const { return std::string(kResourceDomain) + ShortName(); }

core::Result<Resource> ParseResourceName(std::string_view name) {
  if (name.substr(0, kResourceDomain.size()) != kResourceDomain) {
    return core::InvalidArgumentError("resource '" + std::string(name) + "' is not gpuslice.dev/");
  }
  std::string_view s = name.substr(kResourceDomain.size());
  if (s == "gpu") return Resource{ResourceKind::kGpu, ""};
  if (s == "gpu-memory") return Resource{ResourceKind::kGpuMemory, ""};
  if (s == "gpu-share") return Resource{ResourceKind::kGpuShare, ""};
  if (s.substr(0, kMigPrefix.size()) == kMigPrefix && IsProfileText(s.substr(kMigPrefix.size()))) {
    return Resource{ResourceKind::kMig, std::string(s.substr(kMigPrefix.size()))};
  }
  return core::InvalidArgumentError("unknown resource '" + std::string(name) +
                                    "' (gpuslice.dev/gpu, gpu-memory, gpu-share or mig-PROFILE)");
}

const NodeGpu* Inventory::Find(std::string_view uuid) const {
  for (const NodeGpu& g : gpus) {
    if (g.uuid == uuid) return &g;
  }
  return nullptr;
}

const NodeGpu* Inventory::ParentOfMig(std::string_view mig_uuid) const {
  for (const NodeGpu& g : gpus) {
    for (const MigUnit& m : g.mig) {
      if (m.uuid == mig_uuid) return &g;
    }
  }
  return nullptr;
}

core::Result<Inventory> InventoryFromJson(const nlohmann::json& reply) {
  if (!reply.is_object() || !reply.contains("gpus") || !reply["gpus"].is_array()) {
    return core::InternalError("GET /v1/gpus: no 'gpus' list in the daemon's reply");
  }
  Inventory inv;
  for (const nlohmann::json& j : reply["gpus"]) {
    if (!j.is_object() || !j.contains("uuid") || !j["uuid"].is_string()) {
      return core::InternalError("GET /v1/gpus: a GPU without a uuid");
    }
    NodeGpu g;
    g.index = j.value("index", 0u);
    g.uuid = j["uuid"].get<std::string>();
    g.model = j.value("model", std::string());
    g.memory_total = j.value("memory_total", uint64_t{0});
    g.island = j.value("island", -1);
    g.mig_enabled = j.value("mig_enabled", false);
    g.healthy = j.value("healthy", true);
    g.health_reason = j.value("health_reason", std::string());
    if (j.contains("mig") && j["mig"].is_array()) {
      for (const nlohmann::json& m : j["mig"]) {
        if (!m.is_object() || !m.contains("uuid") || !m["uuid"].is_string()) continue;
        g.mig.push_back({m["uuid"].get<std::string>(), m.value("profile", std::string())});
      }
    }
    // What the daemon's slices and foreign processes leave.
    g.foreign_memory = j.value("foreign_memory", uint64_t{0});
    uint64_t mem_used = g.foreign_memory;
    uint32_t milli_used = 0;
    if (j.contains("slices") && j["slices"].is_array()) {
      for (const nlohmann::json& s : j["slices"]) {
        SliceShape shape{s.value("memory_limit", uint64_t{0}), s.value("compute_milli", 0u)};
        // A whole-GPU job is reported with all of the GPU's memory and no
        // share: whole, so that no share is placed beside it either.
        if (g.memory_total > 0 && shape.memory_limit >= g.memory_total) shape.compute_milli = 1000;
        g.slices.push_back(shape);
        if (shape.Whole()) {
          mem_used = g.memory_total;
          milli_used = 1000;
          continue;
        }
        mem_used += shape.memory_limit;
        milli_used += shape.compute_milli;
      }
    }
    g.memory_free = mem_used >= g.memory_total ? 0 : g.memory_total - mem_used;
    g.milli_free = milli_used >= 1000 ? 0 : 1000 - milli_used;
    inv.gpus.push_back(std::move(g));
  }
  return inv;
}

std::map<Resource, std::vector<Device>> AdvertisedDevices(const Inventory& inventory) {
  std::map<Resource, std::vector<Device>> out;
  for (const NodeGpu& g : inventory.gpus) {
    if (g.mig_enabled) {
      for (const MigUnit& m : g.mig) {
        if (m.profile.empty() || !IsProfileText(m.profile)) continue;
        out[Resource{ResourceKind::kMig, m.profile}].push_back({m.uuid, g.healthy});
      }
      continue;
    }
    out[Resource{ResourceKind::kGpu, ""}].push_back({g.uuid, g.healthy});
    auto& mem = out[Resource{ResourceKind::kGpuMemory, ""}];
    for (uint32_t k = 0; k < g.MemoryUnits(); ++k) {
      mem.push_back({FractionId(ResourceKind::kGpuMemory, g.uuid, k), g.healthy});
    }
    auto& share = out[Resource{ResourceKind::kGpuShare, ""}];
    for (uint32_t k = 0; k < kSharesPerGpu; ++k) {
      share.push_back({FractionId(ResourceKind::kGpuShare, g.uuid, k), g.healthy});
    }
  }
  // A GPU smaller than 1 GiB has no memory units: no empty resource.
  std::erase_if(out, [](const auto& kv) { return kv.second.empty(); });
  return out;
}

std::string FractionId(ResourceKind kind, std::string_view uuid, uint32_t k) {
  return std::string(uuid) + std::string(InfixOf(kind)) + std::to_string(k);
}

core::Result<ParsedId> ParseDeviceId(ResourceKind kind, std::string_view id) {
  if (id.empty()) return core::InvalidArgumentError("an empty device ID");
  switch (kind) {
    case ResourceKind::kGpu:
      if (id.substr(0, 4) != "GPU-") {
        return core::InvalidArgumentError("device ID '" + std::string(id) + "' is not a GPU UUID");
      }
      return ParsedId{std::string(id), -1};
    case ResourceKind::kMig:
      if (id.substr(0, 4) != "MIG-") {
        return core::InvalidArgumentError("device ID '" + std::string(id) +
                                          "' is not a MIG instance UUID");
      }
      return ParsedId{std::string(id), -1};
    case ResourceKind::kGpuMemory:
    case ResourceKind::kGpuShare: {
      std::string_view infix = InfixOf(kind);
      size_t at = id.rfind(infix);
      int64_t unit = -1;
      if (at == std::string_view::npos || at == 0 ||
          !ParseInt(id.substr(at + infix.size()), &unit)) {
        return core::InvalidArgumentError(
            "device ID '" + std::string(id) + "' is not a " +
            (kind == ResourceKind::kGpuMemory ? "gpu-memory" : "gpu-share") + " ID (<gpu uuid>" +
            std::string(infix) + "<n>)");
      }
      if (kind == ResourceKind::kGpuShare && unit >= kSharesPerGpu) {
        return core::InvalidArgumentError("device ID '" + std::string(id) +
                                          "': a GPU has shares 0-99");
      }
      return ParsedId{std::string(id.substr(0, at)), unit};
    }
  }
  return core::InternalError("unknown resource kind");
}

core::Result<std::vector<IdGroup>> GroupByGpu(ResourceKind kind,
                                              const std::vector<std::string>& ids) {
  std::vector<IdGroup> groups;
  std::set<std::string_view> seen;
  for (const std::string& id : ids) {
    if (!seen.insert(id).second) {
      return core::InvalidArgumentError("device ID '" + id + "' given twice");
    }
    GPUSLICE_ASSIGN_OR_RETURN(ParsedId p, ParseDeviceId(kind, id));
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const IdGroup& g) { return g.uuid == p.uuid; });
    if (it == groups.end()) {
      groups.push_back({p.uuid, {}});
      it = groups.end() - 1;
    }
    it->ids.push_back(id);
  }
  return groups;
}

core::Result<IdGroup> OnOneGpu(const Resource& resource, const std::vector<std::string>& ids) {
  if (ids.empty()) return core::InvalidArgumentError(resource.Name() + ": no device IDs");
  GPUSLICE_ASSIGN_OR_RETURN(std::vector<IdGroup> groups, GroupByGpu(resource.kind, ids));
  if (groups.size() == 1) return groups[0];
  std::string where;
  for (const IdGroup& g : groups) {
    where += (where.empty() ? "" : ", ") + g.uuid + ": " + std::to_string(g.ids.size());
  }
  return core::InvalidArgumentError(resource.Name() + ": the " + std::to_string(ids.size()) +
                                    " device IDs lie on " + std::to_string(groups.size()) +
                                    " GPUs (" + where +
                                    "); a fraction must be on one GPU (is "
                                    "GetPreferredAllocation off, or the extender not in use?)");
}

std::string EncodeUnits(std::vector<int64_t> units) {
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  std::string out;
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j + 1 < units.size() && units[j + 1] == units[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(units[i]);
    if (j > i) out += '-' + std::to_string(units[j]);
    i = j + 1;
  }
  return out;
}

core::Result<std::vector<int64_t>> DecodeUnits(std::string_view text) {
  std::vector<int64_t> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    size_t dash = part.find('-');
    int64_t lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos
                  ? ParseInt(part, &lo) && ParseInt(part, &hi)
                  : ParseInt(part.substr(0, dash), &lo) && ParseInt(part.substr(dash + 1), &hi);
    // 1024 units: a 1 TiB GPU; anything longer is not ours.
    if (!ok || hi < lo || hi - lo > 1024 || out.size() > 4096) {
      return core::InvalidArgumentError("unit list: bad part '" + std::string(part) + "'");
    }
    for (int64_t u = lo; u <= hi; ++u) out.push_back(u);
  }
  return out;
}

}  // namespace gpuslice::kubernetes
