#include "sim/sim_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/units.h"

namespace gpuslice::sim {
namespace {

using core::InvalidArgumentError;
using core::Result;
using core::Status;

// Properties of a catalog model, loosely those of the real board. Memory is
// the nominal size in binary units so that arithmetic in tests is exact.
struct CatalogEntry {
  const char* key;
  const char* name;
  uint64_t memory_gib;
  uint32_t sm_count;
  uint32_t cc_major, cc_minor;
  uint32_t clock_mhz, memory_clock_mhz, bus_width, l2_mib;
  uint32_t tdp_w, idle_w;
  bool mig_capable;
};

constexpr CatalogEntry kCatalog[] = {
    {"H100-80GB", "NVIDIA H100 80GB HBM3", 80, 132, 9, 0, 1980, 2619, 5120, 50, 700, 70, true},
    {"H200-141GB", "NVIDIA H200", 141, 132, 9, 0, 1980, 3201, 6144, 50, 700, 75, true},
    {"A100-40GB", "NVIDIA A100-SXM4-40GB", 40, 108, 8, 0, 1410, 1215, 5120, 40, 400, 55, true},
    {"A100-80GB", "NVIDIA A100-SXM4-80GB", 80, 108, 8, 0, 1410, 1593, 5120, 40, 400, 60, true},
    {"A30-24GB", "NVIDIA A30", 24, 56, 8, 0, 1440, 1215, 3072, 24, 165, 30, true},
    {"L40S-48GB", "NVIDIA L40S", 48, 142, 8, 9, 2520, 9001, 384, 96, 350, 35, false},
    {"L4-24GB", "NVIDIA L4", 24, 58, 8, 9, 2040, 6251, 192, 48, 72, 16, false},
    {"A10-24GB", "NVIDIA A10", 24, 72, 8, 6, 1695, 6251, 384, 6, 150, 20, false},
    {"T4-16GB", "Tesla T4", 16, 40, 7, 5, 1590, 5001, 256, 4, 70, 10, false},
    {"V100-32GB", "Tesla V100-SXM2-32GB", 32, 80, 7, 0, 1530, 877, 4096, 6, 300, 40, false},
    {"RTX4090-24GB", "NVIDIA GeForce RTX 4090", 24, 128, 8, 9, 2520, 10501, 384, 72, 450, 25,
     false},
};

// PCI bus numbers of an 8-GPU server; further devices continue upwards.
constexpr uint32_t kBusNumbers[] = {0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB};

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

Result<uint32_t> ParseUint(std::string_view text, std::string_view what, uint32_t max) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v > max) {
    return InvalidArgumentError("bad " + std::string(what) + " " + Quote(text) +
                                ": expected a whole number up to " + std::to_string(max));
  }
  return v;
}

const CatalogEntry* FindModel(std::string_view key) {
  std::string want = Lower(key);
  for (const CatalogEntry& e : kCatalog) {
    if (Lower(e.key) == want) return &e;
  }
  // Accept the short form without memory ("H100") when it is unambiguous.
  const CatalogEntry* found = nullptr;
  for (const CatalogEntry& e : kCatalog) {
    std::string k = Lower(e.key);
    if (k.substr(0, k.find('-')) == want) {
      if (found != nullptr) return nullptr;
      found = &e;
    }
  }
  return found;
}

Result<DeviceSpec> FromCatalog(std::string_view model) {
  const CatalogEntry* e = FindModel(model);
  if (e == nullptr) {
    return InvalidArgumentError("unknown GPU model " + Quote(model) + " (known: " + KnownModels() +
                                ")");
  }
  DeviceSpec d;
  d.model = e->key;
  d.name = e->name;
  d.total_memory = e->memory_gib * core::kGiB;
  d.sm_count = e->sm_count;
  d.cc_major = e->cc_major;
  d.cc_minor = e->cc_minor;
  d.clock_khz = e->clock_mhz * 1000;
  d.memory_clock_khz = e->memory_clock_mhz * 1000;
  d.memory_bus_width = e->bus_width;
  d.l2_cache_bytes = e->l2_mib * static_cast<uint32_t>(core::kMiB);
  d.power_limit_mw = e->tdp_w * 1000;
  d.idle_power_mw = e->idle_w * 1000;
  d.mig_capable = e->mig_capable;
  return d;
}

