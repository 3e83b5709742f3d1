#pragma once

// The per-GPU coordination file (coord_layout.h, docs/COMPUTE.md): open or
// create it, join it as a member of a slice, and advance the schedule
// (compute_policy.h) under the decision lease.
//
// Thread safety: any number of threads and processes may use one file at
// once. Tick and Join take the lease (try-only, never waiting for it);
// everything else is atomics on the caller's own member entry.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "slice/compute/compute_policy.h"
#include "slice/compute/coord_layout.h"

namespace gpuslice::slice {

// CLOCK_MONOTONIC in ns: the clock of every timestamp in the file (one
// clock for all processes of a host).
uint64_t MonotonicNs();

// "<dir>/gpu-<uuid>.coord", the UUID lower-cased without its GPU-/MIG-
// prefix (so both spellings of one device meet in one file).
std::string CoordPath(const std::string& dir, std::string_view uuid);

// A stable non-zero key for a slice, from its region's path and creation
// time (two slices never share both).
uint64_t SliceKey(std::string_view region_path, uint64_t created_unix_ns);

class Coordinator {
 public:
  // Opens the file at `path` or creates it (mode `mode`; 0660 lets a group
  // share it, world access is refused). Creation is filled privately and
  // published with link(2), so nobody maps a half-made file.
  static core::Result<std::unique_ptr<Coordinator>> OpenOrCreate(const std::string& path,
                                                                 std::string_view uuid,
                                                                 mode_t mode);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  coord::CoordHeader& header() const { return *header_; }
  coord::SliceEntry& slice(uint32_t index) const;
  coord::MemberEntry& member(uint32_t index) const;

  // Finds or adds the slice `key` and claims a member entry in it for
  // `pid`. Returns the member index. ResourceExhausted when full of live
  // entries; Unavailable when the lease stays busy.
  core::Result<uint32_t> Join(uint64_t key, int32_t pid, uint64_t now_ns);
  // Frees member `index` if `pid` still owns it.
  void Leave(uint32_t index, int32_t pid);
  // Refreshes the slice's configuration (from its region).
  void Configure(uint32_t member_index, uint32_t share_milli, coord::Mode mode,
                 uint32_t priority);

  // Advances the schedule to `now_ns` if the lease is free (or stale).
  // False when another process is deciding right now.
  bool Tick(uint64_t now_ns, const PolicyParams& params);

  // Sleeps until turn_seq differs from `seq`, at most `timeout_ns` (a futex
  // on the shared word).
  void WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const;

 private:
  Coordinator(void* base);
  bool TryLock(uint64_t now_ns);
  void Unlock();

  void* base_;
  coord::CoordHeader* header_;
};

}  // namespace gpuslice::slice
