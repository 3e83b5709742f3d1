#include "daemon/services/replicas.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"
#include "daemon/services/replicas_api.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using core::JobState;

// A Service over the fakes (as in service_test.cc) with a ReplicaManager on
// its ledger; the fake clock moves by hand, the fake inventory reports the
// SM use the test sets for each replica's process.
class ReplicasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-replicas-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Restart();
  }
  void TearDown() override {
    manager_.reset();
    service_.reset();
    if (db_ != nullptr) sqlite3_close(db_);
    fs::remove_all(dir_);
  }

  // A fresh Service and ReplicaManager over the same state: a daemon restart.
  void Restart() {
    manager_.reset();
    service_.reset();
    if (db_ != nullptr) sqlite3_close(db_);
    db_ = nullptr;
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    o.kill_grace_ms = 1000;
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
    manager_ = std::make_unique<ReplicaManager>(*service_, clock_);
    core::Status started = manager_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    // The test's own handle, to play a crash in the middle of a change.
    ASSERT_EQ(sqlite3_open((dir_ + "/ledger.db").c_str(), &db_), SQLITE_OK);
  }

  ServiceCreateSpec Spec(const std::string& name, core::ReplicaRange range,
                         const std::string& mem = "8GiB") {
    ServiceCreateSpec s;
    s.name = name;
    s.policy.replicas = range;
    s.policy.target_milli = 700;
    s.policy.scale_up_after_ms = 10'000;
    s.policy.scale_down_after_ms = 30'000;
    s.policy.cooldown_ms = 20'000;
    s.policy.healthy_run_ms = 30'000;
    s.policy.backoff_initial_ms = 5'000;
    s.policy.backoff_max_ms = 20'000;
    s.policy.crash_loop_after = 3;
    s.request = {{"mem", mem}, {"priority", "high"}};
    s.argv = {"serve", "--port", "0"};
    s.cwd = "/srv";
    s.env = {"PATH=/usr/bin", "GPUSLICE_SERVICE=forged"};
    return s;
  }

  // Live replica jobs of `name`, by id.
  std::vector<ReplicaView> Live(const std::string& name) {
    auto v = manager_->Get(name);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    std::vector<ReplicaView> out;
    if (!v.ok()) return out;
    for (const ReplicaView& r : v->replicas) {
      if (!core::IsTerminal(r.state)) out.push_back(r);
    }
    return out;
  }

  // Sets the SM use each running job's process shows on its GPU.
  void SetUse(const std::map<uint64_t, uint32_t>& pct) {
    std::vector<GpuUsage> gpus;
    for (const GpuInfo& g : service_->inventory().gpus) {
      GpuUsage u;
      u.index = g.index;
      u.memory_total = g.memory_total;
      gpus.push_back(u);
    }
    for (const auto& [id, p] : pct) {
      auto v = service_->reads().Get(id);
      if (!v.ok() || v->job.state != JobState::kRunning) continue;
      regions_.pids[v->job.region_path] = {static_cast<int32_t>(v->job.pid)};
      GpuProcess proc;
      proc.pid = static_cast<uint32_t>(v->job.pid);
      proc.used_memory = core::kGiB;
      proc.sm_util_pct = p;
      gpus[v->job.allocation.gpu_indices[0]].processes.push_back(proc);
    }
    inventory_.usage = gpus;
  }

  // Every replica of `name` at `pct` SM use.
  void SetAllUse(const std::string& name, uint32_t pct) {
    std::map<uint64_t, uint32_t> m;
    for (const ReplicaView& r : Live(name)) m[r.job_id] = pct;
    SetUse(m);
  }

  // One second of daemon life: time moves, the service samples and ticks,
  // the manager ticks.
  void Second() {
    clock_.Advance(1000);
    service_->Tick();
    service_->Sample();
    manager_->Tick();
  }

  size_t CountEvents(const std::string& kind) {
    auto e = service_->events().Query(EventQuery{0, 0, 10'000});
    EXPECT_TRUE(e.ok());
    if (!e.ok()) return 0;
    return std::count_if(e->begin(), e->end(), [&](const Event& ev) { return ev.kind == kind; });
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{SimulatedGpus(2)};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<ReplicaManager> manager_;
};

TEST_F(ReplicasTest, CreateSubmitsTheMinimumAsTaggedJobsOfTheOwner) {
  auto v = manager_->Create(TestCaller(1000), Spec("web", {2, 4}));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->desired, 2u);
  EXPECT_EQ(v->request_describe, "8 GiB");
  ASSERT_EQ(v->replicas.size(), 2u);
  std::set<std::string> names;
  for (const ReplicaView& r : v->replicas) {
    auto job = service_->reads().Get(r.job_id);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->job.uid, 1000u) << "replicas run as the service's owner";
    EXPECT_EQ(job->job.state, JobState::kRunning);
    EXPECT_EQ(job->job.request.priority, core::Priority::kHigh);
    EXPECT_EQ(job->job.argv, (std::vector<std::string>{"serve", "--port", "0"}));
    EXPECT_EQ(ServiceOfJob(job->job), "web") << "tagged, and the caller's forged tag is dropped";
    names.insert(job->job.request.name);
  }
  EXPECT_EQ(names, (std::set<std::string>{"web-1", "web-2"}));
  EXPECT_EQ(CountEvents("service_created"), 1u);
  EXPECT_EQ(manager_->Create(TestCaller(1000), Spec("web", {1, 2})).status().code(),
            core::StatusCode::kAlreadyExists);
}

