#include "daemon/quotas/quota_keeper.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::Principal;
using core::PrincipalKind;
using core::Quota;

constexpr uint64_t kGiB = 1ull << 30;

// A job table as the keeper sees it: every job by id, the running ones, where
// the pass placed a job, which jobs can give capacity back, and each user's
// groups (with how often they were asked).
struct Table {
  std::map<uint64_t, Job> jobs;
  std::set<uint64_t> running;
  std::map<uint64_t, core::Allocation> placed;
  std::set<uint64_t> borrowable;
  std::map<std::string, std::vector<std::string>> groups;
  int group_lookups = 0;

  QuotaKeeper::Jobs Callbacks() {
    return QuotaKeeper::Jobs{
        .for_each_charged =
            [this](const std::function<void(const Job&)>& visit) {
              for (uint64_t id : running) visit(jobs.at(id));
            },
        .job = [this](uint64_t id) -> const Job& { return jobs.at(id); },
        .placed = [this](uint64_t id) -> std::optional<core::Allocation> {
          auto it = placed.find(id);
          if (it == placed.end()) return std::nullopt;
          return it->second;
        },
        .borrowable = [this](const Job& job) { return borrowable.count(job.id) > 0; },
        .groups_of =
            [this](const std::string& user, uint32_t) {
              ++group_lookups;
              return groups[user];
            },
    };
  }

  // A fraction of one GPU with `memory` bytes, of `user` (uid `uid`).
  Job& Add(uint64_t id, const std::string& user, uint32_t uid, uint64_t memory) {
    Job& job = jobs[id];
    job.id = id;
    job.user = user;
    job.uid = uid;
    job.request.kind = core::RequestKind::kFraction;
    job.request.memory_bytes = memory;
    return job;
  }
  // The same, running since `started_ms` on GPU 0.
  Job& Run(uint64_t id, const std::string& user, uint32_t uid, uint64_t memory,
           int64_t started_ms = 0) {
    Job& job = Add(id, user, uid, memory);
    job.allocation.gpu_indices = {0};
    job.allocation.memory_bytes_per_gpu = memory;
    job.started_ms = started_ms;
    running.insert(id);
    return job;
  }
};

Quota MemoryQuota(uint64_t bytes) {
  Quota q;
  q.memory_bytes = bytes;
  return q;
}

const Principal kAlice{PrincipalKind::kUser, "alice"};
const Principal kMl{PrincipalKind::kGroup, "ml"};

TEST(QuotaKeeper, WithoutQuotasNothingIsChargedAndTheQueueIsNotHeld) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  t.Run(1, "alice", 1000, 8 * kGiB);
  EXPECT_TRUE(keeper.RunningUsage().empty());
  core::PlanOptions opt;
  keeper.HoldForQuotas(&opt);
  EXPECT_FALSE(opt.held);
  EXPECT_FALSE(opt.started);
  EXPECT_TRUE(keeper.CheckAtSubmit(t.Add(2, "alice", 1000, 80 * kGiB)).ok());
}

TEST(QuotaKeeper, ARunningJobIsChargedToItsUserAndItsGroupsButNotWhenExcepted) {
  Table t;
  t.groups["alice"] = {"ml"};
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.Set(kAlice, MemoryQuota(20 * kGiB));
  keeper.Set(kMl, MemoryQuota(30 * kGiB));
  t.Run(1, "alice", 1000, 8 * kGiB);
  core::QuotaUsage usage = keeper.RunningUsage();
  EXPECT_EQ(usage[kAlice].memory_bytes, 8 * kGiB);
  EXPECT_EQ(usage[kMl].memory_bytes, 8 * kGiB);
  EXPECT_EQ(usage[kMl].jobs, 1u);
  EXPECT_TRUE(keeper.RunningUsage(/*except_id=*/1).empty());
  ASSERT_EQ(keeper.RunningCharges().size(), 1u);
  EXPECT_EQ(keeper.RunningCharges()[0].owner.groups, std::vector<std::string>{"ml"});
}

TEST(QuotaKeeper, AWholeGpuIsChargedTheSmallestGpusMemory) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.NoteGpuMemory(80 * kGiB);
  keeper.NoteGpuMemory(40 * kGiB);
  keeper.NoteGpuMemory(80 * kGiB);
  EXPECT_EQ(keeper.whole_gpu_bytes(), 40 * kGiB);
  Job& job = t.Add(1, "alice", 1000, 0);
  job.request.kind = core::RequestKind::kWholeGpus;
  job.request.gpus_min = job.request.gpus_max = 2;
  core::QuotaCharge charge = keeper.RequestCharge(job);
  EXPECT_EQ(charge.gpus, 2u);
  EXPECT_EQ(charge.memory_bytes, 80 * kGiB);
}

