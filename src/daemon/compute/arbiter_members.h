#pragma once

// The arbiter's side of a slice's members file (docs/COMPUTE.md,
// "Arbitration by the daemon"): the file held open for as long as the slice
// is registered, and what the arbiter believes of what the job writes into
// it. Everything read here is untrusted input.

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "slice/compute/coord_board_layout.h"

namespace gpuslice::daemon {

// A slice's members file, held open by the arbiter for as long as the slice
// is registered (never re-opened by path: the job cannot swap it). The job
// may write anything into it, or truncate it: it is only ever read with
// pread(2), and the mapping exists only as the doorbell's futex address
// (the kernel's futex calls fault with EFAULT, never SIGBUS).
struct MembersHandle {
  uint64_t job_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string path;
  int fd = -1;
  void* map = MAP_FAILED;

  ~MembersHandle() {
    if (map != MAP_FAILED) munmap(map, slice::board::kMembersSize);
    if (fd >= 0) close(fd);
  }
  const void* doorbell() const {
    return map == MAP_FAILED ? nullptr
                             : static_cast<const char*>(map) + slice::board::kDoorbellOffset;
  }
};

// What a slice's processes report on one GPU, as far as it can be believed:
// only the flags of live members on this device count, and each field is
// checked (the file may hold anything).
struct Report {
  bool live = false;
  bool waiting = false;
  bool inflight = false;
  // Every live member reports the GPU time its work used, and
  // what they added since the previous read.
  bool gpu_time = true;
  uint64_t gpu_ns = 0;
  uint32_t doorbell = 0;
};

// What the previous read saw of each member slot's GPU time counter: the
// slot's owner word and the counter. A new owner's counter starts at zero
// (a slot is cleared when claimed).
struct GpuSeen {
  uint64_t owner = 0;
  uint64_t gpu_ns = 0;
};

// Reads the members file once (pread, never the mapping) and reduces it to a
// Report for the slice's device `device_index`; `seen` is updated.
Report ReadReport(const MembersHandle& m, uint32_t device_index, uint64_t now_ns,
                  GpuSeen (&seen)[slice::board::kMembersPerSlice]);

// The members file a job already has (a daemon restarted under it), or null
// when it is missing or not that job's user's.
std::shared_ptr<MembersHandle> OpenExistingMembers(const std::string& path, uint64_t job, uid_t uid,
                                                   gid_t gid);

}  // namespace gpuslice::daemon
