#pragma once

// `gpuslice container-args --compose SERVICE ID` (pure, tested without a
// daemon): a docker-compose override fragment that puts one service into a
// running job's slice, made from the daemon's GET /v1/jobs/{id}/container
// answer (docs/CONTAINERS.md, "docker-compose"):
//
//   services:
//     "SERVICE":
//       devices: ["/dev/nvidia0", ...]
//       volumes: ["HOST:CONTAINER[:ro]", ...]
//       environment: {"K": "V", ...}
//       cgroup_parent: "/gpuslice/job-12"    # only when the daemon gives one
//
// It begins with a comment naming the job. Every scalar is written
// double-quoted, with YAML escapes for what is not printable ASCII, and '$'
// doubled (compose substitutes ${VAR} in values), so that any value reads
// back exactly as the daemon gave it.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpuslice::cli {

// A compose service name: one or more of letters, digits, '.', '_' and '-'
// (the Compose file schema's pattern). Errors name the bad character.
core::Status CheckComposeServiceName(std::string_view name);

// `text` as a YAML double-quoted scalar: printable ASCII as is except '"'
// and '\', which are escaped, and control characters and every non-ASCII
// character as an escape (\n, \t, \r, \xHH, \uHHHH, \UHHHHHHHH), so that the
// result is ASCII. InvalidArgument when `text` is not valid UTF-8.
core::Result<std::string> YamlQuoted(std::string_view text);

// The override fragment for `service` from `container` (the daemon's JSON).
// cgroup_parent is optional (absent or "": no key). Errors: a bad service
// name; a field missing or of the wrong type; a device or path holding ':'
// (compose's short syntax splits on it) or empty; an env entry without '='
// or whose name is not [A-Za-z_][A-Za-z0-9_]*, or named twice; text that is
// not UTF-8.
core::Result<std::string> ComposeFragment(std::string_view service,
                                          const nlohmann::json& container);

}  // namespace gpuslice::cli