TEST_F(ReplicasTest, ARequestNoGpuCanHoldIsRefusedAndNothingStays) {
  auto v = manager_->Create(TestCaller(1000), Spec("big", {1, 2}, "100GiB"));
  EXPECT_EQ(v.status().code(), core::StatusCode::kInvalidArgument) << v.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
  EXPECT_TRUE(service_->reads().List(false).empty());
  // The name is free again, and nothing comes back after a restart.
  Restart();
  EXPECT_TRUE(manager_->List().empty());
  EXPECT_TRUE(manager_->Create(TestCaller(1000), Spec("big", {1, 2})).ok());
}

TEST_F(ReplicasTest, BadNamesAndPoliciesAreRefusedWithTheirField) {
  EXPECT_NE(manager_->Create(TestCaller(1000), Spec("a/b", {1, 2})).status().message().find("a/b"),
            std::string::npos);
  ServiceCreateSpec s = Spec("ok", {1, 2});
  s.policy.target_milli = 0;
  EXPECT_NE(manager_->Create(TestCaller(1000), s).status().message().find("--target-util"),
            std::string::npos);
  s = Spec("ok", {1, 2});
  s.request["argv"] = {"x"};
  EXPECT_EQ(manager_->Create(TestCaller(1000), s).status().code(),
            core::StatusCode::kInvalidArgument);
  Caller tcp = TestCaller(1000);
  tcp.local = false;
  EXPECT_EQ(manager_->Create(tcp, Spec("ok", {1, 2})).status().code(),
            core::StatusCode::kPermissionDenied);
}

