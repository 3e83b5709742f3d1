#include "cli/view/ps_view.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1'700'000'000'000;
constexpr int64_t kMin = 60'000;

json JobJson(uint64_t id, const std::string& state, int64_t submitted, int64_t started,
             int64_t ended) {
  return {{"id", id},
          {"user", "alice"},
          {"name", "train"},
          {"state", state},
          {"request", {{"describe", "8 GiB"}, {"priority", "normal"}}},
          {"submitted_ms", submitted},
          {"started_ms", started},
          {"ended_ms", ended},
          {"exit_code", state == "exited" ? 0 : -1},
          {"reason", ""}};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// AGE is the job's age, not the time in the current state.
TEST(RenderPs, AgeIsSinceSubmissionAndElapsedIsTheRunTime) {
  json running = JobJson(1, "running", kNow - 10 * kMin, kNow - 3 * kMin, 0);
  json exited = JobJson(2, "exited", kNow - 30 * kMin, kNow - 25 * kMin, kNow - 20 * kMin);
  json queued = JobJson(3, "queued", kNow - 2 * kMin, 0, 0);
  queued["queue_position"] = 1;
  queued["waiting_for"] = "needs 8 GiB on one GPU";
  auto lines = Lines(RenderPs({{"jobs", {running, exited, queued}}}, kNow));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find("AGE"), std::string::npos);
  EXPECT_NE(lines[0].find("ELAPSED"), std::string::npos);
  EXPECT_NE(lines[1].find("10m00s  3m00s"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("30m00s  5m00s"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("exit 0"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("2m00s   -"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("needs 8 GiB on one GPU"), std::string::npos) << lines[3];
}

// ps shows a container job's image; lists without one keep
// their columns.
TEST(RenderPs, AContainerJobShowsItsImageAndAHostJobADash) {
  json host = JobJson(1, "running", kNow - 10 * kMin, kNow - 3 * kMin, 0);
  json box = JobJson(2, "running", kNow - 10 * kMin, kNow - 3 * kMin, 0);
  box["image"] = "localhost/train:1";
  box["engine"] = "podman";
  auto lines = Lines(RenderPs({{"jobs", {host, box}}}, kNow));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("IMAGE"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("localhost/train:1"), std::string::npos) << lines[2];
  const size_t column = lines[0].find("IMAGE");
  ASSERT_NE(column, std::string::npos);
  EXPECT_EQ(lines[1].substr(column, 2), "- ") << lines[1];
  EXPECT_EQ(lines[2].substr(column, 17), "localhost/train:1") << lines[2];
  EXPECT_EQ(Lines(RenderPs({{"jobs", {host}}}, kNow))[0].find("IMAGE"), std::string::npos);
}

// An elastic job killed by SIGUSR1 shows more than "exit 138".
TEST(RenderPs, AnEndBySignalNamesTheSignal) {
  json killed = JobJson(4, "exited", kNow - kMin, kNow - kMin, kNow);
  killed["exit_code"] = 138;
  EXPECT_NE(RenderPs({{"jobs", {killed}}}, kNow).find("exit 138 (killed by SIGUSR1)"),
            std::string::npos);
  EXPECT_STREQ(SignalName(143), "killed by SIGTERM");
  EXPECT_EQ(SignalName(1), nullptr);
  EXPECT_EQ(SignalName(128), nullptr);
}

TEST(RenderPs, ASuspendedJobWaitingToResumeShowsItsPositionAndWhatItWaitsFor) {
  json asleep = JobJson(5, "suspended", kNow - 10 * kMin, kNow - 9 * kMin, 0);
  asleep["reason"] = "suspended by idle reclaim";
  json waiting = JobJson(6, "suspended", kNow - 10 * kMin, kNow - 9 * kMin, 0);
  waiting["reason"] = "suspended by alice";
  waiting["flags"] = {"resume_asked"};
  waiting["queue_position"] = 2;
  waiting["waiting_for"] = "waiting for GPU memory to resume on demand: behind job 7";
  auto lines = Lines(RenderPs({{"jobs", {asleep, waiting}}}, kNow));
  ASSERT_EQ(lines.size(), 3u);
  // POS, then NOTE.
  EXPECT_NE(lines[1].find("9m00s    -    suspended by idle reclaim"), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("9m00s    2    suspended by alice; resume_asked; waiting for GPU memory "
                          "to resume on demand: behind job 7"),
            std::string::npos)
      << lines[2];
}

// A job's name, image and reason never reach an admin's terminal raw:
// escape sequences are shown, not obeyed.
TEST(RenderPs, AJobsTextIsShownWithItsEscapesVisibleNeverEmitted) {
  json job = JobJson(6, "failed", kNow - kMin, kNow - kMin, kNow);
  job["name"] = "x\x1b]0;owned\x07y";
  job["image"] = "img\x1b[2J";
  job["reason"] = "cannot start 'a\nstate: cancelled'";
  job["user"] = "bob\xe2\x80\xae";
  const std::string text = RenderPs({{"jobs", {job}}}, kNow);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos) << text;
  EXPECT_NE(text.find("x\\x1b]0;owned\\x07y"), std::string::npos) << text;
  EXPECT_NE(text.find("img\\x1b[2J"), std::string::npos) << text;
  EXPECT_NE(text.find("bob\\u202e"), std::string::npos) << text;
  auto lines = Lines(text);
  ASSERT_EQ(lines.size(), 2u) << "a newline in a reason makes no line of its own:\n" << text;
  EXPECT_NE(lines[1].find("'a\\nstate: cancelled'"), std::string::npos) << lines[1];
}

TEST(DependenciesText, EachJobWithItsConditionStateAndStatus) {
  json job = JobJson(5, "queued", kNow, 0, 0);
  EXPECT_EQ(DependenciesText(job), "") << "none";
  job["after"] = {{{"job", 1}, {"condition", "ok"}, {"state", "running"}, {"status", "waiting"}},
                  {{"job", 2},
                   {"condition", "any"},
                   {"state", "exited"},
                   {"exit_code", 3},
                   {"status", "satisfied"}},
                  {{"job", 3}, {"condition", "any"}}};  // Ended long ago: no state.
  EXPECT_EQ(DependenciesText(job), "1:ok (running, waiting), 2 (exit 3, satisfied), 3");
}

TEST(ParsePsFormat, TakesFieldsWithOptionalWidths) {
  auto cols = ParsePsFormat("id,user,name:12,note");
  ASSERT_TRUE(cols.ok()) << cols.status().ToString();
  ASSERT_EQ(cols->size(), 4u);
  EXPECT_EQ((*cols)[2].width, 12u);
  EXPECT_EQ((*cols)[0].width, 0u);
  const std::vector<std::string> names = PsFieldNames();
  EXPECT_EQ(names[(*cols)[1].field], "user");
  for (const std::string& n : names) EXPECT_TRUE(ParsePsFormat(n).ok()) << n;
}

TEST(ParsePsFormat, NamesTheBadItemAndTheFieldsThereAre) {
  struct Case {
    const char* format;
    const char* needle;
  } cases[] = {
      {"id,usr", "unknown field 'usr' (fields: id, user,"},
      {"", "unknown field ''"},
      {"id,", "unknown field ''"},
      {"name:x", "'name:x': the width after ':' must be a number from 1 to 999"},
      {"name:0", "from 1 to 999"},
      {"name:", "from 1 to 999"},
      {"name:1000", "from 1 to 999"},
  };
  for (const Case& c : cases) {
    auto r = ParsePsFormat(c.format);
    ASSERT_FALSE(r.ok()) << c.format;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("--format: ", 0), 0u);
  }
}

TEST(RenderPs, AFormatPicksTheColumnsAndCutsTheWideOnes) {
  json job = JobJson(7, "queued", kNow - kMin, 0, 0);
  job["name"] = "a-rather-long-name";
  job["request"]["pool"] = "inference";
  auto lines = Lines(RenderPs({{"jobs", {job}}}, kNow, *ParsePsFormat("id,name:8,pool,age")));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "ID  NAME      POOL       AGE");
  EXPECT_EQ(lines[1], "7   a-rathe~  inference  1m00s");
}

// ps does not show the GPU a suspended job no longer holds.
TEST(RenderPs, ASuspendedJobHoldsNoGpuAndSaysWhereItWas) {
  json job = JobJson(3, "suspended", kNow - 10 * kMin, kNow - 5 * kMin, 0);
  job["allocation"] = {{"gpu_indices", {2}}};
  auto lines = Lines(RenderPs({{"jobs", {job}}}, kNow, *ParsePsFormat("gpu,note")));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].substr(0, 5), "-    ") << lines[1];
  EXPECT_NE(lines[1].find("was on GPU 2"), std::string::npos) << lines[1];
}

