#include "slice/region/region.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/units.h"
#include "slice/region/admission.h"

namespace gpuslice::slice {
namespace {

using core::kGiB;
using core::kMiB;

constexpr char kUuidA[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kUuidB[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpuslice-region-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A probe whose answers the test decides.
class FakeProbe final : public ProcessProbe {
 public:
  bool IsAlive(int32_t pid, uint64_t) const override { return dead_.count(pid) == 0; }
  void Kill(int32_t pid) { dead_.insert(pid); }

 private:
  std::set<int32_t> dead_;
};

// Standalone admission: the limit is the device's own field (what
// Region::LimitOf reads while no limits page is attached).
bool TryCharge(layout::DeviceEntry& device, layout::ProcessSlot& slot, uint32_t d, uint64_t bytes) {
  return slice::TryCharge(device, slot, d, bytes, device.limit_bytes.load());
}

RegionOptions OneDevice(uint64_t limit) {
  RegionOptions o;
  o.name = "test";
  o.devices.push_back({kUuidA, limit});
  return o;
}

TEST(Region, CreateThenOpenSeesTheSameLimits) {
  TempDir dir;
  auto created = Region::Create(dir.File("r"), OneDevice(4 * kGiB));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto opened = Region::Open(dir.File("r"));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto devices = (*opened)->Devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].uuid, kUuidA);
  EXPECT_EQ(devices[0].limit_bytes, 4 * kGiB);
  EXPECT_EQ(devices[0].used_bytes, 0u);
}

TEST(Region, FileIsPrivateToItsOwner) {
  TempDir dir;
  ASSERT_TRUE(Region::Create(dir.File("r"), OneDevice(kGiB)).ok());
  struct stat st {};
  ASSERT_EQ(stat(dir.File("r").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST(Region, CreateRefusesAnExistingFile) {
  TempDir dir;
  ASSERT_TRUE(Region::Create(dir.File("r"), OneDevice(kGiB)).ok());
  auto again = Region::Create(dir.File("r"), OneDevice(kGiB));
  EXPECT_EQ(again.status().code(), core::StatusCode::kAlreadyExists);
}

TEST(Region, CreateRefusesAWorldWritableMode) {
  TempDir dir;
  RegionOptions o = OneDevice(kGiB);
  o.mode = 0666;
  EXPECT_EQ(Region::Create(dir.File("r"), o).status().code(),
            core::StatusCode::kInvalidArgument);
}

TEST(Region, OpenRefusesAWorldWritableFile) {
  TempDir dir;
  ASSERT_TRUE(Region::Create(dir.File("r"), OneDevice(kGiB)).ok());
  ASSERT_EQ(chmod(dir.File("r").c_str(), 0666), 0);
  auto opened = Region::Open(dir.File("r"));
  EXPECT_EQ(opened.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(opened.status().message().find("writable"), std::string::npos);
}

TEST(Region, OpenRefusesAFileOfTheWrongSize) {
  TempDir dir;
  std::ofstream(dir.File("r")) << "not a region";
  chmod(dir.File("r").c_str(), 0600);
  EXPECT_EQ(Region::Open(dir.File("r")).status().code(), core::StatusCode::kFailedPrecondition);
}

TEST(Region, OpenRefusesABadMagic) {
  TempDir dir;
  {
    auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
    ASSERT_TRUE(r.ok());
    (*r)->header().magic.store(42);
  }
  auto opened = Region::Open(dir.File("r"));
  EXPECT_EQ(opened.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("magic"), std::string::npos);
}

TEST(Region, OpenOfAMissingFileIsNotFound) {
  TempDir dir;
  EXPECT_EQ(Region::Open(dir.File("nope")).status().code(), core::StatusCode::kNotFound);
}

TEST(Region, RacingOpenOrCreateAllMapTheSameFile) {
  TempDir dir;
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<Region>> regions(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto r = Region::OpenOrCreate(dir.File("r"), OneDevice(kGiB));
      if (r.ok()) regions[t] = std::move(*r);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : regions) ASSERT_NE(r, nullptr);
  // A charge through one mapping is seen through every other.
  regions[0]->device(0).used_bytes.store(123);
  for (auto& r : regions) EXPECT_EQ(r->device(0).used_bytes.load(), 123u);
}

TEST(Region, FindOrAddDeviceFromManyThreadsMakesOneEntry) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), RegionOptions{});
  ASSERT_TRUE(r.ok());
  constexpr int kThreads = 8;
  std::vector<uint32_t> index(kThreads, 99);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto i = (*r)->FindOrAddDevice(t % 2 ? kUuidA : kUuidB, kGiB);
      if (i.ok()) index[t] = *i;
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(index[t], index[t % 2]);
  EXPECT_NE(index[0], index[1]);
  EXPECT_EQ((*r)->Devices().size(), 2u);
}

TEST(Region, UuidMatchIgnoresPrefixAndCase) {
  EXPECT_TRUE(SameUuid("GPU-ABCDEF01-2222", "MIG-abcdef01-2222"));
  EXPECT_TRUE(SameUuid("abcdef01-2222", "GPU-abcdef01-2222"));
  EXPECT_FALSE(SameUuid("GPU-abcdef01-2222", "GPU-abcdef01-2223"));
}

TEST(Region, ClosedRegionRefusesADeviceItDoesNotList) {
  TempDir dir;
  RegionOptions o = OneDevice(kGiB);
  o.closed = true;
  auto r = Region::Create(dir.File("r"), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->FindOrAddDevice(kUuidB, kGiB).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(*(*r)->FindOrAddDevice(kUuidA, 5 * kGiB), 0u);
  // The region's limit wins over the one the caller proposes.
  EXPECT_EQ((*r)->device(0).limit_bytes.load(), kGiB);
}

TEST(Region, ChargeStopsExactlyAtTheLimit) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(100));
  ASSERT_TRUE(r.ok());
  auto slot = (*r)->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(slot.ok());
  auto& dev = (*r)->device(0);
  auto& s = (*r)->slot(*slot);
  EXPECT_TRUE(TryCharge(dev, s, 0, 60));
  EXPECT_FALSE(TryCharge(dev, s, 0, 41));
  EXPECT_TRUE(TryCharge(dev, s, 0, 40));
  EXPECT_FALSE(TryCharge(dev, s, 0, 1));
  EXPECT_EQ(dev.used_bytes.load(), 100u);
  Uncharge(dev, s, 0, 60);
  EXPECT_EQ(dev.used_bytes.load(), 40u);
  EXPECT_EQ(s.used_bytes[0].load(), 40u);
  EXPECT_EQ(dev.peak_bytes.load(), 100u);
}

TEST(Region, ChargeOfMoreThanTheLimitDoesNotWrapAround) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  auto& dev = (*r)->device(0);
  auto& s = (*r)->slot(*(*r)->ClaimSlot(getpid(), 0));
  EXPECT_FALSE(TryCharge(dev, s, 0, ~0ull));
  EXPECT_TRUE(TryCharge(dev, s, 0, 1));
  EXPECT_FALSE(TryCharge(dev, s, 0, ~0ull - 0));
}

TEST(Region, LiveResizeAppliesToTheNextCharge) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  auto& dev = (*r)->device(0);
  auto& s = (*r)->slot(*(*r)->ClaimSlot(getpid(), 0));
  ASSERT_TRUE(TryCharge(dev, s, 0, 768 * kMiB));
  EXPECT_FALSE(TryCharge(dev, s, 0, 512 * kMiB));
  uint64_t gen = (*r)->header().limits_generation.load();
  ASSERT_TRUE((*r)->SetLimit(kUuidA, 2 * kGiB).ok());
  EXPECT_GT((*r)->header().limits_generation.load(), gen);
  EXPECT_TRUE(TryCharge(dev, s, 0, 512 * kMiB));
  // Lower than current usage: nothing more fits, frees still work.
  ASSERT_TRUE((*r)->SetLimit(kUuidA, 512 * kMiB).ok());
  EXPECT_FALSE(TryCharge(dev, s, 0, 1));
  Uncharge(dev, s, 0, 768 * kMiB);
  EXPECT_TRUE(TryCharge(dev, s, 0, 0));
  EXPECT_FALSE(TryCharge(dev, s, 0, 1));
  Uncharge(dev, s, 0, 512 * kMiB);
  EXPECT_TRUE(TryCharge(dev, s, 0, 512 * kMiB));
}

