#include "slice/base/posix_error.h"

#include <cerrno>
#include <cstring>

namespace gpuslice::slice {

core::Status PosixError(const std::string& context, int err) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return core::NotFoundError(msg);
    case EEXIST:
      return core::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
      return core::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return core::ResourceExhaustedError(msg);
    default:
      return core::InternalError(msg);
  }
}

}  // namespace gpuslice::slice
