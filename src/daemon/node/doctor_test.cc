#include "daemon/node/doctor.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

using nlohmann::json;

InventorySnapshot OneGpu(const std::string& source) {
  InventorySnapshot inv;
  inv.source = source;
  inv.library = "libnvidia-ml.so.1";
  GpuInfo g;
  g.index = 0;
  g.uuid = "GPU-0";
  g.model = "NVIDIA H100 80GB HBM3";
  inv.gpus.push_back(g);
  return inv;
}

const json* Check(const json& report, const std::string& name) {
  for (const json& c : report["checks"]) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

// On the simulated GPU doctor must not call the CUDA runtime "compatible":
// runtime-API programs fail there.
TEST(Doctor, OnTheSimulatorSaysPlainlyWhatRunsAndThatTheRuntimeDoesNot) {
  InventorySnapshot inv = OneGpu("simulated");
  json report = Doctor(DoctorOptions{}, inv).Run();
  const json* sim = Check(report, "simulator");
  ASSERT_NE(sim, nullptr) << report.dump(2);
  EXPECT_TRUE((*sim)["note"].get<bool>());
  std::string detail = (*sim)["detail"];
  EXPECT_NE(detail.find("CUDA driver API"), std::string::npos) << detail;
  EXPECT_NE(detail.find("run unchanged"), std::string::npos) << detail;
  EXPECT_NE(detail.find("CUDA runtime"), std::string::npos) << detail;
  EXPECT_NE(detail.find("do not run"), std::string::npos) << detail;
  const json* rt = Check(report, "cuda_runtime");
  ASSERT_NE(rt, nullptr) << report.dump(2);
  EXPECT_FALSE((*rt)["ok"].get<bool>());
  EXPECT_TRUE((*rt)["note"].get<bool>());
  std::string rt_detail = (*rt)["detail"];
  EXPECT_EQ(rt_detail.find("compatible"), std::string::npos) << rt_detail;
  EXPECT_NE(rt_detail.find("do not run on the SIMULATED GPU"), std::string::npos) << rt_detail;
  // Notes do not decide the verdict: it is the other checks'.
  bool others_ok = true;
  for (const json& c : report["checks"]) {
    if (!c.value("note", false)) others_ok = others_ok && c["ok"].get<bool>();
  }
  EXPECT_EQ(report["ok"].get<bool>(), others_ok) << report.dump(2);
}

TEST(Doctor, OnARealGpuHasNoSimulatorNote) {
  InventorySnapshot inv = OneGpu("nvml");
  json report = Doctor(DoctorOptions{}, inv).Run();
  EXPECT_EQ(Check(report, "simulator"), nullptr) << report.dump(2);
  for (const json& c : report["checks"]) EXPECT_FALSE(c.value("note", false)) << c.dump();
}

}  // namespace
}  // namespace gpuslice::daemon
