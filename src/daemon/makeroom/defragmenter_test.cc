#include "daemon/makeroom/defragmenter.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/launch/checkpointer_fake.h"

namespace gpuslice::daemon {
namespace {

using core::Job;
using core::JobState;

// A job table and a placement core as the component sees them: the core
// proposes `proposals_`, each only if `movable` allows its job.
class DefragmenterTest : public ::testing::Test {
 protected:
  Defragmenter Make(Checkpointer* checkpointer) {
    return Defragmenter(
        Defragmenter::Jobs{
            .find = [this](uint64_t id) -> const Job* {
              auto it = jobs_.find(id);
              return it == jobs_.end() ? nullptr : &it->second;
            },
            .live = [this](uint64_t id) -> std::optional<LiveJob> {
              auto it = live_.find(id);
              if (it == live_.end()) return std::nullopt;
              return it->second;
            },
            .can_move = [this](const Job& job) -> core::Status {
              if (unmovable_.count(job.id)) return core::FailedPreconditionError("a container");
              return core::Status::Ok();
            },
            .has_cuda_processes = [this](const Job& job) { return !no_cuda_.count(job.id); },
            .plan =
                [this](uint64_t, uint32_t max_moves, const std::function<bool(uint64_t)>& movable) {
                  ++plans_;
                  std::vector<NodeCapacity::MoveHint> out;
                  for (const auto& m : proposals_) {
                    if (out.size() < max_moves && movable(m.job_id)) out.push_back(m);
                  }
                  return out;
                },
            .suspend = [this](uint64_t id, const SuspendToMakeRoom& why) -> core::Status {
              if (!suspend_result_.ok()) return suspend_result_;
              suspended_[id] = why;
              live_.at(id).checkpointing = true;
              return core::Status::Ok();
            },
            .record =
                [this](std::string kind, uint64_t id, std::string, std::string message) {
                  events_.push_back(kind + " " + std::to_string(id) + ": " + message);
                },
        },
        rules_, checkpointer, clock_);
  }

  // A running single-GPU job on GPU-0.
  Job& Run(uint64_t id) {
    Job& job = jobs_[id];
    job.id = id;
    job.user = "u";
    job.state = JobState::kRunning;
    job.request.kind = core::RequestKind::kFraction;
    job.allocation.gpu_uuids = {"GPU-0"};
    live_[id] = LiveJob{.job = &job};
    return job;
  }
  Job& Queue(uint64_t id) {
    Job& job = jobs_[id];
    job.id = id;
    job.user = "head";
    job.state = JobState::kQueued;
    job.request.kind = core::RequestKind::kWholeGpus;
    job.request.gpus_min = job.request.gpus_max = 1;
    return job;
  }
  // Job `id`'s move is over: it runs on its new GPU.
  void Moved(uint64_t id) { live_.at(id).checkpointing = false; }

  FakeClock clock_;
  FakeCheckpointer checkpointer_;
  PolicyConfig rules_;
  std::map<uint64_t, Job> jobs_;
  std::map<uint64_t, LiveJob> live_;
  std::set<uint64_t> unmovable_, no_cuda_;
  std::vector<NodeCapacity::MoveHint> proposals_;
  int plans_ = 0;
  core::Status suspend_result_ = core::Status::Ok();
  std::map<uint64_t, SuspendToMakeRoom> suspended_;
  std::vector<std::string> events_;
};

TEST_F(DefragmenterTest, AutoSuspendsEachJobToMoveAndWaitsForItsMoveToEnd) {
  rules_.defragment = DefragMode::kAuto;
  Run(1);
  Queue(2);
  proposals_ = {{1, "GPU-1"}};
  Defragmenter d = Make(&checkpointer_);
  EXPECT_TRUE(d.Defragment(2));
  ASSERT_EQ(suspended_.count(1), 1u);
  EXPECT_EQ(suspended_[1].move_to, "GPU-1");
  EXPECT_EQ(suspended_[1].defrag_for, 2u);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0], "defragmenting 2: moving job 1 to GPU-1");
  EXPECT_TRUE(d.moving());
  EXPECT_EQ(d.WaitingText(2), "; moving job(s) 1 to make room");
  // Nothing more is planned while the move is in flight...
  clock_.Advance(5000);
  EXPECT_FALSE(d.Defragment(2));
  EXPECT_EQ(plans_, 1);
  // ...and it is forgotten once its worker is done.
  Moved(1);
  proposals_.clear();
  EXPECT_FALSE(d.Defragment(2));
  EXPECT_FALSE(d.moving());
}

