#include "slurm/spank_request.h"

#include <sys/wait.h>

#include <algorithm>
#include <charconv>

#include "core/strings.h"
#include "core/units.h"

namespace gpuslice::slurm {

using core::Result;
using core::Status;
using nlohmann::json;

namespace {

Result<uint32_t> ParseUint(std::string_view text, std::string_view what) {
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return core::InvalidArgumentError(std::string(what) + ": '" + std::string(text) +
                                      "' is not a whole number");
  }
  return v;
}

constexpr uint64_t kMiB = 1ull << 20;

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// `milli` of a GPU of `total` bytes, whole MiB.
uint64_t MemoryShare(uint64_t total, uint32_t milli) { return total / kMiB * milli / 1000 * kMiB; }

}  // namespace

Status ValidateOption(std::string_view name, std::string_view value) {
  if (name == "gpu-mem") {
    auto b = core::ParseMemorySize(value);
    if (!b.ok()) return core::InvalidArgumentError("--gpu-mem: " + b.status().message());
    if (*b == 0) return core::InvalidArgumentError("--gpu-mem: must be more than 0");
    return Status::Ok();
  }
  if (name == "gpu-share") {
    auto s = core::ParseShareMilli(value);
    if (!s.ok()) return core::InvalidArgumentError("--gpu-share: " + s.status().message());
    return Status::Ok();
  }
  if (name == "gpu-priority") {
    auto p = core::ParsePriority(value);
    if (!p.ok()) return core::InvalidArgumentError("--gpu-priority: " + p.status().message());
    return Status::Ok();
  }
  return core::InvalidArgumentError("unknown option --" + std::string(name));
}

Result<PluginConfig> ParsePluginArgs(const std::vector<std::string>& args) {
  PluginConfig c;
  for (const std::string& a : args) {
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "socket") {
      if (value.empty() || value[0] != '/') {
        return core::InvalidArgumentError("socket=" + value + ": must be an absolute path");
      }
      c.socket = value;
    } else if (key == "shards_per_gpu") {
      GPUSLICE_ASSIGN_OR_RETURN(c.shards_per_gpu, ParseUint(value, "shards_per_gpu"));
      if (c.shards_per_gpu == 0) {
        return core::InvalidArgumentError("shards_per_gpu: must be at least 1");
      }
    } else if (key == "required") {
      if (value != "yes" && value != "no") {
        return core::InvalidArgumentError("required=" + value + ": must be yes or no");
      }
      c.required = value == "yes";
    } else {
      return core::InvalidArgumentError("unknown argument '" + a +
                                        "' (known: socket=, shards_per_gpu=, required=)");
    }
  }
  return c;
}

Result<std::vector<uint32_t>> ParseIdList(std::string_view text) {
  std::vector<uint32_t> out;
  for (std::string_view part : Split(text, ',')) {
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) {
      GPUSLICE_ASSIGN_OR_RETURN(uint32_t v, ParseUint(part, "GPU id"));
      out.push_back(v);
      continue;
    }
    GPUSLICE_ASSIGN_OR_RETURN(uint32_t lo, ParseUint(part.substr(0, dash), "GPU id"));
    GPUSLICE_ASSIGN_OR_RETURN(uint32_t hi, ParseUint(part.substr(dash + 1), "GPU id"));
    if (hi < lo || hi - lo > 1024) {
      return core::InvalidArgumentError("GPU id range '" + std::string(part) + "' is not valid");
    }
    for (uint32_t v = lo; v <= hi; ++v) out.push_back(v);
  }
  return out;
}

Result<StepGres> StepGresFromEnv(const std::map<std::string, std::string>& env) {
  StepGres g;
  auto get = [&](const char* k) -> const std::string* {
    auto it = env.find(k);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
  };
  const std::string* ids = get("SLURM_STEP_GPUS");
  if (ids == nullptr) ids = get("SLURM_JOB_GPUS");
  if (ids != nullptr) {
    auto parsed = ParseIdList(*ids);
    if (!parsed.ok()) {
      return core::InvalidArgumentError("cannot read the step's GPUs ('" + *ids +
                                        "'): " + parsed.status().message());
    }
    g.gpu_minors = std::move(*parsed);
  }
  if (const std::string* shards = get("SLURM_SHARDS_ON_NODE")) {
    GPUSLICE_ASSIGN_OR_RETURN(g.shards, ParseUint(*shards, "SLURM_SHARDS_ON_NODE"));
  }
  return g;
}

std::string StepName(uint32_t step_id) {
  switch (step_id) {
    case 0xfffffffbu:
      return "batch";
    case 0xfffffffcu:
      return "extern";
    case 0xfffffffau:
      return "interactive";
    default:
      return std::to_string(step_id);
  }
}