TEST_F(ReplicasTest, BusyReplicasScaleUpThroughCoolDownsAndIdleOnesScaleDown) {
  ASSERT_TRUE(manager_->Create(TestCaller(1000), Spec("web", {1, 3})).ok());
  SetAllUse("web", 90);
  // Scale-up window 10 s: the first sample above target starts it.
  int seconds = 0;
  while (manager_->Get("web")->desired == 1 && seconds < 30) {
    Second();
    ++seconds;
  }
  EXPECT_GE(seconds, 10);
  EXPECT_LE(seconds, 12);
  ASSERT_EQ(Live("web").size(), 2u) << "the new replica is submitted and runs";
  EXPECT_EQ(CountEvents("service_scale"), 1u);
  auto after_first = manager_->Get("web");
  EXPECT_NE(after_first->last_decision.find("1 -> 2"), std::string::npos)
      << after_first->last_decision;

  // Both busy: the next step waits for the 20 s cool-down, not the window.
  SetAllUse("web", 95);
  seconds = 0;
  while (manager_->Get("web")->desired == 2 && seconds < 60) {
    Second();
    ++seconds;
  }
  EXPECT_GE(seconds, 19);
  EXPECT_LE(seconds, 22);
  ASSERT_EQ(Live("web").size(), 3u);

  // At the maximum: no further growth however busy.
  SetAllUse("web", 100);
  for (int i = 0; i < 60; ++i) Second();
  EXPECT_EQ(manager_->Get("web")->desired, 3u);
  EXPECT_EQ(Live("web").size(), 3u);

  // 50% over 3 replicas would be 75% over 2: stays.
  SetAllUse("web", 50);
  for (int i = 0; i < 60; ++i) Second();
  EXPECT_EQ(manager_->Get("web")->desired, 3u);

  // 20%: below 70% x 2/3 for 30 s -> 2; the newest replica is stopped.
  uint64_t newest = 0;
  for (const ReplicaView& r : Live("web")) {
    if (r.name == "web-3") newest = r.job_id;
  }
  ASSERT_NE(newest, 0u);
  SetAllUse("web", 20);
  seconds = 0;
  while (manager_->Get("web")->desired == 3 && seconds < 60) {
    Second();
    ++seconds;
  }
  EXPECT_GE(seconds, 29);
  EXPECT_LE(seconds, 32);
  Second();  // The cancelled replica's processes are gone.
  EXPECT_EQ(service_->reads().Get(newest)->job.state, JobState::kCancelled);
  ASSERT_EQ(Live("web").size(), 2u);
  EXPECT_EQ(CountEvents("service_stop"), 1u);
  EXPECT_EQ(CountEvents("service_replace"), 0u) << "a replica the service stopped is not replaced";

  // Still idle: 20% < 35% for 2 -> 1 after the cool-down and the window.
  SetAllUse("web", 20);
  for (int i = 0; i < 60; ++i) Second();
  EXPECT_EQ(manager_->Get("web")->desired, 1u);
  EXPECT_EQ(Live("web").size(), 1u);
  for (int i = 0; i < 120; ++i) Second();
  EXPECT_EQ(Live("web").size(), 1u) << "never below the minimum";
  EXPECT_EQ(CountEvents("service_scale"), 4u);
}

TEST_F(ReplicasTest, UseIsRelativeToTheReplicasComputeShare) {
  ServiceCreateSpec spec = Spec("web", {1, 2});
  spec.request["compute"] = "30%";
  ASSERT_TRUE(manager_->Create(TestCaller(1000), spec).ok());
  SetAllUse("web", 27);  // 27% of the GPU is 90% of a 30% share.
  Second();
  auto v = manager_->Get("web");
  ASSERT_TRUE(v->mean_use_pct.has_value());
  EXPECT_NEAR(*v->mean_use_pct, 90.0, 1e-9);
  ASSERT_EQ(v->replicas.size(), 1u);
  EXPECT_NEAR(v->replicas[0].use_pct.value_or(-1), 90.0, 1e-9);
  for (int i = 0; i < 12; ++i) Second();
  EXPECT_EQ(manager_->Get("web")->desired, 2u) << "90% of the share is above the 70% target";
}

