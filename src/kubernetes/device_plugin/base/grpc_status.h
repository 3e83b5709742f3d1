#pragma once

// The one border between core::Status and gRPC's status, both ways.

#include <grpcpp/support/status.h>

#include <string_view>

#include "core/status.h"

namespace gpuslice::kubernetes {

grpc::Status ToGrpc(const core::Status& status);
// `what` names the call for the message ("kubelet Register").
core::Status FromGrpc(const grpc::Status& status, std::string_view what);

}  // namespace gpuslice::kubernetes