// "1g.10gb" on `device`: checks that the profile exists for its memory size.
Result<MigSpec> ParseMigProfileFor(const DeviceSpec& device, std::string_view text) {
  std::string p = Lower(text);
  unsigned c = 0, gb = 0;
  char tail = 0;
  if (std::sscanf(p.c_str(), "%ug.%ugb%c", &c, &gb, &tail) != 2 ||
      p != std::to_string(c) + "g." + std::to_string(gb) + "gb") {
    return InvalidArgumentError("bad MIG profile " + Quote(text) + ": expected e.g. '1g.10gb'");
  }
  if (c != 1 && c != 2 && c != 3 && c != 4 && c != 7) {
    return InvalidArgumentError("bad MIG profile " + Quote(text) +
                                ": compute slices must be 1, 2, 3, 4 or 7");
  }
  // One memory slice is an eighth of the board, named in whole decimal GB
  // the way NVIDIA names profiles (A100-40GB: 5gb, H100-80GB: 10gb).
  double slice_gb = static_cast<double>(device.total_memory) / core::kGiB / 8.0;
  for (uint32_t k : {1u, 2u, 4u, 8u}) {
    if (static_cast<unsigned>(std::lround(k * slice_gb)) == gb) {
      MigSpec m;
      m.profile = p;
      m.compute_slices = c;
      m.memory_slices = k;
      m.memory_bytes = device.total_memory / 8 * k;
      m.sm_count = device.sm_count / 8 * c;
      return m;
    }
  }
  return InvalidArgumentError("MIG profile " + Quote(text) + " does not exist on " + device.model +
                              " (memory slices there are " + std::to_string(std::lround(slice_gb)) +
                              "gb each)");
}

// "1g.5gb*7" or "3g.20gb+2g.10gb+1g.5gb*2".
Status ParseMigList(std::string_view text, DeviceSpec* device) {
  if (!device->mig_capable) {
    return InvalidArgumentError("GPU model " + device->model + " does not support MIG (in " +
                                Quote(text) + ")");
  }
  for (std::string_view item : Split(text, '+')) {
    uint32_t times = 1;
    std::string_view profile = item;
    if (size_t star = item.find('*'); star != std::string_view::npos) {
      profile = item.substr(0, star);
      GPUSLICE_ASSIGN_OR_RETURN(times, ParseUint(item.substr(star + 1), "MIG count", 7));
      if (times == 0) return InvalidArgumentError("bad MIG count in " + Quote(item));
    }
    GPUSLICE_ASSIGN_OR_RETURN(MigSpec m, ParseMigProfileFor(*device, profile));
    for (uint32_t i = 0; i < times; ++i) device->mig.push_back(m);
  }
  uint32_t compute = 0, memory = 0;
  for (const MigSpec& m : device->mig) {
    compute += m.compute_slices;
    memory += m.memory_slices;
  }
  if (compute > 7 || memory > 8) {
    return InvalidArgumentError("MIG layout " + Quote(text) + " needs " + std::to_string(compute) +
                                "/7 compute and " + std::to_string(memory) +
                                "/8 memory slices: it does not fit one GPU");
  }
  return Status::Ok();
}

Result<std::pair<uint32_t, uint32_t>> ParseComputeCapability(std::string_view text) {
  size_t dot = text.find('.');
  if (dot == std::string_view::npos) {
    return InvalidArgumentError("bad compute capability " + Quote(text) + ": expected e.g. '9.0'");
  }
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t major,
                            ParseUint(text.substr(0, dot), "compute capability", 20));
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t minor,
                            ParseUint(text.substr(dot + 1), "compute capability", 9));
  return std::make_pair(major, minor);
}

