#include "daemon/fairshare/fair_share_book.h"

#include <gtest/gtest.h>

#include <set>

namespace gpuslice::daemon {
namespace {

using core::Principal;
using core::PrincipalKind;

constexpr int64_t kHour = 3600 * 1000;

std::set<Principal> Active(std::initializer_list<const char*> users, const char* group) {
  std::set<Principal> out;
  for (const char* u : users) out.insert({PrincipalKind::kUser, u});
  out.insert({PrincipalKind::kGroup, group});
  return out;
}

TEST(FairShareBook, NothingIsChargedAndEveryFactorIsOneUntilItIsOpen) {
  FairShareBook book{core::FairShareConfig{}};
  EXPECT_FALSE(book.open());
  book.Charge("alice", "ml", 1.0, 0, kHour);
  book.Rank(Active({"alice", "bob"}, "ml"), kHour);
  EXPECT_FALSE(book.ranked());
  EXPECT_EQ(book.FactorOf("alice", "ml"), 1.0);
}

TEST(FairShareBook, TheHeavierUserGetsTheLowerFactor) {
  FairShareBook book{core::FairShareConfig{}};
  book.Open();
  book.Charge("alice", "ml", 4.0, 0, kHour);
  book.Charge("bob", "ml", 1.0, 0, kHour);
  book.Rank(Active({"alice", "bob"}, "ml"), kHour);
  ASSERT_TRUE(book.ranked());
  EXPECT_LT(book.FactorOf("alice", ""), book.FactorOf("bob", ""));
  EXPECT_LT(book.FactorOf("alice", "ml"), book.FactorOf("bob", "ml"));
}

TEST(FairShareBook, NoFactorsWhileFairShareIsOff) {
  core::FairShareConfig off;
  off.enabled = false;
  FairShareBook book{off};
  book.Open();
  book.Charge("alice", "ml", 4.0, 0, kHour);
  book.Rank(Active({"alice", "bob"}, "ml"), kHour);
  EXPECT_FALSE(book.ranked());
}

TEST(FairShareBook, EachChargeOfAJobStartsWhereItsLastOneEnded) {
  FairShareBook book{core::FairShareConfig{}};
  book.Open();
  EXPECT_EQ(book.AdvanceCharge(7, /*first_ms=*/100, 1000), 100);
  EXPECT_EQ(book.AdvanceCharge(7, 100, 2000), 1000);
  book.MarkCharged(8, 1500);
  EXPECT_EQ(book.AdvanceCharge(8, 0, 2000), 1500);
  book.ForgetEnded([](uint64_t id) { return id == 8; });
  EXPECT_EQ(book.AdvanceCharge(7, 2500, 3000), 2500) << "forgotten: starts afresh";
  EXPECT_EQ(book.AdvanceCharge(8, 0, 3000), 2000);
}

TEST(FairShareBook, ARankingIsDueAtMostOncePerIntervalUnlessForced) {
  FairShareBook book{core::FairShareConfig{}};
  EXPECT_TRUE(book.RankDue(10'000, false));
  EXPECT_FALSE(book.RankDue(10'000 + FairShareBook::kRankEveryMs - 1, false));
  EXPECT_TRUE(book.RankDue(10'001, true));
  EXPECT_TRUE(book.RankDue(10'001 + FairShareBook::kRankEveryMs, false));
}

}  // namespace
}  // namespace gpuslice::daemon
