// JobSetup: what a job is given to run in its slice. See job_setup.h.

#include "daemon/setup/job_setup.h"

#include "core/strings.h"
#include "daemon/elastic/elastic_jobs.h"
#include "daemon/suspend/suspender.h"

namespace gpuslice::daemon {

using core::Job;
using core::JobState;

std::vector<std::string> JobSetup::JobEnvironment(const Job& job) const {
  const std::vector<std::string>& job_env = hooks_.job_env();
  // The caller's environment, minus what the slice decides.
  auto overridden = [&](const std::string& e) {
    for (const char* k :
         {"CUDA_VISIBLE_DEVICES=", "GPUSLICE_SLICE=", "GPUSLICE_JOB_ID=", "GPUSLICE_MEMORY_LIMIT=",
          "GPUSLICE_COORD_DIR=", "GPUSLICE_GPUS_FILE=", "GPUSLICE_LIMITS="}) {
      if (e.rfind(k, 0) == 0) return true;
    }
    for (const std::string& forced : job_env) {
      if (e.rfind(forced.substr(0, forced.find('=') + 1), 0) == 0) return true;
    }
    return false;
  };
  std::vector<std::string> env;
  std::string preload, libpath;
  for (const std::string& e : job.env) {
    if (overridden(e)) continue;
    if (e.rfind("LD_PRELOAD=", 0) == 0) {
      preload = e.substr(11);
    } else if (e.rfind("LD_LIBRARY_PATH=", 0) == 0) {
      libpath = e.substr(16);
    } else {
      env.push_back(e);
    }
  }
  env.push_back("CUDA_VISIBLE_DEVICES=" + core::Join(job.allocation.gpu_uuids, ","));
  env.push_back("GPUSLICE_JOB_ID=" + std::to_string(job.id));
  if (!job.region_path.empty()) env.push_back("GPUSLICE_SLICE=" + job.region_path);
  const std::string limits_path = regions_.LimitsPathOf(job.region_path);
  if (!limits_path.empty()) env.push_back("GPUSLICE_LIMITS=" + limits_path);
  if (IsElastic(job)) env.push_back("GPUSLICE_GPUS_FILE=" + JobDir(job.id) + "/gpus");
  if (!options_.coord_dir.empty()) env.push_back("GPUSLICE_COORD_DIR=" + options_.coord_dir);
  if (!options_.shim_path.empty()) {
    env.push_back("LD_PRELOAD=" + options_.shim_path + (preload.empty() ? "" : ":" + preload));
  } else if (!preload.empty()) {
    env.push_back("LD_PRELOAD=" + preload);
  }
  if (hooks_.simulated() && !options_.sim_lib_dir.empty()) {
    libpath = options_.sim_lib_dir + (libpath.empty() ? "" : ":" + libpath);
  }
  if (!libpath.empty()) env.push_back("LD_LIBRARY_PATH=" + libpath);
  for (const std::string& forced : job_env) env.push_back(forced);
  return env;
}

SliceLimits JobSetup::SliceLimitsOf(const Job& job) const {
  SliceLimits limits;
  limits.job_id = job.id;
  limits.uid = job.uid;
  limits.gid = job.gid;
  limits.name = job.request.name;
  limits.uuids = job.allocation.gpu_uuids;
  limits.memory_bytes_per_device = job.allocation.memory_bytes_per_gpu;
  limits.compute_milli = job.allocation.compute_milli;
  limits.work_conserving = job.request.compute_mode == core::ComputeMode::kWorkConserving;
  limits.priority = job.request.priority;
  // A paused job stays paused through a resize or a priority change (the
  // page is rewritten whole); Resume and the idle reclaim set it explicitly.
  if (auto l = table_.live().find(job.id); l != table_.live().end())
    limits.launches_paused = l->second.paused;
  if (job.state == JobState::kSuspended) {
    // Suspended: its GPUs are others' now. A process the suspension missed,
    // or a new one, may allocate nothing and launch nothing there.
    limits.memory_bytes_per_device = 0;
    limits.launches_paused = true;
    // And a process that makes a CUDA call asks for a resume rather than
    // fail (or block in the driver) until its owner types one.
    if (options_.resume_on_demand) limits.suspension = Suspender::SuspensionId(job);
  }
  limits.shared_gid = external_.SharedGidOf(job);
  TakeTurnsWithoutAShare(job, &limits);
  return limits;
}

void JobSetup::TakeTurnsWithoutAShare(const Job& job, SliceLimits* limits) {
  // A part of a GPU without a compute share still shares that GPU with the
  // slices beside it. Left out of the turns, it would launch freely and the
  // GPU's own time-slicing would give it half the GPU against a
  // high-priority 50% slice (57% against 27%). It takes turns with the smallest
  // share there is, work-conserving: it runs on whatever the others leave,
  // yields to their priority and their shares, and is never capped alone.
  if (job.request.kind == core::RequestKind::kFraction && limits->compute_milli == 0) {
    limits->compute_milli = kShareOfNoShareMilli;
    limits->work_conserving = true;
    limits->no_share = true;
  }
}

core::Result<CdiSlice> JobSetup::ContainerOf(const Caller& caller, uint64_t id) const {
  auto it = table_.jobs().find(id);
  if (it == table_.jobs().end()) return core::NotFoundError("no job " + std::to_string(id));
  const Job& job = it->second;
  GPUSLICE_RETURN_IF_ERROR(CheckOwner(caller, job));
  if (job.state != JobState::kRunning || job.region_path.empty()) {
    return core::FailedPreconditionError("job " + std::to_string(id) + " is " +
                                         std::string(core::JobStateName(job.state)) +
                                         ": only a running job has a slice to join");
  }
  return containers_.SliceOf(job);
}

std::string JobSetup::CgroupParentOf(uint64_t id) const {
  auto it = table_.jobs().find(id);
  if (it != table_.jobs().end() && it->second.mode == core::JobMode::kExternal) return "";
  return launcher_.CgroupParent(id);
}

std::string JobSetup::JobDir(uint64_t id) const {
  return options_.jobs_dir + "/" + std::to_string(id);
}

std::string JobSetup::StartedText(const Job& job) {
  return "on " +
         (job.allocation.gpu_uuids.empty() ? std::string("-")
                                           : core::Join(job.allocation.gpu_uuids, ",")) +
         (job.pid ? ", pid " + std::to_string(job.pid) : "");
}

}  // namespace gpuslice::daemon
