#include "daemon/node/job_finder.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace gpuslice::daemon {
namespace {

// The NUL-separated environment of `pid`, or "" when it cannot be read.
std::string ReadEnviron(const char* pid) {
  std::string path = std::string("/proc/") + pid + "/environ";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

bool HoldsAll(const std::string& environ, const std::vector<std::string>& entries) {
  for (const std::string& e : entries) {
    bool found = false;
    for (size_t at = 0; at < environ.size() && !found;) {
      size_t end = environ.find('\0', at);
      if (end == std::string::npos) end = environ.size();
      found = environ.compare(at, end - at, e) == 0;
      at = end + 1;
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> FindProcessGroupsByEnv(const std::vector<std::string>& entries) {
  std::vector<int64_t> groups;
  if (entries.empty()) return groups;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return groups;
  while (struct dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    if (!HoldsAll(ReadEnviron(e->d_name), entries)) continue;
    pid_t group = getpgid(static_cast<pid_t>(pid));
    if (group > 0) groups.push_back(group);
  }
  closedir(proc);
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

std::vector<std::string> JobIdentityEnv(uint64_t job_id, const std::string& region_path) {
  std::vector<std::string> entries = {"GPUSLICE_JOB_ID=" + std::to_string(job_id)};
  if (!region_path.empty()) entries.push_back("GPUSLICE_SLICE=" + region_path);
  return entries;
}

}  // namespace gpuslice::daemon
