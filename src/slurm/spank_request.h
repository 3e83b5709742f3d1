#pragma once

// The SPANK plugin's decisions, apart from Slurm and the socket so that they
// can be tested: what the options mean, which GPUs a step was given, and the
// external job it asks gpusliced for (docs/SLURM.md).
//
// GPUs are matched by device node, never by index arithmetic: Slurm names a
// step's GPUs by their gres.conf `File=` nodes (/dev/nvidiaN), and the
// daemon reports each GPU's node minor (NVML's minor number). The CUDA index
// a step sees (CUDA_VISIBLE_DEVICES) may be renumbered by the devices
// cgroup, so it is never used to find a GPU.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::slurm {

// The user's options (--gpu-mem, --gpu-share, --gpu-priority), as typed.
struct SpankOptions {
  std::optional<std::string> mem;
  std::optional<std::string> share;
  std::optional<std::string> priority;
  bool any() const { return mem || share || priority; }
};

// Each option alone, as srun/sbatch take it: errors say what is wrong with
// the value, so the user sees it before the job is even submitted.
core::Status ValidateOption(std::string_view name, std::string_view value);

// plugstack.conf arguments: `socket=PATH` (the node's gpusliced socket,
// default /run/gpuslice/gpuslice.sock), `shards_per_gpu=N` (gres.conf's
// shard Count per GPU; needed for `--gres=shard`), `required=yes|no`
// (default yes: a GPU step fails when gpusliced cannot be reached; no: it
// runs without a slice, with a warning).
struct PluginConfig {
  std::string socket = "/run/gpuslice/gpuslice.sock";
  uint32_t shards_per_gpu = 0;
  bool required = true;
};
core::Result<PluginConfig> ParsePluginArgs(const std::vector<std::string>& args);

// What Slurm gave the step on this node, from its environment.
struct StepGres {
  std::vector<uint32_t> gpu_minors;  // Device node minors, in Slurm's order.
  uint32_t shards = 0;               // --gres=shard:N on this node; 0: none.
};

// "0,2-3" (Slurm's id lists) -> {0, 2, 3}. Errors name the token.
core::Result<std::vector<uint32_t>> ParseIdList(std::string_view text);

// The step's GPUs from its environment: SLURM_STEP_GPUS (a step of srun) or
// SLURM_JOB_GPUS (a batch or interactive step): the minors of the device
// nodes gres.conf names; SLURM_SHARDS_ON_NODE for shards. An empty
// StepGres: no GPU on this node.
core::Result<StepGres> StepGresFromEnv(const std::map<std::string, std::string>& env);

// Identity of the step, for the slice's labels and name.
struct StepId {
  uint32_t job_id = 0;
  std::string step;  // "0", "batch", "interactive".
  uint32_t uid = 0;
};

// Slurm's special step ids (slurm.h): not numbers a user would recognise.
std::string StepName(uint32_t step_id);

// The POST /v1/jobs body for the step: an external job bound to the caller
// (slurmstepd), on the GPUs `gres` names, matched to the daemon's GPUs
// (`gpus` is GET /v1/gpus's "gpus" list) by minor. Errors are what the user
// is told: options without GPUs, a fraction over several GPUs, shards
// without shards_per_gpu, a GPU the daemon does not know.
core::Result<nlohmann::json> BuildSliceRequest(const SpankOptions& options, const StepGres& gres,
                                               const StepId& step, const PluginConfig& config,
                                               const nlohmann::json& gpus);

// A task's wait status (S_TASK_EXIT_STATUS) as the exit code a shell says:
// its exit status, or 128 + the signal that ended it.
int ExitCodeOfWaitStatus(int status);

// Environment for the step from the daemon's job view ("env": ["K=V", ...]):
// LD_PRELOAD and LD_LIBRARY_PATH put the slice's entries first and keep the
// step's (`current`, its values now, absent: unset); the rest replace.
std::map<std::string, std::string> StepEnvironment(
    const nlohmann::json& env, const std::map<std::string, std::string>& current);

}  // namespace gpuslice::slurm
