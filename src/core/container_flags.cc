#include "core/container_flags.h"

namespace gpuslice::core {

Result<std::vector<std::string>> PlainContainerFlags(const std::vector<std::string>& device_nodes,
                                                     const std::vector<ContainerMount>& mounts,
                                                     const std::vector<std::string>& env) {
  auto check = [](const std::string& path) -> Status {
    if (path.find(':') == std::string::npos) return Status::Ok();
    return FailedPreconditionError("path '" + path +
                                   "' holds ':', which a -v flag cannot carry; use CDI");
  };
  std::vector<std::string> out;
  for (const std::string& node : device_nodes) {
    GPUSLICE_RETURN_IF_ERROR(check(node));
    out.push_back("--device");
    out.push_back(node);
  }
  for (const ContainerMount& m : mounts) {
    GPUSLICE_RETURN_IF_ERROR(check(m.host_path));
    GPUSLICE_RETURN_IF_ERROR(check(m.container_path));
    out.push_back("-v");
    out.push_back(m.host_path + ":" + m.container_path + (m.read_only ? ":ro" : ""));
  }
  for (const std::string& kv : env) {
    out.push_back("-e");
    out.push_back(kv);
  }
  return out;
}

}  // namespace gpuslice::core
