#include "sim/device_model.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "core/units.h"

namespace gpuslice::sim {
namespace {

using core::kGiB;
using core::kMiB;

class DeviceModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/simmodelXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    unlink((dir_ + "/state").c_str());
    rmdir(dir_.c_str());
  }
  ModelOptions Options(const char* spec = "1xH100-80GB") {
    ModelOptions o;
    o.state_path = dir_ + "/state";
    o.config = *ParseGpuSpec(spec);
    o.explicit_config = true;
    o.context_bytes = 300 * kMiB;
    return o;
  }
  std::unique_ptr<DeviceModel> OpenModel(const char* spec = "1xH100-80GB") {
    core::Result<std::unique_ptr<DeviceModel>> m = DeviceModel::Open(Options(spec));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  std::string dir_;
};

// Runs `body` in a child that registers with the model and then blocks until
// killed. Returns the child's pid once `body` has run.
// With `new_pid_namespace` the holder is pid 1 of a PID namespace of its
// own, as a container's process is: 0 is returned (its host pid is for the
// caller to find; the caller must be a child subreaper to wait for it), -2
// when that needs privileges the test lacks.
pid_t SpawnHolder(const ModelOptions& options, uint64_t reserve_bytes,
                  bool new_pid_namespace = false) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0 && new_pid_namespace) {
    if (unshare(CLONE_NEWPID) != 0) _exit(errno == EPERM ? 77 : 1);
    pid_t inner = fork();
    if (inner != 0) _exit(inner > 0 ? 0 : 1);  // The holder is orphaned to the test.
  }
  if (pid == 0) {
    close(fds[0]);
    auto m = DeviceModel::Open(options);
    char ok = 0;
    if (m.ok() && (*m)->Register().ok() && (*m)->AddContext(0).ok() &&
        (*m)->ReserveMemory(0, reserve_bytes).ok()) {
      ok = 1;
    }
    if (write(fds[1], &ok, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  close(fds[1]);
  if (new_pid_namespace) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
      close(fds[0]);
      return -2;
    }
    pid = 0;  // Success; the holder's host pid is for the caller to find.
  }
  char ok = 0;
  if (read(fds[0], &ok, 1) != 1 || ok != 1) {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    close(fds[0]);
    return -1;
  }
  close(fds[0]);
  return pid;
}

TEST_F(DeviceModelTest, CreatesPrivateFileWithTopology) {
  auto m = OpenModel("2xA100-40GB:mig=3g.20gb+1g.5gb*2,1xL4");
  ASSERT_NE(m, nullptr);
  struct stat st;
  ASSERT_EQ(stat(m->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(m->device_count(), 3u);
  EXPECT_EQ(m->unit_count(), 7u);  // 3 + 3 MIG instances, 1 whole L4.
  DeviceInfo d0 = m->Device(0);
  EXPECT_EQ(d0.unit, layout::kNoUnit);
  ASSERT_EQ(d0.mig.size(), 3u);
  EXPECT_EQ(d0.mig[0].profile, "3g.20gb");
  EXPECT_EQ(d0.mig[0].memory_bytes, 20 * kGiB);
  EXPECT_EQ(d0.mig[1].gpu_instance_id, 2u);
  EXPECT_EQ(d0.mig[0].uuid.rfind("MIG-", 0), 0u);
  EXPECT_NE(d0.mig[0].uuid, m->Device(1).mig[0].uuid);
  DeviceInfo l4 = m->Device(2);
  EXPECT_EQ(m->Unit(l4.unit).uuid, l4.uuid);
  EXPECT_EQ(l4.PciBusIdCuda().size(), 12u);
  EXPECT_EQ(l4.PciBusIdNvml().size(), 16u);
}

TEST_F(DeviceModelTest, DeviceRecordsWhetherTheGpuCanRunMig) {
  auto m = OpenModel("1xA100-40GB,1xL4,1xH100-80GB:mig=1g.10gb");
  EXPECT_TRUE(m->Device(0).mig_capable);
  EXPECT_FALSE(m->Device(1).mig_capable);
  EXPECT_TRUE(m->Device(2).mig_capable);
  EXPECT_EQ(m->state()->devices[0].mig_capable, 1u);
  EXPECT_EQ(m->state()->devices[1].mig_capable, 0u);
}

TEST_F(DeviceModelTest, SecondOpenSeesTheSameCounters) {
  auto a = OpenModel();
  auto b = OpenModel();
  ASSERT_TRUE(a->Register().ok());
  ASSERT_TRUE(a->ReserveMemory(0, 3 * kGiB).ok());
  EXPECT_EQ(b->UnitMemory(0).used, 3 * kGiB);
  a->ReleaseMemory(0, kGiB);
  EXPECT_EQ(b->UnitMemory(0).used, 2 * kGiB);
  a->Unregister();
  EXPECT_EQ(b->UnitMemory(0).used, 0u);
}

TEST_F(DeviceModelTest, ContextChargesItsOverheadToTheProcess) {
  auto m = OpenModel();
  ASSERT_TRUE(m->Register().ok());
  ASSERT_TRUE(m->AddContext(0).ok());
  std::vector<ProcessUsage> procs = m->UnitProcesses(0);
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].pid, getpid());
  EXPECT_EQ(procs[0].contexts, 1u);
  EXPECT_EQ(procs[0].used_bytes, 300 * kMiB);
  EXPECT_EQ(procs[0].context_bytes, 300 * kMiB);
  m->RemoveContext(0);
  EXPECT_EQ(m->UnitMemory(0).used, 0u);
}

