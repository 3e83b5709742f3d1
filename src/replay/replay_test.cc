#include "replay/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "replay/queue_replay.h"
#include "replay/replay_report.h"

namespace gpuslice::replay {
namespace {

using core::Demand;
using core::Result;

// A small cluster where fragmentation matters: 4 nodes of 2 GPUs.
ReplayInput SmallInput() {
  std::vector<core::TraceNode> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back({"n" + std::to_string(i), 32000, 131072, 2, "T4", i + 2});
  }
  std::vector<core::TraceTask> tasks = {{"a", 4000, 8192, 1, 600, "", 2},
                                        {"b", 4000, 8192, 1, 300, "", 3},
                                        {"c", 8000, 8192, 1, 1000, "", 4},
                                        {"d", 2000, 4096, 0, 0, "", 5},
                                        {"e", 8000, 16384, 2, 1000, "", 6}};
  return BuildInput(nodes, tasks).value();
}

// One node of one whole GPU and whole-GPU tasks with times: "a" holds the
// GPU from 0 to 3600 s, "b" (created at 60 s, runs an hour) waits for it and
// holds it until 7200 s, "c" comes at 8000 s, after both ended.
struct TimedTrace {
  ReplayInput input;
  std::vector<core::TraceTask> tasks;
};
TimedTrace OneGpuTrace() {
  std::vector<core::TraceNode> nodes = {{"n0", 32000, 131072, 1, "T4", 2}};
  std::vector<core::TraceTask> tasks = {{"a", 1000, 1024, 1, 1000, "", 2, 0, 3600},
                                        {"b", 1000, 1024, 1, 1000, "", 3, 60, 3660},
                                        {"c", 1000, 1024, 1, 1000, "", 4, 8000, 8600}};
  return {BuildInput(nodes, tasks).value(), tasks};
}

QueueReplayConfig TodayConfig(std::vector<double> user_mix) {
  QueueReplayConfig c = QueueReplayVariants({}).front();
  c.user_mix = std::move(user_mix);
  return c;
}

TEST(MaxMinShares, GiveSmallDemandsInFullAndSplitTheRestEqually) {
  struct Case {
    std::vector<double> demands;
    double total;
    std::vector<double> want;
  } cases[] = {
      {{1, 10, 10}, 9, {1, 4, 4}}, {{10, 1, 10}, 9, {4, 1, 4}},
      {{5, 5}, 20, {5, 5}},  // Less asked than there is: each gets its ask.
      {{8, 8, 8}, 6, {2, 2, 2}},   {{0, 3}, 2, {0, 2}},
  };
  for (const Case& c : cases) {
    std::vector<double> got = MaxMinShares(c.demands, c.total);
    ASSERT_EQ(got.size(), c.want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], c.want[i]) << i;
  }
}

