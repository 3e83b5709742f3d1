#include "slice/base/pid_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice::slice {
namespace {

// Reads a small /proc file into `buf` (NUL-terminated); false if absent.
bool ReadSmall(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// Field 22 of a /proc/<pid>/stat file (clock ticks since boot); 0 if the
// process is gone or a zombie.
uint64_t StartTimeAt(const char* path) {
  char buf[1024];
  if (!ReadSmall(path, buf, sizeof(buf))) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields
  // are counted from the last ')'. Field 3 is the state.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return 0;
  p += 2;
  if (*p == 'Z' || *p == 'X' || *p == 'x') return 0;
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return 0;
    ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

// The last pid of /proc/<pid>/status's "NSpid:" line (the pid in the
// innermost namespace) and how many namespaces the line lists.
bool InnermostPid(pid_t pid, pid_t* inner, int* levels) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(pid));
  char buf[4096];
  if (!ReadSmall(path, buf, sizeof(buf))) return false;
  const char* line = std::strstr(buf, "\nNSpid:");
  if (line == nullptr) return false;
  const char* p = line + 7;
  *levels = 0;
  while (true) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    if (end == p) break;
    *inner = static_cast<pid_t>(v);
    ++*levels;
    p = end;
    if (*p == '\n' || *p == '\0') break;
  }
  return *levels > 0;
}

// Whether `pid`'s namespace is `ns`; true when we may not look (the start
// time and the innermost pid already matched, which is near certain).
bool InNamespace(pid_t pid, uint64_t ns) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/ns/pid", static_cast<int>(pid));
  struct stat st;
  if (stat(path, &st) != 0) return true;
  return st.st_ino == ns;
}

pid_t ScanProc(uint64_t ns, pid_t ns_pid, uint64_t start_time) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return 0;
  pid_t found = 0;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    if (StartTimeOf(pid) != start_time) continue;
    pid_t inner = 0;
    int levels = 0;
    // One level: the process is in the reader's namespace, not a nested one.
    if (!InnermostPid(pid, &inner, &levels) || levels < 2 || inner != ns_pid) continue;
    if (!InNamespace(pid, ns)) continue;
    found = pid;
    break;
  }
  closedir(d);
  return found;
}

// Translations found, per thread (readers are the daemon's sampler, NVML
// callers and reapers: few threads, few containers).
struct CacheEntry {
  uint64_t ns;
  uint64_t start_time;
  pid_t ns_pid;
  pid_t visible;
};
constexpr int kCacheEntries = 32;
thread_local CacheEntry t_cache[kCacheEntries];
thread_local unsigned t_next;
thread_local uint64_t t_own_ns;
thread_local pid_t t_own_ns_pid;  // getpid() when t_own_ns was read.

}  // namespace

uint64_t OwnPidNamespace() {
  pid_t me = getpid();
  if (t_own_ns_pid != me) {
    struct stat st;
    t_own_ns = stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
    t_own_ns_pid = me;
  }
  return t_own_ns;
}

uint64_t OwnStartTime() { return StartTimeAt("/proc/self/stat"); }

uint64_t StartTimeOf(pid_t pid) {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  return StartTimeAt(path);
}


pid_t VisiblePid(uint64_t ns, pid_t ns_pid, uint64_t start_time) {
  if (ns_pid <= 0) return 0;
  if (ns == 0 || ns == OwnPidNamespace()) {
    return StartTimeOf(ns_pid) == start_time ? ns_pid : 0;
  }
  for (CacheEntry& c : t_cache) {
    if (c.ns != ns || c.ns_pid != ns_pid || c.start_time != start_time || c.visible == 0) continue;
    if (StartTimeOf(c.visible) == start_time) return c.visible;
    c.visible = 0;  // Gone (or its pid reused): look again below.
  }
  pid_t found = ScanProc(ns, ns_pid, start_time);
  if (found != 0) t_cache[t_next++ % kCacheEntries] = {ns, start_time, ns_pid, found};
  return found;
}

Liveness LivenessOf(uint64_t ns, pid_t ns_pid, uint64_t start_time) {
  if (VisiblePid(ns, ns_pid, start_time) != 0) return Liveness::kAlive;
  if (ns == 0 || ns == OwnPidNamespace()) return Liveness::kDead;
  // Another namespace: only a reader in the initial one sees every process.
  return OwnPidNamespace() == kInitPidNamespace ? Liveness::kDead : Liveness::kUnknown;
}

}  // namespace gpuslice::slice
