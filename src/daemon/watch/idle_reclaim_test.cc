#include "daemon/watch/idle_reclaim.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

constexpr int64_t kMinute = 60'000;

// An IdleReclaim that records what it asks of the daemon, with idle
// reclaim on after 10 minutes, and one running job of normal priority.
class IdleReclaimTest : public ::testing::Test {
 protected:
  IdleReclaimTest() {
    job_.id = 7;
    job_.user = "alice";
    job_.state = core::JobState::kRunning;
    job_.request.priority = core::Priority::kNormal;
    rules_.idle_after_ms = 10 * kMinute;
    rules_.idle_action = IdleAction::kPause;
  }

  IdleReclaim& Make() {
    idle_ = std::make_unique<IdleReclaim>(
        rules_,
        IdleReclaim::Hooks{
            .paused = [this](const core::Job&) { return paused_; },
            .pause = [this](const core::Job& job) -> core::Status {
              calls_.push_back("pause " + Id(job));
              if (pause_fails_) return core::InternalError("disk full");
              paused_ = true;
              return core::Status::Ok();
            },
            .end =
                [this](const core::Job& job, const std::string& reason) {
                  calls_.push_back("end " + Id(job) + " " + reason.substr(0, 5));
                },
            .suspend = [this](const core::Job& job, const std::string&) -> core::Status {
              calls_.push_back("suspend " + Id(job));
              return suspend_;
            },
            .record =
                [this](const std::string& kind, const core::Job& job, const std::string& message) {
                  calls_.push_back(kind + " " + Id(job));
                  messages_.push_back(message);
                },
            .tell = [this](const core::Job& job,
                           const std::string&) { calls_.push_back("tell " + Id(job)); },
        });
    return *idle_;
  }
  static std::string Id(const core::Job& job) { return std::to_string(job.id); }
  static JobUsage Low(int64_t low_use_ms) {
    JobUsage u;
    u.sampled_ms = 1;
    u.low_use_ms = low_use_ms;
    return u;
  }

  core::Job job_;
  PolicyConfig rules_;
  std::unique_ptr<IdleReclaim> idle_;
  std::vector<std::string> calls_;
  std::vector<std::string> messages_;
  bool paused_ = false;
  bool pause_fails_ = false;
  core::Status suspend_;
};

TEST_F(IdleReclaimTest, AJobIdleLongEnoughWhileOthersWaitIsFlaggedThenActedOnOnce) {
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(9 * kMinute), true);
  EXPECT_TRUE(calls_.empty());
  EXPECT_FALSE(idle.Flagged(job_.id));
  idle.Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_,
            (std::vector<std::string>{"idle_flagged 7", "pause 7", "idle_action 7", "tell 7"}));
  EXPECT_TRUE(idle.Flagged(job_.id));
  idle.Watch(job_, Low(20 * kMinute), true);
  EXPECT_EQ(calls_.size(), 4u) << "once per episode";
}

TEST_F(IdleReclaimTest, AnIdleJobIsOnlyFlaggedWhileNothingWaits) {
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(10 * kMinute), false);
  EXPECT_EQ(calls_, std::vector<std::string>{"idle_flagged 7"});
}

TEST_F(IdleReclaimTest, IdleActionAlwaysActsEvenWhenNothingWaits) {
  rules_.idle_action = IdleAction::kWarn;
  rules_.idle_action_always = true;
  Make().Watch(job_, Low(10 * kMinute), false);
  EXPECT_EQ(calls_, (std::vector<std::string>{"idle_flagged 7", "idle_action 7", "tell 7"}));
}

TEST_F(IdleReclaimTest, AnExemptJobIsOnlyFlaggedAndTheEventSaysWhy) {
  job_.no_idle_reclaim = true;
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_, std::vector<std::string>{"idle_flagged 7"});
  EXPECT_NE(messages_[0].find("--no-idle-reclaim"), std::string::npos) << messages_[0];

  job_.no_idle_reclaim = false;
  job_.request.priority = core::Priority::kHigh;  // idle_exempt_priority's default.
  EXPECT_TRUE(idle_->Exempt(job_));
  job_.request.priority = core::Priority::kNormal;
  EXPECT_FALSE(idle_->Exempt(job_));
}

