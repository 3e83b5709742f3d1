#include "slice/region/region_snapshot.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/units.h"
#include "slice/region/admission.h"

namespace gpuslice::slice {
namespace {

using core::kGiB;
using core::StatusCode;
using Part = RegionSnapshot::Part;

constexpr char kUuidA[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kUuidB[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

class RegionSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-snapshot-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/region";
    RegionOptions o;
    o.name = "job-7";
    o.closed = true;
    o.devices = {{kUuidA, 4 * kGiB}, {kUuidB, 0}};
    auto r = Region::Create(path_, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    region_ = std::move(*r);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The region's bytes as a reader would copy them.
  std::vector<unsigned char> Bytes() const {
    std::vector<unsigned char> b(layout::kRegionSize);
    int fd = open(path_.c_str(), O_RDONLY);
    EXPECT_EQ(pread(fd, b.data(), b.size(), 0), ssize_t(b.size()));
    close(fd);
    return b;
  }

  std::string dir_, path_;
  std::unique_ptr<Region> region_;
};

TEST_F(RegionSnapshotTest, ReadsWhatTheSlicesProcessesReport) {
  auto slot = region_->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(TryCharge(region_->device(0), region_->slot(*slot), 0, kGiB, 4 * kGiB));
  region_->device(1).refused_allocs.store(3);
  region_->device(1).throttled_ns.store(5000);

  auto all = RegionSnapshot::Read(path_, Part::kAll);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<DeviceUsage> devices = all->Devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].uuid, kUuidA);
  EXPECT_EQ(devices[0].limit_bytes, 4 * kGiB);
  EXPECT_EQ(devices[0].used_bytes, kGiB);
  EXPECT_EQ(devices[0].peak_bytes, kGiB);
  EXPECT_EQ(devices[1].index, 1u);
  EXPECT_EQ(devices[1].refused_allocs, 3u);
  EXPECT_EQ(devices[1].throttled_ns, 5000u);
  std::vector<ProcessUsage> processes = all->Processes();
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].pid, getpid());
  EXPECT_EQ(processes[0].slot, *slot);
  EXPECT_EQ(processes[0].used_bytes[0], kGiB);
  EXPECT_EQ(*all->FindDevice("gpu-AAAAAAAA-bbbb-cccc-dddd-eeeeeeeeeeee"), 1u);
  EXPECT_EQ(all->FindDevice("GPU-none").status().code(), StatusCode::kNotFound);

  // The devices alone: the header and the entries, no process slots.
  auto devices_only = RegionSnapshot::Read(path_, Part::kDevices);
  ASSERT_TRUE(devices_only.ok()) << devices_only.status().ToString();
  EXPECT_EQ(devices_only->Devices().size(), 2u);
  EXPECT_TRUE(devices_only->Processes().empty());
}

