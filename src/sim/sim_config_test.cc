#include "sim/sim_config.h"

#include <gtest/gtest.h>

#include "core/units.h"

namespace gpuslice::sim {
namespace {

TEST(ParseGpuSpec, CountAndModelGiveThatManyGpus) {
  core::Result<SimConfig> c = ParseGpuSpec("2xH100-80GB");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->devices.size(), 2u);
  EXPECT_EQ(c->devices[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c->devices[0].total_memory, 80 * core::kGiB);
  EXPECT_EQ(c->devices[0].sm_count, 132u);
  EXPECT_EQ(c->devices[0].cc_major, 9u);
  EXPECT_NE(c->devices[0].uuid, c->devices[1].uuid);
  EXPECT_EQ(c->devices[0].uuid.rfind("GPU-", 0), 0u);
  EXPECT_EQ(c->devices[0].uuid.size(), 40u);
  EXPECT_NE(c->devices[0].pci_bus, c->devices[1].pci_bus);
}

TEST(ParseGpuSpec, UuidsAreStableAcrossParses) {
  EXPECT_EQ(ParseGpuSpec("1xA100-40GB")->devices[0].uuid,
            ParseGpuSpec("1xA100-40GB")->devices[0].uuid);
  EXPECT_EQ(ParseGpuSpec("2xL4")->Fingerprint(), ParseGpuSpec("2xL4-24GB")->Fingerprint());
  EXPECT_NE(ParseGpuSpec("2xL4")->Fingerprint(), ParseGpuSpec("1xL4")->Fingerprint());
}

TEST(ParseGpuSpec, MigLayoutWithRepeatCount) {
  core::Result<SimConfig> c = ParseGpuSpec("1xA100-40GB:mig=1g.5gb*7");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->devices[0].mig.size(), 7u);
  EXPECT_EQ(c->devices[0].mig[0].memory_bytes, 5 * core::kGiB);
  EXPECT_EQ(c->devices[0].mig[0].compute_slices, 1u);
}

TEST(ParseGpuSpec, MixedGroupsAndOptions) {
  core::Result<SimConfig> c =
      ParseGpuSpec("1xH100-80GB:mig=3g.40gb+2g.20gb+1g.10gb*2,2xL4:mem=20GiB:sm=10:cc=8.6");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->devices.size(), 3u);
  EXPECT_EQ(c->devices[0].mig.size(), 4u);
  EXPECT_EQ(c->devices[1].total_memory, 20 * core::kGiB);
  EXPECT_EQ(c->devices[2].sm_count, 10u);
  EXPECT_EQ(c->devices[2].cc_minor, 6u);
}

struct BadSpec {
  const char* spec;
  const char* must_mention;
};

TEST(ParseGpuSpec, RejectsBadSpecsNamingTheToken) {
  const BadSpec cases[] = {
      {"", "empty"},
      {"2xB999", "B999"},
      {"0xH100-80GB", "positive"},
      {"99xH100-80GB", "99"},
      {"1xL4:mig=1g.5gb", "does not support MIG"},
      {"1xA100-40GB:mig=1g.7gb", "1g.7gb"},
      {"1xA100-40GB:mig=1g.5gb*8", "8"},
      {"1xA100-40GB:mig=4g.20gb+4g.20gb", "does not fit"},
      {"1xA100-40GB:mig=5g.20gb", "5g.20gb"},
      {"1xH100-80GB:mem=lots", "lots"},
      {"1xH100-80GB:colour=red", "colour"},
      {"1xH100-80GB:cc=9", "'9'"},
      {"17xH100-80GB", "17"},
      {"9xH100-80GB,9xL4", "at most 16"},
  };
  for (const BadSpec& c : cases) {
    core::Result<SimConfig> r = ParseGpuSpec(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_NE(r.status().message().find(c.must_mention), std::string::npos)
        << c.spec << " -> " << r.status().message();
  }
}

TEST(ParseConfigJson, DevicesWithOverrides) {
  core::Result<SimConfig> c = ParseConfigJson(R"({"devices": [
      {"model": "A100-80GB", "count": 2, "mig": ["3g.40gb", "3g.40gb"]},
      {"model": "T4", "name": "My T4", "memory": "8GiB", "uuid": "GPU-12345678-aaaa",
       "compute_capability": "7.5", "sm_count": 20, "pci_bus": 99}]})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->devices.size(), 3u);
  EXPECT_EQ(c->devices[1].mig.size(), 2u);
  EXPECT_EQ(c->devices[2].name, "My T4");
  EXPECT_EQ(c->devices[2].uuid, "GPU-12345678-aaaa");
  EXPECT_EQ(c->devices[2].total_memory, 8 * core::kGiB);
  EXPECT_EQ(c->devices[2].pci_bus, 99u);
}

TEST(ParseConfigJson, RejectsBadDocumentsNamingTheField) {
  const BadSpec cases[] = {
      {"not json", "not valid JSON"},
      {"{}", "devices"},
      {R"({"devices": [{"modle": "T4"}]})", "modle"},
      {R"({"devices": [{"memory": 12}]})", "devices[0].memory"},
      {R"({"devices": [{"memory": "12 parsecs"}]})", "devices[0].memory"},
      {R"({"devices": [{"model": "T4", "mig": ["1g.5gb"]}]})", "devices[0]"},
      {R"({"devices": [{"uuid": "X"}]})", "GPU-"},
      {R"({"devices": []})", "no GPUs"},
  };
  for (const BadSpec& c : cases) {
    core::Result<SimConfig> r = ParseConfigJson(c.spec);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_NE(r.status().message().find(c.must_mention), std::string::npos)
        << c.spec << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace gpuslice::sim
