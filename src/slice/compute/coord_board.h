#pragma once

// The files of daemon-arbitrated compute shares (coord_board_layout.h,
// docs/COMPUTE.md "Arbitration by the daemon"): the per-GPU board (the
// daemon's decisions, read-only to jobs) and the per-slice members file (the
// slice's reports, read by the daemon as untrusted input).
//
// Creation (CreateBoard, CreateMembersFile) is the daemon's; the shim opens
// the board with BoardView and its own slice's members file with
// MembersFile. Thread safety: both views may be used from any number of
// threads; every access to the shared words is atomic.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "slice/compute/coord_board_layout.h"

namespace gpuslice::slice {

// "<dir>/gpu-<uuid>.board", the UUID spelt as in CoordPath.
std::string BoardPath(const std::string& dir, std::string_view uuid);

// Where a daemon job's members file is: dirname($GPUSLICE_LIMITS)/members
// when `limits_path` is set (the slice directory of the daemon's layout),
// else beside the region: "<dir>/job-<id>.slice" -> "<dir>/job-<id>/members"
// (the layout before the limits page), "<dir>/region" -> "<dir>/members".
std::string MembersPath(const char* limits_path, const std::string& region_path);

// Refuses a file the calling process could have written itself: writable by
// group or others, or owned by someone but root and the caller, or (for a
// caller that is not root) owned by the caller with an owner-write bit. What
// such a file says is not the daemon's word.
core::Status CheckDaemonWritten(const std::string& path, uid_t owner, mode_t mode, uid_t euid);

// Creates the board at `path` (or replaces one of another version), mode
// `mode` (0644 for a root daemon; 0444 for a daemon that is not root, whose
// jobs run as itself). Returns the daemon's writable mapping (kBoardSize
// bytes; unmap with munmap). An existing board of this version is reused:
// its slices are what a restarted arbiter recovers.
core::Result<void*> CreateOrOpenBoard(const std::string& path, std::string_view uuid, mode_t mode);

// Creates a slice's members file (O_EXCL; an old one at `path` is removed
// first), owned by `uid`:`gid` when the caller is root, with `mode` (0600;
// 0660 for a slice of its own group). Returns the open descriptor (the
// daemon keeps it; close it when done).
core::Result<int> CreateMembersFile(const std::string& path, uint64_t job_id, uid_t uid,
                                    gid_t gid, mode_t mode = 0600);

// A board, mapped read-only (the shim's side).
class BoardView {
 public:
  // Refuses a board the caller could have written (CheckDaemonWritten), of
  // the wrong size, magic or version.
  static core::Result<std::unique_ptr<BoardView>> Open(const std::string& path);
  ~BoardView();
  BoardView(const BoardView&) = delete;
  BoardView& operator=(const BoardView&) = delete;

  const board::BoardHeader& header() const { return *header_; }
  const board::BoardSlice& slice(uint32_t index) const;
  // Index of the slice of `job_id` on this board (tries `hint` first), -1.
  int32_t FindSlice(uint64_t job_id, int32_t hint) const;
  // True when the arbiter has not beaten for kArbiterStaleNs.
  bool ArbiterStale(uint64_t now_ns) const;
  // Sleeps until turn_seq differs from `seq`, at most `timeout_ns`.
  void WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const;

 private:
  explicit BoardView(void* base);
  void* base_;
  const board::BoardHeader* header_;
};

// The slice's own members file, mapped read-write (the shim's side).
class MembersFile {
 public:
  static core::Result<std::unique_ptr<MembersFile>> Open(const std::string& path);
  ~MembersFile();
  MembersFile(const MembersFile&) = delete;
  MembersFile& operator=(const MembersFile&) = delete;

  uint64_t job_id() const;
  board::MemberSlot& slot(uint32_t index) const;
  // Claims a free (or dead) slot for `pid` launching on the slice's device
  // `device_index`. ResourceExhausted when all are live.
  core::Result<uint32_t> Claim(int32_t pid, uint32_t device_index, uint64_t now_ns);
  void Leave(uint32_t index, int32_t pid);
  // Adds 1 to the doorbell and wakes the arbiter.
  void Ring();

 private:
  explicit MembersFile(void* base);
  void* base_;
  board::MembersHeader* header_;
};

}  // namespace gpuslice::slice
