#include "cli/job_select.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

json Jobs() {
  return {{"jobs",
           {{{"id", 1}, {"user", "alice"}, {"state", "running"}},
            {{"id", 2}, {"user", "alice"}, {"state", "queued"}},
            {{"id", 3}, {"user", "bob"}, {"state", "queued"}},
            {{"id", 4}, {"user", "alice"}, {"state", "exited"}}}}};
}

std::vector<int> Ids(const json& list) {
  std::vector<int> out;
  for (const json& j : list["jobs"]) out.push_back(j["id"]);
  return out;
}

// Issue 18 item 13: ps/cancel --user and --state, as in Slurm.
TEST(JobFilter, PicksJobsByUserAndState) {
  JobFilter mine;
  mine.user = "alice";
  EXPECT_EQ(Ids(Filter(Jobs(), mine)), (std::vector<int>{1, 2, 4}));
  JobFilter my_queued = mine;
  my_queued.states = *ParseStates("queued");
  EXPECT_EQ(Ids(Filter(Jobs(), my_queued)), (std::vector<int>{2}));
  JobFilter live;
  live.states = *ParseStates("queued,running");
  EXPECT_EQ(Ids(Filter(Jobs(), live)), (std::vector<int>{1, 2, 3}));
  JobFilter ended;
  ended.states = *ParseStates("ended");
  EXPECT_EQ(Ids(Filter(Jobs(), ended)), (std::vector<int>{4}));
  EXPECT_TRUE(WantsEndedJobs(ended.states));
  EXPECT_FALSE(WantsEndedJobs(live.states));
  EXPECT_EQ(Ids(Filter(Jobs(), JobFilter{})), (std::vector<int>{1, 2, 3, 4}));
}

TEST(ParseStates, NamesTheBadToken) {
  auto s = ParseStates("queued,pending");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--state: unknown job state 'pending'"), std::string::npos)
      << s.status().message();
}

// Issue 18 item 13: job arrays (submit --array 1-20).
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
