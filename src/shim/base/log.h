#pragma once

// Logging from inside the user's process: one line per message on stderr,
// "gpuslice[<pid>] <level>: <message>". Formats into a stack buffer and
// writes with one write(2), so it allocates nothing and is safe after fork.
// Hot paths never log above debug level, and debug is off by default.

#include <atomic>

namespace gpuslice::shim {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Parses "error", "warn", "info", "debug"; returns false for anything else.
bool ParseLogLevel(const char* text, LogLevel* level);

// The current threshold (default warn). Relaxed: a stale level only means one
// message more or less.
inline std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarn)};
inline void SetLogLevel(LogLevel level) {
  g_log_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

void LogLine(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gpuslice::shim

#define GPUSLICE_LOG(level, ...)                                        \
  do {                                                                  \
    if (::gpuslice::shim::LogEnabled(::gpuslice::shim::LogLevel::level)) \
      ::gpuslice::shim::LogLine(::gpuslice::shim::LogLevel::level, __VA_ARGS__); \
  } while (0)
