#pragma once

// Small string helpers shared across parts (header-only: no I/O, no state).

#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::core {

// "a,b,c" from {"a","b","c"} and ",".
inline std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

}  // namespace gpuslice::core
