#pragma once

// The directory of the shim's per-GPU coordination files for the daemon's
// jobs (GPUSLICE_COORD_DIR, docs/COMPUTE.md "The coordination file"). All
// slices on one GPU must open the same file to take turns, whatever user
// runs them, so the directory is shared by the users who may submit jobs.

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace gpuslice::daemon {

// Creates `path` (or fixes an existing one) for coordination files.
// With `group`: 02770 owned by that group. The shim creates its files 0660
// in a group-writable directory, and the setgid bit gives every file the
// directory's group, so jobs of different users in that group share them.
// Without: 0700, for a daemon whose jobs all run as its own user.
// Refuses a path that is not a directory, is a symbolic link, or belongs to
// another user: someone else could then swap or read the files.
core::Status PrepareCoordDir(const std::string& path, std::optional<uint32_t> group);

// The group the coordination directory should have for a daemon whose socket
// belongs to `socket_gid` (nullopt: the daemon's own group). A daemon that is
// not root runs every job as itself and needs no group; a root daemon runs
// jobs as the callers, who are exactly those who may open its socket.
std::optional<uint32_t> CoordDirGroup(std::optional<uint32_t> socket_gid, bool daemon_is_root,
                                      uint32_t daemon_gid);

}  // namespace gpuslice::daemon
