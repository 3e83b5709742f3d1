#include "shim/base/log.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace gpuslice::shim {

bool ParseLogLevel(const char* text, LogLevel* level) {
  static constexpr struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"error", LogLevel::kError},
                 {"warn", LogLevel::kWarn},
                 {"info", LogLevel::kInfo},
                 {"debug", LogLevel::kDebug}};
  for (const auto& l : kLevels) {
    if (text != nullptr && std::strcmp(text, l.name) == 0) {
      *level = l.level;
      return true;
    }
  }
  return false;
}

void LogLine(LogLevel level, const char* format, ...) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf), "gpuslice[%d] %s: ", int(getpid()),
                        kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, format);
  int m = std::vsnprintf(buf + n, sizeof(buf) - size_t(n) - 1, format, args);
  va_end(args);
  size_t len = size_t(n) + (m < 0 ? 0 : std::min<size_t>(size_t(m), sizeof(buf) - size_t(n) - 2));
  buf[len++] = '\n';
  (void)!write(STDERR_FILENO, buf, len);
}

}  // namespace gpuslice::shim
