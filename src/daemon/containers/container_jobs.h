#pragma once

// Containers, as a component Service owns (docs/CONTAINERS.md): what a
// container joining a running job's slice is given (its CDI spec, the
// flags of `gpuslice container-args`), the CDI specs of the running jobs
// kept in the admin's directory, and container jobs (`--image`): their
// checks at submission, the engine command that is their leader, and the
// removal of a container that ended with its job.
//
// It owns the CDI directory's state and the engines' settings; what it
// needs of a job beyond the job itself (its slice's group, an elastic
// job's GPU file, the limits page beside a region, a user's groups, the
// GPUs and the forced environment as the daemon has them now) it asks the
// job table (Service) through `Jobs`. One thread, as Service.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/jobs/job.h"
#include "core/status.h"
#include "daemon/launch/cdi.h"
#include "daemon/launch/launcher.h"
#include "daemon/node/inventory.h"

namespace gpuslice::daemon {

class ContainerJobs {
 public:
  // The admin's settings (ServiceOptions).
  struct Options {
    std::string shim_path;    // Mounted into containers at kCdiShimPath.
    std::string sim_lib_dir;  // The simulated driver, when the GPUs are simulated.
    std::string coord_dir;    // GPUSLICE_COORD_DIR ("": none).
    std::string cdi_dir;      // Where engines read CDI specs ("": none written).
    std::string podman = "/usr/bin/podman";
    std::string docker = "/usr/bin/docker";
    std::vector<std::string> podman_args;
    std::vector<std::string> docker_args;
  };
  // What it asks of the job table.
  struct Jobs {
    // The GPUs as last read, and "K=V" forced into every job: read at each
    // call, the daemon may change them.
    std::function<const InventorySnapshot&()> inventory;
    std::function<const std::vector<std::string>&()> job_env;
    // The group a job's slice files are shared with (0: none).
    std::function<uint32_t(const core::Job&)> shared_gid;
    // An elastic job's GPU file ("" for other jobs).
    std::function<std::string(const core::Job&)> gpus_file;
    // The daemon's limits page beside a region ("" when none).
    std::function<std::string(const std::string& region_path)> limits_path;
    // A user's gids, the primary one included.
    std::function<std::vector<uint32_t>(const std::string& user, uint32_t gid)> gids_of;
    // Calls `visit` with each running job.
    std::function<void(const std::function<void(const core::Job&)>& visit)> for_each_running;
  };

  ContainerJobs(Options options, Jobs jobs, Launcher& launcher)
      : options_(std::move(options)), jobs_(std::move(jobs)), launcher_(launcher) {}

  // Starts writing CDI specs (the daemon's start); none before.
  void OpenCdi() { cdi_ = CdiSpecs(options_.cdi_dir); }
  bool cdi_enabled() const { return cdi_.enabled(); }

  // What a container joining `job`'s slice is given.
  CdiSlice SliceOf(const core::Job& job) const;
  // The CDI directory holds exactly the running jobs' specs (logged once
  // while it fails: engines then do not see the slices).
  void SyncCdi();
  // One job's spec written (a start), or removed (its end).
  void WriteCdi(const core::Job& job);
  void RemoveCdi(uint64_t job_id) { cdi_.Remove(job_id); }

  // --image/--engine at submission (`shell`: run -i or shell, which the
  // daemon does not start): checked, and set on `job`.
  core::Status CheckSpec(const std::optional<std::string>& image,
                         const std::optional<std::string>& engine, bool shell,
                         const std::string& cwd, core::Job* job) const;
  // A container job's leader: the engine's `run` (container_job.h).
  core::Result<std::vector<std::string>> Argv(const core::Job& job) const;
  // Removes an ended container job's container from its engine's store.
  void RemoveContainer(const core::Job& job);
  // The environment the engine's client runs with (root's, cleaned).
  static std::vector<std::string> EngineEnvironment();

 private:
  Options options_;
  Jobs jobs_;
  Launcher& launcher_;
  CdiSpecs cdi_{""};
  bool cdi_error_logged_ = false;
};

}  // namespace gpuslice::daemon
