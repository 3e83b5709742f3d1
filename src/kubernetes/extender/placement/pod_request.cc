#include "kubernetes/extender/placement/pod_request.h"

#include <cctype>
#include <limits>
#include <map>

#include "core/units.h"

namespace gpuslice::kubernetes {

using nlohmann::json;

namespace {

// Kubernetes quantity suffixes that keep a value an integer.
struct Suffix {
  const char* text;
  uint64_t factor;
};
constexpr Suffix kSuffixes[] = {
    {"Ki", 1ull << 10},      {"Mi", 1ull << 20},         {"Gi", 1ull << 30},
    {"Ti", 1ull << 40},      {"Pi", 1ull << 50},         {"Ei", 1ull << 60},
    {"k", 1000ull},          {"M", 1000000ull},          {"G", 1000000000ull},
    {"T", 1000000000000ull}, {"P", 1000000000000000ull}, {"E", 1000000000000000000ull}};

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The raw gpuslice.dev/ quantities of one container: limits first, then
// requests for what limits do not name.
core::Result<std::map<std::string, uint64_t>> Resources(const json& c, const std::string& where) {
  std::map<std::string, uint64_t> out;
  auto res = c.find("resources");
  if (res == c.end() || !res->is_object()) return out;
  for (const char* section : {"limits", "requests"}) {
    auto s = res->find(section);
    if (s == res->end() || !s->is_object()) continue;
    for (const auto& [key, value] : s->items()) {
      if (key.rfind(kResourcePrefix, 0) != 0 || out.count(key)) continue;
      auto q = ParseIntegerQuantity(value);
      if (!q.ok()) {
        return core::InvalidArgumentError(where + ": " + key + ": " + q.status().message());
      }
      out[key] = *q;
    }
  }
  return out;
}

// The ask of one container, or why it cannot be honoured.
core::Result<ContainerAsk> AskOf(const std::map<std::string, uint64_t>& r, const std::string& name,
                                 const std::string& where) {
  ContainerAsk a;
  a.name = name;
  bool has_mem = false, has_share = false;
  for (const auto& [key, value] : r) {
    if (key == kResourceGpuMemory) {
      has_mem = true;
      if (value == 0 || value > (1ull << 20)) {
        return core::InvalidArgumentError(where + ": " + key + " " + std::to_string(value) +
                                          " is not a GPU memory size in GiB");
      }
      a.gpu_mem_bytes = value * core::kGiB;
    } else if (key == kResourceGpuShare) {
      has_share = true;
      if (value == 0 || value > 100) {
        return core::InvalidArgumentError(where + ": " + key + " " + std::to_string(value) +
                                          " is not a percentage of one GPU (1-100)");
      }
      a.share_milli = static_cast<uint32_t>(value * 10);
    } else if (key == kResourceGpu) {
      if (value == 0) continue;
      if (value > core::kMaxGpusPerNode) {
        return core::InvalidArgumentError(where + ": " + key + " " + std::to_string(value) +
                                          " exceeds " + std::to_string(core::kMaxGpusPerNode) +
                                          " GPUs per node");
      }
      a.whole_gpus = static_cast<uint32_t>(value);
    } else if (key.rfind(kResourceMigPrefix, 0) == 0) {
      if (value == 0) continue;
      if (a.mig_count > 0) {
        return core::InvalidArgumentError(where + ": more than one MIG profile in one container");
      }
      a.mig_profile = key.substr(std::string(kResourceMigPrefix).size());
      if (a.mig_profile.empty() || value > 64) {
        return core::InvalidArgumentError(where + ": bad MIG resource " + key);
      }
      a.mig_count = static_cast<uint32_t>(value);
    } else {
      return core::InvalidArgumentError(
          where + ": unknown resource " + key +
          " (gpuslice.dev/gpu-memory, gpu-share, gpu, mig-<profile>)");
    }
  }
  if (has_share && !has_mem) {
    return core::InvalidArgumentError(
        where +
        ": gpuslice.dev/gpu-share needs gpuslice.dev/gpu-memory too (a slice's memory "
        "must be bounded; ask e.g. gpuslice.dev/gpu-memory: 8 for 8 GiB)");
  }
  int kinds = (has_mem ? 1 : 0) + (a.whole_gpus > 0 ? 1 : 0) + (a.mig_count > 0 ? 1 : 0);
  if (kinds > 1) {
    return core::InvalidArgumentError(where +
                                      ": a container asks for one of a fraction "
                                      "(gpu-memory/gpu-share), whole GPUs (gpu) or MIG instances");
  }
  // A whole share cannot be shared: the GPU is the container's.
  if (has_mem && a.share_milli >= core::kMilliPerGpu) {
    a.gpu_mem_bytes = 0;
    a.share_milli = 0;
    a.whole_gpus = 1;
  }
  return a;
}

core::Status ReadContainers(const json& spec, const char* field, PodRequest* pod,
                            std::vector<ContainerAsk>* out) {
  auto cs = spec.find(field);
  if (cs == spec.end() || cs->is_null()) return core::Status::Ok();
  if (!cs->is_array())
    return core::InvalidArgumentError(std::string("spec.") + field + ": not a list");
  for (const json& c : *cs) {
    if (!c.is_object()) continue;
    const std::string name = Str(c, "name");
    const std::string where = std::string(field == std::string("initContainers") ? "init " : "") +
                              "container '" + name + "'";
    auto r = Resources(c, where);
    if (!r.ok()) {
      pod->uses_gpuslice = true;
      if (pod->invalid.empty()) pod->invalid = r.status().message();
      continue;
    }
    if (r->empty()) continue;
    pod->uses_gpuslice = true;
    auto a = AskOf(*r, name, where);
    if (!a.ok()) {
      if (pod->invalid.empty()) pod->invalid = a.status().message();
      continue;
    }
    if (!a->empty()) out->push_back(std::move(*a));
  }
  return core::Status::Ok();
}

}  // namespace

core::Demand ContainerAsk::ToDemand() const {
  if (whole_gpus > 0) return core::Demand::WholeGpus(whole_gpus);
  return core::Demand::Fraction(share_milli == 0 ? 1 : share_milli, gpu_mem_bytes);
}

core::Result<uint64_t> ParseIntegerQuantity(const json& q) {
  if (q.is_number_unsigned()) return q.get<uint64_t>();
  if (q.is_number_integer()) {
    if (q.get<int64_t>() < 0) return core::InvalidArgumentError("negative quantity");
    return static_cast<uint64_t>(q.get<int64_t>());
  }
  if (!q.is_string()) return core::InvalidArgumentError("quantity is not a string or integer");
  const std::string s = q.get<std::string>();
  size_t i = 0;
  if (i < s.size() && s[i] == '+') ++i;
  const size_t digits_from = i;
  uint64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
      return core::InvalidArgumentError("quantity '" + s + "' is too large");
    }
    v = v * 10 + uint64_t(s[i] - '0');
    ++i;
  }
  if (i == digits_from) return core::InvalidArgumentError("quantity '" + s + "' is not a number");
  const std::string suffix = s.substr(i);
  if (suffix.empty()) return v;
  for (const Suffix& x : kSuffixes) {
    if (suffix == x.text) {
      if (v != 0 && v > std::numeric_limits<uint64_t>::max() / x.factor) {
        return core::InvalidArgumentError("quantity '" + s + "' is too large");
      }
      return v * x.factor;
    }
  }
  return core::InvalidArgumentError("quantity '" + s +
                                    "' is not a whole number (extended resources are integers)");
}

