#include "daemon/api/api.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "daemon/api/api_json.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

TEST(ParseSubmitBody, AcceptsTheDocumentedFields) {
  auto s = ParseSubmitBody(
      R"({"mem": "8GiB", "compute": "30%", "priority": "high", "name": "a", "max_runtime": "1h",
          "mode": "run", "argv": ["python", "x.py"], "cwd": "/home", "env": ["A=1"]})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*s->fields.mem, "8GiB");
  EXPECT_EQ(s->mode, core::JobMode::kRun);
  EXPECT_EQ(s->argv.size(), 2u);
  auto bytes = ParseSubmitBody(R"({"mem": 1073741824, "cwd": "/"})");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes->fields.mem, "1073741824B");  // A JSON integer counts bytes.
}

TEST(ParseSubmitBody, DependenciesAreAListAsTheCliTakesItOrOneJobId) {
  auto s = ParseSubmitBody(R"({"gpus": "1", "after": "5,3:ok", "cwd": "/"})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->after, (std::vector<core::Dependency>{{3, core::DependencyKind::kOk},
                                                     {5, core::DependencyKind::kAny}}));
  auto one = ParseSubmitBody(R"({"gpus": "1", "after": 12, "cwd": "/"})");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->after, (std::vector<core::Dependency>{{12, core::DependencyKind::kAny}}));
  EXPECT_TRUE(ParseSubmitBody(R"({"gpus": "1", "cwd": "/"})")->after.empty());
}

TEST(ParseSubmitBody, RejectsBadBodiesNamingTheField) {
  struct Case {
    const char* body;
    const char* needle;
  } cases[] = {
      {"", "not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"cwd": "/", "argv": "ls"})", "argv: must be an array"},
      {R"({"cwd": "/", "argv": [1]})", "argv[0]: must be a string"},
      {R"({"cwd": "/", "mem": -5})", "mem: must not be negative"},
      {R"({"cwd": "/", "gpus": true})", "gpus: must be a string"},
      {R"({"cwd": "/", "mode": "daemon"})", "unknown job mode"},
      {R"({"mem": "1GiB"})", "cwd: missing"},
      {R"({"cwd": "/", "user": "root"})", "unknown field 'user'"},
      {R"({"cwd": "/", "after": "3:maybe"})", "--after '3:maybe': unknown condition 'maybe'"},
      {R"({"cwd": "/", "after": "x"})", "--after 'x': 'x' is not a job id"},
      {R"({"cwd": "/", "after": [3]})", "after: must be a string"},
      {R"({"cwd": "/", "after": -3})", "after: must not be negative"},
  };
  // An over-long entry is refused with a message that says what the limit is.
  auto long_env =
      ParseSubmitBody(R"({"cwd": "/", "env": ["X=)" + std::string(200000, 'x') + "\"]}");
  ASSERT_FALSE(long_env.ok());
  EXPECT_NE(long_env.status().message().find("env[0]: longer than 131072 bytes"), std::string::npos)
      << long_env.status().message();
  for (const Case& c : cases) {
    auto s = ParseSubmitBody(c.body);
    ASSERT_FALSE(s.ok()) << c.body;
    EXPECT_NE(s.status().message().find(c.needle), std::string::npos) << s.status().message();
  }
}

