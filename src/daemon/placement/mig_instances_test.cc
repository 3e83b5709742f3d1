#include "daemon/placement/mig_instances.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

MigInstance Instance(const std::string& uuid, const std::string& profile, uint64_t bytes) {
  MigInstance m;
  m.uuid = uuid;
  m.profile = profile;
  m.memory_total = bytes;
  return m;
}

core::ResourceRequest Mig(const std::string& profile) {
  core::ResourceRequest r;
  r.kind = core::RequestKind::kMig;
  r.mig = *core::ParseMigProfile(profile);
  return r;
}

MigInstances TwoGpus() {
  MigInstances m;
  m.Add(0, "A100", Instance("MIG-a", "1g.10gb", 10'000'000'000), "train");
  m.Add(0, "A100", Instance("MIG-b", "3g.40gb", 40'000'000'000), "train");
  m.Add(1, "H100", Instance("MIG-c", "1g.10gb", 10'000'000'000), "infer");
  return m;
}

TEST(MigInstances, AnUnnamedInstanceIsOfTheProfileOfItsMemory) {
  EXPECT_TRUE(IsOfProfile(Instance("MIG-x", "", 9'800'000'000), *core::ParseMigProfile("1g.10gb")));
  EXPECT_FALSE(
      IsOfProfile(Instance("MIG-x", "", 20'000'000'000), *core::ParseMigProfile("1g.10gb")));
  EXPECT_FALSE(
      IsOfProfile(Instance("MIG-x", "2g.10gb", 10'000'000'000), *core::ParseMigProfile("1g.10gb")))
      << "a name decides over memory";
}

TEST(MigInstances, FindMatchesProfilePoolAndModel) {
  MigInstances m = TwoGpus();
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "", true), 0);
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "infer", true), 2);
  EXPECT_EQ(m.Find(Mig("3g.40gb"), "infer", true), -1);
  core::ResourceRequest h100 = Mig("1g.10gb");
  h100.gpu_models = {"H100"};
  EXPECT_EQ(m.Find(h100, "", true), 2);
}

TEST(MigInstances, ATakenInstanceIsFoundOnlyWhenTakenOnesCount) {
  MigInstances m = TwoGpus();
  EXPECT_TRUE(m.Take(0));
  EXPECT_FALSE(m.Take(0)) << "taken twice";
  EXPECT_TRUE(m.HeldByJob("MIG-a"));
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "train", true), -1);
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "train", false), 0);
  m.Give(0);
  EXPECT_FALSE(m.HeldByJob("MIG-a"));
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "train", true), 0);
}

TEST(MigInstances, ForeignUseKeepsAnInstanceFromBeingFreeUntilCleared) {
  MigInstances m = TwoGpus();
  m.SetForeign("MIG-a", 2'000'000'000, "pid 4242, user bob");
  EXPECT_EQ(m.ForeignOf("MIG-a"), "pid 4242, user bob");
  EXPECT_EQ(m.at(0).foreign_bytes, 2'000'000'000u);
  EXPECT_FALSE(m.at(0).Free());
  EXPECT_EQ(m.Find(Mig("1g.10gb"), "", true), 2);
  m.SetForeign("MIG-a", 5, "");
  EXPECT_EQ(m.ForeignOf("MIG-a"), "");
  EXPECT_EQ(m.at(0).foreign_bytes, 0u) << "nobody holds it, so no bytes either";
  EXPECT_TRUE(m.at(0).Free());
}

TEST(MigInstances, UnknownUuidsAreIgnored) {
  MigInstances m = TwoGpus();
  m.SetForeign("MIG-z", 1, "pid 1");
  EXPECT_EQ(m.ForeignOf("MIG-z"), "");
  EXPECT_FALSE(m.HeldByJob("MIG-z"));
  EXPECT_EQ(m.IndexOf("MIG-z"), -1);
  EXPECT_EQ(m.IndexOf("MIG-c"), 2);
}

}  // namespace
}  // namespace gpuslice::daemon
