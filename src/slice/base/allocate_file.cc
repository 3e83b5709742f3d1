#include "slice/base/allocate_file.h"

#include <fcntl.h>

#include <cerrno>

namespace gpuslice::slice {

int AllocateFile(int fd, uint64_t size) {
  int err;
  // posix_fallocate returns the error rather than setting errno; EINTR (a
  // signal during a long emulated fill) is worth one more try each time.
  do {
    err = posix_fallocate(fd, 0, off_t(size));
  } while (err == EINTR);
  return err;
}

}  // namespace gpuslice::slice
