#pragma once

// Where a suspended job's slice devices go when it resumes on other GPUs
// (a move; docs/SUSPEND.md). A slice's devices have an order (its processes
// charge memory per device index, and CUDA ordinals map onto it), and that
// order must survive the move: device i of the slice becomes device i on its
// new GPU. A GPU the job keeps stays at its index, so only the devices that
// change GPU are renamed, and no rename ever names a GPU the slice still has.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpuslice::core {

struct Relocation {
  // order[i]: the position in `target` of the GPU that becomes the slice's
  // device i.
  std::vector<size_t> order;
  // (from, to) for each device that changes GPU, in slice order.
  std::vector<std::pair<std::string, std::string>> moves;
};

// `now`: the slice's devices in order (the GPUs its processes are on);
// `target`: the GPUs of its new allocation, in any order. InvalidArgument
// when the counts differ or either names a GPU twice.
Result<Relocation> Relocate(const std::vector<std::string>& now,
                            const std::vector<std::string>& target);

}  // namespace gpuslice::core
