#pragma once

// "Did you mean ...?" for a mistyped subcommand: the nearest of the known
// names by edit distance (insertions, deletions, substitutions and swaps of
// two neighbouring letters), if it is near enough to be a typo.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::cli {

// Optimal-string-alignment distance between `a` and `b`.
size_t EditDistance(std::string_view a, std::string_view b);

// The known name nearest `typed`: within 1 edit for names of up to 4
// letters, 2 for longer ones, or one that `typed` begins (`serv` ->
// `service`). Ties go to the first in `known`. None if nothing is near.
std::optional<std::string> NearestName(std::string_view typed,
                                       const std::vector<std::string>& known);

}  // namespace gpuslice::cli
