#pragma once

// The directory of the compute arbiter's boards (GPUSLICE_COORD_DIR,
// docs/COMPUTE.md "Arbitration by the daemon"): one board per GPU, written
// only by the daemon, read by every job. Nobody but the daemon may create,
// replace or remove anything in it, so it is the daemon's and 0755.
//
// (Before the arbiter, the shims of all users shared writable coordination
// files here, in a 02770 directory of the socket's group: any member of that
// group could take every slice's turns. Those files are removed.)

#include <string>

#include "core/status.h"

namespace gpuslice::daemon {

// Creates `path` (or fixes an existing one): the daemon's, mode 0755, and
// removes the coordination files (`*.coord`) a previous version let jobs
// share there. Refuses a path that is not a directory, is a symbolic link,
// or belongs to another user: someone else could then swap the boards.
core::Status PrepareCoordDir(const std::string& path);

}  // namespace gpuslice::daemon
