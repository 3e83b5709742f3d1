// ContainerJobs: CDI specs of running jobs, what a container joining a
// slice gets, and container jobs (container_jobs.h).

#include "daemon/containers/container_jobs.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>

#include "core/strings.h"
#include "daemon/base/log.h"
#include "daemon/launch/container_job.h"

namespace gpuslice::daemon {

using core::Job;

CdiSlice ContainerJobs::SliceOf(const Job& job) const {
  const InventorySnapshot& inventory = jobs_.inventory();
  CdiSlice c;
  c.job_id = job.id;
  auto exists = [](const std::string& p) { return access(p.c_str(), F_OK) == 0; };
  // Device nodes: the job's GPUs (real ones only: the simulated GPU has
  // none), and the driver's control nodes.
  if (!inventory.simulated()) {
    for (uint32_t g : job.allocation.gpu_indices) {
      const std::string node = "/dev/nvidia" + std::to_string(g);
      if (exists(node)) c.device_nodes.push_back(node);
    }
    for (const char* node : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) {
      if (exists(node)) c.device_nodes.push_back(node);
    }
    // A MIG instance is reached only through its capability nodes (the
    // driver's /proc file says which); the GPU's device minor is taken as
    // its index, as for /dev/nvidiaN above.
    std::string minors;
    for (size_t i = 0; i < job.allocation.gpu_uuids.size() && i < job.allocation.gpu_indices.size();
         ++i) {
      const uint32_t g = job.allocation.gpu_indices[i];
      if (g >= inventory.gpus.size()) continue;
      for (const MigInstance& m : inventory.gpus[g].mig) {
        if (m.uuid != job.allocation.gpu_uuids[i]) continue;
        if (minors.empty()) {
          std::ifstream in(kMigMinorsPath);
          minors.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        for (const std::string& node :
             MigCapabilityNodes(minors, g, m.gpu_instance_id, m.compute_instance_id)) {
          if (exists(node)) c.device_nodes.push_back(node);
        }
      }
    }
  }
  // The shim and the driver's libraries, where the environment points. A
  // daemon in a container sees the driver under its driver root: it checks
  // the files there and names them as the host does (host_library).
  if (!options_.shim_path.empty()) c.mounts.push_back({options_.shim_path, kCdiShimPath, true});
  auto dir_of = [](const std::string& p) {
    return p.rfind('/') == std::string::npos ? std::string() : p.substr(0, p.rfind('/'));
  };
  std::string driver_dir = inventory.simulated() ? options_.sim_lib_dir : "";
  std::string host_driver_dir = driver_dir;
  if (driver_dir.empty()) {
    driver_dir = dir_of(inventory.library);
    host_driver_dir = inventory.host_library.empty() ? driver_dir : dir_of(inventory.host_library);
  }
  for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"}) {
    if (!driver_dir.empty() && exists(driver_dir + "/" + lib)) {
      c.mounts.push_back(
          {host_driver_dir + "/" + lib, std::string(kCdiDriverDir) + "/" + lib, true});
    }
  }
  // The slice: the job's region read-write (as its processes on the host
  // have it), the daemon's limits page read-only, the coordination
  // directory as it is (its own permissions decide), at the same paths.
  if (!job.region_path.empty()) c.mounts.push_back({job.region_path, job.region_path, false});
  const std::string limits_path = jobs_.limits_path(job.region_path);
  if (!limits_path.empty()) {
    c.mounts.push_back({limits_path, limits_path, true});
    // The members file beside it (the shim's reports to the compute
    // arbiter: job-writable), once the arbiter made it; without it the
    // container's launches would not take turns.
    const std::string members = limits_path.substr(0, limits_path.rfind('/')) + "/members";
    if (exists(members)) c.mounts.push_back({members, members, false});
  }
  if (const uint32_t gid = jobs_.shared_gid(job); gid != 0) c.additional_gids.push_back(gid);
  if (!options_.coord_dir.empty()) {
    c.mounts.push_back({options_.coord_dir, options_.coord_dir, false});
  }
  if (const std::string gpus = jobs_.gpus_file(job); !gpus.empty()) {
    c.mounts.push_back({gpus, gpus, true});
    c.env.push_back("GPUSLICE_GPUS_FILE=" + gpus);
  }
  c.env.push_back("CUDA_VISIBLE_DEVICES=" + core::Join(job.allocation.gpu_uuids, ","));
  c.env.push_back("GPUSLICE_JOB_ID=" + std::to_string(job.id));
  if (!job.region_path.empty()) c.env.push_back("GPUSLICE_SLICE=" + job.region_path);
  if (!limits_path.empty()) c.env.push_back("GPUSLICE_LIMITS=" + limits_path);
  if (!options_.coord_dir.empty()) c.env.push_back("GPUSLICE_COORD_DIR=" + options_.coord_dir);
  if (!options_.shim_path.empty()) c.env.push_back(std::string("LD_PRELOAD=") + kCdiShimPath);
  c.env.push_back(std::string("LD_LIBRARY_PATH=") + kCdiDriverDir);
  for (const std::string& forced : jobs_.job_env()) {
    c.env.push_back(forced);
    // The simulated GPU's state, read-write, its folder only when it holds
    // nothing else (SimStateMount).
    if (forced.rfind("GPUSLICE_SIM_STATE=", 0) == 0) {
      if (auto m = SimStateMount(forced.substr(19)); m) c.mounts.push_back(*m);
    }
  }
  return c;
}

void ContainerJobs::SyncCdi() {
  if (!cdi_.enabled()) return;
  std::map<uint64_t, CdiSlice> slices;
  jobs_.for_each_running([&](const Job& job) { slices[job.id] = SliceOf(job); });
  core::Status s = cdi_.Sync(slices);
  if (!s.ok() && !cdi_error_logged_) {
    LogWarn("container engines will not see the slices: " + s.message());
  }
  cdi_error_logged_ = !s.ok();
}

void ContainerJobs::WriteCdi(const Job& job) {
  if (cdi_.enabled()) (void)cdi_.Write(SliceOf(job));
}

core::Status ContainerJobs::CheckSpec(const std::optional<std::string>& image,
                                      const std::optional<std::string>& engine_name, bool shell,
                                      const std::string& cwd, Job* job) const {
  if (!image) {
    if (engine_name) return core::InvalidArgumentError("--engine goes with --image");
    return core::Status::Ok();
  }
  GPUSLICE_RETURN_IF_ERROR(ValidateImageName(*image));
  GPUSLICE_ASSIGN_OR_RETURN(ContainerEngine engine,
                            ParseContainerEngine(engine_name.value_or("podman")));
  if (shell) {
    return core::InvalidArgumentError(
        "--image: a container job is started by the daemon; not with run -i or shell");
  }
  if (!launcher_.UsesCgroups()) {
    // Without the job's cgroup the engine's processes (conmon, the
    // container) would leave the job: nothing could end or account them.
    return core::FailedPreconditionError(
        "--image: container jobs need the daemon to track jobs by cgroup, which it does not "
        "here (" +
        launcher_.Tracking() + ")");
  }
  if (cwd.find(':') != std::string::npos || cwd.find(',') != std::string::npos) {
    return core::InvalidArgumentError("--image: the working directory '" + cwd.substr(0, 200) +
                                      "' holds ':' or ',', which an engine's -v cannot mount; run "
                                      "from another directory");
  }
  job->image = *image;
  job->engine = std::string(ContainerEngineName(engine));
  return core::Status::Ok();
}

core::Result<std::vector<std::string>> ContainerJobs::Argv(const Job& job) const {
  // Again at every start: a job queued by a daemon that took more names
  // (or a requeued one) must not hand root's engine a path or a transport.
  GPUSLICE_RETURN_IF_ERROR(ValidateImageName(job.image));
  ContainerRun run;
  GPUSLICE_ASSIGN_OR_RETURN(run.engine, ParseContainerEngine(job.engine));
  const bool docker = run.engine == ContainerEngine::kDocker;
  run.engine_path = docker ? options_.docker : options_.podman;
  run.engine_args = docker ? options_.docker_args : options_.podman_args;
  run.uid = job.uid;
  run.gid = job.gid;
  run.groups = jobs_.gids_of(job.user, job.gid);
  run.cwd = job.cwd;
  run.cgroup_parent = launcher_.CgroupParent(job.id);
  if (run.cgroup_parent.empty()) {
    return core::FailedPreconditionError("the job has no cgroup to hold its container");
  }
  GPUSLICE_ASSIGN_OR_RETURN(run.slice_flags, ContainerSliceFlags(SliceOf(job)));
  run.image = job.image;
  run.command = job.argv;
  return ContainerCommand(run);
}

void ContainerJobs::RemoveContainer(const Job& job) {
  // The engine removes a container that ended by itself (--rm); one killed
  // with its job (cancel, preemption, a time limit: conmon dies too) stays
  // in its store, and would keep the name.
  auto engine = ParseContainerEngine(job.engine);
  if (!engine.ok()) return;
  const bool podman = *engine == ContainerEngine::kPodman;
  std::vector<std::string> argv = {podman ? options_.podman : options_.docker, "rm", "-f"};
  if (podman) argv.push_back("--ignore");
  const std::string parent = launcher_.CgroupParent(job.id);
  if (parent.empty()) return;
  argv.push_back(ContainerName(parent));
  LogInfo("job " + std::to_string(job.id) + ": removing its container " + argv.back());
  // A container whose conmon was killed with it (SIGKILL after the grace)
  // is still "running" to podman: the first `rm -f` waits for an exit file
  // nobody writes, fails after ~5 s and marks it exited; the next succeeds.
  launcher_.RunHelper(argv, EngineEnvironment(), /*attempts=*/4);
}

std::vector<std::string> ContainerJobs::EngineEnvironment() {
  // The engine's client runs as root: nothing of the caller's environment
  // (CONTAINERS_CONF, DOCKER_HOST, ... would hand them root's engine).
  return {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
          "LANG=C.UTF-8"};
}

}  // namespace gpuslice::daemon
