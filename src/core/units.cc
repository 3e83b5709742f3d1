#include "core/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace gpuslice::core {
namespace {

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A decimal number "123" or "1.25" split into integer and fraction digits so
// that sizes are computed exactly (no binary floating point on the path).
struct Decimal {
  std::string_view integer;
  std::string_view fraction;
};

// Consumes a decimal number from the front of `s`. Returns false if there is
// none (or it is malformed, such as "1." or ".5").
bool ConsumeDecimal(std::string_view* s, Decimal* out) {
  size_t i = 0;
  while (i < s->size() && std::isdigit(static_cast<unsigned char>((*s)[i]))) ++i;
  if (i == 0) return false;
  out->integer = s->substr(0, i);
  out->fraction = {};
  if (i < s->size() && (*s)[i] == '.') {
    size_t j = i + 1;
    while (j < s->size() && std::isdigit(static_cast<unsigned char>((*s)[j]))) ++j;
    if (j == i + 1) return false;
    out->fraction = s->substr(i + 1, j - i - 1);
    i = j;
  }
  s->remove_prefix(i);
  return true;
}

// value = decimal * multiplier exactly, or an error if it overflows or is not
// a whole number.
Result<uint64_t> ScaleDecimal(const Decimal& d, uint64_t multiplier, std::string_view token) {
  unsigned __int128 value = 0;
  for (char c : d.integer) {
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > std::numeric_limits<uint64_t>::max()) {
      return InvalidArgumentError("size " + Quote(token) + " is too large");
    }
  }
  value *= multiplier;
  unsigned __int128 frac_num = 0, frac_den = 1;
  for (char c : d.fraction) {
    if (frac_den > (static_cast<unsigned __int128>(1) << 100)) break;  // Ignore absurd precision.
    frac_num = frac_num * 10 + static_cast<unsigned>(c - '0');
    frac_den *= 10;
  }
  unsigned __int128 frac_scaled = frac_num * multiplier;
  if (frac_scaled % frac_den != 0) {
    return InvalidArgumentError("size " + Quote(token) + " is not a whole number of bytes");
  }
  value += frac_scaled / frac_den;
  if (value > std::numeric_limits<uint64_t>::max()) {
    return InvalidArgumentError("size " + Quote(token) + " is too large");
  }
  return static_cast<uint64_t>(value);
}

}  // namespace

