#include "core/jobs/request.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace gpuslice::core {
namespace {

bool ParseUint(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

constexpr uint32_t kMaxGpusPerRequest = 64;

}  // namespace

std::string MigProfile::ToString() const {
  return std::to_string(compute_slices) + "g." + std::to_string(memory_gb) + "gb";
}

Result<MigProfile> ParseMigProfile(std::string_view original) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("bad MIG profile '" + std::string(original.substr(0, 64)) +
                                "': " + std::string(why) + " (expected e.g. '1g.10gb')");
  };
  std::string lower(original);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view text = lower;
  // The Kubernetes resource name and its short form.
  for (std::string_view prefix : {"nvidia.com/mig-", "mig-"}) {
    if (text.substr(0, prefix.size()) == prefix) {
      text.remove_prefix(prefix.size());
      break;
    }
  }
  size_t g = text.find("g.");
  if (g == std::string_view::npos) return bad("missing 'g.'");
  std::string_view slices = text.substr(0, g);
  std::string_view mem = text.substr(g + 2);
  if (mem.size() < 3 || mem.substr(mem.size() - 2) != "gb") return bad("memory must end in 'gb'");
  mem.remove_suffix(2);
  MigProfile p;
  if (!ParseUint(slices, &p.compute_slices)) {
    return bad("'" + std::string(slices) + "' is not a number of compute slices");
  }
  if (p.compute_slices < 1 || p.compute_slices > 7 || p.compute_slices == 5 ||
      p.compute_slices == 6) {
    return bad("compute slices must be 1, 2, 3, 4 or 7");
  }
  if (!ParseUint(mem, &p.memory_gb) || p.memory_gb < 1 || p.memory_gb > 1024) {
    return bad("memory must be 1 to 1024 GB");
  }
  return p;
}

std::string_view RequestKindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kWholeGpus: return "gpus";
    case RequestKind::kFraction: return "fraction";
    case RequestKind::kMig: return "mig";
  }
  return "fraction";
}

Status ParseGpuCount(std::string_view text, uint32_t* min, uint32_t* max) {
  size_t dash = text.find('-');
  uint32_t lo = 0, hi = 0;
  bool ok = dash == std::string_view::npos
                ? ParseUint(text, &lo) && (hi = lo, true)
                : ParseUint(text.substr(0, dash), &lo) && ParseUint(text.substr(dash + 1), &hi);
  if (!ok) {
    return InvalidArgumentError("bad GPU count '" + std::string(text) +
                                "': expected a number such as '2' or a range such as '1-4'");
  }
  if (lo == 0) return InvalidArgumentError("GPU count '" + std::string(text) + "' must be >= 1");
  if (hi < lo) {
    return InvalidArgumentError("GPU range '" + std::string(text) + "' has max below min");
  }
  if (hi > kMaxGpusPerRequest) {
    return InvalidArgumentError("GPU count '" + std::string(text) + "' is over " +
                                std::to_string(kMaxGpusPerRequest));
  }
  *min = lo;
  *max = hi;
  return Status::Ok();
}

std::string_view ComputeModeName(ComputeMode mode) {
  return mode == ComputeMode::kWorkConserving ? "work-conserving" : "hard";
}

Result<ComputeMode> ParseComputeMode(std::string_view text) {
  if (text == "hard") return ComputeMode::kHard;
  if (text == "work-conserving") return ComputeMode::kWorkConserving;
  return InvalidArgumentError("compute mode '" + std::string(text.substr(0, 64)) +
                              "': expected hard or work-conserving");
}

Status ApplySliceSize(const std::optional<std::string>& mem,
                      const std::optional<std::string>& compute, ResourceRequest* r) {
  if (mem) {
    auto bytes = ParseMemorySize(*mem);
    if (!bytes.ok()) return bytes.status().WithContext("--mem");
    if (*bytes == 0) return InvalidArgumentError("--mem: must be more than 0 bytes");
    r->memory_bytes = *bytes;
  }
  if (compute) {
    auto share = ParseShareMilli(*compute);
    if (!share.ok()) return share.status().WithContext("--compute");
    r->compute_milli = *share;
  }
  return Status::Ok();
}

