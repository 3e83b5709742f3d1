#include "sim/process_liveness.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuslice::sim {

uint64_t ProcessStartTime(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses: parse
  // from the last ')'. Field 3 is the state, field 22 the start time.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return 0;
  p += 2;
  char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return 0;
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return 0;
    ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

bool ProcessAlive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  uint64_t now_start = ProcessStartTime(pid);
  return now_start != 0 && now_start == start_time;
}

}  // namespace gpuslice::sim