TEST_F(DeviceModelTest, OutOfMemoryCountsEveryProcess) {
  pid_t child = SpawnHolder(Options(), 60 * kGiB);
  ASSERT_GT(child, 0);
  auto m = OpenModel();
  ASSERT_TRUE(m->Register().ok());
  core::Status s = m->ReserveMemory(0, 30 * kGiB);
  EXPECT_EQ(s.code(), core::StatusCode::kResourceExhausted);
  EXPECT_TRUE(m->ReserveMemory(0, 19 * kGiB).ok());
  std::vector<ProcessUsage> procs = m->UnitProcesses(0);
  EXPECT_EQ(procs.size(), 2u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST_F(DeviceModelTest, KilledProcessIsReapedOnNextAccess) {
  pid_t child = SpawnHolder(Options(), 70 * kGiB);
  ASSERT_GT(child, 0);
  auto m = OpenModel();
  EXPECT_EQ(m->UnitMemory(0).used, 70 * kGiB + 300 * kMiB);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(m->UnitMemory(0).used, 0u);
  EXPECT_TRUE(m->UnitProcesses(0).empty());
  ASSERT_TRUE(m->Register().ok());
  EXPECT_TRUE(m->ReserveMemory(0, 80 * kGiB).ok());
}

// A container's process knows itself by its pid in its own namespace (1
// here); the host's pid 1 is another process. The host must neither reap it
// (it did: the recorded start time is not init's) nor name it by pid 1.
TEST_F(DeviceModelTest, AProcessOfAnotherPidNamespaceIsNamedByItsHostPidAndKeptWhileItLives) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t child = SpawnHolder(Options(), 2 * kGiB, /*new_pid_namespace=*/true);
  if (child == -2) GTEST_SKIP() << "needs CAP_SYS_ADMIN";
  ASSERT_EQ(child, 0);
  auto m = OpenModel();
  EXPECT_EQ(m->UnitMemory(0).used, 2 * kGiB + 300 * kMiB);  // Not reaped.
  std::vector<ProcessUsage> procs = m->UnitProcesses(0);
  ASSERT_EQ(procs.size(), 1u);
  const pid_t host = procs[0].pid;
  ASSERT_GT(host, 1);
  // It is the holder: in another PID namespace than ours.
  struct stat theirs, ours;
  ASSERT_EQ(stat(("/proc/" + std::to_string(host) + "/ns/pid").c_str(), &theirs), 0);
  ASSERT_EQ(stat("/proc/self/ns/pid", &ours), 0);
  EXPECT_NE(theirs.st_ino, ours.st_ino);
  kill(host, SIGKILL);
  EXPECT_EQ(waitpid(host, nullptr, 0), host);
  EXPECT_EQ(m->UnitMemory(0).used, 0u);  // Reaped once gone.
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_F(DeviceModelTest, ReserveReapsDeadProcessesBeforeReportingOom) {
  pid_t child = SpawnHolder(Options(), 70 * kGiB);
  ASSERT_GT(child, 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto m = OpenModel();
  ASSERT_TRUE(m->Register().ok());
  EXPECT_TRUE(m->ReserveMemory(0, 79 * kGiB).ok());
}

TEST_F(DeviceModelTest, DifferentConfigIsRejectedWhileInUse) {
  auto a = OpenModel("1xH100-80GB");
  ASSERT_TRUE(a->Register().ok());
  core::Result<std::unique_ptr<DeviceModel>> b = DeviceModel::Open(Options("2xL4"));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("GPUSLICE_SIM_STATE"), std::string::npos);
  ModelOptions implicit = Options("2xL4");
  implicit.explicit_config = false;  // No configuration in the environment.
  core::Result<std::unique_ptr<DeviceModel>> c = DeviceModel::Open(implicit);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->device_count(), 1u);
}

TEST_F(DeviceModelTest, StaleFileWithOtherConfigIsReplacedWhenUnused) {
  { auto a = OpenModel("1xH100-80GB"); }
  auto b = OpenModel("2xL4");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->device_count(), 2u);
}