TEST_F(DefragmenterTest, SuggestOnlyNamesTheMovesInTheHeadsReason) {
  rules_.defragment = DefragMode::kSuggest;
  Run(1);
  Run(3);
  Queue(2);
  proposals_ = {{1, "GPU-1"}, {3, "GPU-2"}};
  Defragmenter d = Make(&checkpointer_);
  EXPECT_FALSE(d.Defragment(2));
  EXPECT_TRUE(suspended_.empty());
  EXPECT_EQ(d.WaitingText(2),
            "; moves would let it start: gpuslice move 1 --gpu GPU-1, then gpuslice move 3 --gpu "
            "GPU-2");
  EXPECT_EQ(d.WaitingText(4), "");  // Only the head it planned for.
}

TEST_F(DefragmenterTest, PlansForTheSameHeadAtMostOnceASecond) {
  rules_.defragment = DefragMode::kSuggest;
  Run(1);
  Queue(2);
  Defragmenter d = Make(&checkpointer_);
  d.Defragment(2);
  clock_.Advance(500);
  d.Defragment(2);
  EXPECT_EQ(plans_, 1);
  clock_.Advance(500);
  d.Defragment(2);
  EXPECT_EQ(plans_, 2);
}

TEST_F(DefragmenterTest, NothingWithoutTheDriversCheckpointApiOrWhenOff) {
  Run(1);
  Queue(2);
  proposals_ = {{1, "GPU-1"}};
  rules_.defragment = DefragMode::kAuto;
  EXPECT_FALSE(Make(nullptr).Defragment(2));
  checkpointer_.available = core::UnimplementedError("no driver");
  EXPECT_FALSE(Make(&checkpointer_).Defragment(2));
  checkpointer_.available = core::Status::Ok();
  rules_.defragment = DefragMode::kOff;
  EXPECT_FALSE(Make(&checkpointer_).Defragment(2));
  EXPECT_EQ(plans_, 0);
}

TEST_F(DefragmenterTest, OffersOnlyJobsThatCanMoveNow) {
  rules_.defragment = DefragMode::kAuto;
  Run(1).allocation.gpu_uuids = {"GPU-0", "GPU-1"};  // Two GPUs.
  Run(3).request.kind = core::RequestKind::kMig;
  Run(4).mode = core::JobMode::kExternal;
  Run(5);
  unmovable_ = {5};  // A container.
  Run(6);
  live_[6].ending = true;
  Run(7);
  live_[7].stopped = true;
  Run(8);
  no_cuda_ = {8};
  Run(9).state = JobState::kSuspended;
  Queue(2);
  for (uint64_t id : {1, 3, 4, 5, 6, 7, 8, 9}) proposals_.push_back({id, "GPU-2"});
  Defragmenter d = Make(&checkpointer_);
  EXPECT_FALSE(d.Defragment(2));
  EXPECT_EQ(plans_, 1);
  EXPECT_TRUE(suspended_.empty());
}

TEST_F(DefragmenterTest, AJobMovesAtMostMovesPerHour) {
  rules_.defragment = DefragMode::kAuto;
  rules_.defragment_moves_per_hour = 1;
  Run(1);
  Queue(2);
  proposals_ = {{1, "GPU-1"}};
  Defragmenter d = Make(&checkpointer_);
  EXPECT_TRUE(d.Defragment(2));
  Moved(1);
  clock_.Advance(30 * 60 * 1000);
  EXPECT_FALSE(d.Defragment(2));  // Moved once within the hour.
  clock_.Advance(30 * 60 * 1000);
  EXPECT_TRUE(d.Defragment(2));
}

TEST_F(DefragmenterTest, AJobWhoseMoveFailedIsNotPlannedForAnHour) {
  rules_.defragment = DefragMode::kAuto;
  Run(1);
  Queue(2);
  proposals_ = {{1, "GPU-1"}};
  suspend_result_ = core::FailedPreconditionError("a worker is busy");
  Defragmenter d = Make(&checkpointer_);
  EXPECT_FALSE(d.Defragment(2));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].rfind("move_failed 1: automatic move to let job 2 (", 0), 0u) << events_[0];
  suspend_result_ = core::Status::Ok();
  clock_.Advance(59 * 60 * 1000);
  EXPECT_FALSE(d.Defragment(2));
  clock_.Advance(60 * 1000);
  EXPECT_TRUE(d.Defragment(2));
  // A suspension that fails later, on its worker, counts the same.
  Moved(1);
  d.MoveFailed(1, clock_.NowMs());
  clock_.Advance(30 * 60 * 1000);
  rules_.defragment_moves_per_hour = 5;
  EXPECT_FALSE(d.Defragment(2));
}

}  // namespace
}  // namespace gpuslice::daemon
