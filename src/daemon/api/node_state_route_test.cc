#include "daemon/api/node_state_route.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "core/units.h"
#include "daemon/jobs/test_support.h"

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

// Two plain GPUs and one in MIG mode with three 1g.10gb instances.
InventorySnapshot Gpus() {
  InventorySnapshot s = SimulatedGpus(2, "H100", 80 * core::kGiB);
  GpuInfo m;
  m.index = 2;
  m.uuid = "GPU-2";
  m.model = "H100";
  m.memory_total = 80 * core::kGiB;
  m.mig_enabled = true;
  for (uint32_t i = 0; i < 3; ++i) {
    MigInstance inst;
    inst.uuid = "MIG-2-" + std::to_string(i);
    inst.profile = "1g.10gb";
    inst.memory_total = 10 * core::kGiB;
    inst.gpu_instance_id = i + 1;
    m.mig.push_back(inst);
  }
  s.gpus.push_back(m);
  return s;
}

class NodeStateRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-node-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    ASSERT_TRUE(service_->Start().ok());
    doctor_ = std::make_unique<Doctor>(DoctorOptions{}, service_->inventory());
    api_ = std::make_unique<Api>(*service_, *doctor_);
    RegisterNodeStateRoute(*api_, *service_);
  }

  uint64_t Submit(core::RequestFields fields) {
    SubmitSpec s;
    s.fields = std::move(fields);
    s.argv = {"train"};
    s.cwd = "/home/u";
    auto v = service_->intake().Submit(TestCaller(1000), s);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v->job.id : 0;
  }
  json Get() {
    ApiRequest r;
    r.method = "GET";
    r.path = kNodeStatePath;
    ApiResponse resp = api_->Handle(r);
    EXPECT_EQ(resp.status, 200) << resp.body;
    return json::parse(resp.body);
  }

  void TearDown() override {
    api_.reset();
    service_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{Gpus()};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Doctor> doctor_;
  std::unique_ptr<Api> api_;
};

TEST_F(NodeStateRouteTest, AnIdleNodeReportsEveryGpuFreeAndHealthy) {
  json j = Get();
  EXPECT_EQ(j["version"], kNodeStateVersion);
  EXPECT_FALSE(j["degraded"].get<bool>());
  ASSERT_EQ(j["gpus"].size(), 3u);
  for (const json& g : j["gpus"]) {
    EXPECT_EQ(g["memory_total"], 80 * core::kGiB);
    EXPECT_EQ(g["memory_allocated"], 0u);
    EXPECT_EQ(g["compute_allocated_milli"], 0u);
    EXPECT_TRUE(g["healthy"].get<bool>());
    EXPECT_FALSE(g["whole"].get<bool>());
  }
  EXPECT_EQ(j["gpus"][0]["uuid"], "GPU-0");
  EXPECT_EQ(j["gpus"][2]["mig_free"]["1g.10gb"], 3);
  EXPECT_EQ(j["gpus"][2]["mig_total"]["1g.10gb"], 3);
  EXPECT_FALSE(j["gpus"][0].contains("mig_free"));
}

TEST_F(NodeStateRouteTest, RunningJobsAreCountedOnTheirGpus) {
  core::RequestFields whole;  // First, while both plain GPUs are idle.
  whole.gpus = "1";
  Submit(whole);
  core::RequestFields fraction;
  fraction.mem = "8GiB";
  fraction.compute = "30%";
  Submit(fraction);
  core::RequestFields no_share;  // Memory only: counted with the smallest share.
  no_share.mem = "4GiB";
  Submit(no_share);
  core::RequestFields mig;
  mig.mig = "1g.10gb";
  Submit(mig);

  json j = Get();
  uint64_t mem = 0, milli = 0;
  int whole_gpus = 0;
  for (const json& g : j["gpus"]) {
    if (g["mig_enabled"].get<bool>()) continue;
    if (g["whole"].get<bool>()) {
      ++whole_gpus;
      EXPECT_EQ(g["memory_allocated"], g["memory_total"]);
      EXPECT_EQ(g["compute_allocated_milli"], 1000u);
    } else {
      mem += g["memory_allocated"].get<uint64_t>();
      milli += g["compute_allocated_milli"].get<uint64_t>();
    }
  }
  EXPECT_EQ(whole_gpus, 1);
  EXPECT_EQ(mem, 12 * core::kGiB);
  EXPECT_EQ(milli, 301u);
  EXPECT_EQ(j["gpus"][2]["mig_free"]["1g.10gb"], 2);
}

TEST_F(NodeStateRouteTest, UncorrectedEccMakesAGpuUnhealthy) {
  auto usage = inventory_.Usage();
  ASSERT_TRUE(usage.ok());
  std::vector<GpuUsage> u = *usage;
  u[1].ecc_uncorrected = 1;
  u[0].last_xid = 13;  // A program's fault: the GPU is fine.
  inventory_.usage = u;
  service_->Sample();
  json j = Get();
  EXPECT_TRUE(j["gpus"][0]["healthy"].get<bool>());
  EXPECT_FALSE(j["gpus"][1]["healthy"].get<bool>());
}

TEST_F(NodeStateRouteTest, NamesNoJobUserOrCommand) {
  core::RequestFields fraction;
  fraction.mem = "8GiB";
  fraction.compute = "30%";
  fraction.name = "secret-name";
  Submit(fraction);
  std::string body = Get().dump();
  EXPECT_EQ(body.find("secret-name"), std::string::npos);
  EXPECT_EQ(body.find("u1000"), std::string::npos);
  EXPECT_EQ(body.find("train"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::daemon