TEST(QueueReplay, CountsAllBusyTimeWhileTheOnlyUserHasATaskWaiting) {
  TimedTrace t = OneGpuTrace();
  Result<QueueReplayResult> r = RunQueueReplay(t.input, t.tasks, TodayConfig({1}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // "b" waits from 60 s to 3600 s.
  EXPECT_NEAR(r->contended_hours, 3540.0 / 3600, 1e-9);
  EXPECT_NEAR(r->all_busy_hours, 3540.0 / 3600, 1e-9);
  EXPECT_NEAR(r->longest_all_busy_hours, 3540.0 / 3600, 1e-9);
  EXPECT_NEAR(r->users[0].all_busy_gpu_hours, 3540.0 / 3600, 1e-9);
  EXPECT_DOUBLE_EQ(r->max_user_deviation_all_busy, 0);
}

TEST(QueueReplay, DoesNotCountAllBusyTimeWhileSomeUserHasNothingWaiting) {
  TimedTrace t = OneGpuTrace();
  // The second user's weight is too small to be drawn: it never waits.
  Result<QueueReplayResult> r = RunQueueReplay(t.input, t.tasks, TodayConfig({1, 1e-12}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->users[1].tasks, 0u);
  EXPECT_NEAR(r->contended_hours, 3540.0 / 3600, 1e-9);
  EXPECT_DOUBLE_EQ(r->all_busy_hours, 0);
  EXPECT_DOUBLE_EQ(r->longest_all_busy_hours, 0);
  EXPECT_DOUBLE_EQ(r->users[0].all_busy_gpu_hours, 0);
}

// The tasks a queue of small ones starves are reported on their own: a
// 2-GPU task that waits for a 1-GPU one to leave its node.
TEST(QueueReplay, ReportsTheWaitOfTasksOfTwoGpusOrMoreAndTheLongestWait) {
  std::vector<core::TraceNode> nodes = {{"n0", 32000, 131072, 2, "T4", 2}};
  std::vector<core::TraceTask> tasks = {{"a", 1000, 1024, 1, 1000, "", 2, 0, 3600},
                                        {"b", 1000, 1024, 2, 1000, "", 3, 60, 3660},
                                        {"c", 1000, 1024, 1, 1000, "", 4, 8000, 8600}};
  ReplayInput input = BuildInput(nodes, tasks).value();
  Result<QueueReplayResult> r = RunQueueReplay(input, tasks, TodayConfig({1}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->multi_tasks, 1u);
  EXPECT_DOUBLE_EQ(r->multi_wait_p95_s, 3540);
  EXPECT_DOUBLE_EQ(r->max_wait_s, 3540);
  EXPECT_NE(FormatQueueTable({*r}).find("multi95"), std::string::npos);
}

// Deserved quotas: two users, each guaranteed one of the node's two GPUs.
// User 0 takes both (the second as a borrower); user 1's task, within its
// guarantee, takes the borrowed GPU back at once, and the borrower goes on
// with the run time it had left once a GPU is free again.
TEST(QueueReplay, ATaskWithinItsGroupsQuotaTakesTheBorrowedGpuBack) {
  std::vector<core::TraceNode> nodes = {{"n0", 32000, 131072, 2, "T4", 2}};
  std::vector<core::TraceTask> tasks = {{"a", 1000, 1024, 1, 1000, "", 2, 0, 7200},
                                        {"b", 1000, 1024, 1, 1000, "", 3, 1, 7201},
                                        {"c", 1000, 1024, 1, 1000, "", 4, 61, 3661}};
  ReplayInput input = BuildInput(nodes, tasks).value();
  QueueReplayConfig c = QueueReplayVariants({}).back();
  ASSERT_EQ(c.label, "quotas");
  c.user_mix = {1, 1};
  c.task_users = {0, 0, 1};
  Result<QueueReplayResult> r = RunQueueReplay(input, tasks, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reclaims, 1u);
  EXPECT_DOUBLE_EQ(r->max_wait_s, 0) << "c starts on arrival; b's wait counts once, at its start";
  // b ran 60 s, was suspended, and ran its other 7,140 s after c left
  // (3,661 s): everything ended at 10,801 s, 2 GPU-hours each for b and a.
  EXPECT_NEAR(r->simulated_hours, 10801.0 / 3600, 1e-9);
  EXPECT_NEAR(r->users[0].gpu_hours, 4.0, 1e-9);
  EXPECT_NEAR(r->users[1].gpu_hours, 1.0, 1e-9);

  c.quotas = false;  // Without quotas c waits for a to end.
  r = RunQueueReplay(input, tasks, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reclaims, 0u);
  EXPECT_DOUBLE_EQ(r->max_wait_s, 7139);
}

TEST(QueueReplay, RefusesATaskUserOutsideTheUserMix) {
  TimedTrace t = OneGpuTrace();
  QueueReplayConfig c = TodayConfig({1, 1});
  c.task_users = {0, 2};
  Result<QueueReplayResult> r = RunQueueReplay(t.input, t.tasks, c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("task user 2"), std::string::npos) << r.status().message();
}

TEST(QueueReplay, AWindowReplaysOnlyTheTasksCreatedWithinIt) {
  TimedTrace t = OneGpuTrace();
  QueueReplayConfig c = TodayConfig({1});
  c.until_s = 4000;  // Leaves out "c" (created at 8000 s).
  Result<QueueReplayResult> r = RunQueueReplay(t.input, t.tasks, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tasks, 2u);
  EXPECT_DOUBLE_EQ(r->simulated_hours, 2.0);  // Until "b" ends.
  c.from_s = 60;                              // Only "b": it starts at once.
  r = RunQueueReplay(t.input, t.tasks, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tasks, 1u);
  EXPECT_DOUBLE_EQ(r->contended_hours, 0);
}

TEST(QueueReplay, RejectsAWindowThatEndsBeforeItStarts) {
  TimedTrace t = OneGpuTrace();
  QueueReplayConfig c = TodayConfig({1});
  c.from_s = 100;
  c.until_s = 100;
  Result<QueueReplayResult> r = RunQueueReplay(t.input, t.tasks, c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("window"), std::string::npos) << r.status().ToString();
}

TEST(ArrivalSequence, InflatesToTheTargetAndIsDeterministic) {
  std::vector<Demand> tasks = {Demand::Fraction(500, 0), Demand::WholeGpus(1),
                               Demand::CpuOnly(1000, 0)};
  std::vector<Demand> a = ArrivalSequence(tasks, 10000, 1.3, 7, true);
  std::vector<Demand> b = ArrivalSequence(tasks, 10000, 1.3, 7, true);
  ASSERT_EQ(a.size(), b.size());
  uint64_t total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].gpu_milli, b[i].gpu_milli);
    total += a[i].TotalGpuMilli();
  }
  EXPECT_LE(total, 13000u);
  EXPECT_GE(total, 13000u - 1000u);  // Stops within one task of the target.
  std::vector<Demand> c = ArrivalSequence(tasks, 10000, 1.3, 8, true);
  bool differs = c.size() != a.size();
  for (size_t i = 0; !differs && i < a.size(); ++i) differs = a[i].gpu_milli != c[i].gpu_milli;
  EXPECT_TRUE(differs);
}

TEST(ArrivalSequence, WithoutShuffleKeepsTraceOrderFirst) {
  std::vector<Demand> tasks = {Demand::Fraction(500, 0), Demand::WholeGpus(1)};
  std::vector<Demand> a = ArrivalSequence(tasks, 10000, 1.3, 1, false);
  EXPECT_EQ(a[0].gpu_milli, 500u);
  EXPECT_EQ(a[1].gpu_milli, 1000u);
}

TEST(RunReplay, ReportsEveryStepAndKeepsTheBooks) {
  ReplayInput in = SmallInput();
  for (const core::PolicyInfo& info : core::AllPolicies()) {
    Result<ReplayResult> r = RunReplay(in, {info.policy, 1.3, 42, true, 0.05, 0});
    ASSERT_TRUE(r.ok()) << info.name << ": " << r.status().ToString();
    ASSERT_EQ(r->steps.size(), 26u) << info.name;
    EXPECT_DOUBLE_EQ(r->capacity_gpus, 8);
    double prev_alloc = 0;
    uint64_t prev_failed = 0;
    for (const StepStats& s : r->steps) {
      EXPECT_GE(s.alloc_ratio, prev_alloc - 1e-12) << info.name;  // Nothing departs.
      EXPECT_GE(s.failed_tasks, prev_failed) << info.name;
      EXPECT_LE(s.alloc_ratio, 1.0);
      EXPECT_NEAR(s.allocated_gpus + s.unallocated_gpus, 8, 1e-9);
      EXPECT_LE(s.fragmented_gpus, s.unallocated_gpus + 1e-9);
      EXPECT_LE(s.allocated_gpus, s.arrived_gpus + 1e-9);
      prev_alloc = s.alloc_ratio;
      prev_failed = s.failed_tasks;
    }
    EXPECT_GT(r->steps.back().failed_tasks, 0u) << info.name;  // 130% cannot all fit.
  }
}

// Two tasks of 30% spread over the two GPUs of one node leave no whole GPU
// for the third; moving one beside the other does.
TEST(RunReplay, WithMovesATaskThatOneMoveLetsInIsPlacedAndCounted) {
  std::vector<core::TraceNode> nodes = {{"n0", 32000, 131072, 2, "T4", 2}};
  std::vector<core::TraceTask> tasks = {{"a", 1000, 1024, 1, 300, "", 2},
                                        {"b", 1000, 1024, 1, 300, "", 3},
                                        {"c", 1000, 1024, 1, 1000, "", 4}};
  ReplayInput in = BuildInput(nodes, tasks).value();
  ReplayConfig config{core::Policy::kSpread, 0.8, 1, false, 0.05, 0};
  Result<ReplayResult> without = RunReplay(in, config);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_EQ(without->steps.back().failed_tasks, 1u);
  EXPECT_EQ(without->steps.back().moved_for, 0u);
  config.moves = true;
  Result<ReplayResult> with = RunReplay(in, config);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_TRUE(with->moves);
  EXPECT_EQ(with->steps.back().failed_tasks, 0u);
  EXPECT_EQ(with->steps.back().moved_for, 1u);
  EXPECT_NEAR(with->steps.back().allocated_gpus, 1.6, 1e-9);
  const std::string table = FormatTable(Summarize({*with}));
  EXPECT_NE(table.find("moved-for@end"), std::string::npos) << table;
  EXPECT_EQ(FormatTable(Summarize({*without})).find("moved-for"), std::string::npos);
}

TEST(RunReplay, RejectsBadConfig) {
  ReplayInput in = SmallInput();
  EXPECT_EQ(RunReplay(in, {core::kDefaultPolicy, 1.3, 1, true, 0, 0.95}).status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunReplay(in, {core::kDefaultPolicy, 0.01, 1, true, 0.05, 0}).status().code(),
            core::StatusCode::kInvalidArgument);
}

TEST(BuildInput, NamesTheLineOfABadTask) {
  std::vector<core::TraceNode> nodes = {{"n", 1000, 1024, 1, "T4", 2}};
  std::vector<core::TraceTask> tasks = {{"t", 1, 1, 2, 500, "", 9}};
  core::Status s = BuildInput(nodes, tasks).status();
  EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("task list line 9"), std::string::npos) << s.message();
}