TEST(Region, SetLimitOfAnUnknownDeviceIsNotFound) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->SetLimit(kUuidB, kGiB).code(), core::StatusCode::kNotFound);
}

TEST(Region, MonitoringCountersStartAtZeroAndAreReportedByDevices) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(100));
  ASSERT_TRUE(r.ok());
  std::vector<DeviceUsage> before = (*r)->Devices();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(before[0].refused_allocs, 0u);
  EXPECT_EQ(before[0].throttled_ns, 0u);
  EXPECT_FALSE(before[0].launches_paused);
  auto& dev = (*r)->device(0);
  auto& s = (*r)->slot(*(*r)->ClaimSlot(getpid(), 0));
  ASSERT_FALSE(TryCharge(dev, s, 0, 101));
  CountRefusal(dev);
  CountRefusal(dev);
  dev.throttled_ns.fetch_add(1500);
  // Another mapping of the same file (another process of the slice, or the
  // daemon) sees the counters.
  auto other = Region::Open(dir.File("r"));
  ASSERT_TRUE(other.ok());
  std::vector<DeviceUsage> after = (*other)->Devices();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].refused_allocs, 2u);
  EXPECT_EQ(after[0].throttled_ns, 1500u);
  EXPECT_EQ(after[0].used_bytes, 0u);
}

