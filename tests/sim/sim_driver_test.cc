// End-to-end tests of the simulated driver: real CUDA programs (cuda_probe)
// run as separate processes over libcuda.so.1 from the build tree, with the
// device state checked through the device model, as NVML would see it.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/device_model.h"
#include "sim_probe.h"

namespace gpuslice::sim {
namespace {

using core::kGiB;
using core::kMiB;
using testing_probe::Probe;

class SimDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/simdrvXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    env_["GPUSLICE_SIM_STATE"] = dir_ + "/state";
    env_["GPUSLICE_SIM_GPUS"] = "1xH100-80GB";
    env_["GPUSLICE_SIM_CONTEXT_MEM"] = "256MiB";
  }
  void TearDown() override {
    unlink((dir_ + "/state").c_str());
    rmdir(dir_.c_str());
  }
  // The device model as NVML sees it (opened after a probe created it).
  std::unique_ptr<DeviceModel> Model() {
    ModelOptions o;
    o.state_path = env_["GPUSLICE_SIM_STATE"];
    o.config = *ParseGpuSpec(env_["GPUSLICE_SIM_GPUS"]);
    o.explicit_config = true;
    auto m = DeviceModel::Open(o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(*m) : nullptr;
  }
  int RunMode(const std::vector<std::string>& args, std::string* out = nullptr,
              std::string* err = nullptr) {
    Probe p(args, env_);
    return p.Finish(out, err);
  }
  std::string dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(SimDriverTest, AllocationsOfSeveralProcessesAreAccounted) {
  Probe a({"hold", std::to_string(1 * kGiB)}, env_);
  Probe b({"hold", std::to_string(2 * kGiB)}, env_);
  ASSERT_EQ(a.ReadLine(), "ready");
  ASSERT_EQ(b.ReadLine(), "ready");
  auto m = Model();
  EXPECT_EQ(m->UnitMemory(0).used, 3 * kGiB + 2 * 256 * kMiB);
  std::vector<ProcessUsage> procs = m->UnitProcesses(0);
  ASSERT_EQ(procs.size(), 2u);
  for (const ProcessUsage& p : procs) {
    uint64_t want = (p.pid == a.pid() ? 1 : 2) * kGiB + 256 * kMiB;
    EXPECT_EQ(p.used_bytes, want) << p.pid;
    EXPECT_EQ(p.contexts, 1u);
    EXPECT_EQ(p.context_bytes, 256 * kMiB);
  }
  // A third process sees both through cuMemGetInfo.
  std::string out;
  ASSERT_EQ(RunMode({"try-alloc", std::to_string(kGiB)}, &out), 0);
  EXPECT_NE(out.find("CUDA_SUCCESS"), std::string::npos);
  uint64_t want_free = 80 * kGiB - (3 * kGiB + 3 * 256 * kMiB) - kGiB;
  EXPECT_NE(out.find("free " + std::to_string(want_free)), std::string::npos) << out;
  EXPECT_EQ(a.Finish(), 0);
  EXPECT_EQ(b.Finish(), 0);
  EXPECT_EQ(m->UnitMemory(0).used, 0u);  // Normal exit gives everything back.
}

TEST_F(SimDriverTest, AllocationBeyondCapacityIsOutOfMemory) {
  env_["GPUSLICE_SIM_GPUS"] = "1xL4:mem=4GiB";
  Probe a({"hold", std::to_string(3 * kGiB)}, env_);
  ASSERT_EQ(a.ReadLine(), "ready");
  std::string out;
  ASSERT_EQ(RunMode({"try-alloc", std::to_string(kGiB)}, &out), 0);
  EXPECT_NE(out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << out;
  ASSERT_EQ(RunMode({"try-alloc", std::to_string(256 * kMiB)}, &out), 0);
  EXPECT_NE(out.find("CUDA_SUCCESS"), std::string::npos) << out;
  EXPECT_EQ(a.Finish(), 0);
}

TEST_F(SimDriverTest, SigkilledProcessGivesBackItsMemory) {
  env_["GPUSLICE_SIM_GPUS"] = "1xL4:mem=4GiB";
  Probe a({"hold", std::to_string(3 * kGiB)}, env_);
  ASSERT_EQ(a.ReadLine(), "ready");
  a.Kill();
  std::string out;
  ASSERT_EQ(RunMode({"try-alloc", std::to_string(3 * kGiB)}, &out), 0);
  EXPECT_NE(out.find("CUDA_SUCCESS"), std::string::npos) << out;
  auto m = Model();
  EXPECT_TRUE(m->UnitProcesses(0).empty());
}

TEST_F(SimDriverTest, CopiesRoundTrip) { EXPECT_EQ(RunMode({"copies"}), 0); }

TEST_F(SimDriverTest, WorkRunsInStreamOrder) { EXPECT_EQ(RunMode({"stream-order"}), 0); }

TEST_F(SimDriverTest, GraphLaunchRunsItsKernels) { EXPECT_EQ(RunMode({"graphs"}), 0); }

TEST_F(SimDriverTest, InvalidUseGivesTheDriverErrors) {
  env_["GPUSLICE_SIM_GPUS"] = "1xH100-80GB,1xL4";
  EXPECT_EQ(RunMode({"errors"}), 0);
}

TEST_F(SimDriverTest, ProcAddressReachesEveryEntryPoint) {
  EXPECT_EQ(RunMode({"proc-address"}), 0);
}

// Entry points the simulator does not implement return
// CUDA_ERROR_NOT_SUPPORTED (exported symbol and cuGetProcAddress alike), so
// programs using them load instead of failing on an unresolved symbol.
TEST_F(SimDriverTest, EveryOtherCudaHEntryPointIsANotSupportedStub) {
  Probe p({GPUSLICE_CUDA_H}, env_, GPUSLICE_CUDA_STUB_PROBE);
  std::string out, err;
  EXPECT_EQ(p.Finish(&out, &err), 0) << err;
  EXPECT_NE(out.find(" stubs"), std::string::npos) << out;
}

// Large copies between memory already there run at about the machine's own
// memcpy bandwidth: each takes at most 3x a host memcpy of the same size,
// measured in the same process, interleaved with it (the fastest of 5
// rounds each; 1.0-1.1x measured). A copy engine that went through a bounce
// buffer, a lock or a system call per small chunk, or a fault per page,
// would show here.
TEST_F(SimDriverTest, LargeCopiesTakeAtMostThreeHostMemcpysOfTheSameSize) {
  std::string out, err;
  ASSERT_EQ(RunMode({"copy-bandwidth", std::to_string(256 * kMiB)}, &out, &err), 0) << err;
  std::map<std::string, double> ms;
  std::istringstream words(out);
  std::string name;
  double value;
  while (words >> name >> value) ms[name] = value;
  ASSERT_EQ(ms.size(), 7u) << out;
  ASSERT_GT(ms["memcpy"], 0) << out;
  for (const auto& [copy, t] : ms) {
    EXPECT_LE(t, 3 * ms["memcpy"]) << copy << " against memcpy: " << out;
  }
}

TEST_F(SimDriverTest, BadConfigurationFailsCuInitNamingTheVariable) {
  env_["GPUSLICE_SIM_GPUS"] = "2xQ9000";
  std::string out, err;
  EXPECT_NE(RunMode({"devices"}, &out, &err), 0);
  EXPECT_NE(err.find("GPUSLICE_SIM_GPUS"), std::string::npos) << err;
  EXPECT_NE(err.find("Q9000"), std::string::npos) << err;
}

TEST_F(SimDriverTest, VisibleDevicesSelectsAndReordersDevices) {
  env_["GPUSLICE_SIM_GPUS"] = "1xH100-80GB,1xA100-40GB:mig=3g.20gb+1g.5gb";
  env_["CUDA_VISIBLE_DEVICES"] = "2,0";
  std::string out;
  ASSERT_EQ(RunMode({"devices"}, &out), 0);
  EXPECT_NE(out.find("0 NVIDIA A100-SXM4-40GB MIG 1g.5gb 5368709120"), std::string::npos) << out;
  EXPECT_NE(out.find("1 NVIDIA H100 80GB HBM3"), std::string::npos) << out;
}

TEST_F(SimDriverTest, InternalCallsDoNotGoThroughExportedSymbols) {
  env_["LD_PRELOAD"] = GPUSLICE_INTERPOSE_PRELOAD;
  std::string out, err;
  EXPECT_EQ(RunMode({"interposition"}, &out, &err), 0) << err;
}

TEST_F(SimDriverTest, TwoSaturatingProcessesEachGetAboutHalf) {
  constexpr int kRunMs = 1200;
  Probe a({"saturate", std::to_string(kRunMs)}, env_);
  Probe b({"saturate", std::to_string(kRunMs)}, env_);
  ASSERT_EQ(a.ReadLine(), "ready");
  ASSERT_EQ(b.ReadLine(), "ready");
  ASSERT_EQ(a.ReadLine(), "done");
  ASSERT_EQ(b.ReadLine(), "done");
  auto m = Model();
  std::vector<ProcessUsage> procs = m->UnitProcesses(0);
  ASSERT_EQ(procs.size(), 2u);
  uint64_t total = procs[0].busy_ns + procs[1].busy_ns;
  // Together they kept the GPU busy most of the time, and neither starved.
  EXPECT_GT(total, uint64_t{kRunMs} * 1000000 * 70 / 100);
  for (const ProcessUsage& p : procs) {
    EXPECT_GT(p.busy_ns, total * 30 / 100) << procs[0].busy_ns << " " << procs[1].busy_ns;
    EXPECT_GT(p.launches, 0u);
  }
  EXPECT_EQ(m->UnitBusyNs(0), total);
  EXPECT_EQ(a.Finish(), 0);
  EXPECT_EQ(b.Finish(), 0);
}

}  // namespace
}  // namespace gpuslice::sim
