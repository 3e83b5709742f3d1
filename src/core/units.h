#pragma once

// Strict parsing and formatting of the quantities users type: memory sizes,
// compute shares, durations. Every error names the offending token, because
// these strings come from command lines, environment variables and JSON.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpuslice::core {

inline constexpr uint64_t kKiB = 1ull << 10;
inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;
inline constexpr uint64_t kTiB = 1ull << 40;

// Parses a byte size. Accepted: a non-negative decimal number (fraction
// allowed, e.g. "1.5") followed by an optional unit, case-insensitive:
//   (none) or B           bytes
//   K, KiB, Ki            2^10   (bare K/M/G/T are binary, as in docker/slurm)
//   M, MiB, Mi            2^20
//   G, GiB, Gi            2^30
//   T, TiB, Ti            2^40
//   KB, MB, GB, TB        10^3, 10^6, 10^9, 10^12 (SI)
// Whitespace between number and unit is allowed; anything else is an error.
// The result must be a whole number of bytes and fit in 64 bits.
Result<uint64_t> ParseBytes(std::string_view text);

// ParseBytes for the GPU memory a user asks for (--mem of jobs, quotas,
// resize): a bare number is refused with a hint, because "--mem 8" is meant
// as 8 GiB far more often than as 8 bytes. "8B" still means 8 bytes.
Result<uint64_t> ParseMemorySize(std::string_view text);

// "80 GiB", "512 MiB", "1.5 GiB", "123 B": the largest binary unit that keeps
// the value >= 1, at most two decimals, trailing zeros dropped.
std::string FormatBytes(uint64_t bytes);

// A compute share of one GPU in per-mille (1000 = a whole GPU). Accepted:
// "30%", "30", "12.5%" (percent, at most one decimal, in (0, 100]).
// The per-mille unit is shared with the placement core and the openb trace.
Result<uint32_t> ParseShareMilli(std::string_view text);

// "30%", "12.5%".
std::string FormatShareMilli(uint32_t milli);

// Durations: "90s", "30m", "2h", "1d", "1h30m", "500ms"; a bare number is
// seconds. Must be positive.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);
std::string FormatDuration(std::chrono::milliseconds d);

enum class Priority { kLow = 0, kNormal = 1, kHigh = 2 };
Result<Priority> ParsePriority(std::string_view text);  // low|normal|high
std::string_view PriorityName(Priority p);

// Per-device byte limits: either one size for every device ("4GiB") or a list
// "0=4GiB,1=2GiB" keyed by device index. A single size is returned under key
// -1 ("all devices").
Result<std::map<int, uint64_t>> ParsePerDeviceBytes(std::string_view text);

}  // namespace gpuslice::core