TEST_F(ReplicasTest, WithoutItsTablesTheManagerRefusesNewServices) {
  ReplicaManager unstarted(*service_, clock_);
  auto refused = unstarted.Create(TestCaller(1000), Spec("web", {1, 2}));
  EXPECT_EQ(refused.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("ledger tables"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(unstarted.List().empty());
}

TEST_F(ReplicasTest, APendingReplicaIsNotCapacityAndBlocksScaleUp) {
  // 60 GiB each: one per GPU, so a third waits.
  ASSERT_TRUE(manager_->Create(TestCaller(1000), Spec("big", {2, 4}, "60GiB")).ok());
  SetAllUse("big", 100);
  for (int i = 0; i < 15; ++i) Second();
  auto v = manager_->Get("big");
  ASSERT_EQ(v->desired, 3u);
  EXPECT_EQ(v->running, 2u);
  EXPECT_EQ(v->pending, 1u);
  for (int i = 0; i < 120; ++i) Second();
  v = manager_->Get("big");
  EXPECT_EQ(v->desired, 3u) << "no scale-up while a replica is pending";
  EXPECT_EQ(v->pending, 1u);
  // Scaling down by hand stops the pending replica first.
  ASSERT_TRUE(manager_->Scale(TestCaller(1000), "big", 2u, std::nullopt).ok());
  Second();
  v = manager_->Get("big");
  EXPECT_EQ(v->running, 2u);
  EXPECT_EQ(v->pending, 0u);
}

TEST_F(ReplicasTest, AReplicaThatExitsIsReplacedAndQuickFailuresBackOff) {
  ASSERT_TRUE(manager_->Create(TestCaller(1000), Spec("web", {1, 2})).ok());
  for (int i = 0; i < 60; ++i) Second();
  auto first = Live("web");
  ASSERT_EQ(first.size(), 1u);
  // It served for a minute, then exited: replaced at once, same name.
  launcher_.Exit(service_->reads().Get(first[0].job_id)->job.pid, 0);
  Second();
  auto second = Live("web");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(second[0].job_id, first[0].job_id);
  EXPECT_EQ(second[0].name, "web-1");
  EXPECT_EQ(CountEvents("service_replace"), 1u);

  // Now it crashes at once, again and again: 5 s, 10 s, 20 s (the cap),
  // 20 s... between attempts, and a crash loop is reported once.
  size_t launches = launcher_.launches.size();
  std::vector<int> gaps;
  int since = 0;
  for (int i = 0; i < 120; ++i) {
    for (const ReplicaView& r : Live("web")) {
      auto job = service_->reads().Get(r.job_id);
      if (job->job.state == JobState::kRunning && launcher_.alive.count(job->job.pid)) {
        launcher_.Exit(job->job.pid, 1);
      }
    }
    Second();
    ++since;
    if (launcher_.launches.size() != launches) {
      gaps.push_back(since);
      since = 0;
      launches = launcher_.launches.size();
    }
  }
  ASSERT_GE(gaps.size(), 4u);
  EXPECT_EQ(gaps[0], 6);  // Ended in the first second, 5 s backoff.
  EXPECT_EQ(gaps[1], 11);
  EXPECT_EQ(gaps[2], 21);
  EXPECT_EQ(gaps[3], 21);
  EXPECT_EQ(CountEvents("service_crash_loop"), 1u);
  EXPECT_TRUE(manager_->Get("web")->crash_loop);

  // A replica that stays up ends the crash loop.
  for (int i = 0; i < 60; ++i) Second();
  EXPECT_FALSE(manager_->Get("web")->crash_loop);
  EXPECT_EQ(CountEvents("service_recovered"), 1u);
}

TEST_F(ReplicasTest, ARestartReassociatesReplicasAndSubmitsNothingTwice) {
  ASSERT_TRUE(manager_->Create(TestCaller(1000), Spec("web", {2, 4})).ok());
  ASSERT_TRUE(manager_->Scale(TestCaller(1000), "web", 3u, std::nullopt).ok());
  ASSERT_EQ(Live("web").size(), 3u);
  // A crash between a replica's submission and its row: the row is missing.
  uint64_t lost = Live("web").back().job_id;
  ASSERT_EQ(
      sqlite3_exec(db_,
                   ("DELETE FROM service_replicas WHERE job_id = " + std::to_string(lost)).c_str(),
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  size_t launches = launcher_.launches.size();
  std::string decision = manager_->Get("web")->last_decision;
  ASSERT_NE(decision.find("2 -> 3"), std::string::npos) << decision;
  Restart();
  auto v = manager_->Get("web");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->desired, 3u);
  EXPECT_EQ(v->last_decision, decision) << "read back from the events";
  EXPECT_EQ(Live("web").size(), 3u);
  for (int i = 0; i < 5; ++i) Second();
  EXPECT_EQ(launcher_.launches.size(), launches) << "nothing submitted twice";
  std::set<std::string> names;
  for (const ReplicaView& r : Live("web")) names.insert(r.name);
  EXPECT_EQ(names, (std::set<std::string>{"web-1", "web-2", "web-3"}));

  // A replica that ended while the daemon was down is replaced.
  launcher_.Exit(service_->reads().Get(lost)->job.pid, 0);
  Restart();
  for (int i = 0; i < 2; ++i) Second();
  EXPECT_EQ(Live("web").size(), 3u);
  EXPECT_EQ(launcher_.launches.size(), launches + 1);
}

TEST_F(ReplicasTest, OnlyTheOwnerOrAnAdminScalesOrRemoves) {
  ASSERT_TRUE(manager_->Create(TestCaller(1000), Spec("web", {1, 4})).ok());
  EXPECT_EQ(manager_->Scale(TestCaller(1001), "web", 2u, std::nullopt).status().code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->Remove(TestCaller(1001), "web").status().code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(manager_->Scale(TestCaller(1000), "web", 5u, std::nullopt).status().code(),
            core::StatusCode::kOutOfRange);
  EXPECT_EQ(manager_->Scale(TestCaller(1000), "nope", 2u, std::nullopt).status().code(),
            core::StatusCode::kNotFound);
  auto v = manager_->Scale(TestCaller(0, /*admin=*/true), "web", 3u, std::nullopt);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(Live("web").size(), 3u);
  // A narrower range clamps desired.
  v = manager_->Scale(TestCaller(1000), "web", std::nullopt, core::ReplicaRange{1, 2});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->desired, 2u);
  EXPECT_EQ(v->last_decision, "set by u1000: 3 -> 2 replicas, range 1-4 -> 1-2");
  Second();
  EXPECT_EQ(Live("web").size(), 2u);

  auto cancelled = manager_->Remove(TestCaller(1000), "web");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->size(), 2u);
  Second();
  EXPECT_TRUE(service_->reads().List(false).empty()) << "every replica ended";
  EXPECT_TRUE(manager_->List().empty());
  Restart();
  EXPECT_TRUE(manager_->List().empty()) << "removal is durable";
  EXPECT_TRUE(manager_->Create(TestCaller(1000), Spec("web", {1, 1})).ok())
      << "the name is free again";
}

TEST(ServiceTable, OpensOnlyAnExistingGpusliceLedger) {
  char tmpl[] = "/tmp/gpuslice-servicetable-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  auto missing = ServiceTable::Open(dir + "/none.db");
  EXPECT_FALSE(missing.ok());
  EXPECT_FALSE(fs::exists(dir + "/none.db")) << "never creates a ledger";
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/other.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  auto foreign = ServiceTable::Open(dir + "/other.db");
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("not a gpuslice ledger"), std::string::npos)
      << foreign.status().ToString();
  fs::remove_all(dir);
}

TEST(ServiceBody, ParsesTheServiceFieldsAndPassesTheRestToTheJobsParser) {
  auto s = ParseServiceBody(R"({"name":"web","replicas":"1-4","target_util":"70%",
      "scale_up_after":"2s","scale_down_after":"1m","cooldown":"5s",
      "mem":"8GiB","compute":"30%","priority":"high","argv":["serve"],"cwd":"/srv",
      "env":["A=1"]})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "web");
  EXPECT_EQ(s->policy.replicas, (core::ReplicaRange{1, 4}));
  EXPECT_EQ(s->policy.target_milli, 700u);
  EXPECT_EQ(s->policy.scale_up_after_ms, 2000);
  EXPECT_EQ(s->policy.scale_down_after_ms, 60000);
  EXPECT_EQ(s->policy.cooldown_ms, 5000);
  EXPECT_EQ(s->request,
            (nlohmann::json{{"mem", "8GiB"}, {"compute", "30%"}, {"priority", "high"}}));
  EXPECT_EQ(s->argv, std::vector<std::string>{"serve"});
  EXPECT_EQ(s->env, std::vector<std::string>{"A=1"});
}