TEST(QuotaKeeper, AUsersGroupsAreLookedUpOncePerUidAndAgainWhenItsNameChanges) {
  Table t;
  t.groups["alice"] = {"ml"};
  t.groups["carol"] = {"ops"};
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  EXPECT_EQ(keeper.OwnerOf(t.Add(1, "alice", 1000, kGiB)).groups, std::vector<std::string>{"ml"});
  keeper.OwnerOf(t.Add(2, "alice", 1000, kGiB));
  EXPECT_EQ(t.group_lookups, 1);
  // The uid now has another name (the account was renamed or reused).
  EXPECT_EQ(keeper.OwnerOf(t.Add(3, "carol", 1000, kGiB)).groups, std::vector<std::string>{"ops"});
  EXPECT_EQ(t.group_lookups, 2);
}

TEST(QuotaKeeper, ASubmissionNoQuotaCouldEverHoldIsRefusedNamingTheQuota) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.Set(kAlice, MemoryQuota(10 * kGiB));
  EXPECT_TRUE(keeper.CheckAtSubmit(t.Add(1, "alice", 1000, 8 * kGiB)).ok());
  core::Status s = keeper.CheckAtSubmit(t.Add(2, "alice", 1000, 16 * kGiB));
  EXPECT_EQ(s.code(), core::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("user alice"), std::string::npos) << s.message();
  // Not while alice's running jobs fill it: that one waits in the queue.
  t.Run(3, "alice", 1000, 10 * kGiB);
  EXPECT_TRUE(keeper.CheckAtSubmit(t.jobs.at(1)).ok());
}

TEST(QuotaKeeper, WithBorrowingAJobBeyondItsGroupsQuotaIsRefusedOnlyWhenItCannotGiveItBack) {
  Table t;
  t.groups["alice"] = {"ml"};
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/true);
  keeper.Set(kMl, MemoryQuota(10 * kGiB));
  core::Status s = keeper.CheckAtSubmit(t.Add(1, "alice", 1000, 16 * kGiB));
  EXPECT_EQ(s.code(), core::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("--restartable"), std::string::npos) << s.message();
  t.borrowable.insert(2);
  EXPECT_TRUE(keeper.CheckAtSubmit(t.Add(2, "alice", 1000, 16 * kGiB)).ok());
}

TEST(QuotaKeeper, AQueuedJobOverItsQuotaIsHeldAndItsWaitIsToldOncePerReason) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.Set(kAlice, MemoryQuota(10 * kGiB));
  t.Run(1, "alice", 1000, 8 * kGiB);
  t.Add(2, "alice", 1000, 4 * kGiB);
  std::vector<std::pair<uint64_t, std::string>> told;
  auto pass = [&] {
    core::PlanOptions opt;
    keeper.HoldForQuotas(&opt);
    const bool held = opt.held && opt.held(2);
    keeper.RecordWaits(
        [&](uint64_t id, const std::string& reason) { told.emplace_back(id, reason); });
    return held;
  };
  EXPECT_TRUE(pass());
  EXPECT_TRUE(pass());
  ASSERT_EQ(told.size(), 1u) << "once, not on every pass";
  EXPECT_EQ(told[0].first, 2u);
  ASSERT_NE(keeper.WaitReason(2), nullptr);
  EXPECT_EQ(*keeper.WaitReason(2), told[0].second);
  t.running.erase(1);  // Job 1 ended: job 2 fits now.
  EXPECT_FALSE(pass());
  EXPECT_EQ(keeper.WaitReason(2), nullptr);
  EXPECT_EQ(told.size(), 1u);
}

TEST(QuotaKeeper, AJobStartedInAPassCountsAgainstTheQuotaForTheJobsAfterIt) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.Set(kAlice, MemoryQuota(10 * kGiB));
  t.Add(1, "alice", 1000, 6 * kGiB);
  t.Add(2, "alice", 1000, 6 * kGiB);
  core::PlanOptions opt;
  keeper.HoldForQuotas(&opt);
  ASSERT_TRUE(opt.held && opt.started);
  EXPECT_FALSE(opt.held(1));
  opt.started(1);
  EXPECT_EQ(keeper.PassUsage().at(kAlice).memory_bytes, 6 * kGiB);
  EXPECT_TRUE(opt.held(2)) << "two jobs of one user do not both start on one quota's room";
}

