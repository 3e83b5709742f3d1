#include "daemon/requests/caller.h"

#include <gtest/gtest.h>

#include "daemon/requests/job_text.h"

namespace gpuslice::daemon {
namespace {

core::Job JobOf(uint32_t uid, const std::string& user) {
  core::Job job;
  job.id = 7;
  job.uid = uid;
  job.user = user;
  return job;
}

Caller CallerOf(uint32_t uid, bool admin = false, bool local = true) {
  Caller c;
  c.uid = uid;
  c.user = "u" + std::to_string(uid);
  c.admin = admin;
  c.local = local;
  return c;
}

TEST(CheckOwnerTest, TheOwnerCallingLocallyMayActOnItsJob) {
  EXPECT_TRUE(CheckOwner(CallerOf(1000), JobOf(1000, "alice")).ok());
}

TEST(CheckOwnerTest, AnAdminMayActOnAnyonesJob) {
  EXPECT_TRUE(CheckOwner(CallerOf(0, /*admin=*/true), JobOf(1000, "alice")).ok());
  EXPECT_TRUE(CheckOwner(CallerOf(5, /*admin=*/true, /*local=*/false), JobOf(1000, "alice")).ok());
}

TEST(CheckOwnerTest, AnotherUserIsRefusedWithTheOwnersName) {
  core::Status s = CheckOwner(CallerOf(1001), JobOf(1000, "alice"));
  EXPECT_EQ(s.code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("job 7 belongs to alice"), std::string::npos) << s.message();
}

TEST(CheckOwnerTest, TheSameUidOverTcpIsNotTheOwner) {
  // A uid claimed over TCP proves nothing: only the unix socket's peer
  // credentials make a caller a job's owner.
  EXPECT_FALSE(CheckOwner(CallerOf(1000, false, /*local=*/false), JobOf(1000, "alice")).ok());
}

TEST(CallerNameTest, NamesTheUserOrElseTheUid) {
  EXPECT_EQ(CallerName(CallerOf(1000)), "u1000");
  Caller nameless;
  nameless.uid = 4242;
  EXPECT_EQ(CallerName(nameless), "4242");
}

TEST(LabelsTextTest, LabelsReadAsSortedPairsOnOneLine) {
  EXPECT_EQ(LabelsText({{"pod", "infer-0"}, {"container", "server"}}),
            "container=server, pod=infer-0");
  EXPECT_EQ(LabelsText({}), "");
}

}  // namespace
}  // namespace gpuslice::daemon