TEST(ExternalJobJson, ParsesModeLabelsPausedAndGpus) {
  auto spec =
      ParseSubmitBody(R"({"mode":"external","mem":"8GiB","gpu_uuids":["GPU-1"],"paused":true,)"
                      R"("labels":{"namespace":"ml","pod":"p"}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->mode, core::JobMode::kExternal);
  EXPECT_TRUE(spec->paused);
  EXPECT_EQ(spec->gpu_uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(spec->labels.at("pod"), "p");
  // Other modes still need a working directory.
  EXPECT_FALSE(ParseSubmitBody(R"({"mem":"8GiB","argv":["x"]})").ok());
  EXPECT_FALSE(ParseSubmitBody(R"({"mode":"external","mem":"8GiB","labels":{"a":1}})").ok());
  EXPECT_FALSE(ParseSubmitBody(R"({"mode":"external","mem":"8GiB","paused":"yes"})").ok());
}

// A Slurm step's request (service_bound_test.cc for what the Service does
// with it).
TEST(ParseSubmitBody, BoundToCallerIsABoolean) {
  auto spec = ParseSubmitBody(R"({"mode":"external","mem":"1GiB","bound_to_caller":"yes"})");
  EXPECT_FALSE(spec.ok());
  spec = ParseSubmitBody(R"({"mode":"external","mem":"1GiB","bound_to_caller":true})");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->bound_to_caller);
}

TEST(ParseTarget, SplitsAndDecodesTheQuery) {
  std::string path;
  std::map<std::string, std::string> q;
  ASSERT_TRUE(ParseTarget("/v1/jobs?all=1&name=a%2Fb+c", &path, &q).ok());
  EXPECT_EQ(path, "/v1/jobs");
  EXPECT_EQ(q["all"], "1");
  EXPECT_EQ(q["name"], "a/b c");
  q.clear();
  EXPECT_FALSE(ParseTarget("/v1/jobs?x=%4", &path, &q).ok());
  EXPECT_FALSE(ParseTarget("/v1/jobs?x=%zz", &path, &q).ok());
}

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-api-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    GpuInfo g;
    g.uuid = "GPU-0";
    g.model = "H100";
    g.memory_total = 80 * core::kGiB;
    InventorySnapshot snap;
    snap.source = "simulated";
    snap.gpus = {g};
    inventory_ = std::make_unique<FakeInventory>(snap);
    ServiceOptions o;
    o.state_dir = dir_;
    service_ = std::make_unique<Service>(o, clock_, *inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
    doctor_ = std::make_unique<Doctor>(DoctorOptions{}, service_->inventory());
    api_ = std::make_unique<Api>(*service_, *doctor_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ApiResponse Call(const std::string& method, const std::string& target,
                   const std::string& body = "", uint32_t uid = 1000) {
    ApiRequest r;
    r.method = method;
    EXPECT_TRUE(ParseTarget(target, &r.path, &r.query).ok());
    r.body = body;
    r.caller.uid = uid;
    r.caller.user = "u" + std::to_string(uid);
    r.caller.admin = uid == 0;
    return api_->Handle(r);
  }
  // As the TCP bearer token holder (http_server.cc makes this caller).
  ApiResponse CallWithToken(const std::string& method, const std::string& target,
                            const std::string& body = "") {
    ApiRequest r;
    r.method = method;
    EXPECT_TRUE(ParseTarget(target, &r.path, &r.query).ok());
    r.body = body;
    r.caller.uid = UINT32_MAX;
    r.caller.gid = UINT32_MAX;
    r.caller.user = "api-token";
    r.caller.admin = true;
    r.caller.local = false;
    r.caller.token = true;
    return api_->Handle(r);
  }

  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<FakeInventory> inventory_;
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Doctor> doctor_;
  std::unique_ptr<Api> api_;
};

TEST_F(ApiTest, SubmitListGetCancel) {
  ApiResponse r = Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto job = nlohmann::json::parse(r.body);
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["user"], "u1000");
  r = Call("GET", "/v1/jobs");
  EXPECT_EQ(nlohmann::json::parse(r.body)["jobs"].size(), 1u);
  r = Call("GET", "/v1/jobs/1");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body)["transitions"].size(), 2u);
  r = Call("POST", "/v1/jobs/1/cancel", "", 2000);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "permission_denied");
  r = Call("POST", "/v1/jobs/1/cancel");
  EXPECT_EQ(r.status, 200);
}