Status ResourceRequest::Validate() const {
  switch (kind) {
    case RequestKind::kWholeGpus:
      if (gpus_min == 0) return InvalidArgumentError("gpus: must ask for at least 1 GPU");
      if (gpus_max < gpus_min) return InvalidArgumentError("gpus: max is below min");
      if (gpus_max > kMaxGpusPerRequest) {
        return InvalidArgumentError("gpus: at most " + std::to_string(kMaxGpusPerRequest));
      }
      if (memory_bytes != 0 || compute_milli != 0) {
        return InvalidArgumentError(
            "gpus: whole GPUs cannot also carry --mem or --compute (they get the whole device)");
      }
      break;
    case RequestKind::kFraction:
      if (memory_bytes == 0) {
        return InvalidArgumentError("mem: a part of a GPU needs a memory size, e.g. --mem 8GiB");
      }
      if (compute_milli > 1000) return InvalidArgumentError("compute: over 100%");
      if (compute_mode != ComputeMode::kHard && compute_milli == 0) {
        return InvalidArgumentError("compute_mode: goes with a compute share (--compute)");
      }
      break;
    case RequestKind::kMig:
      if (mig.compute_slices == 0 || mig.memory_gb == 0) {
        return InvalidArgumentError("mig: a MIG request needs a profile, e.g. --mig 1g.10gb");
      }
      if (memory_bytes != 0 || compute_milli != 0 || gpus_min != 0) {
        return InvalidArgumentError("mig: a MIG request cannot also carry --mem, --compute or --gpus");
      }
      break;
  }
  if (kind != RequestKind::kFraction && compute_mode != ComputeMode::kHard) {
    return InvalidArgumentError("compute_mode: goes with --mem and --compute (a part of one GPU)");
  }
  if (max_runtime && max_runtime->count() <= 0) {
    return InvalidArgumentError("max_runtime: must be positive");
  }
  if (name.size() > 128) return InvalidArgumentError("name: longer than 128 characters");
  if (host_cpu_milli != 0 &&
      (host_cpu_milli < kMinHostCpuMilli || host_cpu_milli > kMaxHostCpuMilli)) {
    return InvalidArgumentError("cpus: must be 0.01 to 4096");
  }
  if (host_memory_bytes != 0 && host_memory_bytes < kMinHostMemoryBytes) {
    return InvalidArgumentError("host_mem: must be at least 4 MiB");
  }
  if (!gpu_models.empty()) {
    GPUSLICE_RETURN_IF_ERROR(ParseGpuModels(FormatGpuModels(gpu_models)).status());
  }
  return Status::Ok();
}

namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> out;
  std::string word;
  for (char c : text) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    } else {
      word.push_back(Lower(c));
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

}  // namespace

Result<std::vector<std::string>> ParseGpuModels(std::string_view text) {
  std::vector<std::string> out;
  std::string_view rest = text;
  while (true) {
    const size_t sep = rest.find_first_of(",|");
    std::string_view item = rest.substr(0, sep);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const std::string shown(text.substr(0, 64));
    if (item.empty()) {
      return InvalidArgumentError("'" + shown +
                                  "': expected GPU model names such as a100 or "
                                  "a100,h100 (see `gpuslice gpus`)");
    }
    if (item.size() > 64) {
      return InvalidArgumentError("'" + std::string(item.substr(0, 32)) +
                                  "...': a GPU model name is at most 64 characters");
    }
    for (char c : item) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == ' ';
      if (!ok) {
        return InvalidArgumentError("'" + std::string(item) +
                                    "': a GPU model name has letters, digits, spaces, '-', '_' "
                                    "and '.' only");
      }
    }
    out.emplace_back(item);
    if (out.size() > kMaxGpuModelNames) {
      return InvalidArgumentError("'" + shown + "': at most " + std::to_string(kMaxGpuModelNames) +
                                  " GPU models");
    }
    if (sep == std::string_view::npos) break;
    rest = rest.substr(sep + 1);
  }
  return out;
}

std::string FormatGpuModels(const std::vector<std::string>& models) {
  std::string out;
  for (const std::string& m : models) out += (out.empty() ? "" : "|") + m;
  return out;
}

bool GpuModelMatches(std::string_view wanted, std::string_view model) {
  if (wanted.size() == model.size()) {
    bool same = true;
    for (size_t i = 0; i < wanted.size() && same; ++i) same = Lower(wanted[i]) == Lower(model[i]);
    if (same) return true;
  }
  const std::vector<std::string> want = Words(wanted), have = Words(model);
  if (want.empty()) return false;
  for (const std::string& w : want) {
    if (std::find(have.begin(), have.end(), w) == have.end()) return false;
  }
  return true;
}

