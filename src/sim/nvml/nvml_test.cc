// The simulated NVML's entry points, called in-process against a state file
// in a temporary directory. The test plays the CUDA driver's part through
// the device model (registering, charging memory and busy time), so every
// expectation is exact; tests/sim/nvml_* do the same with real processes.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/nvml_abi.h"
#include "core/units.h"
#include "sim/device_model.h"

namespace gpuslice::sim {
namespace {

using core::kGiB;
using core::kMiB;

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gpuslice-nvml-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/state").c_str(), 1);
    unsetenv("GPUSLICE_SIM_CONFIG");
    UseGpus("2xH100-80GB");
  }

  void TearDown() override {
    while (nvmlShutdown() == NVML_SUCCESS) {
    }
    driver_.reset();
    std::filesystem::remove_all(dir_);
  }

  void UseGpus(const char* spec) { setenv("GPUSLICE_SIM_GPUS", spec, 1); }

  // This process as a CUDA program would appear to the model.
  DeviceModel& Driver() {
    if (!driver_) {
      core::Result<ModelOptions> options = ModelOptionsFromEnvironment();
      EXPECT_TRUE(options.ok()) << options.status().ToString();
      core::Result<std::unique_ptr<DeviceModel>> model = DeviceModel::Open(*options);
      EXPECT_TRUE(model.ok()) << model.status().ToString();
      driver_ = std::move(model).value();
      EXPECT_TRUE(driver_->Register().ok());
    }
    return *driver_;
  }

  nvmlDevice_t Gpu(unsigned int index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &d), NVML_SUCCESS);
    return d;
  }

  std::string dir_;
  std::unique_ptr<DeviceModel> driver_;
};

TEST_F(NvmlTest, EveryQueryBeforeInitIsUninitialized) {
  unsigned int count = 0;
  char text[96];
  nvmlDevice_t d = nullptr;
  nvmlMemory_t mem;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-x", &d), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlSystemGetDriverVersion(text, sizeof(text)), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlDeviceGetMemoryInfo(d, &mem), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  // Version queries need no initialisation, as in real NVML.
  int cuda = 0;
  EXPECT_EQ(nvmlSystemGetCudaDriverVersion(&cuda), NVML_SUCCESS);
  EXPECT_EQ(cuda, 13000);
}

TEST_F(NvmlTest, InitAndShutdownAreReferenceCounted) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(nvmlInit(), NVML_SUCCESS);
  nvmlDevice_t d = Gpu(0);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  unsigned int count = 0;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  // Handles outlive a shutdown and work again after the next init.
  ASSERT_EQ(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_SUCCESS);
  unsigned int index = 9;
  EXPECT_EQ(nvmlDeviceGetIndex(d, &index), NVML_SUCCESS);
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(nvmlInitWithFlags(0x100), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, BadSimulatorConfigurationFailsInit) {
  UseGpus("3xNoSuchGpu");
  EXPECT_EQ(nvmlInit_v2(), NVML_ERROR_INVALID_ARGUMENT);
  unsigned int count = 0;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  UseGpus("1xL4");
  EXPECT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
}