// A move's body names the GPU, and nothing else; a bad one changes nothing.
TEST_F(ApiTest, AMoveBodyThatIsNotJustAGpuIsRefusedNamingWhy) {
  ApiResponse r = Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto message = [&](const std::string& body) {
    ApiResponse m = Call("POST", "/v1/jobs/1/move", body);
    EXPECT_EQ(m.status, 400) << body << ": " << m.body;
    return nlohmann::json::parse(m.body)["error"]["message"].get<std::string>();
  };
  EXPECT_NE(message("[1]").find("body must be a JSON object {\"gpu\""), std::string::npos);
  EXPECT_NE(message(R"({"gpu": "GPU-1", "force": true})").find("unknown field 'force'"),
            std::string::npos);
  EXPECT_NE(message("{}").find("gpu: missing"), std::string::npos);
  EXPECT_NE(message(R"({"gpu": ""})").find("gpu: must be the UUID"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(Call("GET", "/v1/jobs/1").body)["state"], "running");
}

// External jobs, labels and health through the API, as the
// Kubernetes device plugin uses them.
TEST_F(ApiTest, AnExternalJobIsHeldPausedLabelledAndReleased) {
  ApiResponse r = Call("POST", "/v1/jobs",
                       R"({"mode": "external", "mem": "8GiB", "gpu_uuids": ["GPU-0"],)"
                       R"( "paused": true, "labels": {"gpuslice.dev/device-plugin": "n1"}})",
                       0);
  ASSERT_EQ(r.status, 201) << r.body;
  auto job = nlohmann::json::parse(r.body);
  EXPECT_EQ(job["mode"], "external");
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["labels"]["gpuslice.dev/device-plugin"], "n1");
  EXPECT_NE(std::find(job["flags"].begin(), job["flags"].end(), "paused"), job["flags"].end());
  const std::string id = std::to_string(job["id"].get<int>());
  // Nothing of its own runs in a cgroup of the daemon's.
  r = Call("GET", "/v1/jobs/" + id + "/container", "", 0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["cgroup_parent"], "");
  r = Call("POST", "/v1/jobs/" + id + "/labels",
           R"({"labels": {"namespace": "ml", "pod": "p", "container": "c"}})", 0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["labels"]["pod"], "p");
  EXPECT_EQ(Call("POST", "/v1/jobs/" + id + "/labels", R"({"labels": {"pod": 1}})", 0).status, 400);
  EXPECT_EQ(Call("POST", "/v1/jobs/" + id + "/labels", R"({"tags": {}})", 0).status, 400);
  EXPECT_EQ(Call("POST", "/v1/jobs/" + id + "/labels", R"({"labels": {}})", 1000).status, 403);
  r = Call("POST", "/v1/jobs/" + id + "/resize", R"({"compute": "30%", "priority": "high"})", 0);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(nlohmann::json::parse(r.body)["request"]["priority"], "high");
  EXPECT_EQ(Call("POST", "/v1/jobs/" + id + "/resume", "", 0).status, 200);
  // The GPU is full for a second one: refused at once with the reason.
  r = Call("POST", "/v1/jobs", R"({"mode": "external", "mem": "75GiB", "gpu_uuids": ["GPU-0"]})",
           0);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("does not fit now"), std::string::npos) << r.body;
  r = Call("POST", "/v1/jobs/" + id + "/cancel", "", 0);
  EXPECT_EQ(r.status, 200);
  job = nlohmann::json::parse(Call("GET", "/v1/jobs/" + id).body);
  EXPECT_EQ(job["state"], "exited");
  EXPECT_EQ(job["exit_code"], 0);
}

TEST_F(ApiTest, AGpuWithACriticalXidOrUncorrectedEccIsUnhealthy) {
  GpuUsage u;
  u.index = 0;
  u.memory_total = 80 * core::kGiB;
  inventory_->usage = {u};
  auto gpus = nlohmann::json::parse(Call("GET", "/v1/gpus").body)["gpus"];
  EXPECT_EQ(gpus[0]["healthy"], true);
  EXPECT_FALSE(gpus[0].contains("health_reason"));
  // A program's own fault (XID 13, 31, 43...) says nothing about the GPU.
  inventory_->usage[0].last_xid = 31;
  EXPECT_EQ(nlohmann::json::parse(Call("GET", "/v1/gpus").body)["gpus"][0]["healthy"], true);
  inventory_->usage[0].last_critical_xid = 79;
  gpus = nlohmann::json::parse(Call("GET", "/v1/gpus").body)["gpus"];
  EXPECT_EQ(gpus[0]["healthy"], false);
  EXPECT_EQ(gpus[0]["health_reason"], "XID 79");
  inventory_->usage[0].last_critical_xid = 0;
  inventory_->usage[0].ecc_uncorrected = 2;
  gpus = nlohmann::json::parse(Call("GET", "/v1/gpus").body)["gpus"];
  EXPECT_EQ(gpus[0]["health_reason"], "2 uncorrected ECC errors");
  EXPECT_TRUE(IsApplicationXid(43));
  EXPECT_FALSE(IsApplicationXid(48));
}

