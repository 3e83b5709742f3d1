#include "daemon/compute/coord_dir.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/launch/launcher.h"

namespace gpuslice::daemon {

core::Status PrepareCoordDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
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
  // The group too: a group that may write here could swap boards.
  if (st.st_gid != getegid() && chown(path.c_str(), static_cast<uid_t>(-1), getegid()) != 0) {
    return ErrnoError(errno, "give coordination directory " + path + " to the daemon's group");
  }
  if ((st.st_mode & 07777) != 0755 && chmod(path.c_str(), 0755) != 0) {
    return ErrnoError(errno, "chmod " + path);
  }
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.find(".coord") != std::string::npos) unlinkat(dirfd(d), name.c_str(), 0);
    }
    closedir(d);
  }
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon
