// NvmlInventory with a driver root (a daemon in a container that sees the
// host's driver under a mount): NVML is found under it, and the host's path
// of the library is what CDI specs will name. NVIDIA's NVML stands in as the
// simulated one, copied where a distribution installs the driver.

#include "daemon/node/nvml_inventory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class NvmlInventoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-nvml-inventory-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/sim-state").c_str(), 1);
    setenv("GPUSLICE_SIM_GPUS", "2xL4-24GB", 1);
  }
  void TearDown() override {
    unsetenv("GPUSLICE_SIM_STATE");
    unsetenv("GPUSLICE_SIM_GPUS");
    fs::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(NvmlInventoryTest, ADriverRootIsSearchedAndTheHostPathIsItsPathBelowIt) {
  const std::string lib_dir = dir_ + "/driver-root/usr/lib/x86_64-linux-gnu";
  fs::create_directories(lib_dir);
  fs::copy_file(std::string(GPUSLICE_SIM_LIB_DIR) + "/libnvidia-ml.so.1",
                lib_dir + "/libnvidia-ml.so.1");
  NvmlInventory inventory(GpuSourceMode::kNvml, GPUSLICE_SIM_LIB_DIR, dir_ + "/driver-root");
  auto snap = inventory.Read();
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_EQ(snap->library, lib_dir + "/libnvidia-ml.so.1");
  EXPECT_EQ(snap->host_library, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  EXPECT_EQ(snap->source, "nvml");
  EXPECT_EQ(snap->gpus.size(), 2u);
}

TEST_F(NvmlInventoryTest, NoDriverUnderTheRootIsAnErrorNamingWhereItLooked) {
  fs::create_directories(dir_ + "/empty-root");
  NvmlInventory inventory(GpuSourceMode::kNvml, GPUSLICE_SIM_LIB_DIR, dir_ + "/empty-root");
  auto snap = inventory.Read();
  ASSERT_FALSE(snap.ok());
  EXPECT_NE(snap.status().message().find(dir_ + "/empty-root/usr/lib64"), std::string::npos)
      << snap.status().message();
}

}  // namespace
}  // namespace gpuslice::daemon
