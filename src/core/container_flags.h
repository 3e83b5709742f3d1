#pragma once

// A job's slice as a container engine's plain flags (--device, -v, -e): what
// engines without CDI (Docker 20.10) need, and what the daemon passes to the
// engine of a container job. One builder for the daemon and the CLI.

#include <string>
#include <vector>

#include "core/status.h"

namespace gpuslice::core {

struct ContainerMount {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  friend bool operator==(const ContainerMount&, const ContainerMount&) = default;
};

// `--device NODE`, `-v HOST:CONTAINER[:ro]`, `-e K=V`, one word each; an
// error naming the path when one holds ':', which -v cannot carry.
Result<std::vector<std::string>> PlainContainerFlags(const std::vector<std::string>& device_nodes,
                                                     const std::vector<ContainerMount>& mounts,
                                                     const std::vector<std::string>& env);

}  // namespace gpuslice::core