TEST_F(ApiTest, AJobAfterAnotherShowsItsDependenciesAndWhatItWaitsFor) {
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})").status, 201);
  ApiResponse r =
      Call("POST", "/v1/jobs", R"({"mem": "8GiB", "after": "1:ok", "argv": ["y"], "cwd": "/"})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto job = nlohmann::json::parse(r.body);
  EXPECT_EQ(job["state"], "queued");
  EXPECT_EQ(job["waiting_for"], "after job 1:ok (running)");
  ASSERT_EQ(job["after"].size(), 1u);
  EXPECT_EQ(job["after"][0]["job"], 1);
  EXPECT_EQ(job["after"][0]["condition"], "ok");
  EXPECT_EQ(job["after"][0]["state"], "running");
  EXPECT_EQ(job["after"][0]["status"], "waiting");
  auto listed = nlohmann::json::parse(Call("GET", "/v1/jobs").body)["jobs"];
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[1]["after"][0]["job"], 1) << "ps --json shows them too";
  EXPECT_FALSE(listed[0].contains("after")) << "only jobs that have some";
  // Refused with 400, naming the job.
  r = Call("POST", "/v1/jobs", R"({"mem": "8GiB", "after": "77", "argv": ["z"], "cwd": "/"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["message"], "--after 77: no job 77");
}

TEST_F(ApiTest, ErrorsAreJsonWithTheRightStatus) {
  struct Case {
    const char* method;
    const char* target;
    const char* body;
    int status;
  } cases[] = {
      {"GET", "/v1/nothing", "", 404},
      {"GET", "/v2/jobs", "", 404},
      {"DELETE", "/v1/jobs", "", 405},
      {"GET", "/v1/jobs/99", "", 404},
      {"GET", "/v1/jobs/abc", "", 404},
      {"POST", "/v1/jobs", "{", 400},
      {"POST", "/v1/jobs", R"({"mem": "100GiB", "argv": ["x"], "cwd": "/"})", 400},
      {"GET", "/v1/jobs/1/logs?offset=x", "", 400},
  };
  for (const Case& c : cases) {
    ApiResponse r = Call(c.method, c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.target << ": " << r.body;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
}

// Every GET route answers HEAD, `HEAD /status` included (the server
// drops the body); monitors probe with HEAD and must not see a 404.
TEST_F(ApiTest, HeadIsAnsweredByEveryGetRouteAndByNoOther) {
  EXPECT_EQ(Call("HEAD", "/v1/status").status, 200);
  EXPECT_EQ(Call("HEAD", "/v1/jobs").status, 200);
  EXPECT_EQ(Call("HEAD", "/v1/jobs/summary").status, 200);
  EXPECT_EQ(Call("HEAD", "/v1/quotas").status, 200);
  EXPECT_EQ(Call("HEAD", "/v1/nothing").status, 404);
}

// The list is filtered and paged by the daemon; a bad parameter
// is refused naming it.
TEST_F(ApiTest, TheJobListTakesFiltersAPageSizeAndACursor) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "1GiB", "name": "a", "argv": ["x"], "cwd": "/"})")
                  .status,
              201);
  }
  auto page = nlohmann::json::parse(Call("GET", "/v1/jobs?limit=2").body);
  ASSERT_EQ(page["jobs"].size(), 2u);
  ASSERT_TRUE(page.contains("next_cursor"));
  auto rest = nlohmann::json::parse(
      Call("GET", "/v1/jobs?limit=2&cursor=" + page["next_cursor"].get<std::string>()).body);
  ASSERT_EQ(rest["jobs"].size(), 1u);
  EXPECT_FALSE(rest.contains("next_cursor"));
  EXPECT_EQ(nlohmann::json::parse(Call("GET", "/v1/jobs?user=nobody").body)["jobs"].size(), 0u);
  ApiResponse bad = Call("GET", "/v1/jobs?sate=queued");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("unknown parameter 'sate'"), std::string::npos) << bad.body;
  auto summary = nlohmann::json::parse(Call("GET", "/v1/jobs/summary").body);
  EXPECT_EQ(summary["counts"]["running"], 3);
  EXPECT_EQ(summary["groups"].size(), 1u);
  EXPECT_EQ(summary["groups"][0]["ids"], "1-3");
  EXPECT_EQ(Call("GET", "/v1/jobs/summary?cursor=1").status, 400);
}

TEST_F(ApiTest, StatusSaysSimulated) {
  ApiResponse r = Call("GET", "/v1/status");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["state"], "ok");
  EXPECT_TRUE(j["simulated"].get<bool>());
}

