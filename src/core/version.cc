#include "core/version.h"

namespace gpuslice::core {

// GPUSLICE_VERSION is defined for this file alone (src/core/CMakeLists.txt),
// so that a new version recompiles one file.
std::string_view Version() { return GPUSLICE_VERSION; }

}  // namespace gpuslice::core
