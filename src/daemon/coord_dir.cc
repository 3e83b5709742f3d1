#include "daemon/coord_dir.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/launcher.h"

namespace gpuslice::daemon {

core::Status PrepareCoordDir(const std::string& path, std::optional<uint32_t> group) {
  const mode_t mode = group ? 02770 : 0700;
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoError(errno, "create coordination directory " + path);
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return ErrnoError(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) {
    return core::FailedPreconditionError("coordination directory " + path +
                                         " is not a directory (or is a symbolic link)");
  }
  if (st.st_uid != geteuid()) {
    return core::PermissionDeniedError("coordination directory " + path + " belongs to uid " +
                                       std::to_string(st.st_uid) + ", not to the daemon");
  }
  // The group first: chown may clear the setgid bit, chmod then sets it.
  if (group && st.st_gid != *group && chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    return ErrnoError(errno, "give coordination directory " + path + " to group " +
                                 std::to_string(*group));
  }
  if ((st.st_mode & 07777) != mode || group) {
    if (chmod(path.c_str(), mode) != 0) return ErrnoError(errno, "chmod " + path);
  }
  return core::Status::Ok();
}

std::optional<uint32_t> CoordDirGroup(std::optional<uint32_t> socket_gid, bool daemon_is_root,
                                      uint32_t daemon_gid) {
  if (socket_gid) return socket_gid;
  if (daemon_is_root) return daemon_gid;
  return std::nullopt;
}

}  // namespace gpuslice::daemon
