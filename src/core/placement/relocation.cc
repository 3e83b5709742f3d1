#include "core/placement/relocation.h"

#include <algorithm>
#include <set>

namespace gpuslice::core {

Result<Relocation> Relocate(const std::vector<std::string>& now,
                            const std::vector<std::string>& target) {
  if (now.size() != target.size()) {
    return InvalidArgumentError("a slice of " + std::to_string(now.size()) +
                                " devices cannot move onto " + std::to_string(target.size()) +
                                " GPUs");
  }
  for (const auto* list : {&now, &target}) {
    if (std::set<std::string>(list->begin(), list->end()).size() != list->size()) {
      return InvalidArgumentError("a GPU is named twice in a move");
    }
  }
  const size_t n = now.size();
  Relocation r;
  r.order.assign(n, n);
  std::vector<bool> used(n, false);
  // Kept GPUs stay where they are.
  for (size_t i = 0; i < n; ++i) {
    auto at = std::find(target.begin(), target.end(), now[i]);
    if (at == target.end()) continue;
    r.order[i] = size_t(at - target.begin());
    used[r.order[i]] = true;
  }
  // The others take the new GPUs in the order given.
  size_t next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (r.order[i] != n) continue;
    while (used[next]) ++next;
    r.order[i] = next;
    used[next] = true;
    r.moves.emplace_back(now[i], target[next]);
  }
  return r;
}

}  // namespace gpuslice::core
