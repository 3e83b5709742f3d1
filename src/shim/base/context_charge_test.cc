#include "shim/base/context_charge.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace gpuslice::shim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// One slice device and two process slots, in plain memory.
struct Slice {
  std::unique_ptr<slice::layout::DeviceEntry> device =
      std::make_unique<slice::layout::DeviceEntry>();
  std::unique_ptr<slice::layout::ProcessSlot> a = std::make_unique<slice::layout::ProcessSlot>();
  std::unique_ptr<slice::layout::ProcessSlot> b = std::make_unique<slice::layout::ProcessSlot>();
  uint64_t used() const { return device->used_bytes.load(); }
};

TEST(ContextCharge, AReservationStopsAtTheLimitLikeAnAllocation) {
  Slice s;
  const uint64_t limit = 1000 * kMiB;
  EXPECT_TRUE(TryReserveContext(*s.device, *s.a, 0, 300 * kMiB, limit));
  EXPECT_TRUE(TryReserveContext(*s.device, *s.b, 0, 300 * kMiB, limit));
  EXPECT_TRUE(TryReserveContext(*s.device, *s.a, 0, 300 * kMiB, limit));
  EXPECT_FALSE(TryReserveContext(*s.device, *s.b, 0, 300 * kMiB, limit));
  EXPECT_EQ(s.used(), 900 * kMiB);
  EXPECT_EQ(s.a->used_bytes[0].load(), 600 * kMiB);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 600 * kMiB) << "a reservation is driver memory";
  EXPECT_EQ(s.b->overhead_bytes[0].load(), 300 * kMiB) << "a refusal changes nothing";
  EXPECT_EQ(s.device->peak_bytes.load(), 900 * kMiB);
}

TEST(ContextCharge, SettlingReturnsWhatTheContextDidNotTakeAndForcesWhatItTookBeyond) {
  Slice s;
  const uint64_t limit = 1000 * kMiB;
  ASSERT_TRUE(TryReserveContext(*s.device, *s.a, 0, 300 * kMiB, limit));
  SettleContext(*s.device, *s.a, 0, 300 * kMiB, 200 * kMiB);
  EXPECT_EQ(s.used(), 200 * kMiB);
  EXPECT_EQ(s.a->used_bytes[0].load(), 200 * kMiB);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 200 * kMiB);
  ASSERT_TRUE(TryReserveContext(*s.device, *s.a, 0, 700 * kMiB, limit));
  // The driver took more than reserved: already taken, so counted whatever
  // the limit (the caller then undoes the context).
  SettleContext(*s.device, *s.a, 0, 700 * kMiB, 900 * kMiB);
  EXPECT_EQ(s.used(), 1100 * kMiB);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 1100 * kMiB);
  ReturnContext(*s.device, *s.a, 0, 900 * kMiB);
  ReturnContext(*s.device, *s.a, 0, 200 * kMiB);
  EXPECT_EQ(s.used(), 0u);
  EXPECT_EQ(s.a->used_bytes[0].load(), 0u);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 0u);
}

TEST(ContextCharge, TheLearnersHoldTakesAllTheRoomLeftAndNothingElseFitsBesideIt) {
  Slice s;
  const uint64_t limit = 1000 * kMiB;
  ASSERT_TRUE(
      slice::TryCharge(*s.device, *s.b, 0, 100 * kMiB, limit));  // Another process's allocation.
  EXPECT_EQ(ReserveHeadroom(*s.device, *s.a, 0, limit), 900 * kMiB);
  EXPECT_EQ(s.used(), limit);
  EXPECT_FALSE(slice::TryCharge(*s.device, *s.b, 0, 1, limit));
  EXPECT_FALSE(TryReserveContext(*s.device, *s.b, 0, 1, limit));
  EXPECT_EQ(s.device->peak_bytes.load(), 100 * kMiB) << "the hold is not memory anyone used";
  SettleContext(*s.device, *s.a, 0, 900 * kMiB, 300 * kMiB);  // What NVML measured.
  EXPECT_EQ(s.used(), 400 * kMiB);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 300 * kMiB);
  EXPECT_TRUE(slice::TryCharge(*s.device, *s.b, 0, 600 * kMiB, limit));
}

TEST(ContextCharge, AFullSliceLeavesTheLearnerNoRoomToHold) {
  Slice s;
  ASSERT_TRUE(slice::TryCharge(*s.device, *s.b, 0, 1000 * kMiB, 1000 * kMiB));
  EXPECT_EQ(ReserveHeadroom(*s.device, *s.a, 0, 1000 * kMiB), 0u);
  // A limit lowered below what is used: still nothing, never a wrap-around.
  EXPECT_EQ(ReserveHeadroom(*s.device, *s.a, 0, 500 * kMiB), 0u);
  EXPECT_EQ(s.used(), 1000 * kMiB);
  EXPECT_EQ(s.a->used_bytes[0].load(), 0u);
}

