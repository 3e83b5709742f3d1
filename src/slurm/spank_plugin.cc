// libgpuslice_spank.so: gpuslice under Slurm (docs/SLURM.md). Slurm's
// scheduler decides which GPUs a job gets; on each node, this plugin asks
// the node's gpusliced for a slice on exactly those GPUs, as the job's user,
// and puts the slice into every task's environment (the shim then enforces
// it). The slice is an external job bound to the step's slurmstepd: the
// daemon releases it when that process is gone, whatever ends the step.
//
// Callbacks (Slurm 22.05's SPANK):
//   slurm_spank_init       every context: registers --gpu-mem, --gpu-share,
//                          --gpu-priority (spank_option_register: 22.05's
//                          sbatch ignores a static option table).
//   option callbacks       srun/sbatch/salloc: a bad value stops the command
//                          before anything is submitted.
//   slurm_spank_user_init  slurmstepd, privileges dropped to the job's user:
//                          creates the slice (so the daemon sees the user on
//                          its socket) and sets the step's environment.
//   slurm_spank_task_init  each task, before exec: when the slice could not
//                          be made, prints why on the task's stderr (the
//                          user's terminal) and fails the task.
//   slurm_spank_task_exit  slurmstepd, as each task ends: keeps the step's
//                          exit status (the first non-zero, else 0).
//   slurm_spank_exit       slurmstepd, as root: releases the slice at once,
//                          saying how the step ended (its exit status).
//
// C ABI out (Slurm dlopens it): every callback catches everything.

// spank.h declares the callbacks without a C++ guard.
extern "C" {
#include <slurm/spank.h>
}

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "slurm/spank_request.h"

namespace gs = gpuslice::slurm;
using nlohmann::json;

namespace {

constexpr int kOptMem = 1, kOptShare = 2, kOptPriority = 3;

struct PluginState {
  gs::SpankOptions options;
  gs::PluginConfig config;
  uint64_t slice_id = 0;  // The daemon's job this step created; 0: none.
  std::string failure;    // Why the step may not run (told to each task).
  // The step's exit status as its tasks ended: the first non-zero (a wait
  // status's exit code, or 128 + the signal), else 0; -1 before any ended.
  int exit_code = -1;
};
PluginState& State() {
  static PluginState state;
  return state;
}

const char* OptionName(int val) {
  switch (val) {
    case kOptMem:
      return "gpu-mem";
    case kOptShare:
      return "gpu-share";
    case kOptPriority:
      return "gpu-priority";
  }
  return "?";
}

int OnOption(int val, const char* optarg, int /*remote*/) {
  try {
    const std::string value = optarg == nullptr ? "" : optarg;
    if (auto s = gs::ValidateOption(OptionName(val), value); !s.ok()) {
      slurm_error("gpuslice: %s", s.message().c_str());
      return -1;
    }
    PluginState& st = State();
    (val == kOptMem     ? st.options.mem
     : val == kOptShare ? st.options.share
                        : st.options.priority) = value;
    return 0;
  } catch (...) {
    return -1;
  }
}

std::string Env(spank_t sp, const char* name) {
  std::vector<char> buf(64 * 1024);
  if (spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size())) != ESPANK_SUCCESS) return "";
  return buf.data();
}

// Reuses the slice a batch (or salloc) step made when this step runs inside
// it on the same node with the same Slurm job: its GPUs are that slice's
// (whole GPUs would otherwise be refused as held by it).
// The environment is the user's to write: the slice named must be this
// user's, of this Slurm job, and running here.
bool ReuseParentSlice(gpuslice::client::Client& client, const std::string& parent, uint32_t job_id,
                      uid_t uid) {
  if (parent.empty() || parent.find_first_not_of("0123456789") != std::string::npos) return false;
  auto j = client.Call("GET", "/v1/jobs/" + parent);
  if (!j.ok()) return false;
  const json labels = j->value("labels", json::object());
  return j->value("state", "") == "running" && j->value("mode", "") == "external" &&
         j->value("uid", int64_t{-1}) == static_cast<int64_t>(uid) && labels.is_object() &&
         labels.value("slurm_job", "") == std::to_string(job_id);
}

