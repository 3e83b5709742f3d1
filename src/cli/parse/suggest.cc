#include "cli/parse/suggest.h"

#include <algorithm>

namespace gpuslice::cli {

size_t EditDistance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between a's first i and b's first j characters.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> NearestName(std::string_view typed,
                                       const std::vector<std::string>& known) {
  if (typed.empty()) return std::nullopt;
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const std::string& name : known) {
    size_t limit = name.size() <= 4 ? 1 : 2;
    size_t distance = EditDistance(typed, name);
    if (distance > limit && name.rfind(typed, 0) != 0) continue;
    if (!best || distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace gpuslice::cli