TEST(ServiceBody, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* needle;
  } cases[] = {
      {R"({"replicas":"1-2","mem":"1GiB","argv":["x"],"cwd":"/"})", "name"},
      {R"({"name":"w","mem":"1GiB","argv":["x"],"cwd":"/"})", "replicas"},
      {R"({"name":"w","replicas":"3-1","mem":"1GiB","argv":["x"],"cwd":"/"})", "--replicas"},
      {R"({"name":"w","replicas":"1-2","target_util":"170%","mem":"1GiB","argv":["x"],"cwd":"/"})",
       "--target-util"},
      {R"({"name":"w","replicas":"1-2","cooldown":"soon","mem":"1GiB","argv":["x"],"cwd":"/"})",
       "--cooldown"},
      {R"({"name":"w","replicas":"1-2","mem":"1GiB","cwd":"/"})", "argv"},
      {R"({"name":"w","replicas":"1-2","mem":"1GiB","argv":["x"],"cwd":"/","mode":"run"})", "mode"},
      {R"({"name":"w","replicas":"1-2","mem":"1GiB","argv":["x"],"cwd":"/","colour":"red"})",
       "colour"},
      {"[1]", "object"},
  };
  for (const Case& c : cases) {
    auto s = ParseServiceBody(c.body);
    ASSERT_FALSE(s.ok()) << c.body;
    EXPECT_NE(s.status().message().find(c.needle), std::string::npos)
        << c.body << " -> " << s.status().message();
  }
}

