#include "shim/base/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "core/units.h"
#include "slice/region/region_layout.h"

namespace gpuslice::shim {
namespace {

using core::kGiB;

ShimConfig Read(std::map<std::string, std::string> vars) {
  return ReadShimConfig([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(ShimConfig, NothingSetMeansNoSliceAndNoProblems) {
  ShimConfig c = Read({});
  EXPECT_FALSE(c.disabled);
  EXPECT_FALSE(c.has_limit);
  EXPECT_TRUE(c.slice_path.empty());
  EXPECT_TRUE(c.problems.empty());
  EXPECT_EQ(c.LimitFor(0), slice::layout::kUnlimited);
}

TEST(ShimConfig, OneLimitAppliesToEveryDevice) {
  ShimConfig c = Read({{"GPUSLICE_MEMORY_LIMIT", "4GiB"}});
  ASSERT_TRUE(c.has_limit);
  EXPECT_EQ(c.LimitFor(0), 4 * kGiB);
  EXPECT_EQ(c.LimitFor(7), 4 * kGiB);
}

TEST(ShimConfig, PerDeviceLimitsLeaveOtherDevicesUnlimited) {
  ShimConfig c = Read({{"GPUSLICE_MEMORY_LIMIT", "0=4GiB,1=2GiB"}});
  ASSERT_TRUE(c.has_limit);
  EXPECT_EQ(c.LimitFor(0), 4 * kGiB);
  EXPECT_EQ(c.LimitFor(1), 2 * kGiB);
  EXPECT_EQ(c.LimitFor(2), slice::layout::kUnlimited);
}

// Table-driven: every bad value gives one line naming the variable and the
// token, and no limit.
TEST(ShimConfig, BadLimitsNameTheVariableAndTheToken) {
  const struct {
    const char* value;
    const char* token;
  } kCases[] = {{"4XB", "4XB"}, {"lots", "lots"}, {"0=4GiB,0=2GiB", "0=4GiB,0=2GiB"},
                {"x=4GiB", "x"},  {"-1GiB", "-1GiB"}};
  for (const auto& k : kCases) {
    ShimConfig c = Read({{"GPUSLICE_MEMORY_LIMIT", k.value}});
    EXPECT_FALSE(c.has_limit) << k.value;
    ASSERT_EQ(c.problems.size(), 1u) << k.value;
    EXPECT_NE(c.problems[0].find("GPUSLICE_MEMORY_LIMIT"), std::string::npos) << c.problems[0];
    EXPECT_NE(c.problems[0].find(k.token), std::string::npos) << c.problems[0];
    EXPECT_NE(c.problems[0].find("without a memory limit"), std::string::npos) << c.problems[0];
  }
}

TEST(ShimConfig, DisableWinsOverEverythingElse) {
  ShimConfig c = Read({{"GPUSLICE_DISABLE", "1"}, {"GPUSLICE_MEMORY_LIMIT", "1GiB"}});
  EXPECT_TRUE(c.disabled);
  EXPECT_FALSE(c.has_limit);
}

TEST(ShimConfig, BadDisableAndLogLevelValuesAreReported) {
  ShimConfig c = Read({{"GPUSLICE_DISABLE", "yes"}, {"GPUSLICE_LOG_LEVEL", "loud"}});
  EXPECT_FALSE(c.disabled);
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_NE(c.problems[0].find("GPUSLICE_LOG_LEVEL"), std::string::npos);
  EXPECT_NE(c.problems[0].find("loud"), std::string::npos);
  EXPECT_NE(c.problems[1].find("GPUSLICE_DISABLE"), std::string::npos);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
}

TEST(ShimConfig, CoRunningIsOnUnlessTurnedOffAndBadValuesAreReported) {
  EXPECT_TRUE(Read({}).compute_corun);
  EXPECT_TRUE(Read({{"GPUSLICE_COMPUTE_CORUN", "1"}}).compute_corun);
  EXPECT_FALSE(Read({{"GPUSLICE_COMPUTE_CORUN", "0"}}).compute_corun);
  ShimConfig bad = Read({{"GPUSLICE_COMPUTE_CORUN", "off"}});
  EXPECT_TRUE(bad.compute_corun);
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_NE(bad.problems[0].find("GPUSLICE_COMPUTE_CORUN"), std::string::npos) << bad.problems[0];
}

TEST(ShimConfig, RelativeSlicePathIsRefused) {
  ShimConfig c = Read({{"GPUSLICE_SLICE", "slice.region"}});
  EXPECT_TRUE(c.slice_path.empty());
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("slice.region"), std::string::npos);
}

TEST(ShimConfig, TheLimitsPageIsTakenFromTheEnvironmentOnlyWhenSet) {
  EXPECT_TRUE(Read({}).limits_path.empty());
  EXPECT_TRUE(Read({{"GPUSLICE_LIMITS", ""}}).limits_path.empty());
  ShimConfig c =
      Read({{"GPUSLICE_SLICE", "/s/job-1/region"}, {"GPUSLICE_LIMITS", "/s/job-1/limits"}});
  EXPECT_EQ(c.limits_path, "/s/job-1/limits");
  EXPECT_TRUE(c.problems.empty());
}

TEST(ShimConfig, StandaloneDirPrefersAnOwnedXdgRuntimeDir) {
  char tmpl[] = "/tmp/gpuslice-xdg-XXXXXX";
  std::string xdg = mkdtemp(tmpl);
  EXPECT_EQ(StandaloneSliceDir(xdg.c_str(), geteuid()), xdg + "/gpuslice");
  EXPECT_EQ(StandaloneSliceDir(xdg.c_str(), geteuid() + 1),
            "/dev/shm/gpuslice-" + std::to_string(geteuid() + 1));
  EXPECT_EQ(StandaloneSliceDir(nullptr, 1234), "/dev/shm/gpuslice-1234");
  EXPECT_EQ(StandaloneSliceDir("relative", 1234), "/dev/shm/gpuslice-1234");
  std::filesystem::remove_all(xdg);
}

TEST(ShimConfig, PrepareSliceDirCreatesAPrivateDirAndRefusesOpenOnes) {
  char tmpl[] = "/tmp/gpuslice-dir-XXXXXX";
  std::string base = mkdtemp(tmpl);
  std::string dir = base + "/gpuslice";
  ASSERT_TRUE(PrepareSliceDir(dir, geteuid()).ok());
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(PrepareSliceDir(dir, geteuid()).ok());  // Idempotent.
  chmod(dir.c_str(), 0777);
  EXPECT_EQ(PrepareSliceDir(dir, geteuid()).code(), core::StatusCode::kPermissionDenied);
  chmod(dir.c_str(), 0700);
  core::Status other = PrepareSliceDir(dir, geteuid() + 1);
  EXPECT_EQ(other.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("refusing"), std::string::npos);
  std::filesystem::remove_all(base);
}

TEST(ShimConfig, StandalonePathIsUniquePerRoot) {
  EXPECT_NE(StandaloneSlicePath("/d", 10, 1), StandaloneSlicePath("/d", 11, 1));
  EXPECT_NE(StandaloneSlicePath("/d", 10, 1), StandaloneSlicePath("/d", 10, 2));
  EXPECT_EQ(StandaloneSlicePath("/d", 10, 255), "/d/slice-10-ff.region");
}

}  // namespace
}  // namespace gpuslice::shim
