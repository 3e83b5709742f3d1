#include "cli/parse/job_select.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// ps/cancel --user and --state, as in Slurm; the daemon applies them, so the
// CLI only says which.
TEST(JobFilter, AsksTheDaemonForJobsByUserStateNameAndPool) {
  JobFilter f;
  EXPECT_EQ(JobsTarget("/v1/jobs", f), "/v1/jobs?limit=100");
  f.user = "alice";
  f.states = *ParseStates("queued,running");
  f.names = {"train", "eval*"};
  f.pool = "inference";
  f.limit = 0;
  EXPECT_EQ(
      JobsTarget("/v1/jobs", f),
      "/v1/jobs?state=queued%2Crunning&user=alice&name=train%2Ceval%2A&pool=inference&limit=0");
  JobFilter ended;
  ended.states = *ParseStates("ended");
  EXPECT_TRUE(WantsEndedJobs(ended.states));
  EXPECT_FALSE(WantsEndedJobs(f.states));
  ended.finished = true;
  EXPECT_EQ(JobsTarget("/v1/jobs/summary", ended),
            "/v1/jobs/summary?state=cancelled%2Cexited%2Cfailed%2Ctimed_out&all=1&limit=100");
}

TEST(UrlEncode, LeavesOnlyUnreservedCharactersAsThey) {
  EXPECT_EQ(UrlEncode("train[3]"), "train%5B3%5D");
  EXPECT_EQ(UrlEncode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
  EXPECT_EQ(UrlEncode("Az09-._~"), "Az09-._~");
}

TEST(ParseStates, NamesTheBadToken) {
  auto s = ParseStates("queued,pending");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--state: unknown job state 'pending'"), std::string::npos)
      << s.status().message();
}

// Job arrays (submit --array 1-20).
TEST(ParseArrayIndices, AcceptsRangesAndLists) {
  EXPECT_EQ(ParseArrayIndices("1-3").value(), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(ParseArrayIndices("0,3,5").value(), (std::vector<uint32_t>{0, 3, 5}));
  EXPECT_EQ(ParseArrayIndices("5,1-2,2").value(), (std::vector<uint32_t>{1, 2, 5}));
  EXPECT_EQ(ParseArrayIndices("1-20").value().size(), 20u);
  for (const char* bad : {"", "a-b", "3-1", "1-", "0-1000", "1,,2", "-1"}) {
    auto r = ParseArrayIndices(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--array"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace gpuslice::cli