core::Result<PodRequest> ParsePod(const json& pod) {
  if (!pod.is_object()) return core::InvalidArgumentError("Pod: not an object");
  PodRequest out;
  auto meta = pod.find("metadata");
  if (meta != pod.end() && meta->is_object()) {
    out.name = Str(*meta, "name");
    out.ns = Str(*meta, "namespace");
    out.uid = Str(*meta, "uid");
    auto ann = meta->find("annotations");
    if (ann != meta->end() && ann->is_object()) {
      auto p = ann->find(kAnnotationPriority);
      if (p != ann->end()) {
        out.priority = p->is_string() ? p->get<std::string>() : "";
        if (out.priority != "high" && out.priority != "normal" && out.priority != "low") {
          out.uses_gpuslice = true;
          out.invalid = std::string("annotation ") + kAnnotationPriority + ": '" + out.priority +
                        "' is not high, normal or low";
        }
      }
    }
  }
  if (out.ns.empty()) out.ns = "default";
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return out;
  GPUSLICE_RETURN_IF_ERROR(ReadContainers(*spec, "containers", &out, &out.containers));
  GPUSLICE_RETURN_IF_ERROR(ReadContainers(*spec, "initContainers", &out, &out.init_containers));
  return out;
}

}  // namespace gpuslice::kubernetes