TEST_F(NvmlTest, ReportsTheConfiguredGpus) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned int count = 0;
  ASSERT_EQ(nvmlDeviceGetCount(&count), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  std::vector<std::string> uuids;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t d = Gpu(i);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    ASSERT_EQ(nvmlDeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
    EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    ASSERT_EQ(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)), NVML_SUCCESS);
    EXPECT_EQ(std::string(uuid).substr(0, 4), "GPU-");
    uuids.push_back(uuid);
    unsigned int index = 99;
    ASSERT_EQ(nvmlDeviceGetIndex(d, &index), NVML_SUCCESS);
    EXPECT_EQ(index, i);
    nvmlDevice_t by_uuid = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
    EXPECT_EQ(by_uuid, d);
    nvmlDevice_t legacy = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex(i, &legacy), NVML_SUCCESS);
    EXPECT_EQ(legacy, d);

    nvmlPciInfo_t pci;
    ASSERT_EQ(nvmlDeviceGetPciInfo_v3(d, &pci), NVML_SUCCESS);
    EXPECT_EQ(pci.pciDeviceId, 0x233010DEu);
    char want[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    std::snprintf(want, sizeof(want), "%08X:%02X:00.0", pci.domain, pci.bus);
    EXPECT_STREQ(pci.busId, want);
    std::snprintf(want, sizeof(want), "%04X:%02X:00.0", pci.domain, pci.bus);
    EXPECT_STREQ(pci.busIdLegacy, want);
    nvmlDevice_t by_pci = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_pci), NVML_SUCCESS);
    EXPECT_EQ(by_pci, d);
    ASSERT_EQ(nvmlDeviceGetHandleByPciBusId(pci.busIdLegacy, &by_pci), NVML_SUCCESS);
    EXPECT_EQ(by_pci, d);

    nvmlMemory_t mem;
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(d, &mem), NVML_SUCCESS);
    EXPECT_EQ(mem.total, 80 * kGiB);
    EXPECT_EQ(mem.used, 0u);
    EXPECT_EQ(mem.free, mem.total);
  }
  EXPECT_NE(uuids[0], uuids[1]);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  ASSERT_EQ(nvmlSystemGetDriverVersion(version, sizeof(version)), NVML_SUCCESS);
  EXPECT_STREQ(version, "580.65.06");
  ASSERT_EQ(nvmlSystemGetNVMLVersion(version, sizeof(version)), NVML_SUCCESS);
  EXPECT_STREQ(version, "13.580.65.06");
}

TEST_F(NvmlTest, UnknownDevicesAreNotFoundAndBadArgumentsInvalid) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t d = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(2, &d), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d),
            NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID(nullptr, &d), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("00000000:01:00.0", &d), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("not-a-bus-id", &d), NVML_ERROR_INVALID_ARGUMENT);
  unsigned int temp = 0;
  EXPECT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_COUNT, &temp),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_GPU, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, ForeignNullAndStaleHandlesAreInvalidArgument) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t valid = Gpu(1);
  int not_a_device = 0;
  const nvmlDevice_t bad[] = {
      nullptr,
      reinterpret_cast<nvmlDevice_t>(&not_a_device),
      // Inside the handle table but not at an entry.
      reinterpret_cast<nvmlDevice_t>(reinterpret_cast<char*>(valid) + 1),
  };
  for (nvmlDevice_t d : bad) {
    unsigned int index = 0;
    nvmlMemory_t mem;
    char name[96];
    EXPECT_EQ(nvmlDeviceGetIndex(d, &index), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(d, &mem), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetName(d, name, sizeof(name)), NVML_ERROR_INVALID_ARGUMENT);
  }
  // GPU 1's handle names nothing once NVML is re-initialised on one GPU.
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  UseGpus("1xH100-80GB");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned int index = 0;
  EXPECT_EQ(nvmlDeviceGetIndex(valid, &index), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, ShortStringBuffersAreInsufficientSizeAndUntouched) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  char name[21];  // "NVIDIA H100 80GB HBM3" is 21 characters + NUL.
  std::memset(name, 'x', sizeof(name));
  EXPECT_EQ(nvmlDeviceGetName(Gpu(0), name, sizeof(name)), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(name[0], 'x');
  char exact[22];
  EXPECT_EQ(nvmlDeviceGetName(Gpu(0), exact, sizeof(exact)), NVML_SUCCESS);
  char uuid[10];
  EXPECT_EQ(nvmlDeviceGetUUID(Gpu(0), uuid, sizeof(uuid)), NVML_ERROR_INSUFFICIENT_SIZE);
  char version[4];
  EXPECT_EQ(nvmlSystemGetDriverVersion(version, sizeof(version)), NVML_ERROR_INSUFFICIENT_SIZE);
}

