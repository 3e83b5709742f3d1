// Moving a job to another GPU (service_move.cc) over a fake driver: `move`
// of a running and of a suspended job, what is refused before anything is
// suspended, a resume that finds its own GPU full and goes elsewhere, a
// restore that fails on the new GPU, and a move cut short by a restart.

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "daemon/jobs/service_suspend_fixture.h"

namespace gpuslice::daemon {
namespace {

// Three GPUs: two H100s and an A100 (another model: never a move target).
InventorySnapshot TwoH100sAndAnA100() {
  InventorySnapshot s = SimulatedGpus(3);
  s.gpus[2].model = "A100";
  return s;
}

class MoveTest : public SuspendTest {
 protected:
  MoveTest() : SuspendTest(TwoH100sAndAnA100()) {}
  std::string GpuOf(uint64_t id) { return Get(id).job.allocation.gpu_uuids.at(0); }
  static std::string OtherH100(const std::string& uuid) {
    return uuid == "GPU-0" ? "GPU-1" : "GPU-0";
  }
  // Suspends job `id` and waits for it.
  void SuspendNow(uint64_t id) {
    ASSERT_TRUE(service_->live().Suspend(TestCaller(kUser), id).ok());
    Settle(id);
    ASSERT_EQ(State(id), JobState::kSuspended);
  }
};

TEST_F(MoveTest, ARunningJobIsSuspendedAndResumedOnTheGpuItNames) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  ASSERT_NE(from, "GPU-2");
  const std::string to = OtherH100(from);
  ASSERT_TRUE(service_->live().Move(TestCaller(kUser), a, to).ok());
  EXPECT_TRUE(HasFlag(a, "suspending"));
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(GpuOf(a), to);
  EXPECT_EQ(Get(a).job.allocation.gpu_indices, std::vector<uint32_t>({to == "GPU-0" ? 0u : 1u}));
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kRunning);
  // The driver restored it onto the new GPU, and its slice was renamed
  // there (the processes' compute gates follow the slice's limits page).
  ASSERT_FALSE(checkpointer_->remaps.empty());
  ASSERT_EQ(checkpointer_->remaps.back().size(), 1u);
  EXPECT_EQ(checkpointer_->remaps.back()[0].from_uuid, from);
  EXPECT_EQ(checkpointer_->remaps.back()[0].to_uuid, to);
  ASSERT_EQ(regions_.moves.size(), 1u);
  EXPECT_EQ(regions_.moves[0].second,
            (std::vector<std::pair<std::string, std::string>>{{from, to}}));
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({to}));
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 60 * kGiB);
  EXPECT_FALSE(Limits(a).launches_paused);
  EXPECT_TRUE(HasEvent(a, "suspended"));
  EXPECT_TRUE(HasEvent(a, "resumed"));
  EXPECT_TRUE(HasEvent(a, "moved"));
  EXPECT_TRUE(Get(a).checkpoint_error.empty());
  // Its old GPU is free: two jobs that need most of a GPU start beside it.
  auto b = Submit("60GiB"), c = Submit("60GiB");
  ASSERT_TRUE(b.ok() && c.ok());
  service_->Tick();
  EXPECT_EQ(State(b->job.id), JobState::kRunning);
  EXPECT_EQ(State(c->job.id), JobState::kRunning);
}

TEST_F(MoveTest, ASuspendedJobMovesByResumingOnTheGpuItNames) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  SuspendNow(a);
  ASSERT_TRUE(service_->live().Move(TestCaller(kUser), a, OtherH100(from)).ok());
  EXPECT_TRUE(HasFlag(a, "resuming"));
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(GpuOf(a), OtherH100(from));
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({OtherH100(from)}));
}