TEST(RenderPs, WhatAJobsOwnerTypedCannotReachTheTerminalAsEscapes) {
  json job = JobJson(3, "queued", kNow, 0, 0);
  job["name"] = "x\x1b]0;pwned\x07";
  job["waiting_for"] = "\x1b[2J";
  const std::string out = RenderPs({{"jobs", {job}}}, kNow);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find('\x07'), std::string::npos);
}

TEST(RenderSummary, CountsByStateAndOneLinePerGroup) {
  json summary = {{"counts", {{"queued", 10000}, {"running", 2}}},
                  {"groups",
                   {{{"ids", "1-2"},
                     {"count", 2},
                     {"state", "running"},
                     {"user", "alice"},
                     {"name", "big"},
                     {"request", "2 GPUs"},
                     {"priority", "normal"},
                     {"pool", "default"},
                     {"held", false}},
                    {{"ids", "3-10002"},
                     {"count", 10000},
                     {"state", "queued"},
                     {"user", "bob"},
                     {"name", "train[0-999]"},
                     {"request", "8 GiB + 30%"},
                     {"priority", "normal"},
                     {"pool", "default"},
                     {"held", false},
                     {"queue_position", 1},
                     {"waiting_for", "first in line: needs 8 GiB + 30% on one GPU"}}}},
                  {"groups_total", 3}};
  auto lines = Lines(RenderSummary(summary));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], "queued 10000  running 2  (10002 jobs)");
  EXPECT_NE(lines[2].find("IDS"), std::string::npos);
  EXPECT_NE(lines[4].find("3-10002"), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("10000"), std::string::npos);
  EXPECT_NE(lines[4].find("train[0-999]"), std::string::npos);
  EXPECT_NE(lines[4].find("first in line"), std::string::npos);
  EXPECT_EQ(lines[5], "(1 more groups: -n 0 shows them all)");
  EXPECT_EQ(RenderSummary({{"counts", json::object()}, {"groups", json::array()}}), "no jobs\n");
}

}  // namespace
}  // namespace gpuslice::cli
