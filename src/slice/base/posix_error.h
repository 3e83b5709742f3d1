#pragma once

// The one place the region library turns an errno into a Status (slice
// regions and limits pages).

#include <string>

#include "core/status.h"

namespace gpuslice::slice {

// "<context>: <strerror>" with a code that says what went wrong: NotFound,
// AlreadyExists, PermissionDenied, ResourceExhausted, else Internal.
core::Status PosixError(const std::string& context, int err);

}  // namespace gpuslice::slice
