#include "daemon/config/access.h"

#include <gtest/gtest.h>

namespace gpuslice::daemon {
namespace {

AccessConfig Config(std::initializer_list<std::pair<const char*, const char*>> settings) {
  AccessConfig c;
  for (const auto& [k, v] : settings) {
    bool known = false;
    core::Status s = ApplyAccessValue(&c, k, v, &known);
    EXPECT_TRUE(s.ok()) << k << ": " << s.ToString();
    EXPECT_TRUE(known) << k;
  }
  return c;
}

// Without access rules any user could submit to any pool at --priority high.
TEST(Access, PoolsWithListsAreOnlyForTheirUsersAndGroups) {
  AccessConfig c = Config({{"pool_users.inference", "alice"}, {"pool_groups.inference", "ml"}});
  const auto normal = core::Priority::kNormal;
  EXPECT_TRUE(CheckAccess(c, "alice", 1000, {"staff"}, "inference", normal).ok());
  EXPECT_TRUE(CheckAccess(c, "bob", 1001, {"staff", "ml"}, "inference", normal).ok());
  core::Status no = CheckAccess(c, "carol", 1002, {"staff"}, "inference", normal);
  EXPECT_EQ(no.code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(no.message(),
            "pool 'inference' is only for users alice and members of ml; user carol is not one of "
            "them (docs/CONFIG.md, Access)");
  EXPECT_TRUE(CheckAccess(c, "carol", 1002, {"staff"}, "default", normal).ok()) << "open pool";
  EXPECT_TRUE(CheckAccess(c, "root", 0, {}, "inference", normal).ok()) << "root always may";
}

TEST(Access, PriorityIsCappedByTheHighestLimitOfTheUsersGroups) {
  AccessConfig c = Config({{"max_priority", "normal"}, {"max_priority.leads", "high"},
                           {"max_priority.guests", "low"}});
  EXPECT_TRUE(CheckAccess(c, "u", 1000, {"staff"}, "default", core::Priority::kNormal).ok());
  core::Status no = CheckAccess(c, "u", 1000, {"staff"}, "default", core::Priority::kHigh);
  EXPECT_EQ(no.code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(no.message(),
            "--priority high: user u may ask at most normal (the machine's limit; docs/CONFIG.md, "
            "Access)");
  EXPECT_TRUE(CheckAccess(c, "l", 1001, {"guests", "leads"}, "default", core::Priority::kHigh).ok());
  EXPECT_TRUE(CheckAccess(c, "root", 0, {}, "default", core::Priority::kHigh).ok());
  // By default everyone may ask high.
  EXPECT_TRUE(CheckAccess(AccessConfig{}, "u", 1000, {}, "default", core::Priority::kHigh).ok());
}

TEST(Access, BadSettingsNameTheKey) {
  AccessConfig c;
  bool known = false;
  EXPECT_NE(ApplyAccessValue(&c, "max_priority", "urgent", &known).message().find("max_priority"),
            std::string::npos);
  EXPECT_NE(ApplyAccessValue(&c, "pool_users.x", "a,,b", &known).message().find("pool_users.x"),
            std::string::npos);
  EXPECT_FALSE(ApplyAccessValue(&c, "pool_users.", "a", &known).ok());
  EXPECT_TRUE(ApplyAccessValue(&c, "watchdog", "off", &known).ok());
  EXPECT_FALSE(known);
}

}  // namespace
}  // namespace gpuslice::daemon