Result<json> BuildSliceRequest(const SpankOptions& options, const StepGres& gres,
                               const StepId& step, const PluginConfig& config, const json& gpus) {
  if (gres.gpu_minors.empty()) {
    return core::FailedPreconditionError(
        "--gpu-mem, --gpu-share and --gpu-priority need GPUs on this node: add --gres=gpu:N or "
        "--gres=shard:N");
  }
  // The daemon's GPU for each node Slurm gave the step.
  std::vector<std::string> uuids;
  uint64_t smallest = 0;
  for (uint32_t minor : gres.gpu_minors) {
    const json* found = nullptr;
    if (gpus.is_array()) {
      for (const json& g : gpus) {
        if (g.value("minor", -1) == static_cast<int64_t>(minor)) found = &g;
      }
    }
    if (found == nullptr) {
      return core::NotFoundError("Slurm gave this step /dev/nvidia" + std::to_string(minor) +
                                 ", which gpusliced on this node does not know (gres.conf and "
                                 "the GPUs disagree; `gpuslice doctor` checks them)");
    }
    uuids.push_back(found->value("uuid", ""));
    const uint64_t total = found->value("memory_total", uint64_t{0});
    smallest = smallest == 0 ? total : std::min(smallest, total);
  }
  json body = {{"mode", "external"}, {"bound_to_caller", true}, {"gpu_uuids", uuids}};
  body["name"] = "slurm-" + std::to_string(step.job_id) + "." + step.step;
  body["labels"] = {{"slurm_job", std::to_string(step.job_id)}, {"slurm_step", step.step}};
  if (options.priority) body["priority"] = *options.priority;

  // A fraction: asked for, or shards.
  std::optional<uint32_t> share_milli;
  if (options.share) {
    GPUSLICE_ASSIGN_OR_RETURN(share_milli, core::ParseShareMilli(*options.share));
  }
  if (!share_milli && gres.shards > 0) {
    if (config.shards_per_gpu == 0) {
      return core::FailedPreconditionError(
          "a --gres=shard step needs shards_per_gpu=N on the gpuslice line of plugstack.conf "
          "(the admin's setup; docs/SLURM.md)");
    }
    if (gres.shards > config.shards_per_gpu) {
      return core::InvalidArgumentError(
          std::to_string(gres.shards) + " shards on this node span more than one GPU (" +
          std::to_string(config.shards_per_gpu) + " per GPU): a slice is on one GPU");
    }
    share_milli = gres.shards * 1000 / config.shards_per_gpu;
    if (*share_milli == 0) share_milli = 1;
  }
  if (!options.mem && !share_milli) {
    // Whole GPUs: also what fences this GPU against shards' slices.
    body["gpus"] = std::to_string(uuids.size());
    return body;
  }
  if (uuids.size() != 1) {
    return core::InvalidArgumentError(
        "--gpu-mem and --gpu-share (and shards) make a slice of one GPU, but this step has " +
        std::to_string(uuids.size()) +
        " GPUs on this node: ask for --gres=gpu:1 (or shards), or whole GPUs without them");
  }
  if (options.mem) {
    body["mem"] = *options.mem;
  } else {
    // A share alone, or shards: the same part of the GPU's memory.
    const uint64_t bytes = MemoryShare(smallest, *share_milli);
    if (bytes == 0) {
      return core::FailedPreconditionError("gpusliced did not report the GPU's memory");
    }
    body["mem"] = bytes;
  }
  if (share_milli) body["compute"] = core::FormatShareMilli(*share_milli);
  return body;
}

std::map<std::string, std::string> StepEnvironment(
    const json& env, const std::map<std::string, std::string>& current) {
  std::map<std::string, std::string> out;
  if (!env.is_array()) return out;
  for (const json& e : env) {
    if (!e.is_string()) continue;
    const std::string kv = e.get<std::string>();
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "LD_PRELOAD" || key == "LD_LIBRARY_PATH") {
      // The slice's entries first, then the step's own that are not there.
      std::vector<std::string> parts;
      for (std::string_view p : Split(value, ':')) parts.emplace_back(p);
      if (auto it = current.find(key); it != current.end()) {
        for (std::string_view p : Split(it->second, key == "LD_PRELOAD" ? ' ' : ':')) {
          for (std::string_view q : Split(p, ':')) {
            if (!q.empty() && std::find(parts.begin(), parts.end(), q) == parts.end()) {
              parts.emplace_back(q);
            }
          }
        }
      }
      value = core::Join(parts, ":");
    }
    out[key] = value;
  }
  return out;
}

int ExitCodeOfWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 0;
}

}  // namespace gpuslice::slurm
