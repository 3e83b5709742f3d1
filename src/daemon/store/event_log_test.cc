#include "daemon/store/event_log.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-events-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    ledger_.reset();
    fs::remove_all(dir_);
  }
  void OpenLedger() {
    auto l = Ledger::Open(dir_ + "/ledger.db");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ledger_ = std::move(*l);
  }
  // Runs `sql` on the ledger's file from a connection of its own.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ + "/ledger.db").c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }
  static Event At(int64_t at_ms, const std::string& kind, uint64_t job_id) {
    Event e;
    e.at_ms = at_ms;
    e.kind = kind;
    e.job_id = job_id;
    e.user = "u1000";
    return e;
  }
  static std::vector<std::string> Kinds(const core::Result<std::vector<Event>>& events) {
    std::vector<std::string> out;
    EXPECT_TRUE(events.ok()) << events.status().ToString();
    if (events.ok()) {
      for (const Event& e : *events) out.push_back(e.kind);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<Ledger> ledger_;
  std::vector<std::string> failures_;
  EventLog log_{ledger_, [this](const core::Status& s) { failures_.push_back(s.message()); }};
};

TEST_F(EventLogTest, EventsGoToTheLedgerAndTheirCountsSurviveAReopening) {
  OpenLedger();
  log_.Record(At(10, "submitted", 1));
  log_.Record(At(20, "started", 1));
  log_.Record(At(30, "submitted", 2));
  EXPECT_EQ(log_.Counts().at("submitted"), 2u);
  EventQuery q;
  q.job_id = 1;
  EXPECT_EQ(Kinds(log_.Query(q)), (std::vector<std::string>{"submitted", "started"}));
  EXPECT_TRUE(failures_.empty());

  ledger_.reset();
  OpenLedger();
  EventLog again(ledger_, [](const core::Status&) {});
  again.LoadCounts();
  EXPECT_EQ(again.Counts().at("submitted"), 2u);
  EXPECT_EQ(again.Counts().at("started"), 1u);
  EXPECT_EQ(Kinds(again.Query(EventQuery{})).size(), 3u);
}

TEST_F(EventLogTest, WithoutALedgerTheNewestEventsAreKeptInMemory) {
  for (size_t i = 0; i < EventLog::kMaxUnsaved + 5; ++i) {
    log_.Record(At(int64_t(i), i % 2 ? "started" : "submitted", i % 3));
  }
  EXPECT_EQ(log_.Counts().at("submitted") + log_.Counts().at("started"), EventLog::kMaxUnsaved + 5);
  EventQuery all;
  all.limit = 10 * EventLog::kMaxUnsaved;
  auto kept = log_.Query(all);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), EventLog::kMaxUnsaved);
  EXPECT_EQ(kept->front().at_ms, 5);  // The oldest five went.
  EventQuery some;
  some.job_id = 1;
  some.since_ms = 900;
  some.limit = 3;
  auto newest = log_.Query(some);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->size(), 3u);
  for (const Event& e : *newest) EXPECT_EQ(e.job_id, 1u);
  EXPECT_EQ(newest->back().at_ms, int64_t(EventLog::kMaxUnsaved + 3));  // The newest of job 1.
  EXPECT_FALSE(log_.WriteUnsaved()) << "no ledger to write to";
}

TEST_F(EventLogTest, AFailedWriteIsReportedAndWrittenLaterInOrder) {
  OpenLedger();
  log_.Record(At(10, "submitted", 1));
  Sql("CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(FAIL, 'disk full'); END");
  log_.Record(At(20, "started", 1));
  log_.Record(At(30, "exited", 1));
  ASSERT_EQ(failures_.size(), 2u);
  EXPECT_NE(failures_[0].find("disk full"), std::string::npos) << failures_[0];
  EXPECT_EQ(log_.Counts().at("exited"), 1u);  // Counted all the same.
  EXPECT_FALSE(log_.WriteUnsaved()) << "still refused";

  Sql("DROP TRIGGER refuse");
  EXPECT_TRUE(log_.WriteUnsaved());
  EXPECT_EQ(Kinds(log_.Query(EventQuery{})),
            (std::vector<std::string>{"submitted", "started", "exited"}));
  EXPECT_TRUE(log_.WriteUnsaved()) << "nothing left";
  EXPECT_EQ(Kinds(log_.Query(EventQuery{})).size(), 3u);
}

}  // namespace
}  // namespace gpuslice::daemon
