#include "kubernetes/extender/kube/node_state.h"

#include <nlohmann/json.hpp>

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

// The version of GET /v1/node this build reads (daemon's kNodeStateVersion).
constexpr int kKnownVersion = 1;

template <typename T>
core::Status Field(const json& j, const char* key, T* out, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return core::InvalidArgumentError(where + ": no '" + key + "'");
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return core::InvalidArgumentError(where + ": '" + key + "' has the wrong type");
  }
  return core::Status::Ok();
}

}  // namespace

core::Result<NodeReport> ParseNodeReport(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return core::InvalidArgumentError("node state: not a JSON object");
  int version = 0;
  GPUSLICE_RETURN_IF_ERROR(Field(j, "version", &version, "node state"));
  if (version != kKnownVersion) {
    return core::InvalidArgumentError("node state: version " + std::to_string(version) +
                                      " (this extender reads version " +
                                      std::to_string(kKnownVersion) + ")");
  }
  NodeReport r;
  r.degraded = j.value("degraded", false);
  r.degraded_reason = j.value("degraded_reason", "");
  auto gpus = j.find("gpus");
  if (gpus == j.end() || !gpus->is_array()) {
    return core::InvalidArgumentError("node state: 'gpus' is not a list");
  }
  for (const json& g : *gpus) {
    GpuReport gr;
    const std::string where = "node state GPU " + std::to_string(r.gpus.size());
    if (!g.is_object()) return core::InvalidArgumentError(where + ": not an object");
    GPUSLICE_RETURN_IF_ERROR(Field(g, "uuid", &gr.uuid, where));
    GPUSLICE_RETURN_IF_ERROR(Field(g, "memory_total", &gr.memory_total, where));
    GPUSLICE_RETURN_IF_ERROR(Field(g, "memory_allocated", &gr.memory_allocated, where));
    GPUSLICE_RETURN_IF_ERROR(
        Field(g, "compute_allocated_milli", &gr.compute_allocated_milli, where));
    gr.index = g.value("index", static_cast<uint32_t>(r.gpus.size()));
    gr.model = g.value("model", "");
    gr.whole = g.value("whole", false);
    gr.healthy = g.value("healthy", true);
    gr.mig_enabled = g.value("mig_enabled", false);
    if (auto m = g.find("mig_free"); m != g.end() && m->is_object()) {
      for (const auto& [profile, n] : m->items()) {
        if (n.is_number_unsigned()) gr.mig_free[profile] = n.get<uint32_t>();
      }
    }
    r.gpus.push_back(std::move(gr));
  }
  return r;
}

}  // namespace gpuslice::kubernetes
