#include "kubernetes/device_plugin/base/grpc_status.h"

#include <gtest/gtest.h>

namespace gpuslice::kubernetes {
namespace {

TEST(GrpcStatus, EveryCodeCrossesTheBorderBothWays) {
  using core::StatusCode;
  for (StatusCode c :
       {StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kAlreadyExists,
        StatusCode::kPermissionDenied, StatusCode::kResourceExhausted,
        StatusCode::kFailedPrecondition, StatusCode::kOutOfRange, StatusCode::kUnavailable,
        StatusCode::kUnimplemented, StatusCode::kDeadlineExceeded, StatusCode::kAborted,
        StatusCode::kInternal}) {
    grpc::Status g = ToGrpc(core::Status(c, "why"));
    EXPECT_EQ(g.error_message(), "why");
    core::Status back = FromGrpc(g, "call");
    EXPECT_EQ(back.code(), c);
    EXPECT_EQ(back.message(), "call: why");
  }
  EXPECT_TRUE(ToGrpc(core::Status::Ok()).ok());
  EXPECT_TRUE(FromGrpc(grpc::Status::OK, "call").ok());
}

TEST(GrpcStatus, ADaemonRefusalReachesTheKubeletAsFailedPrecondition) {
  grpc::Status g = ToGrpc(core::FailedPreconditionError("does not fit now on GPU-1: 2 GiB free"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // gRPC codes we never send come back as internal errors.
  EXPECT_EQ(FromGrpc(grpc::Status(grpc::StatusCode::DATA_LOSS, "x"), "c").code(),
            core::StatusCode::kInternal);
}

}  // namespace
}  // namespace gpuslice::kubernetes
