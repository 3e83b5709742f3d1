#pragma once

// The resource request model shared by the CLI, the daemon, the placement
// core and the cluster integrations: what a user asks for, in the terms they
// think in ("8 GiB and 30% of a GPU, high priority", "2 whole GPUs", "a
// 1g.10gb MIG slice").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace gpuslice::core {

// A MIG profile such as "1g.10gb": `compute_slices` of the GPU's 7 (or 8)
// compute slices and `memory_gb` of memory (decimal GB, as NVIDIA names them).
struct MigProfile {
  uint32_t compute_slices = 0;
  uint32_t memory_gb = 0;
  std::string ToString() const;  // "1g.10gb"
  friend bool operator==(const MigProfile&, const MigProfile&) = default;
};
// Accepts "1g.10gb", "3g.40gb", also as Kubernetes spells them
// ("nvidia.com/mig-1g.10gb", "mig-1g.10gb") and in any case ("1G.10GB").
// A MIG instance has 1, 2, 3, 4 or 7 compute slices. "1g.10gb+me" is
// rejected (media extensions are not modelled). Errors name the token.
Result<MigProfile> ParseMigProfile(std::string_view text);

enum class RequestKind {
  kWholeGpus,  // `gpus_min`..`gpus_max` whole GPUs.
  kFraction,   // Part of one GPU: `memory_bytes` and `compute_milli`.
  kMig,        // One MIG instance of profile `mig`.
};
std::string_view RequestKindName(RequestKind kind);

// What a fraction's compute share means (docs/COMPUTE.md): a hard cap, never
// above its share even alone on the GPU (the default), or work-conserving,
// above it while other slices leave the GPU idle.
enum class ComputeMode { kHard, kWorkConserving };
std::string_view ComputeModeName(ComputeMode mode);  // "hard", "work-conserving"
Result<ComputeMode> ParseComputeMode(std::string_view text);

struct ResourceRequest {
  RequestKind kind = RequestKind::kFraction;
  // kWholeGpus: a fixed count has gpus_min == gpus_max; elastic jobs
  // ("--gpus 1-4") have gpus_min < gpus_max.
  uint32_t gpus_min = 0;
  uint32_t gpus_max = 0;
  // kFraction: memory cap and compute share (per-mille of one GPU). A
  // fraction with compute_milli == 0 gets no compute cap.
  uint64_t memory_bytes = 0;
  uint32_t compute_milli = 0;
  ComputeMode compute_mode = ComputeMode::kHard;  // Only with compute_milli.
  // kMig.
  MigProfile mig;

  Priority priority = Priority::kNormal;
  std::string name;  // Optional, human-readable.
  std::string pool;  // Empty: the default pool.
  std::optional<std::chrono::milliseconds> max_runtime;
  // Host limits, applied through the job's cgroup like `docker run --cpus
  // --memory` (docs/DAEMON.md): CPU time in per-mille of one CPU (`--cpus
  // 0.5` = 500) and memory in bytes (`--host-mem`); 0 = no limit.
  uint32_t host_cpu_milli = 0;
  uint64_t host_memory_bytes = 0;
  // GPU models the job may run on (`--gpu-model a100,h100`; GpuModelMatches
  // says which GPUs each name means); empty: any.
  std::vector<std::string> gpu_models;

  // Checks internal consistency (not whether any GPU could hold it: that is
  // the placement core's job). Errors name the offending field.
  Status Validate() const;

  // "2 GPUs", "1-4 GPUs", "8 GiB + 30%", "MIG 1g.10gb".
  std::string Describe() const;
};

// A new memory size and/or compute share for a part of one GPU, as
// `--mem` and `--compute` give them (`update` of a queued job, `resize` of a
// running one): parsed into `r`, whose other fields stay; errors name the
// flag. `r` must be a part of one GPU (kFraction); the caller validates the
// whole request afterwards.
Status ApplySliceSize(const std::optional<std::string>& mem,
                      const std::optional<std::string>& compute, ResourceRequest* r);

// Bounds of the host limits (a cgroup needs some memory to start a process
// at all; the kernel's CFS quota needs at least 1 ms per 100 ms period).
inline constexpr uint32_t kMinHostCpuMilli = 10;             // 0.01 CPU
inline constexpr uint32_t kMaxHostCpuMilli = 4096 * 1000;    // 4096 CPUs
inline constexpr uint64_t kMinHostMemoryBytes = 4ull << 20;  // 4 MiB
// Parses `--cpus`: a positive decimal number of CPUs with at most three
// decimals ("0.5", "2", "1.25"), as per-mille.
Result<uint32_t> ParseCpuMilli(std::string_view text);
// "0.5", "2", "1.25".
std::string FormatCpuMilli(uint32_t milli);

// Parses the GPU count syntax of `--gpus`: "2" or "1-4".
Status ParseGpuCount(std::string_view text, uint32_t* min, uint32_t* max);

// `--gpu-model`: one name or a list separated by ',' or '|' ("a100",
// "a100,h100", "H100-80GB"), at most kMaxGpuModelNames names of 1-64
// letters, digits, spaces, '-', '_' or '.'. Errors name the token.
inline constexpr size_t kMaxGpuModelNames = 8;
Result<std::vector<std::string>> ParseGpuModels(std::string_view text);
// "a100|h100" (the form the ledger keeps and ParseGpuModels reads back).
std::string FormatGpuModels(const std::vector<std::string>& models);
// Whether a GPU whose model NVML names `model` ("NVIDIA A100-SXM4-40GB") is
// what `wanted` asks for: equal, ignoring case, or every word of `wanted`
// (words split at spaces, '-' and '_') a word of `model`: "a100",
// "A100-40GB" and "nvidia a100" all match that GPU, "a100-80gb" does not.
bool GpuModelMatches(std::string_view wanted, std::string_view model);

// Slurm's `--gres=gpu[:TYPE][:COUNT]` ("gpu:a100:2", "gpu:2", "gpu:a100";
// a count of 1 when none is given): the `--gpus` count and the model it
// names (none when no type). Errors name the token.
struct Gres {
  std::string gpus;                  // "2"
  std::optional<std::string> model;  // "a100"
};
Result<Gres> ParseGres(std::string_view text);

}  // namespace gpuslice::core
