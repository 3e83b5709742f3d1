#include "daemon/node/process_table.h"

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace gpuslice::daemon {
namespace {

std::string UserName(uint32_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) return pw.pw_name;
  return std::to_string(uid);
}

}  // namespace

std::string GroupNameOf(uint32_t gid) {
  struct group gr;
  struct group* found = nullptr;
  char buf[8192];
  if (getgrgid_r(gid, &gr, buf, sizeof buf, &found) == 0 && found != nullptr) return gr.gr_name;
  return std::to_string(gid);
}

std::optional<ProcessOwner> ProcProcessTable::OwnerOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  ProcessOwner o;
  bool have_uid = false;
  std::vector<uint32_t> gids;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(
        line.substr(line.find(':') == std::string::npos ? line.size() : line.find(':') + 1));
    if (line.rfind("Uid:", 0) == 0) {
      have_uid = static_cast<bool>(fields >> o.uid);  // Real uid: who started it.
    } else if (line.rfind("Gid:", 0) == 0) {
      fields >> o.gid;
    } else if (line.rfind("Groups:", 0) == 0) {
      uint32_t g;
      while (fields >> g) gids.push_back(g);
    }
  }
  if (!have_uid) return std::nullopt;
  o.user = UserName(o.uid);
  o.groups.push_back(GroupNameOf(o.gid));
  for (uint32_t g : gids) {
    if (g != o.gid) o.groups.push_back(GroupNameOf(g));
  }
  return o;
}

int64_t ProcProcessTable::ProcessGroupOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // The command name (field 2) may hold spaces and parentheses: skip to the
  // last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  char state = 0;
  long long ppid = 0, pgrp = -1;
  if (std::sscanf(stat.c_str() + close + 1, " %c %lld %lld", &state, &ppid, &pgrp) != 3) return -1;
  return pgrp;
}

std::vector<int64_t> ProcProcessTable::DescendantsOf(int64_t pid) {
  // One pass over /proc for every parent link, then a walk down from `pid`.
  std::multimap<int64_t, int64_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return {};
  while (struct dirent* e = readdir(proc)) {
    char* end = nullptr;
    long long p = std::strtoll(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || p <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long long ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %lld", &state, &ppid) != 2) continue;
    children.emplace(ppid, p);
  }
  closedir(proc);
  std::vector<int64_t> out;
  std::vector<int64_t> todo{pid};
  while (!todo.empty()) {
    int64_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

core::Status ProcProcessTable::Signal(int64_t pid, int signal) {
  if (pid <= 0) return core::InvalidArgumentError("no process " + std::to_string(pid));
  if (kill(static_cast<pid_t>(pid), signal) != 0) {
    int err = errno;
    return core::UnavailableError("kill " + std::to_string(pid) + ": " + std::strerror(err));
  }
  return core::Status::Ok();
}

core::Status ProcProcessTable::SignalIfOwnedBy(int64_t pid, uint32_t uid, int signal) {
  if (pid <= 0) return core::InvalidArgumentError("no process " + std::to_string(pid));
  // The pidfd names this process for good: if it ends and its pid is
  // reused after this point, the owner read below is the newcomer's, and
  // the probe through the pidfd then fails (the process it names is gone).
  const int fd = int(syscall(SYS_pidfd_open, pid_t(pid), 0));
  if (fd < 0) {
    if (errno == ESRCH) return core::NotFoundError("no process " + std::to_string(pid));
    if (errno != ENOSYS) {
      return core::UnavailableError("pidfd_open " + std::to_string(pid) + ": " +
                                    std::strerror(errno));
    }
    // A kernel without pidfds (< 5.3): check, then kill (a short window).
    std::optional<ProcessOwner> o = OwnerOf(pid);
    if (!o) return core::NotFoundError("no process " + std::to_string(pid));
    if (o->uid != uid)
      return core::PermissionDeniedError("process " + std::to_string(pid) + " is not uid " +
                                         std::to_string(uid) + "'s");
    return Signal(pid, signal);
  }
  core::Status result = core::Status::Ok();
  std::optional<ProcessOwner> o = OwnerOf(pid);
  if (!o || syscall(SYS_pidfd_send_signal, fd, 0, nullptr, 0) != 0) {
    result = core::NotFoundError("no process " + std::to_string(pid));
  } else if (o->uid != uid) {
    result = core::PermissionDeniedError("process " + std::to_string(pid) + " is not uid " +
                                         std::to_string(uid) + "'s");
  } else if (syscall(SYS_pidfd_send_signal, fd, signal, nullptr, 0) != 0) {
    result =
        errno == ESRCH
            ? core::NotFoundError("no process " + std::to_string(pid))
            : core::UnavailableError("kill " + std::to_string(pid) + ": " + std::strerror(errno));
  }
  close(fd);
  return result;
}

}  // namespace gpuslice::daemon