TEST(Region, SetLaunchesPausedIsSeenByEveryMappingAndCanBeCleared) {
  TempDir dir;
  RegionOptions o = OneDevice(kGiB);
  o.devices.push_back({kUuidB, kGiB});
  auto r = Region::Create(dir.File("r"), o);
  ASSERT_TRUE(r.ok());
  auto other = Region::Open(dir.File("r"));
  ASSERT_TRUE(other.ok());
  const uint64_t gen = (*r)->header().limits_generation.load();
  ASSERT_TRUE((*r)->SetLaunchesPaused(kUuidB, true).ok());
  EXPECT_EQ((*other)->device(1).launches_paused.load(), 1u);
  EXPECT_EQ((*other)->device(0).launches_paused.load(), 0u);
  std::vector<DeviceUsage> u = (*other)->Devices();
  ASSERT_EQ(u.size(), 2u);
  EXPECT_FALSE(u[0].launches_paused);
  EXPECT_TRUE(u[1].launches_paused);
  // Pausing is not a limit change: the memory admission does not re-read.
  EXPECT_EQ((*r)->header().limits_generation.load(), gen);
  ASSERT_TRUE((*r)->SetLaunchesPaused("gpu-AAAAAAAA-bbbb-cccc-dddd-eeeeeeeeeeee", false).ok());
  EXPECT_FALSE((*other)->Devices()[1].launches_paused);
}

TEST(Region, SetLaunchesPausedOfAnUnknownDeviceIsNotFound) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->SetLaunchesPaused(kUuidB, true).code(), core::StatusCode::kNotFound);
}

TEST(Region, SweepReturnsTheUsageOfDeadProcessesOnly) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  auto& dev = (*r)->device(0);
  uint32_t a = *(*r)->ClaimSlot(1001, 7);
  uint32_t b = *(*r)->ClaimSlot(1002, 7);
  ASSERT_TRUE(TryCharge(dev, (*r)->slot(a), 0, 300 * kMiB));
  ASSERT_TRUE(TryCharge(dev, (*r)->slot(b), 0, 200 * kMiB));
  FakeProbe probe;
  EXPECT_EQ((*r)->Sweep(probe), 0u);
  probe.Kill(1001);
  EXPECT_EQ((*r)->Sweep(probe), 1u);
  EXPECT_EQ(dev.used_bytes.load(), 200 * kMiB);
  EXPECT_EQ((*r)->Processes().size(), 1u);
  EXPECT_EQ((*r)->Processes()[0].pid, 1002);
  EXPECT_EQ((*r)->Sweep(probe), 0u);  // Already reclaimed.
}