// The property the race test of tests/shim checks end to end: contexts
// reserved from many threads at once never add up to more than the limit,
// whatever the interleaving, and exactly as many fit as the limit holds.
TEST(ContextCharge, RacingReservationsNeverAddUpToMoreThanTheLimit) {
  for (int round = 0; round < 200; ++round) {
    Slice s;
    const uint64_t limit = 1000 * kMiB;
    std::atomic<int> granted{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        slice::layout::ProcessSlot& slot = t % 2 == 0 ? *s.a : *s.b;
        while (!go.load()) {
        }
        if (TryReserveContext(*s.device, slot, 0, 300 * kMiB, limit)) {
          ++granted;
          // An allocation in the context beside the others' reservations.
          (void)slice::TryCharge(*s.device, slot, 0, 50 * kMiB, limit);
        }
      });
    }
    go = true;
    for (auto& t : threads) t.join();
    EXPECT_EQ(granted.load(), 3) << "round " << round;
    EXPECT_LE(s.device->peak_bytes.load(), limit) << "round " << round;
    EXPECT_EQ(s.used(), s.a->used_bytes[0].load() + s.b->used_bytes[0].load());
  }
}

TEST(ContextCharge, DriverMemoryIsWhatNvmlShowsBeyondTheAllocationsPlusWhatItCannotShow) {
  const struct {
    uint64_t nvml, charged, overhead, unseen, want;
  } kCases[] = {
      {300, 0, 0, 0, 300},        // A context, nothing else.
      {364, 64, 0, 0, 300},       // ... and an allocation of 64.
      {364, 364, 300, 0, 300},    // Already learnt: unchanged.
      {0, 300, 300, 300, 300},    // A reservation under way: kept.
      {300, 600, 600, 300, 600},  // One context live, one being created.
      {0, 64, 0, 0, 0},           // NVML behind an allocation: never negative.
      {0, 300, 300, 0, 0},        // The context is gone.
  };
  for (const auto& k : kCases) {
    EXPECT_EQ(DriverMemoryTarget(k.nvml, k.charged, k.overhead, k.unseen), k.want)
        << k.nvml << " " << k.charged << " " << k.overhead << " " << k.unseen;
  }
}

TEST(ContextCharge, SetDriverMemoryMovesTheOverheadBothWays) {
  Slice s;
  ASSERT_TRUE(slice::TryCharge(*s.device, *s.a, 0, 64, 1000));
  SetDriverMemory(*s.device, *s.a, 0, 300);
  EXPECT_EQ(s.used(), 364u);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 300u);
  SetDriverMemory(*s.device, *s.a, 0, 100);
  EXPECT_EQ(s.used(), 164u);
  EXPECT_EQ(s.a->used_bytes[0].load(), 164u);
  EXPECT_EQ(s.a->overhead_bytes[0].load(), 100u);
}

TEST(ContextLearning, OnlyOneClaimantLearnsAndTheOthersSeeItsSize) {
  Slice s;
  uint64_t size = 0;
  EXPECT_FALSE(LearntContextSize(*s.device, &size));
  const uint64_t first = LearnerWord(100, 0), second = LearnerWord(200, 1);
  EXPECT_TRUE(ClaimLearning(*s.device, first));
  EXPECT_FALSE(ClaimLearning(*s.device, second));
  EXPECT_TRUE(IsLearning(s.device->context_learner.load()));
  EXPECT_FALSE(LearntContextSize(*s.device, &size));
  PublishContextSize(*s.device, first, 300 * kMiB);
  ASSERT_TRUE(LearntContextSize(*s.device, &size));
  EXPECT_EQ(size, 300 * kMiB);
  EXPECT_FALSE(IsLearning(s.device->context_learner.load()));
  EXPECT_FALSE(ClaimLearning(*s.device, second)) << "learnt once, for every process";
}

TEST(ContextLearning, AContextOfZeroBytesIsLearntToo) {
  Slice s;
  const uint64_t word = LearnerWord(100, 0);
  ASSERT_TRUE(ClaimLearning(*s.device, word));
  PublishContextSize(*s.device, word, 0);
  uint64_t size = 1;
  ASSERT_TRUE(LearntContextSize(*s.device, &size));
  EXPECT_EQ(size, 0u);
}

