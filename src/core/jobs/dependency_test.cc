#include "core/jobs/dependency.h"

#include <gtest/gtest.h>

namespace gpuslice::core {
namespace {

TEST(ParseDependencies, ReadsIdsAndConditionsSortedById) {
  struct Case {
    const char* text;
    std::vector<Dependency> want;
  } cases[] = {
      {"12", {{12, DependencyKind::kAny}}},
      {"12:ok", {{12, DependencyKind::kOk}}},
      {"12:any", {{12, DependencyKind::kAny}}},
      {"5,3:ok,4",
       {{3, DependencyKind::kOk}, {4, DependencyKind::kAny}, {5, DependencyKind::kAny}}},
      // Named twice: the stricter condition, once.
      {"7,7:ok", {{7, DependencyKind::kOk}}},
      {"7:ok,7", {{7, DependencyKind::kOk}}},
  };
  for (const Case& c : cases) {
    auto deps = ParseDependencies(c.text);
    ASSERT_TRUE(deps.ok()) << c.text << ": " << deps.status().ToString();
    EXPECT_EQ(*deps, c.want) << c.text;
  }
}

TEST(ParseDependencies, MalformedSpecsAreRefusedNamingTheToken) {
  struct Case {
    const char* text;
    const char* names;
  } cases[] = {
      {"x", "'x' is not a job id"},
      {"3:maybe", "unknown condition 'maybe'"},
      {"0", "'0' is not a job id"},
      {"-3", "'-3' is not a job id"},
      {"3,,4", "an empty entry"},
      {"3,", "an empty entry"},
      {"", "empty"},
      {"12 ", "'12 ' is not a job id"},
      {"3:", "unknown condition ''"},
      {"99999999999999999999999", "is not a job id"},
  };
  for (const Case& c : cases) {
    auto deps = ParseDependencies(c.text);
    ASSERT_FALSE(deps.ok()) << c.text;
    EXPECT_EQ(deps.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(deps.status().message().find(c.names), std::string::npos)
        << c.text << ": " << deps.status().message();
    EXPECT_NE(deps.status().message().find("--after"), std::string::npos);
  }
}

TEST(ParseDependencies, AtMostAHundredJobs) {
  std::string text;
  for (int i = 1; i <= 100; ++i) text += (i > 1 ? "," : "") + std::to_string(i);
  ASSERT_TRUE(ParseDependencies(text).ok());
  EXPECT_FALSE(ParseDependencies(text + ",101").ok());
}

TEST(FormatDependencies, IsReadBackAsTheSameList) {
  auto deps = ParseDependencies("9,2:ok,4:any");
  ASSERT_TRUE(deps.ok());
  EXPECT_EQ(FormatDependencies(*deps), "2:ok,4,9");
  EXPECT_EQ(*ParseDependencies(FormatDependencies(*deps)), *deps);
  EXPECT_EQ(FormatDependencies({}), "");
}

TEST(EvaluateDependency, AnyEndSatisfiesAnyOnlyExitZeroSatisfiesOk) {
  const Dependency any{12, DependencyKind::kAny}, ok{12, DependencyKind::kOk};
  struct Case {
    JobState state;
    int exit_code;
    DependencyStatus any, ok;
  } cases[] = {
      {JobState::kQueued, -1, DependencyStatus::kWaiting, DependencyStatus::kWaiting},
      {JobState::kRunning, -1, DependencyStatus::kWaiting, DependencyStatus::kWaiting},
      {JobState::kExited, 0, DependencyStatus::kSatisfied, DependencyStatus::kSatisfied},
      {JobState::kExited, 3, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
      {JobState::kExited, 137, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
      {JobState::kExited, -1, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
      {JobState::kCancelled, -1, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
      {JobState::kTimedOut, 143, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
      {JobState::kFailed, 127, DependencyStatus::kSatisfied, DependencyStatus::kBroken},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Evaluate(any, c.state, c.exit_code), c.any) << JobStateName(c.state) << c.exit_code;
    EXPECT_EQ(Evaluate(ok, c.state, c.exit_code), c.ok) << JobStateName(c.state) << c.exit_code;
  }
}

TEST(BrokenDependencyReason, NamesTheJobAndHowItEnded) {
  const Dependency ok{12, DependencyKind::kOk};
  EXPECT_EQ(BrokenDependencyReason(ok, JobState::kExited, 3),
            "dependency job 12 did not succeed (exit 3)");
  EXPECT_EQ(BrokenDependencyReason(ok, JobState::kCancelled, -1),
            "dependency job 12 did not succeed (cancelled)");
  EXPECT_EQ(BrokenDependencyReason(ok, JobState::kExited, -1),
            "dependency job 12 did not succeed (exit status unknown)");
}

}  // namespace
}  // namespace gpuslice::core
