#pragma once

// Whether a process recorded in the state file still runs. A pid alone is
// not enough: pids are reused, so a slot also records the process start
// time (/proc/<pid>/stat field 22, clock ticks since boot).

#include <sys/types.h>

#include <cstdint>

namespace gpuslice::sim {

// The start time of `pid`, or 0 if it does not exist (or is a zombie, which
// has already released everything a live process holds).
uint64_t ProcessStartTime(pid_t pid);

// True if `pid` exists, is not a zombie and started at `start_time`.
bool ProcessAlive(pid_t pid, uint64_t start_time);

}  // namespace gpuslice::sim
