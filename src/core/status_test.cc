#include "core/status.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  GPUSLICE_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

Status CheckEven(int x) {
  GPUSLICE_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(Status, DefaultIsOkAndPrintsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(Status, ErrorPrintsCodeNameAndMessage) {
  EXPECT_EQ(NotFoundError("job 7").ToString(), "not_found: job 7");
  EXPECT_EQ(InvalidArgumentError("x").WithContext("--mem").ToString(),
            "invalid_argument: --mem: x");
}

TEST(Result, CarriesValueOrError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_EQ(r.value_or(-1), -1);
}

TEST(Result, ReturnIfErrorPropagates) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(Result, ConstructedFromOkStatusBecomesInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace gpuslice::core