TEST_F(MoveTest, WhatCannotMoveIsRefusedBeforeAnythingIsSuspended) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  auto code = [&](uint32_t uid, const std::string& gpu) {
    return service_->live().Move(TestCaller(uid), a, gpu).code();
  };
  EXPECT_EQ(code(kUser, "GPU-9"), core::StatusCode::kNotFound);
  EXPECT_EQ(code(kUser, from), core::StatusCode::kFailedPrecondition);     // Already there.
  EXPECT_EQ(code(kUser, "GPU-2"), core::StatusCode::kFailedPrecondition);  // Another model.
  EXPECT_EQ(code(1001, OtherH100(from)), core::StatusCode::kPermissionDenied);
  // The target has no room for its 60 GiB now (nor has the A100).
  auto b = Submit("60GiB"), d = Submit("60GiB");
  ASSERT_TRUE(b.ok() && d.ok());
  service_->Tick();
  ASSERT_EQ(State(b->job.id), JobState::kRunning);
  ASSERT_EQ(State(d->job.id), JobState::kRunning);
  core::Status full = service_->live().Move(TestCaller(kUser), a, OtherH100(from));
  EXPECT_EQ(full.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(full.message().find("cannot move to " + OtherH100(from)), std::string::npos)
      << full.message();
  EXPECT_TRUE(checkpointer_->Calls().empty());
  EXPECT_EQ(State(a), JobState::kRunning);
  // A queued job holds no GPU to move from.
  auto c = Submit("60GiB");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(service_->live().Move(TestCaller(kUser), c->job.id, from).code(),
            core::StatusCode::kFailedPrecondition);
}

TEST_F(MoveTest, AResumeWhoseOwnGpuIsTakenGoesToAnotherOfItsModel) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  SuspendNow(a);
  // Three jobs fill the three GPUs; then the one on the other H100 ends.
  std::vector<uint64_t> fill;
  for (int i = 0; i < 3; ++i) {
    auto v = Submit("60GiB");
    ASSERT_TRUE(v.ok());
    fill.push_back(v->job.id);
  }
  service_->Tick();
  for (uint64_t id : fill) ASSERT_EQ(State(id), JobState::kRunning);
  core::Status none = service_->live().Resume(TestCaller(kUser), a);
  EXPECT_EQ(none.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("nor does any other GPU of its model have room"), std::string::npos)
      << none.message();
  uint64_t elsewhere = 0;
  for (uint64_t id : fill) {
    if (GpuOf(id) == OtherH100(from)) elsewhere = id;
  }
  ASSERT_NE(elsewhere, 0u);
  ASSERT_TRUE(service_->Cancel(TestCaller(kUser), elsewhere).ok());
  EndProcesses(elsewhere);
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(GpuOf(a), OtherH100(from));
  EXPECT_TRUE(HasEvent(a, "moved"));
}

// The placement core's proposal: three small jobs spread over the three
// GPUs leave none idle for a whole-GPU job; the waiting job says which move
// would let it start, and that move does.
TEST_F(MoveTest, TheJobFirstInLineSaysWhichMoveWouldLetItStart) {
  options_.policy = core::Policy::kSpread;
  options_.rules.defragment = DefragMode::kSuggest;  // It only says (auto makes the move).
  Restart();
  std::vector<uint64_t> small;
  for (int i = 0; i < 3; ++i) {
    auto v = Submit("20GiB");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    small.push_back(v->job.id);
    regions_.pids[v->job.region_path] = {static_cast<int32_t>(kCuda + 10 + i)};
    procs_.owners[kCuda + 10 + i] = {kUser, kUser, "u1000", {}};
    checkpointer_->Set(kCuda + 10 + i, GpuProcessState::kRunning);
  }
  std::set<std::string> used;
  for (uint64_t id : small) used.insert(GpuOf(id));
  ASSERT_EQ(used.size(), 3u) << "spread puts one on each GPU";
  SubmitSpec whole;
  whole.fields.gpus = "1";
  whole.argv = {"train"};
  whole.cwd = "/home/u";
  auto head = service_->intake().Submit(TestCaller(kUser), whole);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  service_->Tick();
  ASSERT_EQ(State(head->job.id), JobState::kQueued);
  const std::string why = Get(head->job.id).waiting_for;
  const std::string marker = "a move would let it start: gpuslice move ";
  const size_t at = why.find(marker);
  ASSERT_NE(at, std::string::npos) << why;
  std::istringstream hint(why.substr(at + marker.size()));
  uint64_t mover = 0;
  std::string flag, gpu;
  hint >> mover >> flag >> gpu;
  ASSERT_EQ(flag, "--gpu");
  ASSERT_TRUE(service_->live().Move(TestCaller(kUser), mover, gpu).ok()) << why;
  Settle(mover);
  EXPECT_EQ(GpuOf(mover), gpu);
  service_->Tick();
  EXPECT_EQ(State(head->job.id), JobState::kRunning) << Get(head->job.id).waiting_for;
}