TEST_F(NvmlTest, MemoryAndProcessListMatchWhatTheDriverCharged) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  DeviceModel& driver = Driver();
  ASSERT_TRUE(driver.AddContext(1).ok());
  ASSERT_TRUE(driver.ReserveMemory(1, 3 * kGiB).ok());
  const uint64_t expected = 3 * kGiB + driver.context_bytes();

  nvmlMemory_t mem;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(Gpu(1), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, expected);
  EXPECT_EQ(mem.free, 80 * kGiB - expected);
  nvmlMemory_v2_t mem2 = {};
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(Gpu(1), &mem2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  mem2.version = nvmlMemory_v2;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(Gpu(1), &mem2), NVML_SUCCESS);
  EXPECT_EQ(mem2.total, 80 * kGiB);
  EXPECT_EQ(mem2.reserved, 0u);
  EXPECT_EQ(mem2.used, expected);
  EXPECT_EQ(mem2.free, 80 * kGiB - expected);
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(Gpu(0), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 0u);

  // Size query: count 0 and no buffer.
  unsigned int count = 0;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(Gpu(1), &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1u);
  nvmlProcessInfo_t infos[4];
  count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(Gpu(1), &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, static_cast<unsigned int>(getpid()));
  EXPECT_EQ(infos[0].usedGpuMemory, expected);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu);
  EXPECT_EQ(infos[0].computeInstanceId, 0xFFFFFFFFu);
  nvmlProcessInfo_v1_t v1[2];
  count = 2;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses(Gpu(1), &count, v1), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(v1[0].pid, static_cast<unsigned int>(getpid()));
  EXPECT_EQ(v1[0].usedGpuMemory, expected);
  count = 0;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v2(Gpu(0), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(Gpu(1), nullptr, infos),
            NVML_ERROR_INVALID_ARGUMENT);

  driver.ReleaseMemory(1, 3 * kGiB);
  driver.RemoveContext(1);
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(Gpu(1), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 0u);
}

TEST_F(NvmlTest, DeadProcessesAreReapedOnRead) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A CUDA process that holds memory and never cleans up.
    core::Result<ModelOptions> options = ModelOptionsFromEnvironment();
    if (!options.ok()) _exit(1);
    core::Result<std::unique_ptr<DeviceModel>> model = DeviceModel::Open(*options);
    if (!model.ok() || !(*model)->Register().ok() || !(*model)->AddContext(0).ok() ||
        !(*model)->ReserveMemory(0, 5 * kGiB).ok()) {
      _exit(1);
    }
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);

  unsigned int count = 1;
  nvmlProcessInfo_t info;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(Gpu(0), &count, &info), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(info.pid, static_cast<unsigned int>(child));
  EXPECT_GT(info.usedGpuMemory, 5 * kGiB);

  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  count = 1;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(Gpu(0), &count, &info), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  nvmlMemory_t mem;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(Gpu(0), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, 0u);
}

TEST_F(NvmlTest, UtilizationIsTheBusyShareOfTheLastWindow) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  DeviceModel& driver = Driver();
  ASSERT_TRUE(driver.AddContext(0).ok());
  nvmlUtilization_t util = {77, 77};
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(Gpu(0), &util), NVML_SUCCESS);  // Takes a sample.
  EXPECT_EQ(util.gpu, 0u);
  EXPECT_EQ(util.memory, 0u);

  // Busy for 150 ms of a window of at least 250 ms (longer on a loaded
  // machine): strictly between idle and full.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  driver.AddBusy(0, 150'000'000);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(Gpu(0), &util), NVML_SUCCESS);
  EXPECT_GT(util.gpu, 0u);
  EXPECT_LE(util.gpu, 60u);
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(Gpu(1), &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 0u);

  // Per-process: one sample, for this process, with its share.
  unsigned int count = 0;
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(Gpu(0), nullptr, &count, 0),
            NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(count, 1u);
  nvmlProcessUtilizationSample_t sample;
  count = 0;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(Gpu(0), &sample, &count, 0),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(Gpu(0), &sample, &count, 0), NVML_SUCCESS);
  EXPECT_EQ(sample.pid, static_cast<unsigned int>(getpid()));
  EXPECT_GT(sample.smUtil, 0u);
  EXPECT_LE(sample.smUtil, 60u);
  const auto now_us =
      static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  EXPECT_LE(sample.timeStamp, now_us);
  EXPECT_GT(sample.timeStamp, now_us - 10'000'000);
  // Nothing newer than what was just seen.
  count = 1;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(Gpu(0), &sample, &count, sample.timeStamp),
            NVML_ERROR_NOT_FOUND);
  // An idle GPU nobody used has no samples either.
  count = 1;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(Gpu(1), &sample, &count, 0), NVML_ERROR_NOT_FOUND);
}

