#include "slice/region/limits_page.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "core/units.h"
#include "slice/region/admission.h"
#include "slice/region/region.h"

namespace gpuslice::slice {
namespace {

using core::kGiB;
using core::kMiB;

constexpr char kUuidA[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kUuidB[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
// An unprivileged uid for the tests that need a reader other than root.
constexpr uid_t kNobody = 65534;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gpuslice-limits-test-XXXXXX";
    path_ = mkdtemp(tmpl);
    // Reachable by the unprivileged children some tests fork.
    chmod(path_.c_str(), 0755);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

LimitsOptions TwoDevices() {
  LimitsOptions o;
  o.name = "job-7";
  o.job_id = 7;
  DeviceControls a;
  a.uuid = kUuidA;
  a.limit_bytes = 4 * kGiB;
  a.share_milli = 300;
  a.priority = core::Priority::kHigh;
  DeviceControls b;
  b.uuid = kUuidB;
  b.limit_bytes = kGiB;
  b.mode = ComputeMode::kWorkConserving;
  b.launches_paused = true;
  o.devices = {a, b};
  return o;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  stat(path.c_str(), &st);
  return st.st_mode & 07777;
}

// Runs `body` in a forked child as `uid` (root only; the caller skips
// otherwise) and returns its exit status: 0 when every check passed, else
// the number of the first failed check.
int AsUser(uid_t uid, const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(uid) != 0 || setuid(uid) != 0) _exit(100);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

TEST(LimitsPage, ReadOnlyMappingSeesEveryDevicesControls) {
  TempDir dir;
  auto created = LimitsPage::Create(dir.File("limits"), TwoDevices());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(ModeOf(dir.File("limits")), 0644u);
  auto page = LimitsPage::OpenReadOnly(dir.File("limits"));
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_FALSE((*page)->writable());
  EXPECT_EQ((*page)->header().job_id, 7u);
  EXPECT_EQ((*page)->header().flags & layout::kLimitsFlagClosed, layout::kLimitsFlagClosed);
  auto devices = (*page)->Devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].uuid, kUuidA);
  EXPECT_EQ(devices[0].limit_bytes, 4 * kGiB);
  EXPECT_EQ(devices[0].share_milli, 300u);
  EXPECT_EQ(devices[0].priority, core::Priority::kHigh);
  EXPECT_EQ(devices[0].mode, ComputeMode::kHard);
  EXPECT_FALSE(devices[0].launches_paused);
  EXPECT_EQ(devices[1].limit_bytes, kGiB);
  EXPECT_EQ(devices[1].mode, ComputeMode::kWorkConserving);
  EXPECT_TRUE(devices[1].launches_paused);
  // Matched as region UUIDs are: prefix and case do not matter.
  EXPECT_EQ((*page)->Find("gpu-AAAAAAAA-bbbb-cccc-dddd-eeeeeeeeeeee"), &(*page)->entry(1));
  EXPECT_EQ((*page)->Find("GPU-99999999-2222-3333-4444-555555555555"), nullptr);
}

TEST(LimitsPage, CreateRefusesBadOptionsAndLeavesNoFile) {
  TempDir dir;
  LimitsOptions writable = TwoDevices();
  writable.mode = 0664;
  EXPECT_EQ(LimitsPage::Create(dir.File("a"), writable).status().code(),
            core::StatusCode::kInvalidArgument);
  LimitsOptions twice = TwoDevices();
  twice.devices[1].uuid = "gpu-11111111-2222-3333-4444-555555555555";
  EXPECT_EQ(LimitsPage::Create(dir.File("b"), twice).status().code(),
            core::StatusCode::kInvalidArgument);
  LimitsOptions share = TwoDevices();
  share.devices[0].share_milli = 1001;
  EXPECT_EQ(LimitsPage::Create(dir.File("c"), share).status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  ASSERT_TRUE(LimitsPage::Create(dir.File("d"), TwoDevices()).ok());
  EXPECT_EQ(LimitsPage::Create(dir.File("d"), TwoDevices()).status().code(),
            core::StatusCode::kAlreadyExists);
}

TEST(LimitsPage, UpdatesReachEveryReaderAndBumpTheGeneration) {
  TempDir dir;
  auto daemon = LimitsPage::Create(dir.File("limits"), TwoDevices());
  ASSERT_TRUE(daemon.ok());
  auto reader = LimitsPage::OpenReadOnly(dir.File("limits"));
  ASSERT_TRUE(reader.ok());
  uint64_t gen = (*reader)->generation();
  ASSERT_TRUE((*daemon)->SetLimit(kUuidA, 8 * kGiB).ok());
  EXPECT_EQ((*reader)->entry(0).limit_bytes.load(), 8 * kGiB);
  EXPECT_GT((*reader)->generation(), gen);
  gen = (*reader)->generation();
  ASSERT_TRUE((*daemon)->SetLaunchesPaused(kUuidB, false).ok());
  EXPECT_FALSE((*reader)->Devices()[1].launches_paused);
  EXPECT_GT((*reader)->generation(), gen);
  DeviceControls c;
  c.uuid = kUuidB;
  c.limit_bytes = 0;
  c.share_milli = 700;
  c.priority = core::Priority::kLow;
  ASSERT_TRUE((*daemon)->Set(c).ok());
  auto after = (*reader)->Devices()[1];
  EXPECT_EQ(after.limit_bytes, 0u);
  EXPECT_EQ(after.share_milli, 700u);
  EXPECT_EQ(after.priority, core::Priority::kLow);
  EXPECT_EQ(after.mode, ComputeMode::kHard);
  // A device the slice does not have cannot be added by an update.
  EXPECT_EQ((*daemon)->SetLimit("GPU-99999999-2222-3333-4444-555555555555", kGiB).code(),
            core::StatusCode::kNotFound);
  // A second daemon-side mapping (a restarted daemon) updates the same page.
  auto again = LimitsPage::OpenForUpdate(dir.File("limits"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE((*again)->SetLimit(kUuidA, 2 * kGiB).ok());
  EXPECT_EQ((*reader)->Devices()[0].limit_bytes, 2 * kGiB);
}

TEST(LimitsPage, AReadOnlyMappingCannotBeUpdated) {
  TempDir dir;
  ASSERT_TRUE(LimitsPage::Create(dir.File("limits"), TwoDevices()).ok());
  auto reader = LimitsPage::OpenReadOnly(dir.File("limits"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->SetLimit(kUuidA, ~0ull).code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*reader)->Devices()[0].limit_bytes, 4 * kGiB);
}

TEST(LimitsPage, APageWritableByGroupOrOthersIsRefused) {
  TempDir dir;
  ASSERT_TRUE(LimitsPage::Create(dir.File("limits"), TwoDevices()).ok());
  for (mode_t mode : {0664, 0646, 0444 | 0020}) {
    SCOPED_TRACE(mode);
    ASSERT_EQ(chmod(dir.File("limits").c_str(), mode), 0);
    auto page = LimitsPage::OpenReadOnly(dir.File("limits"));
    EXPECT_EQ(page.status().code(), core::StatusCode::kPermissionDenied);
    EXPECT_NE(page.status().message().find("writable by group or others"), std::string::npos)
        << page.status().message();
  }
}

// The page a job could rewrite decides nothing: its own shim refuses it.
TEST(LimitsPage, APageTheReaderOwnsAndCanWriteIsRefused) {
  TempDir dir;
  ASSERT_TRUE(LimitsPage::Create(dir.File("limits"), TwoDevices()).ok());
  if (geteuid() != 0) {
    auto page = LimitsPage::OpenReadOnly(dir.File("limits"));  // Ours, 0644.
    EXPECT_EQ(page.status().code(), core::StatusCode::kPermissionDenied);
    return;
  }
  ASSERT_EQ(chown(dir.File("limits").c_str(), kNobody, kNobody), 0);
  const std::string path = dir.File("limits");
  EXPECT_EQ(AsUser(kNobody,
                   [&] {
                     auto page = LimitsPage::OpenReadOnly(path);
                     if (page.status().code() != core::StatusCode::kPermissionDenied) return 1;
                     if (page.status().message().find("writable by it") == std::string::npos)
                       return 2;
                     return 0;
                   }),
            0);
  // The same file made read-only for its owner (a daemon that is not root,
  // its jobs running as its user) is accepted.
  ASSERT_EQ(chmod(path.c_str(), 0444), 0);
  EXPECT_EQ(AsUser(kNobody, [&] { return LimitsPage::OpenReadOnly(path).ok() ? 0 : 1; }), 0);
}

TEST(LimitsPage, ARootOwnedPageIsAcceptedAndCannotBeOpenedForWritingByAJob) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as another user";
  TempDir dir;
  ASSERT_TRUE(LimitsPage::Create(dir.File("limits"), TwoDevices()).ok());  // root, 0644.
  const std::string path = dir.File("limits");
  EXPECT_EQ(AsUser(kNobody,
                   [&] {
                     auto page = LimitsPage::OpenReadOnly(path);
                     if (!page.ok()) return 1;
                     if ((*page)->entry(0).limit_bytes.load() != 4 * kGiB) return 2;
                     if (open(path.c_str(), O_RDWR) >= 0 || errno != EACCES) return 3;
                     if (LimitsPage::OpenForUpdate(path).ok()) return 4;
                     if (chmod(path.c_str(), 0666) == 0) return 5;
                     return 0;
                   }),
            0);
}

TEST(LimitsPage, AnotherVersionOrSizeIsRefused) {
  TempDir dir;
  ASSERT_TRUE(LimitsPage::Create(dir.File("limits"), TwoDevices()).ok());
  {
    int fd = open(dir.File("limits").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const uint32_t version = layout::kLimitsVersion + 1;
    ASSERT_EQ(pwrite(fd, &version, sizeof(version), offsetof(layout::LimitsHeader, version)),
              ssize_t(sizeof(version)));
    close(fd);
  }
  auto page = LimitsPage::OpenReadOnly(dir.File("limits"));
  EXPECT_EQ(page.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(page.status().message().find("version 2"), std::string::npos)
      << page.status().message();
  ASSERT_EQ(truncate(dir.File("limits").c_str(), 8192), 0);
  EXPECT_EQ(LimitsPage::OpenReadOnly(dir.File("limits")).status().code(),
            core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(LimitsPage::OpenReadOnly(dir.File("missing")).status().code(),
            core::StatusCode::kNotFound);
}

// A daemon that is not root makes the page 0444 and can still update it:
// the owner-write bit is lifted for the open and put back.
TEST(LimitsPage, AnOwnReadOnlyPageCanBeUpdatedAndStaysReadOnly) {
  TempDir dir;
  const std::string path = dir.File("limits");
  auto update = [&] {
    LimitsOptions o = TwoDevices();
    o.mode = 0444;
    if (!LimitsPage::Create(path, o).ok()) return 1;
    auto page = LimitsPage::OpenForUpdate(path);
    if (!page.ok()) return 2;
    if (!(*page)->SetLimit(kUuidA, kGiB).ok()) return 3;
    if (ModeOf(path) != 0444u) return 4;
    auto reader = LimitsPage::OpenReadOnly(path);
    if (!reader.ok() || (*reader)->entry(0).limit_bytes.load() != kGiB) return 5;
    return 0;
  };
  if (geteuid() != 0) {
    EXPECT_EQ(update(), 0);
    return;
  }
  ASSERT_EQ(chown(dir.path().c_str(), kNobody, kNobody), 0);
  EXPECT_EQ(AsUser(kNobody, update), 0);
}

// --- A region with the daemon's limits page attached (the shim's view). ---

std::unique_ptr<Region> MakeRegion(const TempDir& dir, const std::vector<DeviceLimit>& devices) {
  RegionOptions o;
  o.name = "test";
  o.closed = true;
  o.devices = devices;
  auto r = Region::Create(dir.File("region"), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

std::unique_ptr<LimitsPage> ReadOnlyPage(const TempDir& dir, const LimitsOptions& o) {
  auto created = LimitsPage::Create(dir.File("limits"), o);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  auto page = LimitsPage::OpenReadOnly(dir.File("limits"));
  EXPECT_TRUE(page.ok()) << page.status().ToString();
  return page.ok() ? std::move(*page) : nullptr;
}

// The shim's admission, as Admit does it: the limit through LimitOf.
bool Admit(Region& r, uint32_t d, uint32_t slot, uint64_t bytes) {
  return TryCharge(r.device(d), r.slot(slot), d, bytes, r.LimitOf(d));
}

// A job owns its region and may rewrite the limit there to "unlimited"
// (and its share, priority and pause); what the shim admits and follows
// does not change.
TEST(RegionWithLimitsPage, ARewrittenRegionDecidesNothing) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}, {kUuidB, kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(ReadOnlyPage(dir, TwoDevices()));
  ASSERT_TRUE(region->has_limits_page());
  // The job's write, through its own mapping of its own file.
  auto job = Region::Open(dir.File("region"));
  ASSERT_TRUE(job.ok());
  for (uint32_t d = 0; d < 2; ++d) {
    layout::DeviceEntry& e = (*job)->device(d);
    e.limit_bytes.store(layout::kUnlimited);
    e.compute_share_milli.store(1000);
    e.priority.store(uint32_t(core::Priority::kHigh) + 1);
    e.compute_mode.store(2);
    e.launches_paused.store(0);
  }
  ASSERT_TRUE((*job)->SetLimit(kUuidA, 40 * kGiB).ok());
  (*job)->header().flags = 0;  // "Open": may add devices.

  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);
  EXPECT_EQ(region->LimitOf(1), kGiB);
  EXPECT_EQ(region->ShareOf(0), 300u);
  EXPECT_EQ(region->ShareOf(1), 0u);
  EXPECT_EQ(region->PriorityOf(1), uint32_t(core::Priority::kNormal) + 1);
  EXPECT_EQ(region->ModeOf(0), 0u);
  EXPECT_TRUE(region->LaunchesPausedOf(1));
  EXPECT_TRUE(region->closed());
  EXPECT_EQ(
      region->FindOrAddDevice("GPU-99999999-2222-3333-4444-555555555555", ~0ull).status().code(),
      core::StatusCode::kNotFound);
  uint32_t slot = *region->ClaimSlot(getpid(), 0);
  EXPECT_TRUE(Admit(*region, 0, slot, 3 * kGiB));
  EXPECT_FALSE(Admit(*region, 0, slot, 2 * kGiB)) << "past the page's 4 GiB";
  EXPECT_TRUE(Admit(*region, 0, slot, kGiB));
  EXPECT_FALSE(Admit(*region, 0, slot, 1));
  EXPECT_EQ(region->Devices()[0].limit_bytes, 4 * kGiB);
}

TEST(RegionWithLimitsPage, TheDaemonsLiveChangesAreFollowed) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}, {kUuidB, kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(ReadOnlyPage(dir, TwoDevices()));
  auto daemon = LimitsPage::OpenForUpdate(dir.File("limits"));
  ASSERT_TRUE(daemon.ok());
  uint32_t slot = *region->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(Admit(*region, 1, slot, 768 * kMiB));
  EXPECT_FALSE(Admit(*region, 1, slot, 512 * kMiB));
  ASSERT_TRUE((*daemon)->SetLimit(kUuidB, 2 * kGiB).ok());
  EXPECT_TRUE(Admit(*region, 1, slot, 512 * kMiB));
  ASSERT_TRUE((*daemon)->SetLaunchesPaused(kUuidB, false).ok());
  EXPECT_FALSE(region->LaunchesPausedOf(1));
  DeviceControls c;
  c.uuid = kUuidA;
  c.limit_bytes = 4 * kGiB;
  c.share_milli = 550;
  c.mode = ComputeMode::kWorkConserving;
  c.priority = core::Priority::kLow;
  ASSERT_TRUE((*daemon)->Set(c).ok());
  EXPECT_EQ(region->ShareOf(0), 550u);
  EXPECT_EQ(region->ModeOf(0), 2u);
  EXPECT_EQ(region->PriorityOf(0), uint32_t(core::Priority::kLow) + 1);
  // The region's own setters no longer decide for this process.
  ASSERT_TRUE(region->SetLimit(kUuidA, 40 * kGiB).ok());
  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);
}

constexpr char kUuidC[] = "GPU-cccccccc-1111-2222-3333-444444444444";

TEST(LimitsPage, AMoveRenamesTheDeviceKeepsItsControlsAndStepsThePlacementCounter) {
  TempDir dir;
  auto daemon = LimitsPage::Create(dir.File("limits"), TwoDevices());
  ASSERT_TRUE(daemon.ok());
  auto reader = LimitsPage::OpenReadOnly(dir.File("limits"));
  ASSERT_TRUE(reader.ok());
  std::string uuid;
  uint32_t placement = 99;
  ASSERT_TRUE((*reader)->ReadPlacement(0, &uuid, &placement));
  EXPECT_EQ(uuid, kUuidA);
  EXPECT_EQ(placement, 0u);
  const uint64_t gen = (*reader)->generation();
  ASSERT_TRUE((*daemon)->MoveDevice(kUuidA, kUuidC).ok());
  ASSERT_TRUE((*reader)->ReadPlacement(0, &uuid, &placement));
  EXPECT_EQ(uuid, kUuidC);
  EXPECT_EQ(placement, 2u);
  EXPECT_GT((*reader)->generation(), gen);
  EXPECT_EQ((*reader)->Find(kUuidA), nullptr);
  ASSERT_NE((*reader)->Find(kUuidC), nullptr);
  const DeviceControls moved = (*reader)->Devices()[0];
  EXPECT_EQ(moved.limit_bytes, 4 * kGiB);
  EXPECT_EQ(moved.share_milli, 300u);
  EXPECT_EQ(moved.priority, core::Priority::kHigh);
  // Refused: a device the slice does not have, one it has already (two
  // entries would name one GPU), a bad UUID, the read-only mapping.
  EXPECT_EQ((*daemon)->MoveDevice(kUuidA, kUuidB).code(), core::StatusCode::kNotFound);
  EXPECT_EQ((*daemon)->MoveDevice(kUuidC, kUuidB).code(), core::StatusCode::kAlreadyExists);
  EXPECT_EQ((*daemon)->MoveDevice(kUuidC, "").code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->MoveDevice(kUuidC, kUuidA).code(), core::StatusCode::kFailedPrecondition);
  // A reader that catches the entry mid-move (odd counter) is told to wait.
  const_cast<layout::LimitsEntry&>((*daemon)->entry(1)).placement.store(5);
  EXPECT_FALSE((*reader)->ReadPlacement(1, &uuid, &placement));
  EXPECT_FALSE((*reader)->ReadPlacement(7, &uuid, &placement));  // No such entry.
}

// The slice's processes keep their device index across a move: the
// region's entry is renamed in place, its counters stay, and the page the
// process attached at start says where the device is now.
TEST(RegionWithLimitsPage, AMovedDeviceKeepsItsIndexAndUsageAndThePageSaysWhereItIs) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}, {kUuidB, kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(ReadOnlyPage(dir, TwoDevices()));
  uint32_t slot = *region->ClaimSlot(getpid(), 0);
  ASSERT_TRUE(Admit(*region, 0, slot, 3 * kGiB));
  EXPECT_EQ(region->PlacementSeqOf(0), 0u);
  auto daemon = LimitsPage::OpenForUpdate(dir.File("limits"));
  ASSERT_TRUE(daemon.ok());
  auto daemon_region = Region::Open(dir.File("region"));
  ASSERT_TRUE(daemon_region.ok());
  ASSERT_TRUE((*daemon)->MoveDevice(kUuidA, kUuidC).ok());
  ASSERT_TRUE((*daemon_region)->RenameDevice(kUuidA, kUuidC).ok());
  EXPECT_EQ(region->PlacementSeqOf(0), 2u);
  std::string uuid;
  uint32_t placement = 0;
  ASSERT_TRUE(region->PlacementOf(0, &uuid, &placement));
  EXPECT_EQ(uuid, kUuidC);
  EXPECT_EQ(*region->FindDevice(kUuidC), 0u);
  EXPECT_FALSE(region->FindDevice(kUuidA).ok());
  EXPECT_EQ(region->Devices()[0].used_bytes, 3 * kGiB);
  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);  // Same entry, same controls.
  EXPECT_FALSE(Admit(*region, 0, slot, 2 * kGiB));
  EXPECT_EQ((*daemon_region)->RenameDevice(kUuidC, kUuidB).code(),
            core::StatusCode::kAlreadyExists);
  EXPECT_EQ((*daemon_region)->RenameDevice(kUuidA, kUuidB).code(), core::StatusCode::kNotFound);
  // Without a page the region's own name is where the device is.
  auto plain = Region::Open(dir.File("region"));
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE((*plain)->PlacementOf(1, &uuid, &placement));
  EXPECT_EQ(uuid, kUuidB);
  EXPECT_EQ(placement, 0u);
}

// The job owns its region: renaming its device there (to follow another
// GPU's turns, say) changes nothing about where the shim says it is.
TEST(RegionWithLimitsPage, AJobThatRenamesItsRegionsDeviceDoesNotMoveIt) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}, {kUuidB, kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(ReadOnlyPage(dir, TwoDevices()));
  auto job = Region::Open(dir.File("region"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE((*job)->RenameDevice(kUuidA, kUuidC).ok());
  std::string uuid;
  uint32_t placement = 0;
  ASSERT_TRUE(region->PlacementOf(0, &uuid, &placement));
  EXPECT_EQ(uuid, kUuidA);
  EXPECT_EQ(placement, 0u);
  EXPECT_EQ(region->PlacementSeqOf(0), 0u);
  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);
}

TEST(RegionWithLimitsPage, ADeviceThePageDoesNotListGetsNoMemory) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}, {kUuidB, 4 * kGiB}});
  ASSERT_NE(region, nullptr);
  LimitsOptions only_a = TwoDevices();
  only_a.devices.resize(1);
  region->AttachLimits(ReadOnlyPage(dir, only_a));
  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);
  EXPECT_EQ(region->LimitOf(1), 0u);
  EXPECT_EQ(region->ShareOf(1), 0u);
  EXPECT_FALSE(region->LaunchesPausedOf(1));
  for (uint32_t d = 2; d < layout::kMaxDevices; ++d) EXPECT_EQ(region->LimitOf(d), 0u) << d;
  uint32_t slot = *region->ClaimSlot(getpid(), 0);
  EXPECT_FALSE(Admit(*region, 1, slot, 1));
  // Renaming the region's device B to A's UUID afterwards changes nothing:
  // entries are matched once, when the page is attached.
  std::strcpy(region->device(1).uuid, kUuidA);
  EXPECT_EQ(region->LimitOf(1), 0u);
}

