#pragma once

// Finding a job's processes by what the daemon put in their environment, for
// a launch the daemon did not see finish (it was killed between recording the
// launch and recording the job's pid). The environment of a process is what
// it was exec'd with (/proc/PID/environ), so a job that changes its own
// variables is still found; a process that exec'd itself with a scrubbed
// environment is not (cgroups close that gap).

#include <cstdint>
#include <string>
#include <vector>

namespace gpuslice::daemon {

// The process groups of live processes whose environment holds every one of
// `entries` ("KEY=value", exact), sorted, without duplicates. Reads
// /proc/*/environ: as root every process, otherwise the caller's own.
std::vector<int64_t> FindProcessGroupsByEnv(const std::vector<std::string>& entries);

// The entries that identify job `job_id` of this daemon: its id and its
// slice region (whose path holds the state directory, so that two daemons on
// one machine never claim each other's jobs).
std::vector<std::string> JobIdentityEnv(uint64_t job_id, const std::string& region_path);

}  // namespace gpuslice::daemon