TEST_F(MoveTest, ARestoreThatFailsOnTheNewGpuLeavesItSuspendedWhereItWas) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  checkpointer_->Fail("restore", kCuda, core::InternalError("CUDA_ERROR_OUT_OF_MEMORY"));
  ASSERT_TRUE(service_->live().Move(TestCaller(kUser), a, OtherH100(from)).ok());
  Settle(a);
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(GpuOf(a), from);
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({from}));  // Renamed back.
  ASSERT_EQ(regions_.moves.size(), 2u);
  EXPECT_NE(Get(a).checkpoint_error.find("resume failed"), std::string::npos);
  EXPECT_EQ(Limits(a).memory_bytes_per_device, 0u);  // Closed again.
  // No GPU is held for it: three jobs that need most of a GPU start.
  for (int i = 0; i < 3; ++i) {
    auto v = Submit("60GiB");
    ASSERT_TRUE(v.ok());
    service_->Tick();
    EXPECT_EQ(State(v->job.id), JobState::kRunning);
  }
}

TEST_F(MoveTest, ARestartAfterTheSliceMovedButBeforeTheRestoreNamesTheOldGpuAgain) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  SuspendNow(a);
  // The daemon died between renaming the slice and restoring the process.
  const std::string path = Get(a).job.region_path;
  ASSERT_TRUE(regions_.Move(path, {{from, OtherH100(from)}}, Limits(a)).ok());
  Restart();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({from}));
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);
}

TEST_F(MoveTest, ARestartAfterTheRestoreKeepsTheNewGpuAndTheNextResumeMovesFromThere) {
  uint64_t a = StartJob();
  const std::string from = GpuOf(a);
  SuspendNow(a);
  // The daemon died after the process was restored (locked) on the new GPU.
  const std::string path = Get(a).job.region_path;
  ASSERT_TRUE(regions_.Move(path, {{from, OtherH100(from)}}, Limits(a)).ok());
  checkpointer_->Set(kCuda, GpuProcessState::kLocked);
  Restart();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({OtherH100(from)}));
  // Resumed on its own (ledger) GPU: the driver is told to move it back.
  checkpointer_->remaps.clear();
  ASSERT_TRUE(service_->live().Resume(TestCaller(kUser), a).ok());
  Settle(a);
  EXPECT_EQ(State(a), JobState::kRunning);
  EXPECT_EQ(GpuOf(a), from);
  ASSERT_EQ(checkpointer_->remaps.size(), 1u);
  ASSERT_EQ(checkpointer_->remaps[0].size(), 1u);
  EXPECT_EQ(checkpointer_->remaps[0][0].from_uuid, OtherH100(from));
  EXPECT_EQ(checkpointer_->remaps[0][0].to_uuid, from);
  EXPECT_EQ(Limits(a).uuids, std::vector<std::string>({from}));
}

TEST_F(MoveTest, ARestartAfterTheUnlockSuspendsTheProcessAgainRatherThanEndingIt) {
  uint64_t a = StartJob();
  SuspendNow(a);
  checkpointer_->Set(kCuda, GpuProcessState::kRunning);  // Unlocked; the daemon died.
  Restart();
  EXPECT_EQ(State(a), JobState::kSuspended);
  EXPECT_EQ(checkpointer_->Get(kCuda), GpuProcessState::kCheckpointed);
}

}  // namespace
}  // namespace gpuslice::daemon