TEST(ScaleBody, TakesACountARangeOrBoth) {
  auto a = ParseScaleBody(R"({"desired":3})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->desired, 3u);
  EXPECT_FALSE(a->range);
  auto b = ParseScaleBody(R"({"replicas":"2-6","desired":2})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->range, (core::ReplicaRange{2, 6}));
  EXPECT_FALSE(ParseScaleBody("{}").ok());
  EXPECT_FALSE(ParseScaleBody(R"({"desired":-1})").ok());
  EXPECT_FALSE(ParseScaleBody(R"({"desired":2,"x":1})").ok());
}

TEST(ServiceJson, CarriesCountsRangeTargetAndTheLastDecision) {
  ServiceView v;
  v.name = "web";
  v.user = "alice";
  v.policy.replicas = {1, 4};
  v.policy.target_milli = 700;
  v.desired = 2;
  v.running = 1;
  v.pending = 1;
  v.mean_use_pct = 81.5;
  v.last_decision_ms = 5;
  v.last_decision = "mean use 81.5% above target 70% for 1m: 1 -> 2 replicas";
  ReplicaView r;
  r.job_id = 7;
  r.name = "web-1";
  r.state = JobState::kRunning;
  r.use_pct = 81.5;
  v.replicas.push_back(r);
  nlohmann::json j = ServiceToJson(v);
  EXPECT_EQ(j["replicas"]["range"], "1-4");
  EXPECT_EQ(j["replicas"]["desired"], 2);
  EXPECT_EQ(j["replicas"]["pending"], 1);
  EXPECT_EQ(j["target_util"], "70%");
  EXPECT_DOUBLE_EQ(j["mean_util_pct"].get<double>(), 81.5);
  EXPECT_EQ(j["last_decision"]["message"], v.last_decision);
  EXPECT_EQ(j["members"][0]["state"], "running");
  v.mean_use_pct.reset();
  v.last_decision_ms = 0;
  j = ServiceToJson(v);
  EXPECT_TRUE(j["mean_util_pct"].is_null());
  EXPECT_TRUE(j["last_decision"].is_null());
}

}  // namespace
}  // namespace gpuslice::daemon
