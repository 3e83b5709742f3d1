// The simulated NVML's GPU health (nvml_health.cc): ECC counts and XID
// events from faults injected into the device model, and a fixed
// temperature. Called in-process, like nvml_test.cc.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/nvml_abi.h"
#include "sim/device_model.h"

namespace gpuslice::sim {
namespace {

class NvmlHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gpuslice-nvml-health-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/state").c_str(), 1);
    unsetenv("GPUSLICE_SIM_CONFIG");
    setenv("GPUSLICE_SIM_GPUS", "2xH100-80GB", 1);
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    // What gpuslice-sim-fault does, from another mapping of the same state.
    auto options = ModelOptionsFromEnvironment();
    ASSERT_TRUE(options.ok()) << options.status().ToString();
    auto model = DeviceModel::Open(*options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    faults_ = std::move(model).value();
  }
  void TearDown() override {
    while (nvmlShutdown() == NVML_SUCCESS) {
    }
    faults_.reset();
    std::filesystem::remove_all(dir_);
  }
  nvmlDevice_t Gpu(unsigned int index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &d), NVML_SUCCESS);
    return d;
  }
  unsigned long long Ecc(unsigned int gpu, nvmlMemoryErrorType_t type) {
    unsigned long long n = 12345;
    EXPECT_EQ(nvmlDeviceGetTotalEccErrors(Gpu(gpu), type, NVML_VOLATILE_ECC, &n), NVML_SUCCESS);
    return n;
  }

  std::string dir_;
  std::unique_ptr<DeviceModel> faults_;
};

TEST_F(NvmlHealthTest, EccCountsAreZeroThenFollowInjectedErrorsPerGpu) {
  EXPECT_EQ(Ecc(0, NVML_MEMORY_ERROR_TYPE_CORRECTED), 0u);
  EXPECT_EQ(Ecc(0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED), 0u);
  faults_->faults().AddEccErrors(0, 5, 1);
  faults_->faults().AddEccErrors(0, 2, 0);
  EXPECT_EQ(Ecc(0, NVML_MEMORY_ERROR_TYPE_CORRECTED), 7u);
  EXPECT_EQ(Ecc(0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED), 1u);
  EXPECT_EQ(Ecc(1, NVML_MEMORY_ERROR_TYPE_CORRECTED), 0u);
  unsigned long long n = 0;
  EXPECT_EQ(
      nvmlDeviceGetTotalEccErrors(Gpu(0), NVML_MEMORY_ERROR_TYPE_COUNT, NVML_VOLATILE_ECC, &n),
      NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetTotalEccErrors(Gpu(0), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC,
                                        nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      nvmlDeviceGetTotalEccErrors(nullptr, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n),
      NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlHealthTest, XidEventsAfterRegistrationArriveOnceInOrder) {
  faults_->faults().InjectXid(0, 13);  // Before registration: not reported.
  unsigned long long types = 0;
  ASSERT_EQ(nvmlDeviceGetSupportedEventTypes(Gpu(0), &types), NVML_SUCCESS);
  EXPECT_EQ(types, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceRegisterEvents(Gpu(0), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  nvmlEventData_t e{};
  EXPECT_EQ(nvmlEventSetWait_v2(set, &e, 0), NVML_ERROR_TIMEOUT);
  faults_->faults().InjectXid(0, 79);
  faults_->faults().InjectXid(0, 48);
  faults_->faults().InjectXid(1, 31);  // GPU 1 is not registered.
  ASSERT_EQ(nvmlEventSetWait_v2(set, &e, 1000), NVML_SUCCESS);
  EXPECT_EQ(e.device, Gpu(0));
  EXPECT_EQ(e.eventType, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
  EXPECT_EQ(e.eventData, 79u);
  EXPECT_EQ(e.gpuInstanceId, 0xFFFFFFFFu);
  ASSERT_EQ(nvmlEventSetWait_v2(set, &e, 0), NVML_SUCCESS);
  EXPECT_EQ(e.eventData, 48u);
  EXPECT_EQ(nvmlEventSetWait_v2(set, &e, 10), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvmlDeviceRegisterEvents(Gpu(1), 0x1, set), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
  EXPECT_EQ(nvmlEventSetWait_v2(nullptr, &e, 0), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlHealthTest, AFixedTemperatureIsReportedUntilSetBackToAuto) {
  unsigned int t = 0;
  ASSERT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
  EXPECT_LT(t, 80u);  // Modelled: 31 C idle to 78 C busy.
  faults_->faults().SetTemperature(0, 95);
  ASSERT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
  EXPECT_EQ(t, 95u);
  ASSERT_EQ(nvmlDeviceGetTemperature(Gpu(1), NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
  EXPECT_LT(t, 80u);
  faults_->faults().SetTemperature(0, 0);
  ASSERT_EQ(nvmlDeviceGetTemperature(Gpu(0), NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
  EXPECT_LT(t, 80u);
}

}  // namespace
}  // namespace gpuslice::sim