TEST_F(NvmlTest, SensorsReadIdleValuesOnAnIdleGpu) {
  UseGpus("1xA100-40GB");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned int temp = 0, power = 0;
  ASSERT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_EQ(temp, 31u);
  ASSERT_EQ(nvmlDeviceGetPowerUsage(Gpu(0), &power), NVML_SUCCESS);
  EXPECT_EQ(power, 55'000u);  // The A100's idle power in the simulator's catalog.
}

TEST_F(NvmlTest, MigDevicesAreReachableFromTheirParentAndBack) {
  UseGpus("1xA100-40GB:mig=3g.20gb+1g.5gb*2");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t gpu = Gpu(0);
  unsigned int current = 9, pending = 9, max = 0;
  ASSERT_EQ(nvmlDeviceGetMigMode(gpu, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned int>(NVML_DEVICE_MIG_ENABLE));
  EXPECT_EQ(pending, current);
  ASSERT_EQ(nvmlDeviceGetMaxMigDeviceCount(gpu, &max), NVML_SUCCESS);
  EXPECT_EQ(max, 7u);

  const uint64_t want_memory[] = {20 * kGiB, 5 * kGiB, 5 * kGiB};
  std::vector<nvmlDevice_t> migs;
  for (unsigned int i = 0; i < max; ++i) {
    nvmlDevice_t mig = nullptr;
    nvmlReturn_t r = nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &mig);
    if (i >= 3) {
      EXPECT_EQ(r, NVML_ERROR_NOT_FOUND) << i;
      continue;
    }
    ASSERT_EQ(r, NVML_SUCCESS) << i;
    migs.push_back(mig);
    unsigned int is_mig = 0, gi = 0, ci = 9;
    ASSERT_EQ(nvmlDeviceIsMigDeviceHandle(mig, &is_mig), NVML_SUCCESS);
    EXPECT_EQ(is_mig, 1u);
    ASSERT_EQ(nvmlDeviceGetGpuInstanceId(mig, &gi), NVML_SUCCESS);
    EXPECT_EQ(gi, i + 1);
    ASSERT_EQ(nvmlDeviceGetComputeInstanceId(mig, &ci), NVML_SUCCESS);
    EXPECT_EQ(ci, 0u);
    nvmlDevice_t parent = nullptr;
    ASSERT_EQ(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent), NVML_SUCCESS);
    EXPECT_EQ(parent, gpu);
    nvmlMemory_t mem;
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
    EXPECT_EQ(mem.total, want_memory[i]);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    ASSERT_EQ(nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
    EXPECT_EQ(std::string(uuid).substr(0, 4), "MIG-");
    nvmlDevice_t by_uuid = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
    EXPECT_EQ(by_uuid, mig);
  }
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  ASSERT_EQ(nvmlDeviceGetName(migs[1], name, sizeof(name)), NVML_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA A100-SXM4-40GB MIG 1g.5gb");
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7, &mig), NVML_ERROR_INVALID_ARGUMENT);

  // Queries that are per GPU or per MIG device only, as on real hardware.
  unsigned int id = 0, index = 0;
  nvmlDevice_t parent = nullptr;
  nvmlUtilization_t util;
  EXPECT_EQ(nvmlDeviceGetGpuInstanceId(gpu, &id), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu, &parent),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetUtilizationRates(gpu, &util), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlDeviceGetUtilizationRates(migs[0], &util), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlDeviceGetIndex(migs[0], &index), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(migs[0], 0, &mig), NVML_ERROR_NOT_SUPPORTED);

  // A process on MIG device 1: listed there and on the parent with the
  // instance's ids, not on MIG device 0.
  DeviceModel& driver = Driver();
  const uint32_t unit = driver.Device(0).mig[1].unit;
  ASSERT_TRUE(driver.AddContext(unit).ok());
  ASSERT_TRUE(driver.ReserveMemory(unit, 1 * kGiB).ok());
  const uint64_t expected = 1 * kGiB + driver.context_bytes();
  nvmlProcessInfo_t info;
  unsigned int count = 1;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(gpu, &count, &info), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(info.usedGpuMemory, expected);
  EXPECT_EQ(info.gpuInstanceId, 2u);
  EXPECT_EQ(info.computeInstanceId, 0u);
  count = 1;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(migs[1], &count, &info), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
  count = 1;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(migs[0], &count, &info), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  nvmlMemory_t mem;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(migs[1], &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.used, expected);
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(gpu, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, 40 * kGiB);
  EXPECT_EQ(mem.used, expected);
}