TEST(Region, ReleaseSlotReturnsEverythingItHeld) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  uint32_t a = *(*r)->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(TryCharge((*r)->device(0), (*r)->slot(a), 0, 10 * kMiB));
  (*r)->ReleaseSlot(a, getpid());
  EXPECT_EQ((*r)->device(0).used_bytes.load(), 0u);
  EXPECT_TRUE((*r)->Processes().empty());
}

TEST(Region, ClaimSlotWhenFullSweepsDeadProcessesFirst) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  // Fill every slot with a pid that cannot exist.
  for (uint32_t i = 0; i < layout::kMaxProcesses; ++i) {
    ASSERT_TRUE((*r)->ClaimSlot(0x7ffffff0, 0).ok());
  }
  auto more = (*r)->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(more.ok()) << more.status().ToString();
}

TEST(Region, ProcessStartTimeOfOurselvesIsStable) {
  auto a = ProcessStartTime(getpid());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GT(*a, 0u);
  EXPECT_EQ(*a, *ProcessStartTime(getpid()));
  EXPECT_FALSE(RealProcessProbe().IsAlive(getpid(), *a + 1));  // A "reused" pid.
  EXPECT_TRUE(RealProcessProbe().IsAlive(getpid(), *a));
}

TEST(Region, UsageOfAProcessKilledWithSigkillIsReclaimedBySweep) {
  TempDir dir;
  auto r = Region::Create(dir.File("r"), OneDevice(kGiB));
  ASSERT_TRUE(r.ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    auto mine = Region::Open(dir.File("r"));
    uint32_t s = *(*mine)->ClaimSlot(getpid(), *ProcessStartTime(getpid()));
    TryCharge((*mine)->device(0), (*mine)->slot(s), 0, 700 * kMiB);
    char c = 1;
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ((*r)->device(0).used_bytes.load(), 700 * kMiB);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ((*r)->Sweep(RealProcessProbe()), 1u);
  EXPECT_EQ((*r)->device(0).used_bytes.load(), 0u);
}

// N processes x M threads charge and uncharge random sizes as fast as they
// can against a small limit. Every successful charge is checked against the
// peak: the slice must never hold more than the limit, not by one byte.
TEST(Region, RacingProcessesAndThreadsNeverOvershootTheLimit) {
  TempDir dir;
  constexpr uint64_t kLimit = 1000003;  // Prime: sizes never tile it exactly.
  auto r = Region::Create(dir.File("r"), OneDevice(kLimit));
  ASSERT_TRUE(r.ok());
  constexpr int kProcesses = 4;
  constexpr int kThreads = 4;
  constexpr int kIterations = 20000;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    pid_t child = fork();
    if (child == 0) {
      auto mine = Region::Open(dir.File("r"));
      if (!mine.ok()) _exit(2);
      uint32_t s = *(*mine)->ClaimSlot(getpid(), 0);
      auto& dev = (*mine)->device(0);
      auto& slot = (*mine)->slot(s);
      std::atomic<bool> bad{false};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          uint64_t x = 88172645463325252ull + p * 31 + t;
          std::vector<uint64_t> held;
          for (int i = 0; i < kIterations; ++i) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t size = 1 + x % 150000;
            if (held.size() < 16 && TryCharge(dev, slot, 0, size)) {
              held.push_back(size);
              if (dev.used_bytes.load(std::memory_order_relaxed) > kLimit) bad = true;
            } else if (!held.empty()) {
              Uncharge(dev, slot, 0, held.back());
              held.pop_back();
            }
          }
          for (uint64_t h : held) Uncharge(dev, slot, 0, h);
        });
      }
      for (auto& t : threads) t.join();
      (*mine)->ReleaseSlot(s, getpid());
      _exit(bad ? 1 : 0);
    }
    children.push_back(child);
  }
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_LE((*r)->device(0).peak_bytes.load(), kLimit);
  // Each thread alone can ask for more than the limit, so the slice was
  // driven to its limit (whatever the scheduling on a busy machine).
  EXPECT_GT((*r)->device(0).peak_bytes.load(), kLimit - 150000);
  EXPECT_EQ((*r)->device(0).used_bytes.load(), 0u);
}

}  // namespace
}  // namespace gpuslice::slice
