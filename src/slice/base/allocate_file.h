#pragma once

// Gives a new file that will be written through a mapping its blocks now.
//
// A file sized with ftruncate(2) is sparse: its pages get their blocks (or,
// on tmpfs, their memory) on the first store through a mapping, and when the
// disk or the tmpfs is full that store faults: SIGBUS kills whoever made it
// (the root daemon, creating a slice or reading its process slots,
// and a job's processes claiming a slot). Allocated at creation, a full disk
// is an ENOSPC here, where the caller can refuse with a reason, and never a
// fault later. Used for every file of the region library written through a
// mapping: slice regions, limits pages, compute boards, members files,
// standalone coordination files.
//
// Plain C library calls (posix_fallocate, GLIBC_2.2.5): safe in the shim,
// which must load where only GLIBC_2.17 is (docs/SHIM.md).

#include <cstdint>

namespace gpuslice::slice {

// Sets the size of `fd` to at least `size` bytes, every one of them
// allocated. Returns 0, or the errno value (ENOSPC, EDQUOT, EFBIG...). On a
// file system without fallocate(2) the C library writes a zero into every
// block instead, with the same result.
int AllocateFile(int fd, uint64_t size);

}  // namespace gpuslice::slice