TEST_F(ApiTest, AddedRoutesCaptureNamedSegments) {
  api_->AddRoute("POST", "/v1/things/{name}/poke", [](const ApiRequest& r) {
    return ApiResponse{200, r.params.at("name") + ":" + r.body, "text/plain", {}};
  });
  api_->AddRoute("GET", "/metrics", [](const ApiRequest& r) {
    return ApiResponse{200, "up " + std::to_string(r.params.size()), "text/plain", {}};
  });
  ApiResponse r = Call("POST", "/v1/things/a%20b/poke", "x");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "a%20b:x") << "segments are given as sent";
  EXPECT_EQ(Call("GET", "/metrics").body, "up 0");
  EXPECT_EQ(Call("GET", "/v1/things/a/poke").status, 405);
  EXPECT_EQ(Call("POST", "/v1/things//poke").status, 404) << "an empty segment does not match";
  EXPECT_EQ(Call("POST", "/v1/things/a/poke/more").status, 404);
  EXPECT_EQ(Call("GET", "/v1/status").status, 200) << "the built-in table still wins";
}

TEST_F(ApiTest, EventsAreListedNewestLastWithFilters) {
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})").status, 201);
  clock_.Advance(1000);
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["y"], "cwd": "/"})").status, 201);
  auto all = nlohmann::json::parse(Call("GET", "/v1/events").body)["events"];
  ASSERT_EQ(all.size(), 4u);  // submitted + started, twice.
  EXPECT_EQ(all[0]["kind"], "submitted");
  EXPECT_EQ(all[0]["job"], 1);
  EXPECT_EQ(all[3]["kind"], "started");
  EXPECT_EQ(all[3]["job"], 2);
  auto job2 = nlohmann::json::parse(Call("GET", "/v1/events?job=2&limit=1").body)["events"];
  ASSERT_EQ(job2.size(), 1u);
  EXPECT_EQ(job2[0]["kind"], "started");
  int64_t later = all[3]["at_ms"].get<int64_t>();
  auto since = nlohmann::json::parse(
      Call("GET", "/v1/events?since_ms=" + std::to_string(later)).body)["events"];
  EXPECT_EQ(since.size(), 2u);
  EXPECT_EQ(Call("GET", "/v1/events?limit=0").status, 400);
  EXPECT_EQ(Call("GET", "/v1/events?job=x").status, 400);
}

TEST_F(ApiTest, QuotasAreSetListedAndRemovedByAdmins) {
  const char* body = R"({"scope": "user", "name": "u1000", "mem": "20GiB", "jobs": 2})";
  ApiResponse r = Call("POST", "/v1/quotas", body);
  EXPECT_EQ(r.status, 403) << "only admins: " << r.body;
  r = Call("POST", "/v1/quotas", body, 0);
  ASSERT_EQ(r.status, 200) << r.body;
  auto q = nlohmann::json::parse(r.body);
  EXPECT_EQ(q["describe"], "memory 20 GiB, jobs 2");
  EXPECT_EQ(q["memory_bytes"], 20 * core::kGiB);
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})").status, 201);
  r = Call("GET", "/v1/quotas");
  auto list = nlohmann::json::parse(r.body)["quotas"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["in_use"]["memory_bytes"], 8 * core::kGiB);
  EXPECT_EQ(list[0]["in_use"]["jobs"], 1);
  EXPECT_FALSE(list[0].contains("gpus")) << "unset: no limit";
  EXPECT_EQ(Call("DELETE", "/v1/quotas/user/u1000").status, 403);
  EXPECT_EQ(Call("DELETE", "/v1/quotas/user/u1000", "", 0).status, 200);
  EXPECT_EQ(Call("DELETE", "/v1/quotas/user/u1000", "", 0).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/quotas/team/x", "", 0).status, 400);
}