TEST(QuotaKeeper, ABorrowerStartsOnIdleCapacityAndIsKnownAsOneFromThen) {
  Table t;
  t.groups["alice"] = {"ml"};
  t.groups["bob"] = {"ml"};
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/true);
  keeper.Set(kMl, MemoryQuota(10 * kGiB));
  t.Run(1, "alice", 1000, 8 * kGiB, /*started_ms=*/100);
  t.Add(2, "bob", 1001, 8 * kGiB);
  t.borrowable.insert(2);
  core::PlanOptions opt;
  keeper.HoldForQuotas(&opt);
  ASSERT_TRUE(opt.held && opt.opportunistic && opt.started);
  EXPECT_FALSE(opt.held(2));
  EXPECT_TRUE(opt.opportunistic(2));
  ASSERT_NE(keeper.BorrowReason(2), nullptr);
  EXPECT_NE(keeper.BorrowReason(2)->find("group ml"), std::string::npos) << *keeper.BorrowReason(2);
  t.placed[2].gpu_indices = {1};
  t.placed[2].memory_bytes_per_gpu = 8 * kGiB;
  opt.started(2);
  EXPECT_EQ(keeper.borrowers(), std::set<uint64_t>{2});
  EXPECT_EQ(keeper.PassUsage().at(kMl).memory_bytes, 8 * kGiB)
      << "a borrower is not charged to its group";

  // The next pass finds it among the running jobs: the later of the two.
  Job& two = t.jobs.at(2);
  two.allocation = t.placed[2];
  two.started_ms = 200;
  t.running.insert(2);
  core::PlanOptions next;
  keeper.HoldForQuotas(&next);
  EXPECT_EQ(keeper.borrowers(), std::set<uint64_t>{2});
  EXPECT_EQ(keeper.BorrowReason(2), nullptr) << "it no longer waits to borrow";
  EXPECT_TRUE(keeper.Guaranteed(t.jobs.at(1)));
  EXPECT_TRUE(keeper.WouldBorrow(two, /*now_ms=*/300));
  EXPECT_FALSE(keeper.WouldBorrow(t.jobs.at(1), /*now_ms=*/50)) << "started first, it fits";
}

TEST(QuotaKeeper, OnlyAJobWithAGroupQuotaIsGuaranteedCapacity) {
  Table t;
  t.groups["alice"] = {"ml"};
  t.groups["dave"] = {"web"};
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/true);
  keeper.Set(kMl, MemoryQuota(10 * kGiB));
  keeper.Set({PrincipalKind::kUser, "dave"}, MemoryQuota(10 * kGiB));
  EXPECT_TRUE(keeper.Guaranteed(t.Add(1, "alice", 1000, kGiB)));
  EXPECT_FALSE(keeper.Guaranteed(t.Add(2, "dave", 1002, kGiB))) << "a user quota is a ceiling";
}

TEST(QuotaKeeper, ARemovedQuotaNoLongerHoldsAnyone) {
  Table t;
  QuotaKeeper keeper(t.Callbacks(), /*borrowing=*/false);
  keeper.Set(kAlice, MemoryQuota(4 * kGiB));
  ASSERT_NE(keeper.Find(kAlice), nullptr);
  EXPECT_FALSE(keeper.CheckAtSubmit(t.Add(1, "alice", 1000, 8 * kGiB)).ok());
  EXPECT_TRUE(keeper.Remove(kAlice));
  EXPECT_FALSE(keeper.Remove(kAlice));
  EXPECT_TRUE(keeper.empty());
  EXPECT_TRUE(keeper.CheckAtSubmit(t.jobs.at(1)).ok());
}

// The admin's verbs: a keeper whose ledger is a real one in a temporary
// directory (null to play a degraded daemon), recording the events it tells
// of and the plans it asks for.
class QuotaVerbsTest : public ::testing::Test {
 protected:
  QuotaVerbsTest() {
    char tmpl[] = "/tmp/quota_verbs_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto opened = Ledger::Open(dir_ + "/ledger.db");
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (opened.ok()) ledger_ = std::move(*opened);
  }
  ~QuotaVerbsTest() override {
    keeper_.reset();
    ledger_.reset();
    std::filesystem::remove_all(dir_);
  }
  QuotaKeeper& Keeper() {
    keeper_ = std::make_unique<QuotaKeeper>(
        t_.Callbacks(), /*borrowing=*/false,
        QuotaKeeper::Records{
            .ledger = [this] { return degraded_ ? nullptr : ledger_.get(); },
            .degraded_reason = [] { return std::string("ledger write failed: disk full"); },
            .now_ms = [] { return int64_t{1000}; },
            .record_event =
                [this](std::string kind, std::string user, std::string message) {
                  events_.push_back(kind + " " + user + " " + message);
                },
            .schedule = [this] { ++plans_; },
        });
    return *keeper_;
  }
  static Caller Admin() {
    Caller c;
    c.user = "root";
    c.admin = true;
    return c;
  }
  static Caller User(uint32_t uid) {
    Caller c;
    c.uid = c.gid = uid;
    c.user = "u" + std::to_string(uid);
    return c;
  }
  size_t QuotasInLedger() {
    auto loaded = ledger_->LoadQuotas();
    EXPECT_TRUE(loaded.ok());
    return loaded.ok() ? loaded->size() : 0;
  }

