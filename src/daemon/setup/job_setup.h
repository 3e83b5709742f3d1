#pragma once

// What a job is given to run in its slice: its environment (the slice, the
// shim, the GPUs it may see), its slice limits (the page the shim and the
// arbiter read), its directory, the cgroup a container of it joins and what
// `gpuslice container-args` hands such a container. It owns none of the
// state it reads: the jobs are the job table's, the slice files the region
// store's, a shared group external jobs', the CDI view container jobs' and
// the cgroups the launcher's. It changes nothing; Service starts, resizes and
// pauses jobs with what it computes. One thread, as Service.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/compute/region_store.h"
#include "daemon/containers/container_jobs.h"
#include "daemon/external/external_jobs.h"
#include "daemon/launch/cdi.h"
#include "daemon/launch/launcher.h"
#include "daemon/requests/caller.h"
#include "daemon/table/job_table.h"

namespace gpuslice::daemon {

class JobSetup {
 public:
  // The share (per mille) a fraction without one takes turns with:
  // work-conserving, so alone it uses the whole GPU.
  static constexpr uint32_t kShareOfNoShareMilli = 1;

  struct Options {
    std::string jobs_dir;     // <state dir>/jobs: each job's directory is below.
    std::string shim_path;    // libgpuslice.so, preloaded into jobs ("": none).
    std::string sim_lib_dir;  // Prepended to LD_LIBRARY_PATH when simulated.
    std::string coord_dir;    // GPUSLICE_COORD_DIR ("": the shim's default).
    // PolicyConfig::resume_on_demand: a suspended job's page names its
    // suspension, so that a CUDA call asks for a resume.
    bool resume_on_demand = false;
  };
  // What it asks of the daemon: read at each call, the daemon may change them.
  struct Hooks {
    // "K=V" forced into every job (e.g. GPUSLICE_SIM_*).
    std::function<const std::vector<std::string>&()> job_env;
    // Whether the GPUs are the simulated driver's.
    std::function<bool()> simulated;
  };

  JobSetup(Options options, Hooks hooks, const JobTable& table, const RegionStore& regions,
           const ExternalJobs& external, const ContainerJobs& containers, const Launcher& launcher)
      : options_(std::move(options)),
        hooks_(std::move(hooks)),
        table_(table),
        regions_(regions),
        external_(external),
        containers_(containers),
        launcher_(launcher) {}

  // The environment a job's processes get: the caller's, plus the slice
  // (CUDA_VISIBLE_DEVICES by UUID, GPUSLICE_SLICE, the shim preloaded, the
  // simulated driver's directory when the GPUs are simulated).
  std::vector<std::string> JobEnvironment(const core::Job& job) const;
  // The slice limits of a job as it is now (a start, a resize, a pause).
  SliceLimits SliceLimitsOf(const core::Job& job) const;
  // A fraction without a compute share takes turns anyway, last (see
  // kShareOfNoShareMilli).
  static void TakeTurnsWithoutAShare(const core::Job& job, SliceLimits* limits);
  // What a container joining a running job's slice of the caller's (or
  // any, for an admin) is given (containers/container_jobs.h): what
  // `gpuslice container-args` turns into an engine's plain flags.
  core::Result<CdiSlice> ContainerOf(const Caller& caller, uint64_t id) const;
  // Job `id`'s cgroup for a container's --cgroup-parent ("" without cgroups).
  // "" for an external job: nothing of its own runs in a cgroup of ours.
  std::string CgroupParentOf(uint64_t id) const;
  // Job `id`'s directory (its logs, exit status, GPU file).
  std::string JobDir(uint64_t id) const;
  // The "started" event's message: "on GPU-0,GPU-1, pid 4242".
  static std::string StartedText(const core::Job& job);

 private:
  const Options options_;
  const Hooks hooks_;
  const JobTable& table_;
  const RegionStore& regions_;
  const ExternalJobs& external_;
  const ContainerJobs& containers_;
  const Launcher& launcher_;
};

}  // namespace gpuslice::daemon