// MIG instances have a utilisation: GPM gives one
// per GPU instance on Hopper (H100/H200), as on real hardware; an A100 has
// no GPM (its MIG instances stay without a figure).
TEST_F(NvmlTest, GpmMeasuresEachMigInstanceAndTheWholeGpuOnHopperOnly) {
  UseGpus("1xH100-80GB:mig=3g.40gb+1g.10gb,1xA100-40GB");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t h100 = Gpu(0), a100 = Gpu(1);
  nvmlGpmSupport_t support{NVML_GPM_SUPPORT_VERSION, 7};
  ASSERT_EQ(nvmlGpmQueryDeviceSupport(h100, &support), NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 1u);
  ASSERT_EQ(nvmlGpmQueryDeviceSupport(a100, &support), NVML_SUCCESS);
  EXPECT_EQ(support.isSupportedDevice, 0u);
  support.version = 2;
  EXPECT_EQ(nvmlGpmQueryDeviceSupport(h100, &support), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  nvmlGpmSample_t s1 = nullptr, s2 = nullptr, g1 = nullptr, g2 = nullptr;
  ASSERT_EQ(nvmlGpmSampleAlloc(&s1), NVML_SUCCESS);
  ASSERT_EQ(nvmlGpmSampleAlloc(&s2), NVML_SUCCESS);
  ASSERT_EQ(nvmlGpmSampleAlloc(&g1), NVML_SUCCESS);
  ASSERT_EQ(nvmlGpmSampleAlloc(&g2), NVML_SUCCESS);
  EXPECT_EQ(nvmlGpmSampleGet(a100, s1), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlGpmMigSampleGet(h100, 9, s1), NVML_ERROR_NOT_FOUND);
  nvmlDevice_t mig0 = nullptr;
  ASSERT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h100, 0, &mig0), NVML_SUCCESS);
  EXPECT_EQ(nvmlGpmSampleGet(mig0, s1), NVML_ERROR_NOT_SUPPORTED);  // The parent samples.

  // Instance 1 (3g.40gb, GPU instance id 1) runs kernels for ~half of the
  // interval; instance 2 is idle.
  DeviceModel& driver = Driver();
  const uint32_t unit = driver.Device(0).mig[0].unit;
  ASSERT_EQ(nvmlGpmMigSampleGet(h100, 1, s1), NVML_SUCCESS);
  ASSERT_EQ(nvmlGpmMigSampleGet(h100, 2, g1), NVML_SUCCESS);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  driver.AddBusy(unit, 100'000'000);
  ASSERT_EQ(nvmlGpmMigSampleGet(h100, 1, s2), NVML_SUCCESS);
  ASSERT_EQ(nvmlGpmMigSampleGet(h100, 2, g2), NVML_SUCCESS);
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  nvmlGpmMetricsGet_t get{};
  get.version = NVML_GPM_METRICS_GET_VERSION;
  get.numMetrics = 3;
  get.sample1 = s1;
  get.sample2 = s2;
  get.metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
  get.metrics[1].metricId = NVML_GPM_METRIC_SM_UTIL;
  get.metrics[2].metricId = NVML_GPM_METRIC_SM_OCCUPANCY;
  ASSERT_EQ(nvmlGpmMetricsGet(&get), NVML_SUCCESS);
  ASSERT_EQ(get.metrics[0].nvmlReturn, NVML_SUCCESS);
  // 100 ms busy over the interval the two samples span (at least 200 ms).
  EXPECT_NEAR(get.metrics[0].value, 100.0 * 100 / elapsed_ms, 100.0 * 100 / elapsed_ms * 0.1);
  EXPECT_LE(get.metrics[0].value, 50.5);
  EXPECT_EQ(get.metrics[1].value, get.metrics[0].value);
  EXPECT_STREQ(get.metrics[0].metricInfo.unit, "%");
  EXPECT_EQ(get.metrics[2].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);

  get.sample1 = g1;
  get.sample2 = g2;
  ASSERT_EQ(nvmlGpmMetricsGet(&get), NVML_SUCCESS);
  EXPECT_EQ(get.metrics[0].value, 0.0) << "the idle instance";

  // Samples of different instances, or in the wrong order, are refused.
  get.sample1 = s1;
  get.sample2 = g2;
  EXPECT_EQ(nvmlGpmMetricsGet(&get), NVML_ERROR_INVALID_ARGUMENT);
  get.sample1 = s2;
  get.sample2 = s1;
  EXPECT_EQ(nvmlGpmMetricsGet(&get), NVML_ERROR_INVALID_ARGUMENT);
  get.version = 9;
  EXPECT_EQ(nvmlGpmMetricsGet(&get), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  // The whole GPU in MIG mode: the instances weighted by their SMs.
  ASSERT_EQ(nvmlGpmSampleGet(h100, g1), NVML_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  driver.AddBusy(unit, 100'000'000);
  ASSERT_EQ(nvmlGpmSampleGet(h100, g2), NVML_SUCCESS);
  get = {};
  get.version = NVML_GPM_METRICS_GET_VERSION;
  get.numMetrics = 1;
  get.sample1 = g1;
  get.sample2 = g2;
  get.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
  ASSERT_EQ(nvmlGpmMetricsGet(&get), NVML_SUCCESS);
  const DeviceInfo info = driver.Device(0);
  const double weight = double(info.mig[0].sm_count) / (info.mig[0].sm_count + info.mig[1].sm_count);
  EXPECT_GT(get.metrics[0].value, 0.0);
  EXPECT_LE(get.metrics[0].value, 100.0 * weight + 0.5);

  for (nvmlGpmSample_t s : {s1, s2, g1, g2}) EXPECT_EQ(nvmlGpmSampleFree(s), NVML_SUCCESS);
  EXPECT_EQ(nvmlGpmSampleFree(nullptr), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, MigModeSaysDisabledOnCapableGpusAndIsUnsupportedOnOthers) {
  UseGpus("1xH100-80GB,1xL4");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned int current = 9, pending = 9, max = 9;
  ASSERT_EQ(nvmlDeviceGetMigMode(Gpu(0), &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned int>(NVML_DEVICE_MIG_DISABLE));
  ASSERT_EQ(nvmlDeviceGetMaxMigDeviceCount(Gpu(0), &max), NVML_SUCCESS);
  EXPECT_EQ(max, 0u);
  EXPECT_EQ(nvmlDeviceGetMigMode(Gpu(1), &current, &pending), NVML_ERROR_NOT_SUPPORTED);
  nvmlDevice_t mig = nullptr;
  EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(Gpu(0), 0, &mig), NVML_ERROR_NOT_SUPPORTED);
  unsigned int is_mig = 9;
  ASSERT_EQ(nvmlDeviceIsMigDeviceHandle(Gpu(0), &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0u);
}

// MIG capability comes from the state file, not from this process's
// configuration: a process without one (as jobs under the daemon) sees the
// same answer as the file's creator.
TEST_F(NvmlTest, MigModeComesFromTheStateFileNotTheEnvironment) {
  UseGpus("1xA100-40GB,1xT4");
  Driver();  // Creates the file with that machine.
  unsetenv("GPUSLICE_SIM_GPUS");
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  unsigned int current = 9, pending = 9;
  ASSERT_EQ(nvmlDeviceGetMigMode(Gpu(0), &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, static_cast<unsigned int>(NVML_DEVICE_MIG_DISABLE));
  EXPECT_EQ(nvmlDeviceGetMigMode(Gpu(1), &current, &pending), NVML_ERROR_NOT_SUPPORTED);
}

TEST(NvmlErrorString, DescribesEveryCodeAndUnknownOnes) {
  EXPECT_STREQ(nvmlErrorString(NVML_SUCCESS), "Success");
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
  for (int code = 1; code <= 29; ++code) {
    const char* text = nvmlErrorString(static_cast<nvmlReturn_t>(code));
    ASSERT_NE(text, nullptr);
    EXPECT_STRNE(text, "Unknown Error") << code;
  }
  EXPECT_STREQ(nvmlErrorString(static_cast<nvmlReturn_t>(12345)), "Unknown Error");
}

}  // namespace
}  // namespace gpuslice::sim
