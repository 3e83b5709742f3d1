#include "sim/nvml/nvml_pci.h"

#include <gtest/gtest.h>

namespace gpuslice::sim {
namespace {

TEST(ParsePciBusId, AcceptsTheNvmlCudaAndLspciForms) {
  struct Case {
    const char* text;
    PciAddress want;
  };
  const Case cases[] = {
      {"00000000:18:00.0", {0, 0x18, 0, 0}},
      {"0000:18:00.0", {0, 0x18, 0, 0}},
      {"18:00.0", {0, 0x18, 0, 0}},
      {"0001:aB:1f.7", {1, 0xAB, 0x1F, 7}},
      {"DEADBEEF:ff:01.0", {0xDEADBEEF, 0xFF, 1, 0}},
  };
  for (const Case& c : cases) {
    core::Result<PciAddress> a = ParsePciBusId(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().ToString();
    EXPECT_EQ(*a, c.want) << c.text;
  }
}

TEST(ParsePciBusId, RejectsMalformedIdsNamingThem) {
  const char* cases[] = {"",
                         "18:00",
                         "1800.0",
                         "zz:00.0",
                         "0000:18:20.0",
                         "0000:18:00.8",
                         "123456789:18:00.0",
                         "0000:118:00.0",
                         "0000:18:00.",
                         ":18:00.0",
                         "0000:18:00.0 "};
  for (const char* text : cases) {
    core::Result<PciAddress> a = ParsePciBusId(text);
    ASSERT_FALSE(a.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(a.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("'" + std::string(text) + "'"), std::string::npos)
        << a.status().message();
  }
}

TEST(PciDeviceIdForName, KnownBoardsHaveTheirDeviceIdAndNvidiasVendorId) {
  EXPECT_EQ(PciDeviceIdForName("NVIDIA H100 80GB HBM3"), 0x233010DEu);
  EXPECT_EQ(PciDeviceIdForName("NVIDIA A100-SXM4-40GB"), 0x20B010DEu);
  EXPECT_EQ(PciDeviceIdForName("Tesla T4"), 0x1EB810DEu);
}

TEST(PciDeviceIdForName, UnknownBoardsHaveDeviceIdZero) {
  EXPECT_EQ(PciDeviceIdForName("Custom Accelerator"), 0x000010DEu);
}

}  // namespace
}  // namespace gpuslice::sim
