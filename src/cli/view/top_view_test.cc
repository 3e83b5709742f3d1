#include "cli/view/top_view.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

constexpr int64_t kNow = 1'700'000'000'000;

// What the daemon answers on a machine with one simulated H100, one running
// slice and one queued job.
json Status() {
  return {{"state", "ok"}, {"degraded_reason", ""}, {"version", "0.1.0"}, {"simulated", true},
          {"gpus", 1},     {"queued", 1},           {"running", 1}};
}

json Gpus(json slices = json::array()) {
  return {{"simulated", true},
          {"gpus",
           {{{"index", 0},
             {"model", "NVIDIA H100 80GB HBM3"},
             {"uuid", "GPU-1c2f9a80-0000-4000-8000-000000000000"},
             {"memory_total", 80 * core::kGiB},
             {"memory_used", 20 * core::kGiB},
             {"utilization_pct", 42},
             {"temperature_c", 45},
             {"power_w", 120.5},
             {"slices", slices}}}}};
}

json SliceJson(uint64_t job, const std::string& user, const std::string& name) {
  return {{"job", job},
          {"user", user},
          {"name", name},
          {"memory_limit", 8 * core::kGiB},
          {"memory_used", 2 * core::kGiB},
          {"compute_milli", 300}};
}

json RunningJob(uint64_t id, const std::string& user, const std::string& name) {
  return {{"id", id},
          {"user", user},
          {"name", name},
          {"state", "running"},
          {"request", {{"kind", "fraction"}, {"describe", "8 GiB + 30%"}, {"priority", "normal"}}},
          {"usage",
           {{"memory_used_bytes", 2 * core::kGiB},
            {"gpu_util_pct", 28.4},
            {"refused_allocs", 3},
            {"low_use_ms", 0}}}};
}