  std::string dir_;
  std::unique_ptr<Ledger> ledger_;
  bool degraded_ = false;
  Table t_;
  std::unique_ptr<QuotaKeeper> keeper_;
  std::vector<std::string> events_;
  int plans_ = 0;
};

TEST_F(QuotaVerbsTest, OnlyAnAdminSetsAQuotaWhichIsRecordedToldOfAndPlannedWith) {
  QuotaKeeper& keeper = Keeper();
  EXPECT_EQ(keeper.SetQuota(User(1000), kAlice, MemoryQuota(kGiB)).code(),
            core::StatusCode::kPermissionDenied);
  EXPECT_EQ(keeper.Find(kAlice), nullptr);
  EXPECT_EQ(keeper.SetQuota(Admin(), kAlice, Quota{}).code(), core::StatusCode::kInvalidArgument)
      << "a quota without a limit";
  EXPECT_EQ(keeper.SetQuota(Admin(), {PrincipalKind::kUser, ""}, MemoryQuota(kGiB)).code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(events_.empty());
  EXPECT_EQ(plans_, 0);

  ASSERT_TRUE(keeper.SetQuota(Admin(), kAlice, MemoryQuota(kGiB)).ok());
  ASSERT_NE(keeper.Find(kAlice), nullptr);
  EXPECT_EQ(keeper.Find(kAlice)->memory_bytes, kGiB);
  EXPECT_EQ(QuotasInLedger(), 1u);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].rfind("quota_set root user alice: ", 0), 0u) << events_[0];
  EXPECT_EQ(plans_, 1) << "a new quota may hold queued jobs, or let them start";
}

TEST_F(QuotaVerbsTest, AQuotaIsNotChangedWhileTheLedgerIsUnavailable) {
  QuotaKeeper& keeper = Keeper();
  ASSERT_TRUE(keeper.SetQuota(Admin(), kAlice, MemoryQuota(kGiB)).ok());
  degraded_ = true;
  core::Status set = keeper.SetQuota(Admin(), kMl, MemoryQuota(kGiB));
  EXPECT_EQ(set.code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(set.message(),
            "daemon degraded (ledger write failed: disk full): cannot record a quota");
  EXPECT_EQ(keeper.Find(kMl), nullptr);
  EXPECT_EQ(keeper.RemoveQuota(Admin(), kAlice).code(), core::StatusCode::kUnavailable);
  EXPECT_NE(keeper.Find(kAlice), nullptr) << "not removed: the ledger would still hold it";
  EXPECT_EQ(plans_, 1);
}

TEST_F(QuotaVerbsTest, RemovingAQuotaNeedsAnAdminAndAQuotaThere) {
  QuotaKeeper& keeper = Keeper();
  ASSERT_TRUE(keeper.SetQuota(Admin(), kAlice, MemoryQuota(kGiB)).ok());
  EXPECT_EQ(keeper.RemoveQuota(User(1000), kAlice).code(), core::StatusCode::kPermissionDenied);
  EXPECT_EQ(keeper.RemoveQuota(Admin(), kMl).code(), core::StatusCode::kNotFound);
  EXPECT_NE(keeper.Find(kAlice), nullptr);

  ASSERT_TRUE(keeper.RemoveQuota(Admin(), kAlice).ok());
  EXPECT_EQ(keeper.Find(kAlice), nullptr);
  EXPECT_EQ(QuotasInLedger(), 0u);
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[1], "quota_removed root user alice");
  EXPECT_EQ(plans_, 2);
}

TEST_F(QuotaVerbsTest, QuotasListEachQuotaWithWhatItsRunningJobsHold) {
  t_.groups["alice"] = {"ml"};
  QuotaKeeper& keeper = Keeper();
  ASSERT_TRUE(keeper.SetQuota(Admin(), kAlice, MemoryQuota(8 * kGiB)).ok());
  ASSERT_TRUE(keeper.SetQuota(Admin(), kMl, MemoryQuota(16 * kGiB)).ok());
  keeper.NoteGpuMemory(40 * kGiB);
  t_.Run(1, "alice", 1000, 3 * kGiB);
  t_.Add(2, "alice", 1000, 5 * kGiB);  // Queued: holds nothing.

  std::map<Principal, QuotaView> seen;
  for (const QuotaView& q : keeper.Quotas()) seen[q.who] = q;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[kAlice].quota.memory_bytes, 8 * kGiB);
  EXPECT_EQ(seen[kAlice].in_use.memory_bytes, 3 * kGiB);
  EXPECT_EQ(seen[kMl].in_use.memory_bytes, 3 * kGiB) << "a group's quota holds its members' jobs";
}

}  // namespace
}  // namespace gpuslice::daemon