TEST(ContextLearning, AnAbandonedClaimLetsTheNextCreatorLearn) {
  Slice s;
  const uint64_t first = LearnerWord(100, 0), second = LearnerWord(200, 1);
  ASSERT_TRUE(ClaimLearning(*s.device, first));
  AbandonLearning(*s.device, second);  // Not its claim: nothing happens.
  EXPECT_FALSE(ClaimLearning(*s.device, second));
  AbandonLearning(*s.device, first);
  EXPECT_TRUE(ClaimLearning(*s.device, second));
}

TEST(ContextLearning, ASizeCachedByAnOlderShimCountsAsLearntAndIsKept) {
  Slice s;
  s.device->context_bytes.store(256 * kMiB);  // No learner word: an older shim's cache.
  uint64_t size = 0;
  ASSERT_TRUE(LearntContextSize(*s.device, &size));
  EXPECT_EQ(size, 256 * kMiB);
  // A learner that raced with it does not overwrite it: the first wins.
  const uint64_t word = LearnerWord(100, 0);
  ASSERT_TRUE(ClaimLearning(*s.device, word));
  PublishContextSize(*s.device, word, 300 * kMiB);
  ASSERT_TRUE(LearntContextSize(*s.device, &size));
  EXPECT_EQ(size, 256 * kMiB);
}

TEST(ContextLearning, TheLearnerWordNamesThePidAndTheSlot) {
  for (const auto& [pid, slot] : {std::pair<int32_t, uint32_t>{1, 0}, {4194304, 511}, {77, 3}}) {
    const uint64_t word = LearnerWord(pid, slot);
    EXPECT_TRUE(IsLearning(word));
    EXPECT_EQ(LearnerPid(word), pid);
    EXPECT_EQ(LearnerSlot(word), slot);
  }
  EXPECT_FALSE(IsLearning(0));
  EXPECT_FALSE(IsLearning(kContextLearnt));
}

TEST(ContextLedger, ADestroyReturnsExactlyWhatTheCreationWasCharged) {
  auto ledger = std::make_unique<ContextLedger>();
  EXPECT_TRUE(ledger->AddCreated(0x1000, 0, 300 * kMiB));
  EXPECT_TRUE(ledger->AddCreated(0x2000, 1, 0));
  int dev = -1;
  uint64_t bytes = 1;
  EXPECT_TRUE(ledger->TakeCreated(0x2000, &dev, &bytes));
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(bytes, 0u);
  EXPECT_FALSE(ledger->TakeCreated(0x2000, &dev, &bytes)) << "taken once";
  EXPECT_FALSE(ledger->TakeCreated(0x3000, &dev, &bytes)) << "never charged";
  EXPECT_TRUE(ledger->TakeCreated(0x1000, &dev, &bytes));
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(bytes, 300 * kMiB);
}

TEST(ContextLedger, IsFullAtItsCapacityAndHasRoomAgainAfterADestroy) {
  auto ledger = std::make_unique<ContextLedger>();
  for (int i = 0; i < ContextLedger::kMaxCreated; ++i) {
    ASSERT_TRUE(ledger->AddCreated(uint64_t(i) + 1, 0, 1)) << i;
  }
  EXPECT_FALSE(ledger->HasRoomForCreated());
  EXPECT_FALSE(ledger->AddCreated(0xffff, 0, 1));
  int dev;
  uint64_t bytes;
  ASSERT_TRUE(ledger->TakeCreated(7, &dev, &bytes));
  EXPECT_TRUE(ledger->HasRoomForCreated());
}

TEST(ContextLedger, KnowsWhichDevicesHoldAContextAndWhatIsPending) {
  auto ledger = std::make_unique<ContextLedger>();
  EXPECT_FALSE(ledger->HoldsContextOn(0));
  ledger->primary(2) = ContextLedger::Primary{0, 1, 0};  // A context of 0 bytes still counts.
  EXPECT_TRUE(ledger->HoldsContextOn(0));
  EXPECT_FALSE(ledger->HoldsContextOn(1));
  ASSERT_TRUE(ledger->AddCreated(0x1000, 1, 300));
  EXPECT_TRUE(ledger->HoldsContextOn(1));
  ledger->AddPending(1, 300);
  ledger->AddPending(1, 200);
  ledger->SubPending(1, 300);
  EXPECT_EQ(ledger->pending(1), 200u);
  ledger->SubPending(1, 500);
  EXPECT_EQ(ledger->pending(1), 0u) << "saturates";
  ledger->Clear();
  EXPECT_FALSE(ledger->HoldsContextOn(0));
  EXPECT_FALSE(ledger->HoldsContextOn(1));
}

}  // namespace
}  // namespace gpuslice::shim