json QueuedJob(uint64_t id, int pos) {
  return {{"id", id},
          {"user", "bob"},
          {"name", "eval"},
          {"state", "queued"},
          {"queue_position", pos},
          {"submitted_ms", kNow - 65'000},
          {"waiting_for", "first in line: needs 70 GiB on one GPU; most free on one GPU: 60 GiB"},
          {"request", {{"kind", "fraction"}, {"describe", "70 GiB"}, {"priority", "high"}}}};
}

json Events() {
  return {{"events",
           {{{"id", 1},
             {"at_ms", kNow - 90'000},
             {"kind", "submitted"},
             {"job", 1},
             {"user", "alice"},
             {"message", "8 GiB + 30%"}},
            {{"id", 2},
             {"at_ms", kNow - 89'000},
             {"kind", "started"},
             {"job", 1},
             {"user", "alice"},
             {"message", "GPU 0"}}}}};
}

TopModel Model() {
  json jobs = {{"jobs", {RunningJob(1, "alice", "train-1"), QueuedJob(2, 1)}}};
  TopModel m = ModelFromJson(Status(), Gpus({SliceJson(1, "alice", "train-1")}), jobs, Events());
  m.host = "node7";
  m.time_text = "12:00:00";
  m.now_ms = kNow;
  return m;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

void ExpectFits(const std::vector<std::string>& lines, size_t width) {
  for (const std::string& l : lines) {
    EXPECT_LE(DisplayWidth(l), width) << "'" << l << "'";
    EXPECT_EQ(l.find('\x1b'), std::string::npos) << "no escape codes in the view";
  }
}

bool IsAscii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

TEST(TopModel, ReadsGpusSlicesWithTheirJobsUsageTheQueueAndEvents) {
  TopModel m = Model();
  EXPECT_EQ(m.state, "ok");
  EXPECT_TRUE(m.simulated);
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].temperature_c, 45);
  EXPECT_DOUBLE_EQ(m.gpus[0].power_w, 120.5);
  ASSERT_EQ(m.gpus[0].slices.size(), 1u);
  const TopSlice& s = m.gpus[0].slices[0];
  EXPECT_EQ(s.job, 1u);
  EXPECT_EQ(s.memory_used, static_cast<int64_t>(2 * core::kGiB));
  EXPECT_DOUBLE_EQ(s.achieved_pct, 28.4);
  EXPECT_EQ(s.refused_allocs, 3u);
  ASSERT_EQ(m.queue.size(), 1u);
  EXPECT_EQ(m.queue[0].request, "70 GiB");
  ASSERT_EQ(m.events.size(), 2u);
  EXPECT_EQ(m.events[1].kind, "started");
}

TEST(TopModel, UnknownFiguresStayUnknown) {
  json gpus = Gpus({SliceJson(1, "alice", "x")});
  gpus["gpus"][0].erase("temperature_c");
  gpus["gpus"][0].erase("power_w");
  gpus["gpus"][0]["slices"][0].erase("memory_used");
  TopModel m = ModelFromJson(Status(), gpus, {{"jobs", json::array()}}, nullptr);
  EXPECT_EQ(m.gpus[0].temperature_c, -1);
  EXPECT_LT(m.gpus[0].power_w, 0);
  EXPECT_EQ(m.gpus[0].slices[0].memory_used, -1);
  EXPECT_LT(m.gpus[0].slices[0].achieved_pct, 0);
  std::string text = Join(RenderTop(m, {}));
  EXPECT_NE(text.find("?/8G"), std::string::npos) << text;
  EXPECT_EQ(text.find(" W "), std::string::npos) << "no power shown when unknown";
}

TEST(TopModel, CleansControlCharactersOutOfEverythingItShows) {
  json jobs = {{"jobs", {RunningJob(1, "alice", "x")}}};
  json ev = {{"events",
              {{{"at_ms", kNow},
                {"kind", "started"},
                {"job_id", 1},
                {"user", "al\x1b[2Jice"},
                {"message", "evil \x1b]0;title\x07 msg \xe2\x80\xae"}}}}};
  TopModel m = ModelFromJson(Status(), Gpus({SliceJson(1, "a\x1b[31mb", "x")}), jobs, ev);
  std::string text = Join(RenderTop(m, {.width = 200}));
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\x07'), std::string::npos);
  EXPECT_NE(text.find("a\\x1b[31mb"), std::string::npos) << text;
  EXPECT_NE(text.find("\\x1b]0;title\\x07 msg \\u202e"), std::string::npos) << text;
  EXPECT_TRUE(IsAscii(text)) << "controls from the daemon are shown as escapes";
}

TEST(Bar, FillsInProportionInAsciiAndEighthsInUtf8) {
  EXPECT_EQ(Bar(0.5, 12, false), "[#####.....]");
  EXPECT_EQ(Bar(0, 6, false), "[....]");
  EXPECT_EQ(Bar(1, 6, false), "[####]");
  EXPECT_EQ(Bar(7.0, 6, false), "[####]") << "clamped";
  EXPECT_EQ(Bar(-1, 6, false), "[....]");
  // 4 cells x 8 = 32 eighths; 0.5 -> 16 = two full cells.
  EXPECT_EQ(Bar(0.5, 6, true), "[\u2588\u2588\u2591\u2591]");
  // 0.5625 -> 18 eighths: two full cells and a quarter cell.
  EXPECT_EQ(Bar(0.5625, 6, true), "[\u2588\u2588\u258e\u2591]");
  EXPECT_EQ(DisplayWidth(Bar(0.33, 30, true)), 30u);
}

TEST(Fit, CutsLongTextToTheWidthWithAMark) {
  EXPECT_EQ(Fit("short", 10, false), "short");
  EXPECT_EQ(Fit("a-very-long-job-name", 8, false), "a-very-~");
  EXPECT_EQ(Fit("a-very-long-job-name", 8, true), "a-very-\u2026");
  EXPECT_EQ(DisplayWidth(Fit("\u2588\u2588\u2588\u2588", 3, true)), 3u);
}

class RenderTopAt : public ::testing::TestWithParam<std::tuple<size_t, bool>> {};

TEST_P(RenderTopAt, ShowsEverySectionWithinTheWidth) {
  auto [width, utf8] = GetParam();
  std::vector<std::string> lines = RenderTop(Model(), {.width = width, .utf8 = utf8});
  ExpectFits(lines, width);
  std::string text = Join(lines);
  if (utf8) {
    EXPECT_NE(text.find("\u2588"), std::string::npos) << text;
  } else {
    EXPECT_TRUE(IsAscii(text)) << text;
  }
  for (const char* want :
       {"gpuslice top  node7  daemon ok  SIMULATED  12:00:00", "GPU 0", "NVIDIA H100 80GB HBM3",
        "UTIL", " 42%", "20 GiB / 80 GiB", "train-1", "alice", "2G/8G", "30%/28%", "3 refused",
        "QUEUE (1 waiting)", "70 GiB", "1m05s", "EVENTS", "started", "1m29s ago"}) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing '" << want << "' in\n" << text;
  }
  EXPECT_NE(text.find(utf8 ? "45\u00b0C" : "45C"), std::string::npos) << text;
  EXPECT_NE(text.find("120 W"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Widths, RenderTopAt,
                         ::testing::Combine(::testing::Values(80, 200), ::testing::Bool()));

TEST(RenderTop, WideTerminalsGetLongerBarsAndLongerNames) {
  std::string name(36, 'n');
  json jobs = {{"jobs", {RunningJob(1, "alice", name)}}};
  TopModel m = ModelFromJson(Status(), Gpus({SliceJson(1, "alice", name)}), jobs, nullptr);
  std::string narrow = Join(RenderTop(m, {.width = 80}));
  std::string wide = Join(RenderTop(m, {.width = 200}));
  EXPECT_EQ(narrow.find(name), std::string::npos) << "cut at 80 columns";
  EXPECT_NE(narrow.find(std::string(11, 'n') + "~"), std::string::npos) << narrow;
  EXPECT_NE(wide.find(name), std::string::npos) << "whole at 200 columns";
  auto util_line = [](const std::string& text) {
    size_t p = text.find("  UTIL ");
    return text.substr(p, text.find('\n', p) - p);
  };
  EXPECT_EQ(util_line(narrow).size(), 80u);
  EXPECT_EQ(util_line(wide).size(), 200u);
}

TEST(RenderTop, AnEmptyMachineSaysSo) {
  json gpus = {{"gpus", json::array()}};
  TopModel m =
      ModelFromJson(Status(), Gpus(), {{"jobs", json::array()}}, {{"events", json::array()}});
  std::string text = Join(RenderTop(m, {}));
  EXPECT_NE(text.find("(no slices)"), std::string::npos) << text;
  EXPECT_NE(text.find("QUEUE (0 waiting)"), std::string::npos);
  EXPECT_NE(text.find("(none waiting)"), std::string::npos);
  EXPECT_NE(text.find("EVENTS\n    (none)"), std::string::npos);
  TopModel none = ModelFromJson(Status(), gpus, nullptr, nullptr);
  EXPECT_EQ(RenderTop(none, {}).size(), 7u) << Join(RenderTop(none, {}));
}

TEST(RenderTop, ManySlicesEachGetARowAndFit) {
  json slices = json::array(), jobs = json::array();
  for (uint64_t id = 1; id <= 40; ++id) {
    std::string name = "worker-" + std::to_string(id) + "-with-a-rather-long-name-for-tests";
    slices.push_back(SliceJson(id, "user" + std::to_string(id), name));
    jobs.push_back(RunningJob(id, "user" + std::to_string(id), name));
  }
  TopModel m = ModelFromJson(Status(), Gpus(slices), {{"jobs", jobs}}, nullptr);
  for (size_t width : {80, 200}) {
    std::vector<std::string> lines = RenderTop(m, {.width = width, .utf8 = true});
    ExpectFits(lines, width);
    size_t rows = 0;
    for (const std::string& l : lines) rows += l.find("worker-") != std::string::npos;
    EXPECT_EQ(rows, 40u);
  }
  EXPECT_EQ(m.gpus[0].slices.size(), 40u);
  std::string text = Join(RenderTop(m, {.width = 80}));
  EXPECT_NE(text.find("40 slices"), std::string::npos);
}

TEST(RenderTop, IdleAndLowUseSlicesAreFlaggedAndWholeGpusShowFullShare) {
  json job = RunningJob(1, "alice", "whole");
  job["request"]["kind"] = "gpus";
  job["usage"]["low_use_ms"] = 600'000;
  job["flags"] = {"idle", "over_limit"};
  json slice = SliceJson(1, "alice", "whole");
  slice["compute_milli"] = 0;
  TopModel m = ModelFromJson(Status(), Gpus({slice}), {{"jobs", {job}}}, nullptr);
  std::string text = Join(RenderTop(m, {.width = 160}));
  EXPECT_NE(text.find("100%/28%"), std::string::npos) << text;
  EXPECT_NE(text.find("IDLE, OVER LIMIT, low use 10m00s"), std::string::npos) << text;
  EXPECT_TRUE(m.gpus[0].slices[0].idle);
}

TEST(RenderTop, ShowsTheDegradedReasonAndARefreshError) {
  TopModel m = Model();
  m.state = "degraded";
  m.degraded_reason = "ledger: disk I/O error";
  m.error = "cannot reach the daemon at /run/gpuslice/gpuslice.sock";
  std::string text = Join(RenderTop(m, {}));
  EXPECT_NE(text.find("daemon degraded"), std::string::npos);
  EXPECT_NE(text.find("DEGRADED: ledger: disk I/O error"), std::string::npos);
  EXPECT_NE(text.find("error: cannot reach the daemon"), std::string::npos);
}

TEST(RenderTop, KeepsOnlyTheLatestEvents) {
  TopModel m = Model();
  m.events.clear();
  for (int i = 0; i < 30; ++i) {
    m.events.push_back({kNow - (30 - i) * 1000, "submitted", static_cast<uint64_t>(i + 1), "u",
                        "event-" + std::to_string(i)});
  }
  std::string text = Join(RenderTop(m, {.max_events = 5}));
  EXPECT_EQ(text.find("event-24"), std::string::npos);
  EXPECT_NE(text.find("event-25"), std::string::npos);
  EXPECT_NE(text.find("event-29"), std::string::npos);
}

TEST(ModelToJson, HasTheSnapshotWithUnknownsAsNull) {
  TopModel m = Model();
  m.gpus[0].temperature_c = -1;
  json j = ModelToJson(m);
  EXPECT_EQ(j["host"], "node7");
  EXPECT_EQ(j["gpus"][0]["uuid"], "GPU-1c2f9a80-0000-4000-8000-000000000000");
  EXPECT_TRUE(j["gpus"][0]["temperature_c"].is_null());
  EXPECT_EQ(j["gpus"][0]["slices"][0]["job"], 1);
  EXPECT_EQ(j["gpus"][0]["slices"][0]["memory_used_bytes"], 2 * core::kGiB);
  EXPECT_EQ(j["queue"][0]["waiting_for"].get<std::string>().substr(0, 13), "first in line");
  EXPECT_EQ(j["events"].size(), 2u);
}

TEST(RenderTop, ShowsProcessesOutsideGpusliceWithPidAndUser) {
  json gpus = Gpus();
  gpus["gpus"][0]["foreign_processes"] = {
      {{"pid", 4242}, {"user", "bob"}, {"uid", 1001}, {"used_memory", 30 * core::kGiB}}};
  TopModel m = ModelFromJson(Status(), gpus, {{"jobs", json::array()}}, nullptr);
  ASSERT_EQ(m.gpus[0].foreign.size(), 1u);
  EXPECT_EQ(ModelToJson(m)["gpus"][0]["foreign_processes"][0]["pid"], 4242);
  std::string all;
  for (const std::string& line : RenderTop(m, RenderOptions{})) all += line + "\n";
  EXPECT_NE(all.find("outside gpuslice: pid 4242 (bob) 30 GiB"), std::string::npos) << all;
}

}  // namespace
}  // namespace gpuslice::cli

namespace gpuslice::cli {
namespace {

// Two idle 20 GiB jobs would show `0 B / 80 GiB` though nothing more fits;
// top shows what jobs reserved and what is left
// for new jobs beside NVML's figure, and a MIG GPU's instances with whose
// each one is.
TEST(RenderTop, ShowsReservedAndFreeForJobsBesideNvmlsUse) {
  json a = SliceJson(1, "alice", "idle-a"), b = SliceJson(2, "bob", "idle-b");
  a["memory_limit"] = b["memory_limit"] = 20 * core::kGiB;
  json gpus = Gpus({a, b});
  gpus["gpus"][0]["memory_used"] = 0;
  gpus["gpus"][0]["foreign_processes"] = {
      {{"pid", 999}, {"user", "eve"}, {"used_memory", 10 * core::kGiB}}};
  TopModel m = ModelFromJson(Status(), gpus, json::object(), json::object());
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].Reserved(), 40 * core::kGiB);
  EXPECT_EQ(m.gpus[0].FreeForJobs(), 30 * core::kGiB);
  RenderOptions o;
  o.width = 120;
  const std::string out = Join(RenderTop(m, o));
  EXPECT_NE(out.find("40 GiB reserved, 30 GiB free for jobs"), std::string::npos) << out;
  EXPECT_NE(out.find("0 B / 80 GiB"), std::string::npos) << out;
  json j = ModelToJson(m);
  EXPECT_EQ(j["gpus"][0]["memory_reserved_bytes"], 40 * core::kGiB);
  EXPECT_EQ(j["gpus"][0]["memory_free_for_jobs_bytes"], 30 * core::kGiB);
}

TEST(RenderTop, ListsAMigGpusInstancesWithWhoseEachIs) {
  json gpus = Gpus();
  json& g = gpus["gpus"][0];
  g["mig_enabled"] = true;
  g["mig"] = {{{"uuid", "MIG-aaaa"},
               {"profile", "1g.10gb"},
               {"memory_total", 10 * core::kGiB},
               {"job", 4},
               {"user", "alice"},
               {"name", "infer"}},
              {{"uuid", "MIG-bbbb"},
               {"profile", "1g.10gb"},
               {"memory_total", 10 * core::kGiB},
               {"foreign_processes", {{{"pid", 77}, {"user", "eve"}, {"used_memory", 1}}}}},
              {{"uuid", "MIG-cccc"}, {"profile", "3g.40gb"}, {"memory_total", 40 * core::kGiB}}};
  TopModel m = ModelFromJson(Status(), gpus, json::object(), json::object());
  ASSERT_EQ(m.gpus[0].instances.size(), 3u);
  RenderOptions o;
  o.width = 120;
  const std::string out = Join(RenderTop(m, o));
  EXPECT_NE(out.find("job 4 alice infer  MIG-aaaa"), std::string::npos) << out;
  EXPECT_NE(out.find("outside gpuslice (pid 77, eve)  MIG-bbbb"), std::string::npos) << out;
  EXPECT_NE(out.find("free  MIG-cccc"), std::string::npos) << out;
  EXPECT_EQ(out.find("reserved,"), std::string::npos) << "instances, not a RESV bar";
  EXPECT_EQ(ModelToJson(m)["gpus"][0]["mig"].size(), 3u);
}

// A GPU in MIG mode never shows 0% utilisation where NVML has no figure:
// each instance's activity where NVML measures it (GPM),
// and n/a, never 0%, where it does not.
TEST(RenderTop, MigUtilisationIsPerInstanceAndNotAvailableIsNotZero) {
  json gpus = Gpus();
  json& g = gpus["gpus"][0];
  g.erase("utilization_pct");  // No figure for the GPU.
  g["mig_enabled"] = true;
  g["mig"] = {{{"uuid", "MIG-aaaa"},
               {"profile", "3g.40gb"},
               {"memory_total", 40 * core::kGiB},
               {"job", 4},
               {"user", "alice"},
               {"utilization_pct", 87.4}},
              {{"uuid", "MIG-bbbb"}, {"profile", "3g.40gb"}, {"memory_total", 40 * core::kGiB}}};
  TopModel m = ModelFromJson(Status(), gpus, json::object(), json::object());
  EXPECT_EQ(m.gpus[0].utilization_pct, -1);
  RenderOptions o;
  o.width = 120;
  const std::string out = Join(RenderTop(m, o));
  EXPECT_NE(out.find("UTIL  n/a"), std::string::npos) << out;
  EXPECT_NE(out.find("busy  87%  job 4 alice"), std::string::npos) << out;
  EXPECT_NE(out.find("busy  n/a  free  MIG-bbbb"), std::string::npos) << out;
  const json j = ModelToJson(m);
  EXPECT_TRUE(j["gpus"][0]["utilization_pct"].is_null());
  EXPECT_DOUBLE_EQ(j["gpus"][0]["mig"][0]["utilization_pct"].get<double>(), 87.4);
  EXPECT_TRUE(j["gpus"][0]["mig"][1]["utilization_pct"].is_null());
}

// nvitop users expect a row per process (pid, user, memory, SM).
TEST(RenderTop, EachProcessOnAGpuHasARowWithItsJobMemoryAndSmUse) {
  json gpus = Gpus({SliceJson(1, "alice", "train-1")});
  gpus["gpus"][0]["processes"] = {
      {{"pid", 4242},
       {"used_memory", 2 * core::kGiB},
       {"sm_util_pct", 27},
       {"job", 1},
       {"user", "alice"}},
      {{"pid", 77}, {"used_memory", 6 * core::kGiB}, {"sm_util_pct", 3}, {"user", "bob"}}};
  json jobs = {{"jobs", {RunningJob(1, "alice", "train-1")}}};
  TopModel m = ModelFromJson(Status(), gpus, jobs, nullptr);
  ASSERT_EQ(m.gpus[0].processes.size(), 2u);
  EXPECT_EQ(m.gpus[0].processes[0].pid, 77u) << "biggest first";
  std::vector<uint64_t> line_jobs;
  auto lines = RenderTop(m, {.width = 100}, &line_jobs);
  ASSERT_EQ(lines.size(), line_jobs.size());
  const std::string text = Join(lines);
  EXPECT_NE(text.find("PID"), std::string::npos) << text;
  bool saw_job_process = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("4242") == std::string::npos) continue;
    saw_job_process = true;
    EXPECT_NE(lines[i].find("alice"), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("2G"), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("27%"), std::string::npos) << lines[i];
    EXPECT_EQ(line_jobs[i], 1u) << "a job's process selects its job";
  }
  EXPECT_TRUE(saw_job_process) << text;
  EXPECT_EQ(ModelToJson(m)["gpus"][0]["processes"].size(), 2u);
}

TEST(RenderTop, TheSelectedJobsRowsAreMarked) {
  TopModel m = Model();
  std::vector<uint64_t> line_jobs;
  auto lines = RenderTop(m, {.width = 100, .selected_job = 2}, &line_jobs);
  size_t marked = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].empty() && lines[i][0] == '>') {
      ++marked;
      EXPECT_EQ(line_jobs[i], 2u) << lines[i];
    }
  }
  EXPECT_EQ(marked, 1u) << Join(lines);
}

TEST(RenderTop, AQueueLongerThanWhatWasFetchedSaysHowLong) {
  TopModel m = Model();
  m.queued = 10000;
  m.queue_truncated = true;
  const std::string text = Join(RenderTop(m, {.width = 100}));
  EXPECT_NE(text.find("QUEUE (10000 waiting, the first 1 shown)"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpuslice::cli
