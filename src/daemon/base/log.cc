#include "daemon/base/log.h"

#include <time.h>

#include <cstdio>

namespace gpuslice::daemon {
namespace {
LogLevel g_level = LogLevel::kInfo;
constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = level; }

void Log(LogLevel level, const std::string& message) {
  if (level > g_level) return;
  time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s gpusliced %s: %s\n", stamp, kNames[static_cast<int>(level)],
               message.c_str());
  std::fflush(stderr);
}

}  // namespace gpuslice::daemon
