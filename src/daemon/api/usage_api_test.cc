#include "daemon/api/usage_api.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/units.h"
#include "daemon/jobs/test_support.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kHour = 3600 * 1000;
constexpr int64_t kT0 = 1'700'000'000'000;
constexpr uint32_t kUnknownGid = 4'242'424;

Caller Admin() {
  Caller c;
  c.admin = true;
  return c;
}

Caller User(uint32_t uid) {
  Caller c;
  c.uid = uid;
  c.user = "u" + std::to_string(uid);
  return c;
}

// A real ledger with jobs whose allocations were held over known hours
// (relative to kT0), written through the ledger's own SaveJob.
class UsageApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-usage-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto l = Ledger::Open(dir_ + "/ledger.db");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ledger_ = std::move(*l);
    // alice: two whole GPUs, 0h..2h, idle for 1h of it.
    AddJob(1, 1001, 0, "alice", "train", core::RequestKind::kWholeGpus, {0, 1}, 80 * core::kGiB, 0,
           0, 2, kHour);
    // bob: 8 GiB + 25% on GPU 0 from 1h, still running.
    AddJob(2, 1002, kUnknownGid, "bob", "serve", core::RequestKind::kFraction, {0}, 8 * core::kGiB,
           250, 1, -1, 0);
    // carol: 20 GiB without a share on GPU 1, 3h..5h.
    AddJob(3, 1003, kUnknownGid, "carol", "eval", core::RequestKind::kFraction, {1},
           20 * core::kGiB, 0, 3, 5, 0);
  }
  void TearDown() override {
    ledger_.reset();
    fs::remove_all(dir_);
  }

  void AddJob(uint64_t id, uint32_t uid, uint32_t gid, const std::string& user,
              const std::string& name, core::RequestKind kind, std::vector<uint32_t> gpus,
              uint64_t mem, uint32_t milli, int64_t from_h, int64_t to_h, int64_t idle_ms) {
    core::Job j;
    j.id = id;
    j.uid = uid;
    j.gid = gid;
    j.user = user;
    j.request.kind = kind;
    j.request.name = name;
    j.request.memory_bytes = mem;
    j.request.compute_milli = milli;
    j.argv = {"x"};
    j.cwd = "/";
    j.submitted_ms = kT0 + from_h * kHour;
    ASSERT_TRUE(ledger_->SaveJob(j, std::nullopt, j.submitted_ms).ok());
    j.state = core::JobState::kRunning;
    j.started_ms = j.submitted_ms;
    j.allocation.gpu_indices = gpus;
    for (uint32_t g : gpus) j.allocation.gpu_uuids.push_back("GPU-" + std::to_string(g));
    j.allocation.memory_bytes_per_gpu = mem;
    j.allocation.compute_milli = milli;
    ASSERT_TRUE(ledger_->SaveJob(j, core::JobState::kQueued, j.started_ms).ok());
    if (to_h >= 0) {
      j.state = core::JobState::kExited;
      j.exit_code = 0;
      j.ended_ms = kT0 + to_h * kHour;
      j.idle_ms = idle_ms;
      ASSERT_TRUE(ledger_->SaveJob(j, core::JobState::kRunning, j.ended_ms).ok());
    }
  }

  json Get(std::map<std::string, std::string> query, Caller caller, int64_t now_ms,
           int* status = nullptr) {
    ApiRequest r;
    r.method = "GET";
    r.path = "/v1/usage";
    r.query = std::move(query);
    r.caller = caller;
    ApiResponse resp = HandleUsage(r, ledger_.get(), SimulatedGpus(2), now_ms);
    if (status) *status = resp.status;
    return json::parse(resp.body);
  }

  static const json* Row(const json& answer, const std::string& key) {
    for (const json& r : answer["rows"]) {
      if (r["key"] == key) return &r;
    }
    return nullptr;
  }

  std::string dir_;
  std::unique_ptr<Ledger> ledger_;
};

