#include "daemon/api/status_page.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/units.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kHostileName = "<b>hostile<i>name";
constexpr const char* kHostileArg = "<script>document.title='pwned'</script>";

InventorySnapshot OneGpu() {
  InventorySnapshot s;
  s.source = "simulated";
  GpuInfo g;
  g.index = 0;
  g.uuid = "GPU-0aa";
  g.model = "NVIDIA H100 80GB HBM3";
  g.memory_total = 80 * core::kGiB;
  s.gpus.push_back(g);
  return s;
}

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-status-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
    doctor_ = std::make_unique<Doctor>(DoctorOptions{}, service_->inventory());
    api_ = std::make_unique<Api>(*service_, *doctor_);
    RegisterStatusPage(*api_, *service_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  JobView Submit(const std::string& mem, const std::string& name,
                 std::vector<std::string> argv = {"train"}) {
    SubmitSpec s;
    s.fields.mem = mem;
    s.fields.compute = "30%";
    s.fields.name = name;
    s.argv = std::move(argv);
    s.cwd = "/home/alice/secret-project";
    s.env = {"API_TOKEN=hunter2"};
    Caller c;
    c.uid = 1000;
    c.gid = 1000;
    c.user = "alice";
    auto v = service_->intake().Submit(c, s);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return *v;
  }

  ApiResponse Get(const std::string& path) {
    ApiRequest r;
    r.method = "GET";
    r.path = path;
    return api_->Handle(r);
  }

  std::string Header(const ApiResponse& r, const std::string& name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{OneGpu()};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Doctor> doctor_;
  std::unique_ptr<Api> api_;
};

TEST_F(StatusPageTest, SnapshotHasTheGpuItsSlicesTheQueueAndEvents) {
  JobView running = Submit("60GiB", "train-1");
  JobView queued = Submit("40GiB", "eval");
  ASSERT_EQ(service_->reads().Get(queued.job.id)->job.state, core::JobState::kQueued);
  regions_.used[running.job.region_path] = 3 * core::kGiB;

  ApiResponse r = Get("/status.json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json s = json::parse(r.body);
  EXPECT_EQ(s["state"], "ok");
  EXPECT_TRUE(s["simulated"].get<bool>());
  EXPECT_EQ(s["running"], 1);
  ASSERT_EQ(s["gpus"].size(), 1u);
  const json& g = s["gpus"][0];
  EXPECT_EQ(g["model"], "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(g["slices"].size(), 1u);
  EXPECT_EQ(g["slices"][0]["job"], running.job.id);
  EXPECT_EQ(g["slices"][0]["name"], "train-1");
  EXPECT_EQ(g["slices"][0]["memory_limit"], 60 * core::kGiB);
  EXPECT_EQ(g["slices"][0]["memory_used"], 3 * core::kGiB);
  EXPECT_EQ(g["slices"][0]["compute_milli"], 300);
  EXPECT_TRUE(g["slices"][0]["flags"].is_array());
  ASSERT_EQ(s["queue"].size(), 1u);
  EXPECT_EQ(s["queue"][0]["job"], queued.job.id);
  EXPECT_EQ(s["queue"][0]["position"], 1);
  EXPECT_FALSE(s["queue"][0]["waiting_for"].get<std::string>().empty());
  bool submitted = false;
  for (const json& e : s["events"]) submitted |= e["kind"] == "submitted";
  EXPECT_TRUE(submitted) << s["events"].dump();
}

TEST_F(StatusPageTest, SnapshotLeavesOutEnvironmentAndDirectory) {
  Submit("8GiB", "x");
  ApiResponse r = Get("/status.json");
  EXPECT_EQ(r.body.find("hunter2"), std::string::npos);
  EXPECT_EQ(r.body.find("secret-project"), std::string::npos);
}

TEST_F(StatusPageTest, LongCommandsAreCut) {
  Submit("8GiB", "x", {"python", std::string(500, 'a')});
  json s = json::parse(Get("/status.json").body);
  std::string cmd = s["gpus"][0]["slices"][0]["command"];
  EXPECT_EQ(cmd.substr(0, 7), "python ");
  EXPECT_EQ(cmd.size(), kMaxCommandChars + std::string("\u2026").size());
}

TEST_F(StatusPageTest, PageIsSelfContainedAndEscapesHostileNamesAndCommands) {
  Submit("8GiB", kHostileName, {"sh", "-c", kHostileArg});
  ApiResponse r = Get("/status");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_NE(Header(r, "Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(Header(r, "X-Content-Type-Options"), "nosniff");
  // Self-contained: no external script, style or image.
  EXPECT_EQ(r.body.find("src="), std::string::npos);
  EXPECT_EQ(r.body.find("<link"), std::string::npos);
  EXPECT_EQ(r.body.find("http://"), std::string::npos);
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
  // The hostile strings appear only escaped.
  EXPECT_EQ(r.body.find("<b>hostile"), std::string::npos);
  EXPECT_EQ(r.body.find("<script>document"), std::string::npos);
  EXPECT_NE(r.body.find("\\u003cb\\u003ehostile\\u003ci\\u003ename"), std::string::npos);
  EXPECT_NE(r.body.find("\\u003cscript\\u003edocument.title"), std::string::npos);
  // It refreshes itself from status.json.
  EXPECT_NE(r.body.find("fetch(\"status.json\""), std::string::npos);
  EXPECT_NE(r.body.find("setInterval(refresh"), std::string::npos);
}

TEST_F(StatusPageTest, OnlyGetIsAllowed) {
  ApiRequest r;
  r.method = "POST";
  r.path = "/status";
  EXPECT_EQ(api_->Handle(r).status, 405);
}

TEST(JsonForScript, EscapesWhatCouldEndTheScriptElementAndStaysTheSameJson) {
  json j = {{"name", "</script><b>&amp;"}, {"n", 1}};
  std::string text = JsonForScript(j);
  EXPECT_EQ(text.find('<'), std::string::npos);
  EXPECT_EQ(text.find('>'), std::string::npos);
  EXPECT_EQ(text.find('&'), std::string::npos);
  EXPECT_EQ(json::parse(text), j);
}

TEST(JsonForScript, InvalidUtf8IsReplacedNotThrown) {
  json j = {{"cmd", std::string("ok \xff\xfe bytes")}};
  std::string text;
  EXPECT_NO_THROW(text = JsonForScript(j));
  EXPECT_NE(text.find("ok "), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
