#pragma once

// NVML's conventions for returning strings and arrays into caller buffers,
// in one place so every entry point behaves alike:
//   - a string needs strlen + 1 bytes; a shorter buffer gets
//     NVML_ERROR_INSUFFICIENT_SIZE and is left untouched;
//   - an array query takes *count = capacity in, gives *count = entries out;
//     too small a capacity gets NVML_ERROR_INSUFFICIENT_SIZE with *count set
//     to the number needed (so {count = 0, buffer = NULL} asks for the size).

#include <cstring>
#include <string_view>
#include <vector>

#include "core/nvml_abi.h"

namespace gpuslice::sim {

inline nvmlReturn_t CopyNvmlString(std::string_view value, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < value.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  return NVML_SUCCESS;
}

template <typename T>
nvmlReturn_t CopyNvmlArray(const std::vector<T>& items, unsigned int* count, T* out) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (*count < items.size()) {
    *count = static_cast<unsigned int>(items.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (out == nullptr && !items.empty()) return NVML_ERROR_INVALID_ARGUMENT;
  if (!items.empty()) std::memcpy(out, items.data(), items.size() * sizeof(T));
  *count = static_cast<unsigned int>(items.size());
  return NVML_SUCCESS;
}

}  // namespace gpuslice::sim
