#include "daemon/store/degraded_mode.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace gpuslice::daemon {
namespace {

// What DegradedMode asks, as a test controls it.
struct World {
  int64_t now = 1000;
  uint64_t free = 100 << 20;
  bool ledger_ok = false;
  bool events_ok = true;
  bool room = false;
  int room_again = 0;
  std::vector<uint64_t> saved;  // Job ids written, in order.
  std::vector<std::pair<std::string, std::string>> events;

  DegradedMode Make(int64_t retry_ms = 2000) {
    DegradedMode::Hooks h;
    h.now_ms = [this] { return now; };
    h.free_bytes = [this] { return free; };
    h.save_job = [this](uint64_t id, std::optional<core::JobState>) {
      if (!ledger_ok) return core::UnavailableError("disk full");
      saved.push_back(id);
      return core::Status::Ok();
    };
    h.write_events = [this] { return events_ok; };
    h.check_room = [this] {
      return room ? core::Status::Ok() : core::ResourceExhaustedError("no space");
    };
    h.record = [this](const std::string& kind, const std::string& message) {
      events.emplace_back(kind, message);
    };
    h.room_again = [this] { ++room_again; };
    return DegradedMode(std::move(h), retry_ms);
  }
};

TEST(DegradedMode, AFailedWriteIsRetriedAtItsIntervalAndHealsOnceEveryRowIsWritten) {
  World w;
  DegradedMode d = w.Make();
  EXPECT_FALSE(d.degraded());
  d.Unsaved(7, core::JobState::kQueued, "disk full");
  d.Unsaved(3, core::JobState::kRunning, "disk full");
  ASSERT_TRUE(d.degraded());
  EXPECT_EQ(d.reason(), "ledger write failed: disk full");
  ASSERT_EQ(w.events.size(), 1u) << "one event, not one per failed write";
  EXPECT_EQ(w.events[0].first, "degraded");

  w.ledger_ok = true;
  w.now += 1999;
  d.Maintain();
  EXPECT_TRUE(w.saved.empty()) << "not before the retry interval";
  w.now += 1;
  d.Maintain();
  EXPECT_EQ(w.saved, (std::vector<uint64_t>{3, 7})) << "oldest id first";
  EXPECT_FALSE(d.degraded());
  EXPECT_EQ(w.events.back().first, "recovered");
  EXPECT_NE(w.events.back().second.find("accepting new work"), std::string::npos);
}

TEST(DegradedMode, ADroppedChangeIsNotWrittenAgain) {
  World w;
  DegradedMode d = w.Make();
  d.Unsaved(4, core::JobState::kQueued, "disk full");
  d.Unsaved(5, core::JobState::kQueued, "disk full");
  d.DropUnsaved(4);
  w.ledger_ok = true;
  w.now += 2000;
  d.Maintain();
  EXPECT_EQ(w.saved, std::vector<uint64_t>{5});
  EXPECT_FALSE(d.degraded());
}

TEST(DegradedMode, ARetryComesAtOnceWhenTheStateDiskHasRoomAgain) {
  World w;
  DegradedMode d = w.Make(/*retry_ms=*/60000);
  d.Unsaved(1, std::nullopt, "disk full");
  w.ledger_ok = true;
  w.free += (1 << 20) - 1;
  d.Maintain();
  EXPECT_TRUE(d.degraded()) << "less than 1 MiB freed";
  w.free += 1;
  d.Maintain();
  EXPECT_FALSE(d.degraded());
}

TEST(DegradedMode, StaysDegradedWhileTheEventsCannotBeWritten) {
  World w;
  DegradedMode d = w.Make();
  d.Unsaved(1, std::nullopt, "disk full");
  w.ledger_ok = true;
  w.events_ok = false;
  w.now += 2000;
  d.Maintain();
  EXPECT_TRUE(d.degraded());
  EXPECT_EQ(w.saved, std::vector<uint64_t>{1});
  w.events_ok = true;
  w.now += 2000;
  d.Maintain();
  EXPECT_FALSE(d.degraded());
  EXPECT_EQ(w.saved, std::vector<uint64_t>{1}) << "a row written is not written again";
}

TEST(DegradedMode, NoRoomForSlicesHealsWhenASliceFitsAndLetsTheQueueStart) {
  World w;
  DegradedMode d = w.Make();
  d.NoRoom("no room for job slices on the state disk (ENOSPC)");
  EXPECT_TRUE(d.no_room());
  EXPECT_TRUE(d.degraded());
  d.NoRoom("another reason");
  EXPECT_EQ(d.reason(), "no room for job slices on the state disk (ENOSPC)") << "the first stands";
  d.Maintain();
  EXPECT_TRUE(d.no_room());
  EXPECT_EQ(w.room_again, 0);
  w.room = true;
  w.now += 5000;
  d.Maintain();
  EXPECT_FALSE(d.no_room());
  EXPECT_FALSE(d.degraded());
  EXPECT_EQ(w.room_again, 1);
  EXPECT_NE(w.events.back().second.find("again after 5s"), std::string::npos)
      << w.events.back().second;
}

TEST(DegradedMode, AHealedCauseGivesWayToOneThatStillHolds) {
  World w;
  DegradedMode d = w.Make();
  d.NoRoom("no room for job slices");
  d.Unsaved(1, std::nullopt, "disk full");
  EXPECT_EQ(d.reason(), "no room for job slices");
  w.room = true;
  d.Maintain();
  EXPECT_TRUE(d.degraded());
  EXPECT_EQ(d.reason(), "ledger write failed: disk full");
  EXPECT_NE(w.events.back().second.find("still degraded"), std::string::npos);
}

TEST(DegradedMode, AReasonThatDoesNotHealStaysUntilARestart) {
  World w;
  DegradedMode d = w.Make();
  d.Degrade("cannot read the GPUs: NVML_ERROR_DRIVER_NOT_LOADED");
  EXPECT_TRUE(w.events.empty()) << "logged; only write failures are events";
  w.ledger_ok = w.room = true;
  w.now += 100000;
  d.Maintain();
  EXPECT_TRUE(d.degraded());
}

}  // namespace
}  // namespace gpuslice::daemon
