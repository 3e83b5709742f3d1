// The job log cap: LogWriter trims, ReadJobLog keeps offsets meaning bytes
// of output since the job started, so followers stream across a trim.

#include "daemon/launch/job_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class JobLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-joblog-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/stdout";
    tmp_ = dir_ + "/stdout.trim";
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Byte `i` of the job's output: a pattern that tells positions apart.
  static char At(uint64_t i) { return static_cast<char>('a' + (i * 7 + i / 251) % 26); }

  std::string dir_, path_, tmp_;
  int fd_ = -1;
};

TEST(JobLog, NoteLineRoundTrips) {
  const char note[] = "gpuslice: 123456 bytes of older output dropped\nrest";
  LogTrim t = ParseLogTrim(note, sizeof note - 1);
  EXPECT_EQ(t.dropped, 123456u);
  EXPECT_EQ(t.header_bytes, sizeof "gpuslice: 123456 bytes of older output dropped\n" - 1);
  for (const char* other : {"gpuslice: bytes of older output dropped\n", "hello\n",
                            "gpuslice: 12 bytes of older output dropped", ""}) {
    EXPECT_EQ(ParseLogTrim(other, strlen(other)).header_bytes, 0u) << other;
  }
}

TEST_F(JobLogTest, UncappedLogIsWrittenAndReadAsIs) {
  {
    LogWriter w(path_.c_str(), tmp_.c_str(), fd_, 0);
    w.Write("hello\n", 6);
    w.Write("world\n", 6);
  }
  auto r = ReadJobLog(path_, 0, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data, "hello\nworld\n");
  EXPECT_EQ(r->next_offset, 12u);
  r = ReadJobLog(path_, 6, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data, "wor");
  EXPECT_EQ(r->next_offset, 9u);
  EXPECT_EQ(ReadJobLog(dir_ + "/missing", 5, 10)->next_offset, 5u);
}

// A job printing three times the cap keeps at most the cap,
// the newest part, behind the note.
TEST_F(JobLogTest, OutputThreeTimesTheCapKeepsTheNewestPartUnderTheCap) {
  const uint64_t cap = kMinLogCap;
  LogWriter w(path_.c_str(), tmp_.c_str(), fd_, cap);
  std::string stream;
  for (uint64_t i = 0; i < 3 * cap; ++i) stream += At(i);
  for (size_t at = 0; at < stream.size(); at += 1000) {
    size_t n = std::min<size_t>(1000, stream.size() - at);
    w.Write(stream.data() + at, n);
    ASSERT_LE(fs::file_size(path_), cap) << "after " << at + n << " bytes";
  }
  auto r = ReadJobLog(path_, 0, 1 << 20);
  ASSERT_TRUE(r.ok());
  LogTrim t = ParseLogTrim(r->data.data(), r->data.size());
  ASSERT_GT(t.header_bytes, 0u) << r->data.substr(0, 80);
  EXPECT_EQ(r->data.substr(0, t.header_bytes),
            "gpuslice: " + std::to_string(t.dropped) + " bytes of older output dropped\n");
  EXPECT_EQ(r->data.substr(t.header_bytes), stream.substr(t.dropped));
  EXPECT_EQ(r->next_offset, stream.size());
  EXPECT_GE(stream.size() - t.dropped, cap / 2 - 1000);  // The newest half is kept.
  EXPECT_FALSE(fs::exists(tmp_));
}

TEST_F(JobLogTest, AFollowerStreamsAcrossTrimsAndSeesANoteForEachGap) {
  const uint64_t cap = kMinLogCap;
  LogWriter w(path_.c_str(), tmp_.c_str(), fd_, cap);
  uint64_t written = 0, offset = 0, gaps = 0;
  std::string chunk(3000, ' ');
  // The reader falls behind now and then (reads less than was written), so
  // some trims drop bytes it has not read.
  for (int round = 0; round < 200; ++round) {
    for (char& c : chunk) c = At(written++);
    w.Write(chunk.data(), chunk.size());
    uint64_t limit = round % 50 < 30 ? 1 << 20 : 100;
    auto r = ReadJobLog(path_, offset, limit);
    ASSERT_TRUE(r.ok());
    std::string data = r->data;
    uint64_t from = offset;
    if (LogTrim t = ParseLogTrim(data.data(), data.size()); t.header_bytes && offset < t.dropped) {
      ++gaps;
      from = t.dropped;
      data = data.substr(t.header_bytes);
    }
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], At(from + i)) << from + i;
    offset = r->next_offset;
    ASSERT_EQ(offset, from + data.size());
  }
  auto rest = ReadJobLog(path_, offset, 1 << 20);
  EXPECT_EQ(rest->next_offset, written);
  EXPECT_GT(gaps, 0u);
}

}  // namespace
}  // namespace gpuslice::daemon
