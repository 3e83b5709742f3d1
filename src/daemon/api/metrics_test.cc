#include "daemon/api/metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "daemon/api/metrics_text.h"
#include "daemon/launch/launcher_fake.h"
#include "daemon/node/doctor.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

TEST(MetricsText, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
}

TEST(MetricsText, ValuesAreExactForIntegersAndSpelledOutForSpecials) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(85899345920.0), "85899345920");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(-1.5), "-1.5");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(0.0 / 0.0), "NaN");
}

TEST(MetricsText, AFamilyHasHelpTypeAndItsSamples) {
  MetricsText t;
  t.Family("x_total", MetricType::kCounter, "Help with \\ and\nnewline.");
  t.Sample({{"a", "1"}, {"b", "q\""}}, uint64_t{7});
  t.Sample({}, 2.5);
  EXPECT_EQ(t.Take(),
            "# HELP x_total Help with \\\\ and\\nnewline.\n"
            "# TYPE x_total counter\n"
            "x_total{a=\"1\",b=\"q\\\"\"} 7\n"
            "x_total 2.5\n");
}

TEST(MetricsText, HistogramEndsWithInfSumAndCount) {
  MetricsText t;
  t.Family("w_seconds", MetricType::kHistogram, "Waits.");
  t.Histogram({{"k", "v"}}, {0.5, 10}, {1, 3}, 4, 42.5);
  EXPECT_EQ(t.Take(),
            "# HELP w_seconds Waits.\n# TYPE w_seconds histogram\n"
            "w_seconds_bucket{k=\"v\",le=\"0.5\"} 1\n"
            "w_seconds_bucket{k=\"v\",le=\"10\"} 3\n"
            "w_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n"
            "w_seconds_sum{k=\"v\"} 42.5\n"
            "w_seconds_count{k=\"v\"} 4\n");
}