TEST_F(ApiTest, PolicyBodiesAreCheckedNamingTheField) {
  struct Case {
    const char* target;
    const char* body;
    const char* needle;
  } cases[] = {
      {"/v1/quotas", R"({"name": "a", "jobs": "1"})", "scope: missing"},
      {"/v1/quotas", R"({"scope": "team", "name": "a", "jobs": "1"})", "expected user or group"},
      {"/v1/quotas", R"({"scope": "user", "name": "a b", "jobs": "1"})",
       "not a user or group name"},
      {"/v1/quotas", R"({"scope": "user", "name": "a"})", "at least one of"},
      {"/v1/quotas", R"({"scope": "user", "name": "a", "mem": "lots"})", "--mem"},
      {"/v1/quotas", R"({"scope": "user", "name": "a", "disk": "1"})", "unknown field 'disk'"},
      {"/v1/jobs/1/resize", R"({"mem": "12GiB", "force": "yes"})", "force: must be true or false"},
      {"/v1/jobs/1/resize", R"({"cores": "2"})", "unknown field 'cores'"},
      {"/v1/jobs/1/resize", R"({"gpus": "2", "mem": "9GiB"})", "not with --mem or --compute"},
      {"/v1/jobs/1/resize", R"({"compute": "150%"})", "over 100%"},
      {"/v1/jobs", R"({"mem": "1GiB", "argv": ["x"], "cwd": "/", "pool": "x"})", "no pool 'x'"},
      {"/v1/jobs", R"({"mem": "1GiB", "argv": ["x"], "cwd": "/", "restartable": 1})",
       "restartable: must be true or false"},
  };
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})").status, 201);
  for (const Case& c : cases) {
    ApiResponse r = Call("POST", c.target, c.body, 0);
    EXPECT_EQ(r.status, 400) << c.body << ": " << r.body;
    EXPECT_NE(r.body.find(c.needle), std::string::npos) << r.body;
  }
  ApiResponse ok = Call("POST", "/v1/jobs/1/resize", R"({"mem": "12GiB", "compute": "40%"})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(nlohmann::json::parse(ok.body)["request"]["describe"], "12 GiB + 40%");
  ApiResponse gpus = Call("GET", "/v1/gpus");
  EXPECT_EQ(nlohmann::json::parse(gpus.body)["gpus"][0]["pool"], "default");
}

// The TCP token may read and cancel only (docs/API.md), never `quota set`
// or any other write. Every route of the table, built-in and added, is tried.
TEST_F(ApiTest, TokenMayReadAndCancelButChangeNothingElse) {
  api_->AddRoute("POST", "/v1/things/{name}/poke", [](const ApiRequest&) {
    return ApiResponse{200, "{}", "application/json", {}};
  });
  ASSERT_EQ(Call("POST", "/v1/jobs", R"({"mem": "8GiB", "argv": ["x"], "cwd": "/"})").status, 201);
  int writes = 0;
  for (const Api::RouteInfo& r : api_->Routes()) {
    std::string target = r.pattern;
    for (size_t b; (b = target.find('{')) != std::string::npos;) {
      target.replace(b, target.find('}', b) - b + 1, r.pattern.find("{id}") == b ? "1" : "user");
    }
    if (r.method != "GET") {
      EXPECT_NE(r.scope, RouteScope::kRead) << r.method << " " << r.pattern << " changes state";
    }
    ApiResponse resp = CallWithToken(r.method, target, R"({"scope": "user", "name": "u1"})");
    bool refused =
        resp.status == 403 && resp.body.find("allows reads and cancels only") != std::string::npos;
    if (r.scope == RouteScope::kWrite) {
      ++writes;
      EXPECT_TRUE(refused) << r.method << " " << target << ": " << resp.status << " " << resp.body;
    } else {
      EXPECT_FALSE(refused) << r.method << " " << target << ": " << resp.body;
    }
  }
  EXPECT_GE(writes, 8);
  EXPECT_EQ(CallWithToken("POST", "/v1/quotas", R"({"scope": "user", "name": "u1000", "jobs": 1})")
                .status,
            403);
  EXPECT_EQ(nlohmann::json::parse(CallWithToken("GET", "/v1/quotas").body)["quotas"].size(), 0u);
  EXPECT_EQ(CallWithToken("POST", "/v1/jobs/1/cancel").status, 200) << "cancels are allowed";
}

// A shell job's environment (the owner's secrets) goes to its owner
// only: never to root, an admin or the token holder.
TEST_F(ApiTest, EnvironmentIsShownToTheJobsOwnerOnly) {
  ApiResponse r =
      Call("POST", "/v1/jobs",
           R"({"mem": "8GiB", "mode": "shell", "cwd": "/", "env": ["SECRET=hunter2"]})");
  ASSERT_EQ(r.status, 201) << r.body;
  auto owner = nlohmann::json::parse(Call("GET", "/v1/jobs/1").body);
  ASSERT_TRUE(owner.contains("env"));
  EXPECT_NE(owner["env"].dump().find("hunter2"), std::string::npos);
  for (const ApiResponse& other :
       {Call("GET", "/v1/jobs/1", "", 0), Call("GET", "/v1/jobs/1", "", 2000),
        CallWithToken("GET", "/v1/jobs/1"), Call("GET", "/v1/jobs", "", 0),
        Call("GET", "/v1/events", "", 0), Call("GET", "/v1/gpus", "", 0)}) {
    EXPECT_EQ(other.body.find("hunter2"), std::string::npos) << other.body;
  }
}

}  // namespace
}  // namespace gpuslice::daemon