// FNV-1a, stable across builds: UUIDs derived from it must not change.
uint64_t Fnv(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Fills derived fields: PCI address, UUID. Called once the list is complete.
Status Finish(SimConfig* config) {
  if (config->devices.empty()) return InvalidArgumentError("the configuration has no GPUs");
  if (config->devices.size() > kMaxDevices) {
    return InvalidArgumentError("too many GPUs (" + std::to_string(config->devices.size()) +
                                "); the simulator supports at most " + std::to_string(kMaxDevices));
  }
  for (size_t i = 0; i < config->devices.size(); ++i) {
    DeviceSpec& d = config->devices[i];
    if (d.pci_bus == 0) d.pci_bus = i < 8 ? kBusNumbers[i] : 0xDC + static_cast<uint32_t>(i);
    if (d.uuid.empty()) {
      uint64_t a = Fnv(Fnv(14695981039346656037ull, d.name), std::to_string(i));
      uint64_t b = Fnv(a, "gpuslice-sim");
      char buf[64];
      std::snprintf(buf, sizeof(buf), "GPU-%08x-%04x-%04x-%04x-%012llx",
                    static_cast<unsigned>(a >> 32), static_cast<unsigned>(a >> 16) & 0xffff,
                    static_cast<unsigned>(a) & 0xffff, static_cast<unsigned>(b >> 48),
                    static_cast<unsigned long long>(b & 0xffffffffffffull));
      d.uuid = buf;
    }
    for (size_t j = i + 1; j < config->devices.size(); ++j) {
      if (config->devices[j].uuid == d.uuid) {
        return InvalidArgumentError("two GPUs share the UUID " + Quote(d.uuid));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::string KnownModels() {
  std::string out;
  for (const CatalogEntry& e : kCatalog) {
    if (!out.empty()) out += ", ";
    out += e.key;
  }
  return out;
}

uint64_t SimConfig::Fingerprint() const {
  uint64_t h = 14695981039346656037ull;
  for (const DeviceSpec& d : devices) {
    h = Fnv(h, d.name + "|" + d.uuid + "|" + std::to_string(d.total_memory) + "|" +
                   std::to_string(d.sm_count) + "|" + std::to_string(d.cc_major) + "." +
                   std::to_string(d.cc_minor) + "|" + std::to_string(d.pci_bus));
    for (const MigSpec& m : d.mig) h = Fnv(h, m.profile);
    h = Fnv(h, ";");
  }
  return h;
}

Result<SimConfig> ParseGpuSpec(std::string_view spec) {
  SimConfig config;
  if (spec.find_first_not_of(" \t") == std::string_view::npos) {
    return InvalidArgumentError("empty GPU spec");
  }
  for (std::string_view group : Split(spec, ',')) {
    std::vector<std::string_view> fields = Split(group, ':');
    std::string_view head = fields[0];
    uint32_t count = 1;
    if (size_t x = Lower(head).find('x');
        x != std::string::npos && x > 0 && std::isdigit(static_cast<unsigned char>(head[0]))) {
      GPUSLICE_ASSIGN_OR_RETURN(count, ParseUint(head.substr(0, x), "GPU count", kMaxDevices));
      if (count == 0) return InvalidArgumentError("GPU count must be positive in " + Quote(group));
      head = head.substr(x + 1);
    }
    GPUSLICE_ASSIGN_OR_RETURN(DeviceSpec d, FromCatalog(head));
    for (size_t i = 1; i < fields.size(); ++i) {
      std::string_view opt = fields[i];
      size_t eq = opt.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgumentError("bad option " + Quote(opt) + " in " + Quote(group) +
                                    ": expected key=value (mig, mem, sm, cc)");
      }
      std::string key = Lower(opt.substr(0, eq));
      std::string_view value = opt.substr(eq + 1);
      if (key == "mig") {
        GPUSLICE_RETURN_IF_ERROR(ParseMigList(value, &d));
      } else if (key == "mem") {
        GPUSLICE_ASSIGN_OR_RETURN(d.total_memory, core::ParseBytes(value));
        if (d.total_memory < core::kGiB) {
          return InvalidArgumentError("GPU memory " + Quote(value) + " is below 1GiB");
        }
      } else if (key == "sm") {
        GPUSLICE_ASSIGN_OR_RETURN(d.sm_count, ParseUint(value, "SM count", 1024));
        if (d.sm_count == 0) return InvalidArgumentError("SM count must be positive");
      } else if (key == "cc") {
        GPUSLICE_ASSIGN_OR_RETURN(auto cc, ParseComputeCapability(value));
        d.cc_major = cc.first;
        d.cc_minor = cc.second;
      } else {
        return InvalidArgumentError("unknown option " + Quote(key) + " in " + Quote(group) +
                                    " (known: mig, mem, sm, cc)");
      }
    }
    for (uint32_t i = 0; i < count; ++i) config.devices.push_back(d);
    if (config.devices.size() > kMaxDevices) break;  // Finish reports it.
  }
  GPUSLICE_RETURN_IF_ERROR(Finish(&config));
  return config;
}

Result<SimConfig> ParseConfigJson(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("the file is not valid JSON");
  if (!doc.is_object() || !doc.contains("devices") || !doc["devices"].is_array()) {
    return InvalidArgumentError("expected an object with a \"devices\" array");
  }
  SimConfig config;
  size_t index = 0;
  for (const nlohmann::json& item : doc["devices"]) {
    std::string where = "devices[" + std::to_string(index++) + "]";
    if (!item.is_object()) return InvalidArgumentError(where + " is not an object");
    for (auto it = item.begin(); it != item.end(); ++it) {
      static const char* kKeys[] = {
          "model",   "count", "name", "uuid", "memory", "sm_count", "compute_capability",
          "pci_bus", "mig"};
      if (std::none_of(std::begin(kKeys), std::end(kKeys),
                       [&](const char* k) { return it.key() == k; })) {
        return InvalidArgumentError(where + ": unknown key " + Quote(it.key()));
      }
    }
    auto str = [&](const char* key) -> Result<std::string> {
      if (!item[key].is_string())
        return InvalidArgumentError(where + "." + key + " must be a string");
      return item[key].get<std::string>();
    };
    auto uint = [&](const char* key, uint32_t max) -> Result<uint32_t> {
      if (!item[key].is_number_unsigned() || item[key].get<uint64_t>() > max) {
        return InvalidArgumentError(where + "." + key + " must be a whole number up to " +
                                    std::to_string(max));
      }
      return item[key].get<uint32_t>();
    };
    std::string model = "H100-80GB";
    if (item.contains("model")) {
      GPUSLICE_ASSIGN_OR_RETURN(model, str("model"));
    }
    Result<DeviceSpec> base = FromCatalog(model);
    if (!base.ok()) return base.status().WithContext(where);
    DeviceSpec d = *base;
    uint32_t count = 1;
    if (item.contains("count")) {
      GPUSLICE_ASSIGN_OR_RETURN(count, uint("count", kMaxDevices));
    }
    if (item.contains("name")) {
      GPUSLICE_ASSIGN_OR_RETURN(d.name, str("name"));
    }
    if (item.contains("uuid")) {
      GPUSLICE_ASSIGN_OR_RETURN(d.uuid, str("uuid"));
      if (d.uuid.rfind("GPU-", 0) != 0 || d.uuid.size() < 8 || d.uuid.size() > 60 || count != 1) {
        return InvalidArgumentError(where + ".uuid " + Quote(d.uuid) +
                                    " must start with 'GPU-' and be given for a single GPU");
      }
    }
    if (item.contains("memory")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string mem, str("memory"));
      Result<uint64_t> bytes = core::ParseBytes(mem);
      if (!bytes.ok()) return bytes.status().WithContext(where + ".memory");
      d.total_memory = *bytes;
    }
    if (item.contains("sm_count")) {
      GPUSLICE_ASSIGN_OR_RETURN(d.sm_count, uint("sm_count", 1024));
    }
    if (item.contains("compute_capability")) {
      GPUSLICE_ASSIGN_OR_RETURN(std::string cc, str("compute_capability"));
      Result<std::pair<uint32_t, uint32_t>> parsed = ParseComputeCapability(cc);
      if (!parsed.ok()) return parsed.status().WithContext(where);
      d.cc_major = parsed->first;
      d.cc_minor = parsed->second;
    }
    if (item.contains("pci_bus")) {
      GPUSLICE_ASSIGN_OR_RETURN(d.pci_bus, uint("pci_bus", 255));
    }
    if (item.contains("mig")) {
      if (!item["mig"].is_array()) return InvalidArgumentError(where + ".mig must be an array");
      std::string list;
      for (const nlohmann::json& m : item["mig"]) {
        if (!m.is_string()) return InvalidArgumentError(where + ".mig entries must be strings");
        list += (list.empty() ? "" : "+") + m.get<std::string>();
      }
      if (!list.empty()) {
        Status s = ParseMigList(list, &d);
        if (!s.ok()) return s.WithContext(where);
      }
    }
    if (d.total_memory < core::kGiB || d.sm_count == 0) {
      return InvalidArgumentError(where + ": memory must be at least 1GiB and sm_count positive");
    }
    for (uint32_t i = 0; i < count; ++i) config.devices.push_back(d);
    if (config.devices.size() > kMaxDevices) break;
  }
  GPUSLICE_RETURN_IF_ERROR(Finish(&config));
  return config;
}

Result<SimConfig> ConfigFromEnvironment(bool* explicit_config) {
  *explicit_config = true;
  if (const char* path = std::getenv("GPUSLICE_SIM_CONFIG"); path != nullptr && *path != '\0') {
    std::ifstream in(path);
    if (!in) return InvalidArgumentError("GPUSLICE_SIM_CONFIG: cannot read " + Quote(path));
    std::stringstream buf;
    buf << in.rdbuf();
    Result<SimConfig> config = ParseConfigJson(buf.str());
    if (!config.ok())
      return config.status().WithContext(std::string("GPUSLICE_SIM_CONFIG ") + path);
    return config;
  }
  if (const char* spec = std::getenv("GPUSLICE_SIM_GPUS"); spec != nullptr && *spec != '\0') {
    Result<SimConfig> config = ParseGpuSpec(spec);
    if (!config.ok()) return config.status().WithContext("GPUSLICE_SIM_GPUS");
    return config;
  }
  *explicit_config = false;
  return ParseGpuSpec("1xH100-80GB");
}

}  // namespace gpuslice::sim