Result<Gres> ParseGres(std::string_view text) {
  const std::string shown(text.substr(0, 64));
  auto bad = [&] {
    return InvalidArgumentError("'" + shown +
                                "': expected gpu[:TYPE][:COUNT], e.g. gpu:a100:2 or gpu:2");
  };
  if (text.substr(0, 3) != "gpu" || (text.size() > 3 && text[3] != ':')) return bad();
  std::vector<std::string_view> parts;
  std::string_view rest = text.size() > 3 ? text.substr(4) : std::string_view();
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  if (text.size() > 3 && parts.empty()) return bad();
  if (parts.size() > 2) return bad();
  auto is_count = [](std::string_view p) {
    return !p.empty() && p.find_first_not_of("0123456789") == std::string_view::npos;
  };
  Gres g{"1", std::nullopt};
  if (parts.size() == 2) {
    if (!is_count(parts[1]) || parts[0].empty()) return bad();
    g.model = std::string(parts[0]);
    g.gpus = std::string(parts[1]);
  } else if (parts.size() == 1) {
    if (parts[0].empty()) return bad();
    if (is_count(parts[0])) {
      g.gpus = std::string(parts[0]);
    } else {
      g.model = std::string(parts[0]);
    }
  }
  if (g.model) GPUSLICE_RETURN_IF_ERROR(ParseGpuModels(*g.model).status().WithContext("--gres"));
  uint32_t min = 0, max = 0;
  GPUSLICE_RETURN_IF_ERROR(ParseGpuCount(g.gpus, &min, &max).WithContext("--gres"));
  return g;
}

Result<uint32_t> ParseCpuMilli(std::string_view text) {
  std::string t(text);
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("'" + t.substr(0, 32) + "': " + why);
  };
  if (t.empty()) return bad("expected a number of CPUs, e.g. 0.5 or 2");
  uint64_t whole = 0, frac = 0;
  size_t i = 0, frac_digits = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9' && whole <= kMaxHostCpuMilli) {
    whole = whole * 10 + static_cast<uint64_t>(t[i++] - '0');
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
      if (++frac_digits > 3) return bad("at most three decimals");
      frac = frac * 10 + static_cast<uint64_t>(t[i++] - '0');
    }
  }
  if (i != t.size() || (i == 0) || t == ".") return bad("expected a number of CPUs, e.g. 0.5 or 2");
  for (size_t d = frac_digits; d < 3; ++d) frac *= 10;
  uint64_t milli = whole * 1000 + frac;
  if (milli < kMinHostCpuMilli || milli > kMaxHostCpuMilli) return bad("must be 0.01 to 4096");
  return static_cast<uint32_t>(milli);
}

std::string FormatCpuMilli(uint32_t milli) {
  std::string out = std::to_string(milli / 1000);
  uint32_t frac = milli % 1000;
  if (frac == 0) return out;
  std::string f = std::to_string(1000 + frac).substr(1);
  while (f.back() == '0') f.pop_back();
  return out + "." + f;
}

namespace {

std::string ModelsNote(const std::vector<std::string>& models) {
  if (models.empty()) return "";
  std::string out;
  for (const std::string& m : models) out += (out.empty() ? "" : " or ") + m;
  return " (" + out + ")";
}

}  // namespace

std::string ResourceRequest::Describe() const {
  switch (kind) {
    case RequestKind::kWholeGpus:
      if (gpus_min == gpus_max) {
        return std::to_string(gpus_min) + (gpus_min == 1 ? " GPU" : " GPUs") +
               ModelsNote(gpu_models);
      }
      return std::to_string(gpus_min) + "-" + std::to_string(gpus_max) + " GPUs" +
             ModelsNote(gpu_models);
    case RequestKind::kFraction:
      return FormatBytes(memory_bytes) +
             (compute_milli ? " + " + FormatShareMilli(compute_milli) : std::string()) +
             (compute_mode == ComputeMode::kWorkConserving ? " (work-conserving)" : "") +
             ModelsNote(gpu_models);
    case RequestKind::kMig:
      return "MIG " + mig.ToString() + ModelsNote(gpu_models);
  }
  return "";
}

}  // namespace gpuslice::core