TEST_F(UsageApiTest, AdminSeesEveryUsersTotalsFromTheLedger) {
  json a = Get({{"since_ms", std::to_string(kT0)}, {"until_ms", std::to_string(kT0 + 10 * kHour)}},
               Admin(), kT0 + 6 * kHour);
  EXPECT_EQ(a["scope"], "all");
  EXPECT_EQ(a["by"], "user");
  ASSERT_EQ(a["rows"].size(), 3u) << a.dump();
  const json* alice = Row(a, "alice");
  ASSERT_NE(alice, nullptr);
  EXPECT_DOUBLE_EQ((*alice)["gpu_hours"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ((*alice)["memory_gib_hours"].get<double>(), 320.0);
  EXPECT_DOUBLE_EQ((*alice)["idle_hours"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ((*alice)["idle_gpu_hours"].get<double>(), 2.0);
  // bob still runs: 1h..now (6h) = 5 h at 0.25.
  const json* bob = Row(a, "bob");
  ASSERT_NE(bob, nullptr);
  EXPECT_DOUBLE_EQ((*bob)["gpu_hours"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ((*bob)["compute_share_hours"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ((*bob)["memory_gib_hours"].get<double>(), 40.0);
  // carol: no share, so memory / GPU memory = 0.25 for 2 h.
  const json* carol = Row(a, "carol");
  ASSERT_NE(carol, nullptr);
  EXPECT_DOUBLE_EQ((*carol)["gpu_hours"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ((*carol)["compute_share_hours"].get<double>(), 0.0);
  EXPECT_EQ(a["total"]["jobs"], 3);
  EXPECT_EQ(a["until_ms"], kT0 + 6 * kHour) << "clamped to now";
}

TEST_F(UsageApiTest, TheWindowCutsAllocationsAtItsEdges) {
  json a = Get({{"since_ms", std::to_string(kT0 + 1 * kHour)},
                {"until_ms", std::to_string(kT0 + 4 * kHour)}},
               Admin(), kT0 + 6 * kHour);
  EXPECT_DOUBLE_EQ((*Row(a, "alice"))["gpu_hours"].get<double>(), 2.0);   // 1h..2h on 2 GPUs.
  EXPECT_DOUBLE_EQ((*Row(a, "bob"))["gpu_hours"].get<double>(), 0.75);    // 1h..4h at 0.25.
  EXPECT_DOUBLE_EQ((*Row(a, "carol"))["gpu_hours"].get<double>(), 0.25);  // 3h..4h at 0.25.
}

TEST_F(UsageApiTest, EachStretchOfAResizedJobCountsWithItsOwnLimits) {
  // bob's slice grew at 3h from 8 GiB + 25% to 16 GiB + 50%: the held row is
  // closed and a new one opened, as a live resize records it.
  std::string sql =
      "UPDATE allocations SET released_ms = " + std::to_string(kT0 + 3 * kHour) +
      " WHERE job_id = 2 AND released_ms IS NULL;"
      " INSERT INTO allocations (job_id, gpu_index, gpu_uuid, memory_bytes, compute_milli,"
      " allocated_ms) VALUES (2, 0, 'GPU-0', " +
      std::to_string(16 * core::kGiB) + ", 500, " + std::to_string(kT0 + 3 * kHour) + ");";
  ASSERT_EQ(sqlite3_exec(ledger_->db(), sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(ledger_->db());
  json a = Get({{"since_ms", std::to_string(kT0)}, {"by", "job"}}, Admin(), kT0 + 6 * kHour);
  const json* bob = Row(a, "2");
  ASSERT_NE(bob, nullptr) << a.dump();
  EXPECT_EQ((*bob)["jobs"], 1) << "one job, however many stretches";
  EXPECT_DOUBLE_EQ((*bob)["gpu_hours"].get<double>(), 2 * 0.25 + 3 * 0.5);
  EXPECT_DOUBLE_EQ((*bob)["memory_gib_hours"].get<double>(), 2 * 8 + 3 * 16);
}

TEST_F(UsageApiTest, AMigInstanceCountsItsComputeSlices) {
  core::Job j;
  j.id = 4;
  j.uid = 1004;
  j.user = "dave";
  j.request.kind = core::RequestKind::kMig;
  j.request.mig = {2, 20};
  j.argv = {"x"};
  j.cwd = "/";
  j.submitted_ms = kT0;
  ASSERT_TRUE(ledger_->SaveJob(j, std::nullopt, kT0).ok());
  j.state = core::JobState::kRunning;
  j.started_ms = kT0;
  j.allocation.gpu_indices = {1};
  j.allocation.gpu_uuids = {"MIG-1"};
  j.allocation.memory_bytes_per_gpu = 20 * core::kGiB;
  ASSERT_TRUE(ledger_->SaveJob(j, core::JobState::kQueued, kT0).ok());
  json a = Get({{"since_ms", std::to_string(kT0)}}, Admin(), kT0 + 7 * kHour);
  const json* dave = Row(a, "dave");
  ASSERT_NE(dave, nullptr) << a.dump();
  EXPECT_DOUBLE_EQ((*dave)["gpu_hours"].get<double>(), 2.0);  // 7 h x 2/7.
  EXPECT_DOUBLE_EQ((*dave)["compute_share_hours"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ((*dave)["memory_gib_hours"].get<double>(), 140.0);
}

TEST_F(UsageApiTest, OthersSeeOnlyTheirOwnJobs) {
  json b = Get({{"since_ms", std::to_string(kT0)}, {"by", "job"}}, User(1002), kT0 + 6 * kHour);
  EXPECT_EQ(b["scope"], "own");
  ASSERT_EQ(b["rows"].size(), 1u) << b.dump();
  EXPECT_EQ(b["rows"][0]["key"], "2");
  EXPECT_EQ(b["rows"][0]["user"], "bob");
  EXPECT_EQ(b["rows"][0]["name"], "serve");
  EXPECT_EQ(b["total"]["jobs"], 1);
}

TEST_F(UsageApiTest, GroupsByGroupNameOrGid) {
  json g = Get({{"since_ms", std::to_string(kT0)}, {"by", "group"}}, Admin(), kT0 + 6 * kHour);
  ASSERT_EQ(g["rows"].size(), 2u) << g.dump();
  ASSERT_NE(Row(g, "root"), nullptr) << "gid 0 has a name" << g.dump();
  ASSERT_NE(Row(g, std::to_string(kUnknownGid)), nullptr) << g.dump();
  EXPECT_EQ((*Row(g, std::to_string(kUnknownGid)))["jobs"], 2);
}

TEST_F(UsageApiTest, BadParametersAreNamed) {
  struct Case {
    std::map<std::string, std::string> query;
    const char* says;
  } cases[] = {
      {{{"since_ms", "yesterday"}}, "since_ms"},
      {{{"until_ms", "-5"}}, "until_ms"},
      {{{"by", "team"}}, "'team'"},
      {{{"user", "bob"}}, "unknown parameter 'user'"},
      {{{"since_ms", std::to_string(kT0)}, {"until_ms", std::to_string(kT0)}}, "before"},
  };
  for (const Case& c : cases) {
    int status = 0;
    json e = Get(c.query, Admin(), kT0 + kHour, &status);
    EXPECT_EQ(status, 400);
    std::string msg = e["error"]["message"];
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

TEST_F(UsageApiTest, WithoutALedgerItIsUnavailable) {
  ApiRequest r;
  r.method = "GET";
  r.path = "/v1/usage";
  r.caller = Admin();
  EXPECT_EQ(HandleUsage(r, nullptr, SimulatedGpus(2), kT0).status, 503);
}

TEST(UsageApiRoute, ReadsTheServicesOwnLedger) {
  char tmpl[] = "/tmp/gpuslice-usage-route-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  {
    FakeClock clock;
    FakeInventory inventory{SimulatedGpus(2)};
    FakeLauncher launcher;
    FakeRegionStore regions;
    ServiceOptions o;
    o.state_dir = dir;
    Service service(o, clock, inventory, launcher, regions);
    ASSERT_TRUE(service.Start().ok());
    SubmitSpec s;
    s.fields.mem = "8GiB";
    s.fields.compute = "50%";
    s.argv = {"x"};
    s.cwd = "/";
    Caller alice = User(1000);
    ASSERT_TRUE(service.intake().Submit(alice, s).ok());
    Doctor doctor({}, service.inventory());
    Api api(service, doctor);
    RegisterUsageApi(api, service);
    ApiRequest r;
    r.method = "GET";
    r.path = "/v1/usage";
    r.query = {{"since_ms", "0"}};
    r.caller = alice;
    ApiResponse resp = api.Handle(r);
    ASSERT_EQ(resp.status, 200) << resp.body;
    json j = json::parse(resp.body);
    ASSERT_EQ(j["rows"].size(), 1u) << j.dump();
    EXPECT_EQ(j["rows"][0]["key"], "u1000");
    EXPECT_GT(j["rows"][0]["gpu_hours"].get<double>(), 0.0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpuslice::daemon
