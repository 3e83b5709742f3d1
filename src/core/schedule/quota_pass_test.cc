#include "core/schedule/quota_pass.h"

#include <gtest/gtest.h>

#include <map>

namespace gpuslice::core {
namespace {

const Principal kAlice{PrincipalKind::kUser, "alice"};
const Principal kTeamA{PrincipalKind::kGroup, "team-a"};
const Principal kTeamB{PrincipalKind::kGroup, "team-b"};

Quota Compute(uint32_t milli) {
  Quota q;
  q.compute_milli = milli;
  return q;
}

QuotaCharge Gpus(uint32_t n) {
  QuotaCharge c;
  c.gpus = n;
  c.compute_milli = 1000 * n;
  c.jobs = 1;
  return c;
}

// Queued jobs by id: owner, ask, whether they can give capacity back.
struct Queue {
  std::map<uint64_t, QuotaOwner> owners;
  std::map<uint64_t, QuotaCharge> asks;
  std::set<uint64_t> borrowable;

  void Add(uint64_t id, const QuotaOwner& owner, QuotaCharge ask, bool can_give_back) {
    owners[id] = owner;
    asks[id] = ask;
    if (can_give_back) borrowable.insert(id);
  }
  QuotaPass::Jobs Hooks() {
    QuotaPass::Jobs j;
    j.owner = [this](uint64_t id) { return owners.at(id); };
    j.ask = [this](uint64_t id) { return asks.at(id); };
    j.started_charge = [this](uint64_t id) { return asks.at(id); };
    j.borrowable = [this](uint64_t id) { return borrowable.count(id) > 0; };
    return j;
  }
};

const QuotaOwner kA{"alice", {"team-a"}};
const QuotaOwner kB{"bob", {"team-b"}};

TEST(QuotaPass, WithoutQuotasItSetsNoHooks) {
  QuotaBook book;
  Queue q;
  QuotaPass pass(book, /*borrowing=*/true, q.Hooks(), {});
  PlanOptions opt;
  pass.Attach(&opt);
  EXPECT_FALSE(opt.held);
  EXPECT_FALSE(opt.opportunistic);
  EXPECT_FALSE(opt.started);
}

TEST(QuotaPass, WithoutBorrowingAGroupQuotaIsACeilingCountingTheRunningJobs) {
  QuotaBook book;
  book.Set(kTeamA, Compute(2000));
  Queue q;
  q.Add(2, kA, Gpus(1), /*can_give_back=*/true);
  q.Add(3, kA, Gpus(1), true);
  QuotaPass pass(book, /*borrowing=*/false, q.Hooks(), {{1, kA, Gpus(1), 100}});
  PlanOptions opt;
  pass.Attach(&opt);
  EXPECT_FALSE(opt.held(2)) << "1 of 2 GPUs' worth is in use";
  opt.started(2);
  EXPECT_TRUE(opt.held(3)) << "job 2 took the rest";
  ASSERT_EQ(pass.held().count(3), 1u);
  EXPECT_NE(pass.held().at(3).find("team-a"), std::string::npos) << pass.held().at(3);
  EXPECT_TRUE(pass.borrowers().empty());
}

TEST(QuotaPass, WithBorrowingAJobBeyondItsGroupsQuotaStartsAsABorrowerIfItCanGiveItBack) {
  QuotaBook book;
  book.Set(kTeamA, Compute(1000));
  Queue q;
  q.Add(2, kA, Gpus(1), /*can_give_back=*/true);
  q.Add(3, kA, Gpus(1), /*can_give_back=*/false);
  QuotaPass pass(book, /*borrowing=*/true, q.Hooks(), {{1, kA, Gpus(1), 100}});
  PlanOptions opt;
  pass.Attach(&opt);
  EXPECT_FALSE(opt.held(2));
  EXPECT_TRUE(opt.opportunistic(2));
  ASSERT_NE(pass.BorrowReason(2), nullptr);
  EXPECT_NE(pass.BorrowReason(2)->find("team-a"), std::string::npos) << *pass.BorrowReason(2);
  EXPECT_TRUE(opt.held(3)) << "it could not give the capacity back";
  EXPECT_NE(pass.held().at(3).find("give the capacity back"), std::string::npos);
  opt.started(2);
  EXPECT_EQ(pass.borrowers(), std::set<uint64_t>{2});
  EXPECT_EQ(pass.usage().at(kTeamA).compute_milli, 1000u)
      << "a borrower is not charged to its group";
}

TEST(QuotaPass, TheRunningJobsStartedLastAreTheBorrowers) {
  QuotaBook book;
  book.Set(kTeamA, Compute(2000));
  book.Set(kTeamB, Compute(2000));
  Queue q;
  QuotaPass pass(
      book, /*borrowing=*/true, q.Hooks(),
      {{1, kA, Gpus(1), 300}, {2, kA, Gpus(1), 100}, {3, kA, Gpus(1), 200}, {4, kB, Gpus(2), 150}});
  EXPECT_EQ(pass.borrowers(), std::set<uint64_t>{1}) << "team-a's third GPU, started last";
  EXPECT_EQ(pass.usage().at(kTeamA).compute_milli, 2000u);
  EXPECT_EQ(pass.usage().at(kTeamB).compute_milli, 2000u);
}

TEST(QuotaPass, AUserQuotaStaysACeilingWithBorrowing) {
  QuotaBook book;
  book.Set(kTeamA, Compute(1000));
  book.Set(kAlice, Compute(1000));
  Queue q;
  q.Add(2, kA, Gpus(1), /*can_give_back=*/true);
  QuotaPass pass(book, /*borrowing=*/true, q.Hooks(), {{1, kA, Gpus(1), 100}});
  PlanOptions opt;
  pass.Attach(&opt);
  EXPECT_TRUE(opt.held(2));
  EXPECT_FALSE(opt.opportunistic(2));
}

TEST(IsGuaranteed, OnlyAGroupQuotaOfTheOwnerGuarantees) {
  QuotaBook book;
  book.Set(kAlice, Compute(1000));
  EXPECT_FALSE(IsGuaranteed(book, kA)) << "a user quota is a ceiling, not a guarantee";
  book.Set(kTeamB, Compute(1000));
  EXPECT_FALSE(IsGuaranteed(book, kA));
  EXPECT_TRUE(IsGuaranteed(book, kB));
}

}  // namespace
}  // namespace gpuslice::core
