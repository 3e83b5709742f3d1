#pragma once

// Who is who across PID namespaces. A process in a container (its own PID
// namespace) knows itself by a pid that means another process, or nothing,
// on the host; yet the simulated GPU's state file and a slice's region are
// shared by processes on both sides, and each side checks whether the other's
// recorded processes still live (to reclaim what dead ones held) and names
// them (NVML's process list, the daemon's tracking). The real driver records
// host pids in the kernel; a process cannot learn its host pid from inside a
// namespace, so a record here is (pid namespace, pid in it, start time), and
// a reader translates: the start time (clock ticks since boot) is the same
// in every namespace, and /proc/<pid>/status's NSpid line gives a process's
// pid in each namespace it belongs to, as seen from the reader's.
//
// Used inside CUDA processes (the shim, the simulated driver): plain C
// library calls only, no allocation, no locks; the small cache is per thread.

#include <sys/types.h>

#include <cstdint>

namespace gpuslice::slice {

// The initial PID namespace's inode number (fixed by the kernel,
// PROC_PID_INIT_INO): a reader in it sees every process of the machine.
inline constexpr uint64_t kInitPidNamespace = 0xEFFFFFFCu;

// The inode of the calling process's PID namespace (/proc/self/ns/pid), 0 if
// it cannot be read. Cached per thread and refreshed after fork.
uint64_t OwnPidNamespace();

// The calling process's start time (/proc/self/stat: right whichever
// namespace the /proc mount belongs to).
uint64_t OwnStartTime();

// /proc/<pid>/stat field 22 (clock ticks since boot), 0 if there is no such
// process or it is a zombie.
uint64_t StartTimeOf(pid_t pid);

// The pid, in the reader's own namespace, of the process that is `ns_pid` in
// namespace `ns` and started at `start_time`; 0 if the reader sees none.
// `ns` 0 (a record of an older build) or the reader's own namespace: `ns_pid`
// itself when that process still lives.
pid_t VisiblePid(uint64_t ns, pid_t ns_pid, uint64_t start_time);

enum class Liveness { kAlive, kDead, kUnknown };
// Whether the recorded process still runs, as far as the reader can tell:
// kUnknown when it lives in a namespace the reader may not see into (the
// reader is itself in a container); callers must then keep what it holds.
Liveness LivenessOf(uint64_t ns, pid_t ns_pid, uint64_t start_time);

}  // namespace gpuslice::slice