TEST(Report, JsonCsvAndPlotCarryEveryPolicy) {
  ReplayInput in = SmallInput();
  std::vector<ReplayResult> runs;
  for (uint64_t seed : {1, 2}) {
    runs.push_back(RunReplay(in, {core::Policy::kBestFit, 1.0, seed, true, 0.05, 0}).value());
    runs.push_back(RunReplay(in, {core::Policy::kFragAware, 1.0, seed, true, 0.05, 0}).value());
  }
  std::vector<PolicySummary> summary = Summarize(runs);
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0].seeds, 2);
  nlohmann::json j =
      nlohmann::json::parse(ToJson({"cmd", "n", "p", 1.0, true, {1, 2}}, runs, summary));
  EXPECT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["summary"][1]["policy"], "frag-aware");
  EXPECT_EQ(j["summary"][0]["steps"].size(), 20u);
  std::string csv = ToCsv(runs, summary);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4 * 20 + 2 * 20);
  std::string gp = GnuplotScript(summary, "out.png", "t");
  EXPECT_NE(gp.find("title 'frag-aware'"), std::string::npos);
  EXPECT_NE(FormatTable(summary).find("best-fit"), std::string::npos);
}

std::string RunTool(const std::string& args, int* status) {
  std::string cmd = std::string(GPUSLICE_REPLAY_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

TEST(ReplayTool, RejectsAnUnknownPolicyByNamingTheValidOnes) {
  int status = 0;
  std::string out = RunTool("--nodes x --pods y --policy tetris", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("unknown placement policy 'tetris'"), std::string::npos) << out;
}

TEST(ReplayTool, ReportsABadRowWithFileAndLine) {
  std::filesystem::path dir = testing::TempDir();
  std::ofstream(dir / "nodes.csv") << "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,two,T4\n";
  std::ofstream(dir / "pods.csv") << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  int status = 0;
  std::string out =
      RunTool("--nodes " + (dir / "nodes.csv").string() + " --pods " + (dir / "pods.csv").string(),
              &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("nodes.csv:2: column 4 (gpu)"), std::string::npos) << out;
}

TEST(ReplayTool, AQueueReplayRunsWithTheDefaultOptions) {
  std::filesystem::path dir = testing::TempDir();
  std::ofstream(dir / "qnodes.csv") << "sn,cpu_milli,memory_mib,gpu,model\n"
                                       "n0,64000,262144,2,V100M32\n";
  std::ofstream(dir / "qpods.csv")
      << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"
         "a,1000,1024,1,500,,0,3600\nb,1000,1024,2,1000,,60,7200\nc,1000,1024,1,300,,120,"
         "1800\n";
  int status = 0;
  std::string out = RunTool("--queue --nodes " + (dir / "qnodes.csv").string() + " --pods " +
                                (dir / "qpods.csv").string() + " --variants today --json",
                            &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_NE(out.find("\"today\""), std::string::npos) << out;
}

// The one run of the real trace in the suite: a 30% replay, a few seconds.
TEST(ReplayTool, SmokeRunOnTheOpenbTrace) {
  const std::string dir = GPUSLICE_OPENB_DIR;
  if (dir.empty() || !std::filesystem::exists(dir + "/openb_node_list_gpu_node.csv")) {
    GTEST_SKIP() << "openb trace not found (configure with -DGPUSLICE_OPENB_DIR=...)";
  }
  int status = 0;
  std::string out = RunTool("--nodes " + dir + "/openb_node_list_gpu_node.csv --pods " + dir +
                                "/openb_pod_list_default.csv --policy best-fit,frag-aware "
                                "--inflate 0.3 --json",
                            &status);
  ASSERT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["runs"][0]["capacity_gpus"].get<double>(), 6212);
  for (const auto& run : j["runs"]) {
    const auto& last = run["steps"].back();
    EXPECT_DOUBLE_EQ(last["arrived_pct"].get<double>(), 30);
    EXPECT_GT(last["alloc_ratio"].get<double>(), 0.29);  // Nothing fails this early.
  }
}

}  // namespace
}  // namespace gpuslice::replay