// A daemon reading the region through a mapping would die of SIGBUS when
// the job shrinks the file under it. Every state the job can leave its
// file in is "no report", in a child process so that a fault fails the test
// instead of ending it.
TEST_F(RegionSnapshotTest, ARegionTheJobTruncatesRegrowsOrRemovesIsNoReportNeverAFault) {
  const std::vector<unsigned char> whole = Bytes();
  const std::vector<unsigned char> header(whole.begin(), whole.begin() + layout::kHeaderSize);
  struct Case {
    const char* what;
    std::function<void()> make;
  };
  const std::vector<Case> cases = {
      {"truncated to 0", [&] { ASSERT_EQ(truncate(path_.c_str(), 0), 0); }},
      {"truncated to half",
       [&] { ASSERT_EQ(truncate(path_.c_str(), layout::kRegionSize / 2), 0); }},
      {"regrown empty",
       [&] {
         ASSERT_EQ(truncate(path_.c_str(), 0), 0);
         ASSERT_EQ(truncate(path_.c_str(), layout::kRegionSize), 0);
       }},
      {"grown", [&] { ASSERT_EQ(truncate(path_.c_str(), layout::kRegionSize + 4096), 0); }},
      {"removed", [&] { ASSERT_EQ(unlink(path_.c_str()), 0); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    c.make();
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto all = RegionSnapshot::Read(path_, Part::kAll);
      auto devices = RegionSnapshot::Read(path_, Part::kDevices);
      _exit(!all.ok() && !devices.ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << "the reader died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "a broken region was taken as a report";
    // Whole again for the next case: the header back over a regrown file.
    int fd = open(path_.c_str(), O_RDWR | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, layout::kRegionSize), 0);
    ASSERT_EQ(pwrite(fd, header.data(), header.size(), 0), ssize_t(header.size()));
    close(fd);
  }
  EXPECT_EQ(RegionSnapshot::Read(dir_ + "/none", Part::kAll).status().code(),
            StatusCode::kNotFound);
}

TEST_F(RegionSnapshotTest, ALeaseTheJobHoldsOnItsRegionIsAnsweredAtOnce) {
  // A write lease: any open by another process would wait for the holder to
  // give it up, for up to /proc/sys/fs/lease-break-time (45 s by default).
  int fd = open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  region_.reset();  // A lease needs the file open nowhere else.
  // Breaking a lease signals its holder (SIGIO, which would end this test).
  signal(SIGIO, SIG_IGN);
  if (fcntl(fd, F_SETLEASE, F_RDLCK) != 0) {
    close(fd);
    GTEST_SKIP() << "leases are not available here: " << strerror(errno);
  }
  // A read lease is broken by an open for writing; a snapshot opens for
  // reading only and so never has to wait for this one.
  auto begin = std::chrono::steady_clock::now();
  auto read = RegionSnapshot::Read(path_, Part::kDevices);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(fcntl(fd, F_SETLEASE, F_UNLCK), 0);
  ASSERT_EQ(fcntl(fd, F_SETLEASE, F_WRLCK), 0) << strerror(errno);
  // A write lease is broken by any open: O_NONBLOCK makes it an answer.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto r = RegionSnapshot::Read(path_, Part::kDevices);
    _exit(r.status().code() == StatusCode::kUnavailable ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const auto took = std::chrono::steady_clock::now() - begin;
  fcntl(fd, F_SETLEASE, F_UNLCK);
  close(fd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_LT(took, std::chrono::seconds(5)) << "the reader waited for the lease";
}

TEST_F(RegionSnapshotTest, AnyBytesParseToAReportOrAClearError) {
  const std::vector<unsigned char> good = Bytes();
  struct Case {
    const char* what;
    size_t size;
    std::function<void(std::vector<unsigned char>&)> mutate;
    StatusCode want;
    const char* message;
  };
  auto put32 = [](std::vector<unsigned char>& b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, sizeof v);
  };
  const std::vector<Case> cases = {
      {"nothing", 0, nullptr, StatusCode::kFailedPrecondition, "truncated"},
      {"the header only", layout::kHeaderSize, nullptr, StatusCode::kFailedPrecondition,
       "truncated"},
      {"a bad magic", good.size(), [](auto& b) { b[0] ^= 1; }, StatusCode::kFailedPrecondition,
       "magic"},
      {"version 2", good.size(), [&](auto& b) { put32(b, 8, 2); }, StatusCode::kFailedPrecondition,
       "version 2"},
      {"another slot size", good.size(), [&](auto& b) { put32(b, 36, 4096); },
       StatusCode::kFailedPrecondition, "does not understand"},
      {"whole", good.size(), nullptr, StatusCode::kOk, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<unsigned char> b(good.begin(), good.begin() + c.size);
    if (c.mutate) c.mutate(b);
    auto parsed = RegionSnapshot::Parse(b, "r", Part::kAll);
    EXPECT_EQ(parsed.status().code(), c.want) << parsed.status().ToString();
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find(c.message), std::string::npos);
    }
  }
  // Entries full of anything: whatever they say, every field is read from
  // the copy (a UUID without its terminator included).
  std::mt19937_64 rng(36);
  for (int round = 0; round < 50; ++round) {
    std::vector<unsigned char> b = good;
    for (size_t i = layout::kDevicesOffset; i < b.size(); ++i) b[i] = uint8_t(rng());
    for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
      put32(b, DeviceFieldOffset(d, 0), layout::kEntryReady);
    }
    auto parsed = RegionSnapshot::Parse(b, "r", Part::kAll);
    ASSERT_TRUE(parsed.ok());
    std::vector<DeviceUsage> devices = parsed->Devices();
    ASSERT_EQ(devices.size(), layout::kMaxDevices);
    for (const DeviceUsage& d : devices) EXPECT_LE(d.uuid.size(), layout::kUuidBytes);
    (void)parsed->Processes();
  }
}

}  // namespace
}  // namespace gpuslice::slice
