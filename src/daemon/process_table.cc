#include "daemon/process_table.h"

#include <grp.h>
#include <pwd.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
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

std::string GroupName(uint32_t gid) {
  struct group gr;
  struct group* found = nullptr;
  char buf[8192];
  if (getgrgid_r(gid, &gr, buf, sizeof buf, &found) == 0 && found != nullptr) return gr.gr_name;
  return std::to_string(gid);
}

}  // namespace

std::optional<ProcessOwner> ProcProcessTable::OwnerOf(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  ProcessOwner o;
  bool have_uid = false;
  std::vector<uint32_t> gids;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line.substr(line.find(':') == std::string::npos
                                              ? line.size()
                                              : line.find(':') + 1));
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
  o.groups.push_back(GroupName(o.gid));
  for (uint32_t g : gids) {
    if (g != o.gid) o.groups.push_back(GroupName(g));
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

core::Status ProcProcessTable::Signal(int64_t pid, int signal) {
  if (pid <= 0) return core::InvalidArgumentError("no process " + std::to_string(pid));
  if (kill(static_cast<pid_t>(pid), signal) != 0) {
    int err = errno;
    return core::UnavailableError("kill " + std::to_string(pid) + ": " + std::strerror(err));
  }
  return core::Status::Ok();
}

}  // namespace gpuslice::daemon