TEST(RegionWithLimitsPage, WithoutAUsablePageNothingIsGranted) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(nullptr);
  EXPECT_FALSE(region->has_limits_page());
  EXPECT_TRUE(region->closed());
  EXPECT_EQ(region->LimitOf(0), 0u);
  uint32_t slot = *region->ClaimSlot(getpid(), 0);
  EXPECT_FALSE(Admit(*region, 0, slot, 1));
}

TEST(RegionWithLimitsPage, ASuspensionIsSeenThroughTheRegionAndOnlyTheDaemonSetsIt) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}});
  ASSERT_NE(region, nullptr);
  region->AttachLimits(ReadOnlyPage(dir, TwoDevices()));
  const std::atomic<uint64_t>* word = region->SuspensionWord();
  ASSERT_NE(word, nullptr);
  EXPECT_EQ(word->load(), 0u) << "a new page says: not suspended";
  auto daemon = LimitsPage::OpenForUpdate(dir.File("limits"));
  ASSERT_TRUE(daemon.ok());
  const uint64_t gen = (*daemon)->generation();
  ASSERT_TRUE((*daemon)->SetSuspension(1'700'000'000'123).ok());
  EXPECT_EQ(word->load(), 1'700'000'000'123u);
  EXPECT_GT((*daemon)->generation(), gen);
  ASSERT_TRUE((*daemon)->SetSuspension(0).ok());
  EXPECT_EQ(word->load(), 0u);
  auto reader = LimitsPage::OpenReadOnly(dir.File("limits"));
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->SetSuspension(1).code(), core::StatusCode::kFailedPrecondition);
  // A standalone slice (no page) is never suspended.
  TempDir other;
  auto standalone = MakeRegion(other, {{kUuidA, 4 * kGiB}});
  ASSERT_NE(standalone, nullptr);
  EXPECT_EQ(standalone->SuspensionWord(), nullptr);
}

TEST(RegionWithLimitsPage, WithoutAPageTheRegionsOwnFieldsDecide) {
  TempDir dir;
  auto region = MakeRegion(dir, {{kUuidA, 4 * kGiB}});
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->LimitOf(0), 4 * kGiB);
  ASSERT_TRUE(region->SetLimit(kUuidA, kGiB).ok());
  EXPECT_EQ(region->LimitOf(0), kGiB);
  ASSERT_TRUE(
      region->SetComputeShare(kUuidA, 250, ComputeMode::kWorkConserving, core::Priority::kHigh)
          .ok());
  EXPECT_EQ(region->ShareOf(0), 250u);
  EXPECT_EQ(region->ModeOf(0), 2u);
  EXPECT_EQ(region->PriorityOf(0), uint32_t(core::Priority::kHigh) + 1);
  ASSERT_TRUE(region->SetLaunchesPaused(kUuidA, true).ok());
  EXPECT_TRUE(region->LaunchesPausedOf(0));
}

}  // namespace
}  // namespace gpuslice::slice