TEST_F(IdleReclaimTest, UseThatComesBackEndsTheEpisodeUnlessPaused) {
  rules_.idle_action = IdleAction::kWarn;
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(10 * kMinute), true);
  idle.Watch(job_, Low(0), true);
  EXPECT_FALSE(idle.Flagged(job_.id));
  idle.Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_.size(), 6u) << "a new episode is flagged and acted on again";

  paused_ = true;  // Paused, it stays in its episode however its use reads.
  idle.Watch(job_, Low(0), true);
  EXPECT_TRUE(idle.Flagged(job_.id));
}

TEST_F(IdleReclaimTest, IdleTimeCountsAfreshOnceUnpaused) {
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(10 * kMinute), true);
  const JobUsage at = Low(12 * kMinute);
  idle.Unpaused(job_.id, &at);
  EXPECT_FALSE(idle.Flagged(job_.id));
  calls_.clear();
  idle.Watch(job_, Low(21 * kMinute), true);
  EXPECT_TRUE(calls_.empty()) << "9 minutes since it was unpaused";
  idle.Watch(job_, Low(22 * kMinute), true);
  EXPECT_FALSE(calls_.empty());
}

TEST_F(IdleReclaimTest, AResumedJobStartsANewEpisode) {
  rules_.idle_action = IdleAction::kWarn;
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(10 * kMinute), true);
  idle.Resumed(job_.id);
  EXPECT_FALSE(idle.Flagged(job_.id));
  calls_.clear();
  idle.Watch(job_, Low(11 * kMinute), true);
  EXPECT_EQ(calls_, (std::vector<std::string>{"idle_flagged 7", "idle_action 7", "tell 7"}));
}

TEST_F(IdleReclaimTest, AnExternalJobWithoutAHolderIsPausedInsteadOfEnded) {
  rules_.idle_action = IdleAction::kEnd;
  job_.mode = core::JobMode::kExternal;
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_[1], "pause 7");
  job_.holder_pid = 4242;  // A Slurm step: its processes are the daemon's to end.
  calls_.clear();
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_[1], "end 7 idle:");
}

TEST_F(IdleReclaimTest, ASuspensionThatCannotStartFallsBack) {
  rules_.idle_action = IdleAction::kSuspend;
  rules_.idle_suspend_fallback = IdleAction::kWarn;
  suspend_ = core::FailedPreconditionError("no checkpoint API");
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_, (std::vector<std::string>{"idle_flagged 7", "suspend 7", "suspend_failed 7",
                                              "idle_action 7", "tell 7"}));
}

TEST_F(IdleReclaimTest, AnExternalJobGetsTheSuspendFallbackAtOnce) {
  rules_.idle_action = IdleAction::kSuspend;
  rules_.idle_suspend_fallback = IdleAction::kWarn;
  job_.mode = core::JobMode::kExternal;
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_, (std::vector<std::string>{"idle_flagged 7", "idle_action 7", "tell 7"}));
}

TEST_F(IdleReclaimTest, APauseThatCannotBeWrittenIsNotReported) {
  pause_fails_ = true;
  Make().Watch(job_, Low(10 * kMinute), true);
  EXPECT_EQ(calls_, (std::vector<std::string>{"idle_flagged 7", "pause 7"}));
}

TEST_F(IdleReclaimTest, IdleReclaimOffWatchesNothing) {
  rules_.idle_after_ms = 0;
  IdleReclaim& idle = Make();
  idle.Watch(job_, Low(100 * kMinute), true);
  EXPECT_TRUE(calls_.empty());
  EXPECT_FALSE(idle.Flagged(job_.id));
}

}  // namespace
}  // namespace gpuslice::daemon
