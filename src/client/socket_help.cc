#include "client/socket_help.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace gpuslice::client {
namespace {

std::string UserName(uid_t uid) {
  struct passwd* pw = getpwuid(uid);
  return pw != nullptr ? pw->pw_name : std::to_string(uid);
}

std::string GroupName(gid_t gid) {
  struct group* gr = getgrgid(gid);
  return gr != nullptr ? gr->gr_name : std::to_string(gid);
}

}  // namespace

std::string ModeText(mode_t mode, bool is_socket) {
  std::string out = is_socket ? "s" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (mode & (0400 >> i)) ? rwx[i] : '-';
  return out;
}

SocketFacts GatherSocketFacts(const std::string& path, int connect_errno) {
  SocketFacts f;
  f.path = path;
  f.connect_errno = connect_errno;
  f.user = UserName(getuid());
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    f.exists = true;
    f.is_socket = S_ISSOCK(st.st_mode);
    f.owner = st.st_uid;
    f.group = st.st_gid;
    f.mode = st.st_mode & 07777;
    f.owner_name = UserName(st.st_uid);
    f.group_name = GroupName(st.st_gid);
    std::vector<gid_t> mine(64);
    int n = getgroups(static_cast<int>(mine.size()), mine.data());
    if (n < 0) {
      n = getgroups(0, nullptr);
      mine.resize(n > 0 ? static_cast<size_t>(n) : 0);
      n = getgroups(static_cast<int>(mine.size()), mine.data());
    }
    mine.resize(n > 0 ? static_cast<size_t>(n) : 0);
    f.in_group_now =
        getegid() == st.st_gid || std::find(mine.begin(), mine.end(), st.st_gid) != mine.end();
    struct passwd* pw = getpwuid(getuid());
    if (pw != nullptr) {
      int count = 64;
      std::vector<gid_t> db(static_cast<size_t>(count));
      if (getgrouplist(pw->pw_name, pw->pw_gid, db.data(), &count) < 0) {
        db.resize(static_cast<size_t>(count));
        getgrouplist(pw->pw_name, pw->pw_gid, db.data(), &count);
      }
      db.resize(static_cast<size_t>(std::max(count, 0)));
      f.in_group_database = std::find(db.begin(), db.end(), st.st_gid) != db.end();
    }
  } else if (errno == EACCES) {
    // A directory on the way does not let this user through: the first one.
    for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
      const std::string dir = path.substr(0, at);
      if (access(dir.c_str(), X_OK) != 0) {
        f.blocked_dir = dir;
        break;
      }
    }
  }
  return f;
}

std::string SocketHelp(const SocketFacts& f) {
  const std::string where = "gpusliced's socket " + f.path;
  const std::string flag = " (give another with --socket or GPUSLICE_SOCKET)";
  if (!f.blocked_dir.empty()) {
    return "cannot reach " + where + ": the directory " + f.blocked_dir + " does not let you (" +
           f.user + ") through; ask an admin to open it (chmod o+x " + f.blocked_dir + ")";
  }
  if (!f.exists) {
    if (f.connect_errno == EACCES || f.connect_errno == EPERM) {
      return "cannot reach " + where + ": permission denied on its path";
    }
    return "no socket at " + f.path + ": gpusliced is not running with this socket" + flag +
           "; an admin starts it as in the README's quick start (docs/DAEMON.md)";
  }
  if (!f.is_socket) {
    return f.path + " is not a socket (" + ModeText(f.mode, false) + " " + f.owner_name + ":" +
           f.group_name + "): is this gpusliced's socket?" + flag;
  }
  const std::string seen =
      " (" + ModeText(f.mode, true) + " " + f.owner_name + ":" + f.group_name + ")";
  if (f.connect_errno == EACCES || f.connect_errno == EPERM) {
    const bool group_may = (f.mode & 0020) != 0;
    if (!group_may || f.group == 0) {
      return "permission denied on " + where + seen +
             ": it lets in no group of users; an admin sets socket_group = GROUP in "
             "gpusliced's configuration (or --socket-group GROUP) and adds the users to "
             "GROUP (docs/CONFIG.md)";
    }
    if (f.in_group_database && !f.in_group_now) {
      return "permission denied on " + where + seen + ": you (" + f.user +
             ") were added to group " + f.group_name +
             " after this session started; log in again (or run `newgrp " + f.group_name +
             "`) to use it";
    }
    return "permission denied on " + where + seen + ": only members of group " + f.group_name +
           " may use gpusliced, and you (" + f.user +
           ") are not one; ask an admin to add you (usermod -aG " + f.group_name + " " + f.user +
           "), then log in again";
  }
  if (f.connect_errno == ECONNREFUSED) {
    return where + " exists" + seen +
           " but no gpusliced listens on it (a daemon that stopped left it): an admin starts "
           "gpusliced again";
  }
  return "cannot reach " + where + seen + ": " + strerror(f.connect_errno) + flag;
}

}  // namespace gpuslice::client