Result<uint64_t> ParseBytes(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgumentError("empty size; expected e.g. '10GiB' or '512MiB'");
  if (s.front() == '-') {
    return InvalidArgumentError("size " + Quote(text) + " is negative");
  }
  Decimal d;
  std::string_view rest = s;
  if (!ConsumeDecimal(&rest, &d)) {
    return InvalidArgumentError("bad size " + Quote(text) +
                                ": expected a number then a unit, e.g. '10GiB' or '512MiB'");
  }
  std::string unit = Lower(Trim(rest));
  static const struct {
    const char* name;
    uint64_t multiplier;
  } kUnits[] = {
      {"", 1},         {"b", 1},
      {"k", kKiB},     {"ki", kKiB},     {"kib", kKiB},    {"kb", 1000ull},
      {"m", kMiB},     {"mi", kMiB},     {"mib", kMiB},    {"mb", 1000ull * 1000},
      {"g", kGiB},     {"gi", kGiB},     {"gib", kGiB},    {"gb", 1000ull * 1000 * 1000},
      {"t", kTiB},     {"ti", kTiB},     {"tib", kTiB},    {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const auto& u : kUnits) {
    if (unit == u.name) return ScaleDecimal(d, u.multiplier, text);
  }
  return InvalidArgumentError("bad size " + Quote(text) + ": unknown unit " +
                              Quote(Trim(rest)) + " (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
}

Result<uint64_t> ParseMemorySize(std::string_view text) {
  std::string_view s = Trim(text);
  Decimal d;
  std::string_view rest = s;
  // Zero is zero in every unit: let the caller's own range check speak.
  bool zero = s.find_first_not_of("0.") == std::string_view::npos;
  if (ConsumeDecimal(&rest, &d) && rest.empty() && !zero) {
    return InvalidArgumentError("size " + Quote(text) + " has no unit: did you mean '" +
                                std::string(s) + "GiB'? (GiB = 2^30 bytes, GB = 10^9; '" +
                                std::string(s) + "B' is " + std::string(s) + " bytes)");
  }
  return ParseBytes(text);
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double v = static_cast<double>(bytes);
  while (unit < 4 && v >= 1024.0) {
    v /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string num(buf);
  while (num.back() == '0') num.pop_back();
  if (num.back() == '.') num.pop_back();
  return num + " " + kNames[unit];
}

Result<uint32_t> ParseShareMilli(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgumentError("empty compute share; expected e.g. '30%'");
  if (s.back() == '%') s = Trim(s.substr(0, s.size() - 1));
  Decimal d;
  std::string_view rest = s;
  if (!ConsumeDecimal(&rest, &d) || !rest.empty()) {
    return InvalidArgumentError("bad compute share " + Quote(text) +
                                ": expected a percentage such as '30%' or '12.5%'");
  }
  if (d.fraction.size() > 1) {
    return InvalidArgumentError("compute share " + Quote(text) +
                                " is too precise: at most one decimal (0.1%)");
  }
  if (d.integer.size() > 4) {
    return InvalidArgumentError("compute share " + Quote(text) + " is over 100%");
  }
  uint32_t milli = 0;
  std::from_chars(d.integer.data(), d.integer.data() + d.integer.size(), milli);
  milli *= 10;
  if (!d.fraction.empty()) milli += static_cast<uint32_t>(d.fraction[0] - '0');
  if (milli == 0) return InvalidArgumentError("compute share " + Quote(text) + " must be above 0%");
  if (milli > 1000) return InvalidArgumentError("compute share " + Quote(text) + " is over 100%");
  return milli;
}

std::string FormatShareMilli(uint32_t milli) {
  std::string out = std::to_string(milli / 10);
  if (milli % 10 != 0) out += "." + std::to_string(milli % 10);
  return out + "%";
}

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) return InvalidArgumentError("empty duration; expected e.g. '30m' or '2h'");
  std::string_view rest = s;
  double total_ms = 0;
  bool any = false;
  while (!rest.empty()) {
    Decimal d;
    if (!ConsumeDecimal(&rest, &d)) {
      return InvalidArgumentError("bad duration " + Quote(text) +
                                  ": expected e.g. '90s', '30m', '2h', '1d' or '1h30m'");
    }
    size_t i = 0;
    while (i < rest.size() && std::isalpha(static_cast<unsigned char>(rest[i]))) ++i;
    std::string unit = Lower(rest.substr(0, i));
    rest.remove_prefix(i);
    double mult;
    if (unit.empty()) {
      if (any || !rest.empty()) {
        return InvalidArgumentError("bad duration " + Quote(text) + ": missing unit");
      }
      mult = 1000;
    } else if (unit == "ms") {
      mult = 1;
    } else if (unit == "s") {
      mult = 1000;
    } else if (unit == "m" || unit == "min") {
      mult = 60'000;
    } else if (unit == "h") {
      mult = 3'600'000;
    } else if (unit == "d") {
      mult = 86'400'000;
    } else {
      return InvalidArgumentError("bad duration " + Quote(text) + ": unknown unit " +
                                  Quote(unit) + " (use ms, s, m, h or d)");
    }
    std::string num(d.integer);
    if (!d.fraction.empty()) num += "." + std::string(d.fraction);
    total_ms += std::stod(num) * mult;
    any = true;
  }
  if (total_ms <= 0) return InvalidArgumentError("duration " + Quote(text) + " must be positive");
  if (total_ms > 1e15) return InvalidArgumentError("duration " + Quote(text) + " is too long");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(total_ms)));
}

std::string FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms < 1000) return std::to_string(ms) + "ms";
  int64_t s = ms / 1000;
  std::string out;
  if (s >= 86400) out += std::to_string(s / 86400) + "d", s %= 86400;
  if (s >= 3600) out += std::to_string(s / 3600) + "h", s %= 3600;
  if (s >= 60) out += std::to_string(s / 60) + "m", s %= 60;
  if (s > 0 || out.empty()) out += std::to_string(s) + "s";
  return out;
}

Result<Priority> ParsePriority(std::string_view text) {
  std::string t = Lower(Trim(text));
  if (t == "low") return Priority::kLow;
  if (t == "normal") return Priority::kNormal;
  if (t == "high") return Priority::kHigh;
  return InvalidArgumentError("bad priority " + Quote(text) + ": use low, normal or high");
}

std::string_view PriorityName(Priority p) {
  switch (p) {
    case Priority::kLow: return "low";
    case Priority::kNormal: return "normal";
    case Priority::kHigh: return "high";
  }
  return "normal";
}

Result<std::map<int, uint64_t>> ParsePerDeviceBytes(std::string_view text) {
  std::map<int, uint64_t> out;
  std::string_view s = Trim(text);
  if (s.find('=') == std::string_view::npos) {
    GPUSLICE_ASSIGN_OR_RETURN(uint64_t all, ParseBytes(s));
    out[-1] = all;
    return out;
  }
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = Trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgumentError("bad per-device limit " + Quote(item) +
                                  ": expected DEVICE=SIZE, e.g. '0=4GiB'");
    }
    std::string_view idx = Trim(item.substr(0, eq));
    int device = -1;
    auto [p, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), device);
    if (ec != std::errc() || p != idx.data() + idx.size() || device < 0 || device > 63) {
      return InvalidArgumentError("bad device index " + Quote(idx) + " in " + Quote(item));
    }
    if (out.count(device)) {
      return InvalidArgumentError("device " + std::string(idx) + " is given twice in " +
                                  Quote(text));
    }
    auto bytes = ParseBytes(item.substr(eq + 1));
    if (!bytes.ok()) return bytes.status();
    out[device] = *bytes;
  }
  if (out.empty()) return InvalidArgumentError("empty per-device limit " + Quote(text));
  return out;
}

}  // namespace gpuslice::core