TEST_F(DeviceModelTest, OtherFormatVersionIsRejected) {
  {
    auto a = OpenModel();
    a->state()->header.version = 99;
  }
  core::Result<std::unique_ptr<DeviceModel>> b = DeviceModel::Open(Options());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("version 99"), std::string::npos) << b.status().message();
}

TEST_F(DeviceModelTest, ForeignFileIsRejected) {
  std::ofstream(dir_ + "/state") << "not a state file, just some text that is long enough";
  core::Result<std::unique_ptr<DeviceModel>> b = DeviceModel::Open(Options());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("size"), std::string::npos) << b.status().message();
}

TEST_F(DeviceModelTest, UtilizationFollowsBusyTime) {
  auto m = OpenModel();
  ASSERT_TRUE(m->Register().ok());
  ASSERT_TRUE(m->AddContext(0).ok());
  m->meter().MaybeSample();  // Baseline.
  EXPECT_EQ(m->meter().UnitUtilizationPercent(0), 0u);
  usleep(200000);
  // More busy time than wall time since the baseline: reads as 100%.
  m->AddBusy(0, 400000000);
  EXPECT_EQ(m->meter().UnitUtilizationPercent(0), 100u);
  EXPECT_EQ(m->meter().DeviceUtilizationPercent(0), 100u);
  EXPECT_GT(m->meter().TemperatureC(0), 60u);
  EXPECT_EQ(m->meter().PowerMilliwatts(0), 700000u);
  std::vector<ProcessUtilization> p = m->ProcessUtilizationSince(0, 0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].pid, getpid());
  EXPECT_EQ(p[0].sm_percent, 100u);
  EXPECT_GE(m->meter().UnitSamples(0, 0).size(), 2u);
  EXPECT_TRUE(m->ProcessUtilizationSince(0, p[0].timestamp_us).empty());
}

// After a gap with no samples (nobody ran kernels or read), the
// window reaches back at most 1 s: utilisation falls to 0 one second after
// the last kernel instead of counting work from before the gap.
TEST_F(DeviceModelTest, UtilizationWindowReachesBackAtMostOneSecond) {
  auto m = OpenModel();
  ASSERT_TRUE(m->Register().ok());
  ASSERT_TRUE(m->AddContext(0).ok());
  m->meter().MaybeSample();  // Baseline.
  usleep(1200000);
  // Work reported just now (a long kernel, at its end) counts in full.
  m->AddBusy(0, 1500000000);
  EXPECT_GE(m->meter().UnitUtilizationPercent(0), 95u);  // That read took a sample.
  // 150 ms of work right after that sample, then 1.2 s without samples:
  // the old window (back to the sample) read ~12%.
  m->AddBusy(0, 150000000);
  usleep(1200000);
  EXPECT_EQ(m->meter().UnitUtilizationPercent(0), 0u);
  EXPECT_EQ(m->meter().TemperatureC(0), 31u);
}

TEST_F(DeviceModelTest, OptionsFromEnvironmentRejectBadValuesNamingTheVariable) {
  struct Case {
    const char* var;
    const char* value;
  } cases[] = {
      {"GPUSLICE_SIM_GPUS", "3xZ80"},
      {"GPUSLICE_SIM_QUANTUM_US", "fast"},
      {"GPUSLICE_SIM_CONTEXT_MEM", "big"},
      {"GPUSLICE_SIM_STATE_MODE", "0777"},
      {"GPUSLICE_SIM_CONFIG", "/nonexistent/sim.json"},
  };
  for (const Case& c : cases) {
    setenv(c.var, c.value, 1);
    core::Result<ModelOptions> o = ModelOptionsFromEnvironment();
    unsetenv(c.var);
    ASSERT_FALSE(o.ok()) << c.var;
    EXPECT_NE(o.status().message().find(c.var), std::string::npos) << o.status().message();
  }
  core::Result<ModelOptions> o = ModelOptionsFromEnvironment();
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->explicit_config);
  EXPECT_EQ(o->config.devices.size(), 1u);
  EXPECT_EQ(o->quantum_ns, 1000000u);
}

}  // namespace
}  // namespace gpuslice::sim
