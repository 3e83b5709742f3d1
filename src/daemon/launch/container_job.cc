#include "daemon/launch/container_job.h"

namespace gpuslice::daemon {

core::Result<ContainerEngine> ParseContainerEngine(std::string_view name) {
  if (name == "podman") return ContainerEngine::kPodman;
  if (name == "docker") return ContainerEngine::kDocker;
  return core::InvalidArgumentError("--engine: expected podman or docker, got '" +
                                    std::string(name.substr(0, 64)) + "'");
}

std::string_view ContainerEngineName(ContainerEngine engine) {
  return engine == ContainerEngine::kDocker ? "docker" : "podman";
}

core::Status ValidateImageName(std::string_view image) {
  if (image.empty() || image.size() > 255) {
    return core::InvalidArgumentError("--image: an image name of 1 to 255 characters is needed");
  }
  if (image[0] == '-') {
    return core::InvalidArgumentError("--image: '" + std::string(image.substr(0, 64)) +
                                      "' is not an image name (it starts with '-')");
  }
  for (char c : image) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/' || c == ':' || c == '@';
    if (!ok) {
      return core::InvalidArgumentError("--image: '" + std::string(image.substr(0, 64)) +
                                        "' holds a character an image name cannot ('" +
                                        std::string(1, c) + "')");
    }
  }
  return core::Status::Ok();
}

core::Result<std::vector<std::string>> ContainerSliceFlags(const CdiSlice& slice) {
  return core::PlainContainerFlags(slice.device_nodes, slice.mounts, slice.env);
}

std::string ContainerName(std::string_view cgroup_parent) {
  std::string name;
  for (char c : cgroup_parent) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (name.empty() && !ok) continue;  // Engines want a letter or digit first.
    name += ok ? c : '-';
  }
  return name.empty() ? "gpuslice-job" : name;
}

std::vector<std::string> ContainerCommand(const ContainerRun& run) {
  std::vector<std::string> a = {run.engine_path};
  const bool podman = run.engine == ContainerEngine::kPodman;
  // Podman's systemd manager takes a slice name, not a path: cgroupfs puts
  // the container exactly below the job's cgroup.
  if (podman) a.insert(a.end(), {"--cgroup-manager", "cgroupfs"});
  a.insert(a.end(), {"run", "--rm"});
  // A restarted (requeued) job may meet its earlier container, left by a
  // daemon that was killed; podman replaces it.
  if (podman) a.push_back("--replace");
  a.insert(a.end(), {"--name", ContainerName(run.cgroup_parent)});
  if (!run.cgroup_parent.empty()) a.insert(a.end(), {"--cgroup-parent", run.cgroup_parent});
  a.insert(a.end(), {"--user", std::to_string(run.uid) + ":" + std::to_string(run.gid)});
  for (uint32_t g : run.groups) {
    if (g != run.gid) a.insert(a.end(), {"--group-add", std::to_string(g)});
  }
  if (run.uid != 0) {
    // The caller, not root: no capability, and no setuid file in the image
    // may give one (the mounted directory is reached with the caller's
    // rights only, and the limits page stays read-only).
    a.insert(a.end(), {"--cap-drop", "all", "--security-opt", "no-new-privileges"});
  }
  a.insert(a.end(), {"-v", run.cwd + ":" + run.cwd, "-w", run.cwd});
  a.insert(a.end(), run.engine_args.begin(), run.engine_args.end());
  a.insert(a.end(), run.slice_flags.begin(), run.slice_flags.end());
  a.push_back(run.image);
  a.insert(a.end(), run.command.begin(), run.command.end());
  return a;
}

}  // namespace gpuslice::daemon
