#include "kubernetes/device_plugin/base/log.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace gpuslice::kubernetes {

namespace {

void Write(std::string_view level, std::string_view message) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc;
  gmtime_r(&ts.tv_sec, &utc);
  char stamp[40];
  size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", ts.tv_nsec / 1000000);
  std::string line = std::string(stamp) + " gpuslice-device-plugin " + std::string(level) + " " +
                     std::string(message) + "\n";
  // One write(2): lines of concurrent threads do not interleave.
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

void LogInfo(std::string_view message) { Write("INFO", message); }
void LogWarn(std::string_view message) { Write("WARN", message); }
void LogError(std::string_view message) { Write("ERROR", message); }

}  // namespace gpuslice::kubernetes