InventorySnapshot TwoGpus() {
  InventorySnapshot s;
  s.source = "simulated";
  for (uint32_t i = 0; i < 2; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    // A model name with characters the format must escape.
    g.model = "NVIDIA H100 \"SXM\"\\80GB";
    g.memory_total = 80 * core::kGiB;
    g.pci_bus_id = "00000000:0" + std::to_string(i) + ":00.0";
    s.gpus.push_back(g);
  }
  return s;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ServiceOptions o;
    o.state_dir = dir_;
    o.shim_path = "/lib/libgpuslice.so";
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    const core::Status started = service_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    options_.hostname = "node-1";
    options_.version = "0.1.0";
    options_.start_time_ms = 1'700'000'000'000;
  }
  void TearDown() override { fs::remove_all(dir_); }

  JobView Submit(std::optional<std::string> mem, std::optional<std::string> gpus,
                 const std::string& priority = "normal", const std::string& name = "") {
    SubmitSpec s;
    s.fields.mem = mem;
    if (mem) s.fields.compute = "30%";
    s.fields.gpus = gpus;
    s.fields.priority = priority;
    if (!name.empty()) s.fields.name = name;
    return Submit(std::move(s));
  }
  JobView Submit(SubmitSpec s) {
    s.argv = {"train"};
    s.cwd = "/home/ada";
    Caller c;
    c.uid = 1000;
    c.gid = 1000;
    c.user = "ada";
    auto v = service_->intake().Submit(c, s);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : JobView{};
  }
  std::string Render() { return RenderMetrics(*service_, options_); }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{TwoGpus()};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  MetricsOptions options_;
};

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST_F(MetricsTest, ForeignGpuUseIsExportedPerGpuAndZeroWhereThereIsNone) {
  GpuUsage u0;
  u0.index = 0;
  u0.memory_total = 80 * core::kGiB;
  // No job: a process outside gpuslice (a pid no system has, so no owner).
  u0.processes.push_back({4'000'000'000u, 30 * core::kGiB, 0});
  GpuUsage u1;
  u1.index = 1;
  u1.memory_total = 80 * core::kGiB;
  inventory_.usage = {u0, u1};
  service_->Sample();
  const std::string m = Render();
  const std::string l0 =
      "{gpu=\"0\",UUID=\"GPU-0\",device=\"nvidia0\","
      "model_name=\"NVIDIA H100 \\\"SXM\\\"\\\\80GB\",Hostname=\"node-1\",pool=\"default\"}";
  EXPECT_TRUE(Has(m, "gpuslice_gpu_foreign_memory_bytes" + l0 + " 32212254720")) << m;
  EXPECT_TRUE(Has(m, "gpuslice_foreign_processes" + l0 + " 1")) << m;
  EXPECT_NE(m.find("gpuslice_foreign_processes{gpu=\"1\""), std::string::npos);
}

TEST_F(MetricsTest, GpusAppearUnderDcgmNamesInMiBWithDcgmLabels) {
  GpuUsage u0;
  u0.index = 0;
  u0.memory_used = 10 * core::kGiB;
  u0.memory_total = 80 * core::kGiB;
  u0.utilization_pct = 42;
  u0.memory_util_pct = 7;
  u0.temperature_c = 55;
  u0.power_mw = 312'500;
  u0.ecc_corrected = 12;
  u0.ecc_uncorrected = 1;
  u0.xid_watched = true;
  u0.xid_errors = 2;
  u0.last_xid = 79;
  GpuUsage u1;
  u1.index = 1;
  u1.memory_total = 80 * core::kGiB;  // Temperature and power unknown.
  inventory_.usage = {u0, u1};
  service_->Sample();
  const std::string m = Render();
  const std::string l0 =
      "{gpu=\"0\",UUID=\"GPU-0\",device=\"nvidia0\","
      "model_name=\"NVIDIA H100 \\\"SXM\\\"\\\\80GB\",Hostname=\"node-1\",pool=\"default\"}";
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_GPU_UTIL" + l0 + " 42")) << m;
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_MEM_COPY_UTIL" + l0 + " 7"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_FB_USED" + l0 + " 10240"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_FB_FREE" + l0 + " 71680"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_FB_TOTAL" + l0 + " 81920"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_GPU_TEMP" + l0 + " 55"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_POWER_USAGE" + l0 + " 312.5"));
  EXPECT_TRUE(Has(m, "gpuslice_gpu_simulated" + l0 + " 1"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_XID_ERRORS" + l0 + " 79"));
  EXPECT_TRUE(Has(m, "gpuslice_gpu_xid_errors_total" + l0 + " 2"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" + l0 + " 12"));
  EXPECT_TRUE(Has(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" + l0 + " 1"));
  EXPECT_TRUE(Has(m, "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL gauge"));
  // Not watched, ECC unknown: absent, not 0.
  EXPECT_EQ(m.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(m.find("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu=\"1\""), std::string::npos);
  // Unknown figures are left out rather than reported as 0.
  EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(m.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""), std::string::npos);
  EXPECT_NE(m.find("DCGM_FI_DEV_FB_USED{gpu=\"1\""), std::string::npos);
}

// GPUs in MIG mode and MIG jobs must not read 0% utilisation: the GPU's and
// each instance's activity are exported where NVML measures them (GPM), as
// dcgm-exporter does, and nothing where it does not.
TEST_F(MetricsTest, MigActivityIsExportedPerInstanceAndUnknownIsLeftOut) {
  InventorySnapshot inv = TwoGpus();
  inv.gpus[0].mig_enabled = true;
  for (uint32_t i = 0; i < 2; ++i) {
    MigInstance m;
    m.uuid = "MIG-" + std::to_string(i);
    m.profile = "3g.40gb";
    m.memory_total = 40 * core::kGiB;
    m.gpu_instance_id = 1 + i;
    inv.gpus[0].mig.push_back(m);
  }
  inventory_ = FakeInventory(inv);
  ServiceOptions o;
  o.state_dir = dir_ + "/mig";
  o.shim_path = "/lib/libgpuslice.so";
  service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
  ASSERT_TRUE(service_->Start().ok());
  SubmitSpec s;
  s.fields.mig = "3g.40gb";
  JobView job = Submit(s);
  ASSERT_EQ(job.job.state, core::JobState::kRunning);
  GpuUsage u0;
  u0.index = 0;
  u0.utilization_known = false;  // MIG mode: no NVML utilisation.
  u0.mig = {{1, 64.0}, {2, -1}};
  GpuUsage u1;
  u1.index = 1;
  u1.utilization_pct = 5;
  inventory_.usage = {u0, u1};
  service_->Sample();
  std::string m = Render();
  EXPECT_EQ(m.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), std::string::npos) << "no figure, no 0";
  EXPECT_NE(m.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), std::string::npos);
  EXPECT_NE(m.find("GPU_I_PROFILE=\"3g.40gb\",GPU_I_ID=\"1\"} 0.64\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("GPU_I_ID=\"2\""), std::string::npos) << "instance 2 has no figure";
  const std::string job_util =
      "gpuslice_job_gpu_utilization_percent{job_id=\"" + std::to_string(job.job.id) + "\"";
  const size_t at = m.find(job_util);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_EQ(m.substr(m.find("} ", at) + 2, 3), "64\n");
  // The instance loses its figure: the job's utilisation is left out too.
  inventory_.usage[0].mig = {{1, -1}, {2, -1}};
  clock_.Advance(1000);
  service_->Sample();
  m = Render();
  EXPECT_EQ(m.find(job_util), std::string::npos) << m;
  EXPECT_NE(m.find("gpuslice_job_idle{job_id=\"" + std::to_string(job.job.id) + "\""),
            std::string::npos);
}

TEST_F(MetricsTest, RunningJobsHaveUsageAgainstLimitsAndGpusTheirAllocatedShares) {
  JobView slice = Submit("8GiB", std::nullopt, "high", "train-a");
  JobView whole = Submit(std::nullopt, "1");
  ASSERT_EQ(slice.job.state, core::JobState::kRunning);
  ASSERT_EQ(whole.job.state, core::JobState::kRunning);
  regions_.used[slice.job.region_path] = 2 * core::kGiB;
  service_->Sample();
  const std::string m = Render();
  const uint32_t gpu = slice.job.allocation.gpu_indices.at(0);
  const std::string labels = "{job_id=\"" + std::to_string(slice.job.id) +
                             "\",name=\"train-a\",user=\"ada\",priority=\"high\",gpu=\"" +
                             std::to_string(gpu) + "\",UUID=\"GPU-" + std::to_string(gpu) +
                             "\",Hostname=\"node-1\",pool=\"default\"}";
  EXPECT_TRUE(Has(m, "gpuslice_job_memory_used_bytes" + labels + " 2147483648")) << m;
  EXPECT_TRUE(Has(m, "gpuslice_job_memory_limit_bytes" + labels + " 8589934592"));
  EXPECT_TRUE(Has(m, "gpuslice_job_compute_share_target_ratio" + labels + " 0.3"));
  EXPECT_TRUE(Has(m, "gpuslice_job_refused_allocations_total" + labels + " 0"));
  EXPECT_TRUE(Has(m, "gpuslice_job_throttled_seconds_total" + labels + " 0"));
  EXPECT_NE(m.find("gpuslice_job_compute_share_achieved_ratio" + labels), std::string::npos);
  EXPECT_NE(m.find("gpuslice_job_info{job_id=\"" + std::to_string(whole.job.id)),
            std::string::npos);
  // The whole GPU counts whole; the slice its limit and share.
  const uint32_t whole_gpu = whole.job.allocation.gpu_indices.at(0);
  ASSERT_NE(gpu, whole_gpu);
  EXPECT_NE(m.find("gpuslice_gpu_memory_allocated_ratio{gpu=\"" + std::to_string(whole_gpu) +
                   "\",UUID=\"GPU-" + std::to_string(whole_gpu)),
            std::string::npos);
  const std::string g =
      "{gpu=\"" + std::to_string(gpu) + "\",UUID=\"GPU-" + std::to_string(gpu) +
      "\",device=\"nvidia" + std::to_string(gpu) +
      "\",model_name=\"NVIDIA H100 \\\"SXM\\\"\\\\80GB\",Hostname=\"node-1\",pool=\"default\"}";
  EXPECT_TRUE(Has(m, "gpuslice_gpu_memory_allocated_ratio" + g + " 0.1")) << m;
  EXPECT_TRUE(Has(m, "gpuslice_gpu_compute_allocated_ratio" + g + " 0.3"));
  EXPECT_TRUE(Has(m, "gpuslice_gpu_slices" + g + " 1"));
  EXPECT_TRUE(Has(m, "gpuslice_jobs_running 2"));
}

// A Kubernetes container's slice carries the pod's names under
// dcgm-exporter's label names (namespace, pod, container), for HPA rules.
TEST_F(MetricsTest, AJobWithPodLabelsCarriesThemOnItsSeries) {
  SubmitSpec s;
  s.fields.mem = "8GiB";
  s.labels = {{"namespace", "ml"}, {"pod", "infer-0"}, {"container", "server"}, {"team", "x"}};
  JobView v = Submit(std::move(s));
  ASSERT_EQ(v.job.state, core::JobState::kRunning);
  service_->Sample();
  const std::string m = Render();
  const std::string tail =
      "Hostname=\"node-1\",pool=\"default\",namespace=\"ml\",pod=\"infer-0\",container=\"server\"}";
  EXPECT_NE(m.find("gpuslice_job_memory_limit_bytes{job_id=\"" + std::to_string(v.job.id)),
            std::string::npos);
  EXPECT_NE(m.find(tail + " 8589934592"), std::string::npos) << m;
  // Other labels stay out of the series (their values are free-form).
  EXPECT_EQ(m.find("team=\"x\""), std::string::npos);
}

// A Slurm step's slice carries its Slurm job and step.
TEST_F(MetricsTest, AJobWithSlurmLabelsCarriesThemOnItsSeries) {
  SubmitSpec s;
  s.fields.mem = "8GiB";
  s.labels = {{"slurm_job", "812"}, {"slurm_step", "batch"}};
  JobView v = Submit(std::move(s));
  ASSERT_EQ(v.job.state, core::JobState::kRunning);
  service_->Sample();
  const std::string m = Render();
  EXPECT_NE(m.find("Hostname=\"node-1\",pool=\"default\",slurm_job=\"812\",slurm_step=\"batch\"} "
                   "8589934592"),
            std::string::npos)
      << m;
}

TEST_F(MetricsTest, QueueLengthIsCountedPerPriorityAndEventsPerKind) {
  Submit(std::nullopt, "2");            // Takes both GPUs.
  Submit(std::nullopt, "1", "high");    // Waits.
  Submit(std::nullopt, "1", "low");     // Waits.
  Submit("1GiB", std::nullopt, "low");  // Waits (no GPU has room).
  const std::string m = Render();
  EXPECT_TRUE(Has(m, "gpuslice_queue_length{priority=\"low\"} 2")) << m;
  EXPECT_TRUE(Has(m, "gpuslice_queue_length{priority=\"normal\"} 0"));
  EXPECT_TRUE(Has(m, "gpuslice_queue_length{priority=\"high\"} 1"));
  EXPECT_TRUE(Has(m, "gpuslice_queue_length_by_user{user=\"ada\",pool=\"default\"} 3")) << m;
  EXPECT_TRUE(Has(m, "gpuslice_jobs_suspended 0"));
  EXPECT_TRUE(Has(m, "gpuslice_events_total{kind=\"submitted\"} 4"));
  EXPECT_TRUE(Has(m, "gpuslice_events_total{kind=\"started\"} 1"));
  EXPECT_TRUE(Has(m, "# TYPE gpuslice_queue_wait_seconds histogram"));
  EXPECT_NE(m.find("gpuslice_queue_wait_seconds_count 1"), std::string::npos);
  EXPECT_TRUE(Has(m, "gpuslice_daemon_up 1"));
  EXPECT_TRUE(Has(m, "gpuslice_daemon_degraded 0"));
  EXPECT_TRUE(Has(m, "gpuslice_daemon_start_time_seconds 1700000000"));
  EXPECT_TRUE(Has(m, "gpuslice_build_info{version=\"0.1.0\",gpu_source=\"simulated\"} 1"));
}

// The GPU and job series carry quota use and the pool, which operators need.
TEST_F(MetricsTest, QuotasShowTheirLimitsAndWhatIsUsedByResource) {
  Caller admin;
  admin.admin = true;
  admin.user = "root";
  core::Quota q;
  q.memory_bytes = 20 * core::kGiB;
  q.jobs = 2;
  ASSERT_TRUE(service_->quotas().SetQuota(admin, {core::PrincipalKind::kUser, "ada"}, q).ok());
  Submit("8GiB", std::nullopt);
  const std::string m = Render();
  EXPECT_TRUE(Has(m,
                  "gpuslice_quota_limit{scope=\"user\",name=\"ada\",resource=\"memory_bytes\"} "
                  "21474836480"))
      << m;
  EXPECT_TRUE(Has(m, "gpuslice_quota_limit{scope=\"user\",name=\"ada\",resource=\"jobs\"} 2"));
  EXPECT_EQ(m.find("gpuslice_quota_limit{scope=\"user\",name=\"ada\",resource=\"gpus\"}"),
            std::string::npos)
      << "a limit not set has no series";
  EXPECT_TRUE(Has(m,
                  "gpuslice_quota_used{scope=\"user\",name=\"ada\",resource=\"memory_bytes\"} "
                  "8589934592"));
  EXPECT_TRUE(Has(m, "gpuslice_quota_used{scope=\"user\",name=\"ada\",resource=\"jobs\"} 1"));
}

TEST_F(MetricsTest, EveryDeclaredFamilyIsRenderedWithHelpAndTypeAndNoOther) {
  Submit("8GiB", std::nullopt);
  service_->Sample();
  const std::string m = Render();
  std::set<std::string> typed, helped;
  std::istringstream in(m);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) typed.insert(line.substr(7, line.find(' ', 7) - 7));
    if (line.rfind("# HELP ", 0) == 0) helped.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  std::set<std::string> declared(MetricFamilyNames().begin(), MetricFamilyNames().end());
  EXPECT_EQ(typed, declared);
  EXPECT_EQ(helped, declared);
  for (const std::string& name : declared) {
    const bool counter = m.find("# TYPE " + name + " counter") != std::string::npos;
    EXPECT_EQ(counter, name.size() > 6 && name.substr(name.size() - 6) == "_total") << name;
  }
}

TEST_F(MetricsTest, TheRouteServesTheTextFormat) {
  Doctor doctor(DoctorOptions{}, service_->inventory());
  Api api(*service_, doctor);
  RegisterMetrics(api, *service_, options_);
  ApiRequest r;
  r.method = "GET";
  r.path = "/metrics";
  ApiResponse resp = api.Handle(r);
  EXPECT_EQ(resp.status, 200);
  EXPECT_EQ(resp.content_type, kMetricsContentType);
  EXPECT_NE(resp.body.find("gpuslice_daemon_up 1"), std::string::npos);
}

// `promtool check metrics` (Debian's prometheus package): exit 0 and no
// lint finding, on an exposition with every kind of series present.
TEST_F(MetricsTest, PromtoolFindsNothingToLint) {
  const std::string promtool = GPUSLICE_PROMTOOL;
  if (promtool.empty() || !fs::exists(promtool)) {
    GTEST_SKIP() << "promtool not installed (Debian package 'prometheus')";
  }
  GpuUsage u0;
  u0.index = 0;
  u0.memory_used = core::kGiB;
  u0.temperature_c = 40;
  u0.power_mw = 100'000;
  u0.ecc_corrected = 3;
  u0.ecc_uncorrected = 0;
  u0.xid_watched = true;
  u0.xid_errors = 1;
  u0.last_xid = 48;
  inventory_.usage = {u0, GpuUsage{}};
  inventory_.usage[1].index = 1;
  Submit("8GiB", std::nullopt, "normal", "a-job");
  Submit(std::nullopt, "1");
  Submit(std::nullopt, "2", "high");
  service_->RecordEvent("preempted", 1, "ada", "by job 9");
  service_->Sample();
  const std::string path = dir_ + "/metrics.txt";
  std::ofstream(path) << Render();
  const std::string cmd = promtool + " check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_EQ(out, "") << out;
}

}  // namespace
}  // namespace gpuslice::daemon