int UserInit(spank_t sp) {
  PluginState& st = State();
  uint32_t job_id = 0, step_id = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    slurm_error("gpuslice: cannot read the step's identity");
    return -1;
  }
  if (gs::StepName(step_id) == "extern") return 0;  // Runs no tasks of the user.
  std::map<std::string, std::string> env;
  for (const char* k : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_SHARDS_ON_NODE", "LD_PRELOAD",
                        "LD_LIBRARY_PATH", "GPUSLICE_JOB_ID"}) {
    if (std::string v = Env(sp, k); !v.empty()) env[k] = v;
  }
  auto gres = gs::StepGresFromEnv(env);
  if (!gres.ok()) {
    st.failure = gres.status().message();
    return 0;
  }
  if (gres->gpu_minors.empty() && gres->shards == 0 && !st.options.any()) return 0;  // No GPU.

  gpuslice::client::Client client(st.config.socket);
  auto gpus = client.Call("GET", "/v1/gpus");
  if (!gpus.ok()) {
    std::string why =
        "cannot reach gpusliced (" + st.config.socket + "): " + gpus.status().message();
    if (st.config.required) {
      st.failure = why;
    } else {
      slurm_info("gpuslice: %s; the step runs without a slice", why.c_str());
    }
    return 0;
  }
  auto it = env.find("GPUSLICE_JOB_ID");
  if (it != env.end() && ReuseParentSlice(client, it->second, job_id, uid)) return 0;

  gs::StepId step{job_id, gs::StepName(step_id), static_cast<uint32_t>(uid)};
  auto body =
      gs::BuildSliceRequest(st.options, *gres, step, st.config, gpus->value("gpus", json::array()));
  if (!body.ok()) {
    st.failure = body.status().message();
    return 0;
  }
  auto created = client.Call("POST", "/v1/jobs", &*body);
  if (!created.ok()) {
    st.failure = "gpusliced refused the slice: " + created.status().message();
    return 0;
  }
  st.slice_id = created->value("id", uint64_t{0});
  // The slice's environment (the owner's view of the job carries it).
  auto view = client.Call("GET", "/v1/jobs/" + std::to_string(st.slice_id));
  if (!view.ok() || !view->contains("env")) {
    st.failure = "cannot read the slice's environment: " +
                 (view.ok() ? std::string("no env in the answer") : view.status().message());
    return 0;
  }
  for (const auto& [k, v] : gs::StepEnvironment((*view)["env"], env)) {
    if (spank_setenv(sp, k.c_str(), v.c_str(), 1) != ESPANK_SUCCESS) {
      st.failure = "cannot set " + k + " in the step's environment";
      return 0;
    }
  }
  slurm_info("gpuslice: job %u step %s: slice %llu", job_id, step.step.c_str(),
             static_cast<unsigned long long>(st.slice_id));
  return 0;
}

}  // namespace

extern "C" {

// SPANK_PLUGIN(gpuslice, 1), each symbol exported (the library hides the rest).
#define GPUSLICE_EXPORT __attribute__((visibility("default")))
GPUSLICE_EXPORT extern const char plugin_name[] = "gpuslice";
GPUSLICE_EXPORT extern const char plugin_type[] = "spank";
GPUSLICE_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
GPUSLICE_EXPORT extern const unsigned int spank_plugin_version = 1;

GPUSLICE_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  try {
    PluginState& st = State();
    std::vector<std::string> args(av, av + ac);
    auto config = gs::ParsePluginArgs(args);
    if (!config.ok()) {
      slurm_error("gpuslice: plugstack.conf: %s", config.status().message().c_str());
      return -1;
    }
    st.config = *config;
    if (spank_context() == S_CTX_SLURMD) return 0;
    static struct spank_option options[] = {
        {const_cast<char*>("gpu-mem"), const_cast<char*>("SIZE"),
         const_cast<char*>("GPU memory of this job's slice per GPU (e.g. 4G; gpuslice)"), 1,
         kOptMem, OnOption},
        {const_cast<char*>("gpu-share"), const_cast<char*>("PCT"),
         const_cast<char*>("share of the GPU's compute for the slice (e.g. 30; gpuslice)"), 1,
         kOptShare, OnOption},
        {const_cast<char*>("gpu-priority"), const_cast<char*>("PRIO"),
         const_cast<char*>("high, normal or low: the slice's priority on the GPU (gpuslice)"), 1,
         kOptPriority, OnOption},
    };
    for (struct spank_option& o : options) {
      if (spank_option_register(sp, &o) != ESPANK_SUCCESS) {
        slurm_error("gpuslice: cannot register --%s", o.name);
        return -1;
      }
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

GPUSLICE_EXPORT int slurm_spank_user_init(spank_t sp, int, char**) {
  try {
    if (!spank_remote(sp)) return 0;
    return UserInit(sp);
  } catch (const std::exception& e) {
    State().failure = std::string("internal error: ") + e.what();
    return 0;
  } catch (...) {
    State().failure = "internal error";
    return 0;
  }
}

GPUSLICE_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  if (!spank_remote(sp)) return 0;
  const std::string& failure = State().failure;
  if (failure.empty()) return 0;
  // The task's stderr is the user's terminal (srun) or the job's error file.
  std::fprintf(stderr, "gpuslice: %s\n", failure.c_str());
  std::fflush(stderr);
  return -1;
}

GPUSLICE_EXPORT int slurm_spank_task_exit(spank_t sp, int, char**) {
  try {
    if (!spank_remote(sp)) return 0;
    int status = 0;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS) return 0;
    PluginState& st = State();
    const int code = gs::ExitCodeOfWaitStatus(status);
    if (st.exit_code <= 0) st.exit_code = code;
    return 0;
  } catch (...) {
    return 0;
  }
}

GPUSLICE_EXPORT int slurm_spank_exit(spank_t sp, int, char**) {
  try {
    if (!spank_remote(sp)) return 0;
    PluginState& st = State();
    if (st.slice_id == 0) return 0;
    // As root again: released now rather than when the daemon notices that
    // this process is gone (which it also does, within 100 ms), with the
    // step's exit status for its record (else every step reads exit 0).
    gpuslice::client::Client client(st.config.socket);
    json body = {{"exit_code", st.exit_code}};
    (void)client.Call("POST", "/v1/jobs/" + std::to_string(st.slice_id) + "/cancel",
                      st.exit_code >= 0 ? &body : nullptr);
    st.slice_id = 0;
    return 0;
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
