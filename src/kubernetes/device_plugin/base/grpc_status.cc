#include "kubernetes/device_plugin/base/grpc_status.h"

#include <string>
#include <utility>

namespace gpuslice::kubernetes {

namespace {

using core::StatusCode;

constexpr std::pair<StatusCode, grpc::StatusCode> kCodes[] = {
    {StatusCode::kOk, grpc::StatusCode::OK},
    {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
    {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
    {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
    {StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
    {StatusCode::kAborted, grpc::StatusCode::ABORTED},
    {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
};

}  // namespace

grpc::Status ToGrpc(const core::Status& status) {
  for (const auto& [ours, theirs] : kCodes) {
    if (ours == status.code()) return grpc::Status(theirs, status.message());
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, status.message());
}

core::Status FromGrpc(const grpc::Status& status, std::string_view what) {
  if (status.ok()) return core::Status::Ok();
  StatusCode code = StatusCode::kInternal;
  for (const auto& [ours, theirs] : kCodes) {
    if (theirs == status.error_code()) code = ours;
  }
  return core::Status(code, std::string(what) + ": " + status.error_message());
}

}  // namespace gpuslice::kubernetes
