#pragma once

// A job that is a container: `gpuslice run|submit --image IMAGE [--engine
// podman|docker] -- CMD...` (docs/CONTAINERS.md, "The container as the job").
// The daemon's launcher starts the engine's client (`podman run ...`) as the
// job's leader, in the job's cgroup; the container itself is created under
// that cgroup (--cgroup-parent), so every process of it is the job's: ps,
// cancel, preemption, the watchdog and accounting see it as they see a host
// job's processes. The command runs as the caller's uid and gids (never root
// unless root asked), without capabilities and unable to gain privileges,
// with the caller's working directory mounted at the same path, and the slice
// injected by the same flags `gpuslice container-args` prints.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "daemon/launch/cdi.h"

namespace gpuslice::daemon {

enum class ContainerEngine { kPodman, kDocker };
// "podman" (the default when only --image is given) or "docker".
core::Result<ContainerEngine> ParseContainerEngine(std::string_view name);
std::string_view ContainerEngineName(ContainerEngine engine);

// Whether `image` is a plain image reference, the only kind of name a
// container job may give: name[:tag][@digest] as the distribution
// reference grammar has it ("pytorch/pytorch:2.5.1-cuda12.4",
// "localhost:5000/team/train:3", "localhost/x@sha256:<64 hex>"), at most
// 255 characters. The engine runs as root and opens whatever a name points
// at, so everything else is refused with the reason (docs/CONTAINERS.md,
// "Which image names are accepted"):
//   - a transport prefix ("oci-archive:", "docker-archive:", "dir:",
//     "containers-storage:", "docker://", ...): root's podman would read a
//     path or store the user names (/etc/shadow, /root);
//   - a path ("/x", "./x", "../x", "~x", a "." or ".." component, "//");
//   - anything starting with '-' (an option of the engine's);
//   - a character no reference holds, upper-case letters outside the
//     registry host, a malformed tag, digest, host or port.
// The engine is also told never to pull (ContainerCommand), so an accepted
// name runs only an image already in root's store.
core::Status ValidateImageName(std::string_view image);

// The slice as an engine's plain flags: --device NODE, -v HOST:CTR[:ro],
// -e K=V (what Docker 20.10, without CDI, needs; podman takes the same).
// Refuses a path holding ':' (-v cannot carry it).
core::Result<std::vector<std::string>> ContainerSliceFlags(const CdiSlice& slice);

struct ContainerRun {
  ContainerEngine engine = ContainerEngine::kPodman;
  std::string engine_path;               // "/usr/bin/podman".
  std::vector<std::string> engine_args;  // The admin's (config podman_args / docker_args).
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // The caller's supplementary groups.
  std::string cwd;               // Mounted at the same path, the command's working directory.
  std::string cgroup_parent;     // "/gpuslice/job-12": the job's cgroup.
  std::vector<std::string> slice_flags;  // ContainerSliceFlags.
  std::string image;
  std::vector<std::string> command;  // Empty: the image's own.
};

// The container's name, from the job's cgroup ("/gpuslice/job-12" ->
// "gpuslice-job-12"): engines' names are global to the machine, and a
// daemon's cgroup base is its own (two daemons, say two tests', both have a
// job 12).
std::string ContainerName(std::string_view cgroup_parent);

// The engine client's argv: `podman --cgroup-manager cgroupfs run --rm
// --pull=never --replace --name gpuslice-job-12 --cgroup-parent /gpuslice/job-12 --user
// UID:GID [--group-add G]... [--cap-drop all --security-opt
// no-new-privileges] -v CWD:CWD -w CWD ADMIN_ARGS... SLICE_FLAGS... IMAGE
// CMD...` (docker: `--pull never`, no podman-only flags).
std::vector<std::string> ContainerCommand(const ContainerRun& run);

}  // namespace gpuslice::daemon
