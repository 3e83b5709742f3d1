#pragma once

// The daemon's log: one line per event on stderr ("2026-01-02T03:04:05Z
// gpusliced info: ..."), for journald or a file.

#include <string>

namespace gpuslice::daemon {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
void SetLogLevel(LogLevel level);
void Log(LogLevel level, const std::string& message);
inline void LogError(const std::string& m) { Log(LogLevel::kError, m); }
inline void LogWarn(const std::string& m) { Log(LogLevel::kWarn, m); }
inline void LogInfo(const std::string& m) { Log(LogLevel::kInfo, m); }
inline void LogDebug(const std::string& m) { Log(LogLevel::kDebug, m); }

}  // namespace gpuslice::daemon
