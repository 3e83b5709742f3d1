#pragma once

// The version of gpuslice every program prints with --version (the CMake
// project's VERSION).

#include <string_view>

namespace gpuslice::core {

std::string_view Version();

}  // namespace gpuslice::core
