#include "daemon/compute/region_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "slice/region/admission.h"
#include "slice/region/limits_page.h"
#include "slice/region/region.h"

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

// The job's user in the tests that need one other than root.
constexpr uid_t kJobUid = 65534;

struct Stat {
  uid_t uid = ~0u;
  mode_t mode = 0;
};
Stat StatOf(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return {};
  return {st.st_uid, mode_t(st.st_mode & 07777)};
}

// Runs `body` in a forked child as `uid` and returns its exit status: 0 when
// every check passed, else the number of the first that failed.
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

class ShimRegionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-region-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  SliceLimits Limits(uint64_t id, std::vector<std::string> uuids) {
    SliceLimits l;
    l.job_id = id;
    l.uid = getuid();
    l.gid = getgid();
    l.uuids = std::move(uuids);
    l.memory_bytes_per_device = 4 * core::kGiB;
    return l;
  }

  std::string dir_;
};

struct Case {
  const char* what;
  uint32_t share_milli;
  bool work_conserving;
  core::Priority priority;
  uint32_t want_mode;  // DeviceEntry::compute_mode.
};

TEST_F(ShimRegionStoreTest, EachDeviceGetsTheShareModeAndPriority) {
  const Case cases[] = {
      {"a hard 30% fraction, high", 300, false, core::Priority::kHigh, 0},
      {"a work-conserving 70% fraction, low", 700, true, core::Priority::kLow, 2},
      {"a whole GPU (no share), low", 0, false, core::Priority::kLow, 0},
      {"a normal job", 250, false, core::Priority::kNormal, 0},
  };
  ShimRegionStore store(dir_ + "/slices");
  uint64_t id = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    SliceLimits l = Limits(id++, {"GPU-aaaa", "GPU-bbbb"});
    l.compute_milli = c.share_milli;
    l.work_conserving = c.work_conserving;
    l.priority = c.priority;
    auto path = store.Create(l);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    // In the daemon's limits page, which the job's shim reads.
    auto page = slice::LimitsPage::OpenForUpdate(store.LimitsPathOf(*path));
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const std::string& uuid : l.uuids) {
      const slice::layout::LimitsEntry* e = (*page)->Find(uuid);
      ASSERT_NE(e, nullptr) << uuid;
      EXPECT_EQ(e->limit_bytes.load(), 4 * core::kGiB) << uuid;
      EXPECT_EQ(e->compute_share_milli.load(), c.share_milli) << uuid;
      EXPECT_EQ(e->compute_mode.load(), c.want_mode) << uuid;
      // A set priority is encoded as core::Priority + 1 (0: unset).
      EXPECT_EQ(e->priority.load(), uint32_t(c.priority) + 1) << uuid;
    }
    // The job's region lists the devices (for its usage counters) and
    // decides nothing: its own limit and compute fields stay 0.
    auto region = slice::Region::Open(*path);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    for (const std::string& uuid : l.uuids) {
      auto index = (*region)->FindDevice(uuid);
      ASSERT_TRUE(index.ok()) << uuid;
      EXPECT_EQ((*region)->device(*index).limit_bytes.load(), 0u) << uuid;
      EXPECT_EQ((*region)->device(*index).compute_share_milli.load(), 0u) << uuid;
    }
  }
}

TEST_F(ShimRegionStoreTest, AShareAboveTheWholeGpuIsRefusedAndLeavesNoRegion) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(9, {"GPU-aaaa"});
  l.compute_milli = 1001;
  auto path = store.Create(l);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("above 100%"), std::string::npos)
      << path.status().message();
  EXPECT_FALSE(store.Exists(dir_ + "/slices/job-9/region"));
  EXPECT_FALSE(fs::exists(dir_ + "/slices/job-9"));
}

TEST_F(ShimRegionStoreTest, LaunchesPausedIsSetAtCreateAndFollowsUpdates) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(3, {"GPU-aaaa", "GPU-bbbb"});
  l.launches_paused = true;
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto page = slice::LimitsPage::OpenForUpdate(store.LimitsPathOf(*path));
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  for (const auto& d : (*page)->Devices()) EXPECT_TRUE(d.launches_paused) << d.uuid;
  l.launches_paused = false;
  ASSERT_TRUE(store.Update(*path, l).ok());
  for (const auto& d : (*page)->Devices()) EXPECT_FALSE(d.launches_paused) << d.uuid;
  l.launches_paused = true;
  ASSERT_TRUE(store.Update(*path, l).ok());
  for (const auto& d : (*page)->Devices()) EXPECT_TRUE(d.launches_paused) << d.uuid;
  // Never in the job's region.
  auto region = slice::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  for (const slice::DeviceUsage& d : (*region)->Devices()) EXPECT_FALSE(d.launches_paused);
}

// Resume on demand: the daemon says "suspended" in its page, the job asks
// in its region, and the daemon reads the request with pread whatever the
// job did to its file.
TEST_F(ShimRegionStoreTest, TheSuspensionGoesToThePageAndTheRequestIsReadFromTheRegion) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(4, {"GPU-aaaa"});
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto page = slice::LimitsPage::OpenReadOnly(store.LimitsPathOf(*path));
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ((*page)->suspension(), 0u);
  l.memory_bytes_per_device = 0;
  l.suspension = 1'700'000'123'456;
  ASSERT_TRUE(store.Update(*path, l).ok());
  EXPECT_EQ((*page)->suspension(), 1'700'000'123'456u);
  EXPECT_EQ((*page)->Devices()[0].limit_bytes, 0u);
  EXPECT_EQ(*store.ResumeRequest(*path), 0u) << "nobody asked yet";

  // The job's process asks, through its own mapping of its region.
  auto job = slice::Region::Open(*path);
  ASSERT_TRUE(job.ok());
  (*job)->header().resume_request.store(1'700'000'123'456);
  auto asked = store.ResumeRequest(*path);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  EXPECT_EQ(*asked, 1'700'000'123'456u);

  l.suspension = 0;
  l.memory_bytes_per_device = 4 * core::kGiB;
  ASSERT_TRUE(store.Update(*path, l).ok());
  EXPECT_EQ((*page)->suspension(), 0u);

  // A region the job truncated or rewrote is an error, never a crash.
  job->reset();
  ASSERT_EQ(truncate(path->c_str(), 100), 0);
  auto cut = store.ResumeRequest(*path);
  EXPECT_EQ(cut.status().code(), core::StatusCode::kFailedPrecondition) << cut.status().ToString();
  ASSERT_EQ(truncate(path->c_str(), 0), 0);
  EXPECT_FALSE(store.ResumeRequest(*path).ok());
  ASSERT_EQ(unlink(path->c_str()), 0);
  EXPECT_EQ(store.ResumeRequest(*path).status().code(), core::StatusCode::kNotFound);
}

TEST_F(ShimRegionStoreTest, AnUpdateOfSomeDevicesLeavesTheOthersAlone) {
  // An elastic job's shrink closes only the given-back GPU (limit 0) in the
  // region its running processes keep.
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(4, {"GPU-aaaa", "GPU-bbbb"});
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  SliceLimits gone = l;
  gone.uuids = {"GPU-bbbb"};
  gone.memory_bytes_per_device = 0;
  ASSERT_TRUE(store.Update(*path, gone).ok());
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 2u);
  for (const SliceUsage& u : *usage) {
    EXPECT_EQ(u.limit_bytes, u.uuid == "GPU-bbbb" ? 0 : 4 * core::kGiB) << u.uuid;
  }
}

TEST_F(ShimRegionStoreTest, UsageCarriesTheShimsRefusalAndThrottleCounters) {
  ShimRegionStore store(dir_ + "/slices");
  auto path = store.Create(Limits(4, {"GPU-aaaa"}));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto region = slice::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  // What the shim does in a job's processes (admission.h, the compute gate).
  slice::CountRefusal((*region)->device(0));
  slice::CountRefusal((*region)->device(0));
  (*region)->device(0).throttled_ns.fetch_add(2'500'000);
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].refused_allocs, 2u);
  EXPECT_EQ((*usage)[0].throttled_ns, 2'500'000u);
}

// The slice is a directory the job cannot write, holding the
// daemon's limits page (daemon-owned, read-only to the job) and the job's
// region (the job's, private).
TEST_F(ShimRegionStoreTest, CreateMakesADaemonDirectoryALimitsPageAndAJobRegion) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(12, {"GPU-aaaa"});
  const bool root = geteuid() == 0;
  if (root) l.uid = l.gid = kJobUid;
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const std::string dir = dir_ + "/slices/job-12";
  EXPECT_EQ(*path, dir + "/region");
  EXPECT_EQ(store.LimitsPathOf(*path), dir + "/limits");
  const uid_t daemon = geteuid();
  EXPECT_EQ(StatOf(dir_ + "/slices").mode, 0711u);
  EXPECT_EQ(StatOf(dir).uid, daemon);
  EXPECT_EQ(StatOf(dir).mode, 0755u);
  EXPECT_EQ(StatOf(dir + "/limits").uid, daemon);
  EXPECT_EQ(StatOf(dir + "/limits").mode, root ? 0644u : 0444u);
  EXPECT_EQ(StatOf(dir + "/region").uid, root ? kJobUid : daemon);
  EXPECT_EQ(StatOf(dir + "/region").mode, 0600u);
}

TEST_F(ShimRegionStoreTest, TheJobCannotWriteReplaceOrRemoveItsLimitsPage) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the job as another user";
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(13, {"GPU-aaaa"});
  l.uid = l.gid = kJobUid;
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const std::string dir = dir_ + "/slices/job-13";
  const std::string limits = dir + "/limits";
  EXPECT_EQ(AsUser(kJobUid,
                   [&] {
                     // Its own region: yes (it reports there).
                     int fd = open(path->c_str(), O_RDWR);
                     if (fd < 0) return 1;
                     close(fd);
                     // The limits page: read and map, never write.
                     if (open(limits.c_str(), O_RDWR) >= 0 || errno != EACCES) return 2;
                     if (!slice::LimitsPage::OpenReadOnly(limits).ok()) return 3;
                     if (chmod(limits.c_str(), 0666) == 0) return 4;
                     // Nor replace it, remove it or add beside it.
                     if (rename(path->c_str(), limits.c_str()) == 0) return 5;
                     if (unlink(limits.c_str()) == 0) return 6;
                     if (open((dir + "/fake").c_str(), O_CREAT | O_RDWR, 0444) >= 0) return 7;
                     return 0;
                   }),
            0);
  auto page = slice::LimitsPage::OpenReadOnly(limits);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ((*page)->Devices()[0].limit_bytes, 4 * core::kGiB);
}

// A job that rewrites its region's limit to "unlimited" (and its device list)
// gains nothing: the daemon's view of the slice's limits does not move, and a
// resize lands in the limits page only.
TEST_F(ShimRegionStoreTest, UsageAndUpdateNeverTakeALimitFromTheRegion) {
  ShimRegionStore store(dir_ + "/slices");
  SliceLimits l = Limits(14, {"GPU-aaaa", "GPU-bbbb"});
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto region = slice::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  (*region)->device(0).limit_bytes.store(~0ull);
  (*region)->device(0).used_bytes.store(20 * core::kGiB);
  std::strcpy((*region)->device(1).uuid, "GPU-cccc");  // A device it was never given.
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  ASSERT_EQ(usage->size(), 2u);
  EXPECT_EQ((*usage)[0].uuid, "GPU-aaaa");
  EXPECT_EQ((*usage)[0].limit_bytes, 4 * core::kGiB);
  EXPECT_EQ((*usage)[0].used_bytes, 20 * core::kGiB) << "what the job reports";
  EXPECT_EQ((*usage)[1].uuid, "GPU-bbbb");
  EXPECT_EQ((*usage)[1].limit_bytes, 4 * core::kGiB);
  EXPECT_EQ((*usage)[1].used_bytes, 0u);
  l.memory_bytes_per_device = 8 * core::kGiB;
  ASSERT_TRUE(store.Update(*path, l).ok());
  usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ((*usage)[0].limit_bytes, 8 * core::kGiB);
  EXPECT_EQ((*region)->device(0).limit_bytes.load(), ~0ull) << "the region is not written";
}

TEST_F(ShimRegionStoreTest, RemoveTakesTheWholeSliceDirectoryAndCreateReplacesAStaleOne) {
  ShimRegionStore store(dir_ + "/slices");
  auto path = store.Create(Limits(15, {"GPU-aaaa"}));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const std::string dir = dir_ + "/slices/job-15";
  std::ofstream(dir + "/members") << "x";  // What other parts keep there.
  // A crashed daemon's leftover for the same id: made again, fresh.
  SliceLimits again = Limits(15, {"GPU-bbbb"});
  again.memory_bytes_per_device = core::kGiB;
  path = store.Create(again);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_FALSE(fs::exists(dir + "/members"));
  auto usage = store.Usage(*path);
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].uuid, "GPU-bbbb");
  EXPECT_EQ((*usage)[0].limit_bytes, core::kGiB);
  std::ofstream(dir + "/members") << "x";
  ASSERT_TRUE(store.Remove(*path).ok());
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(store.Exists(*path));
  EXPECT_EQ(store.Remove(*path).code(), core::StatusCode::kNotFound);
}

TEST_F(ShimRegionStoreTest, OnlySlicesOfThisLayoutHaveALimitsPage) {
  ShimRegionStore store(dir_ + "/slices");
  EXPECT_EQ(store.LimitsPathOf(dir_ + "/slices/job-3/region"), dir_ + "/slices/job-3/limits");
  EXPECT_EQ(store.LimitsPathOf(dir_ + "/slices/job-3.slice"), "");
  EXPECT_EQ(store.LimitsPathOf("/elsewhere/job-3/region"), "");
  EXPECT_EQ(store.LimitsPathOf(dir_ + "/slices/other/region"), "");
  EXPECT_EQ(store.LimitsPathOf(""), "");
}

// A job started by an older daemon has one slice file (job-<id>.slice) that
// holds its limits too; a restarted daemon must still read, update and
// remove it, or it could not re-adopt the job.
TEST_F(ShimRegionStoreTest, AnOlderDaemonsSliceFileIsStillReadUpdatedAndRemoved) {
  ASSERT_EQ(mkdir((dir_ + "/slices").c_str(), 0755), 0);
  const std::string path = dir_ + "/slices/job-5.slice";
  slice::RegionOptions o;
  o.name = "job-5";
  o.closed = true;
  o.devices = {{"GPU-aaaa", 4 * core::kGiB}};
  auto old = slice::Region::Create(path, o);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  uint32_t slot = *(*old)->ClaimSlot(getpid(), 0);
  slice::ForceCharge((*old)->device(0), (*old)->slot(slot), 0, core::kGiB);
  ShimRegionStore store(dir_ + "/slices");
  ASSERT_TRUE(store.Exists(path));
  EXPECT_EQ(store.LimitsPathOf(path), "");
  auto usage = store.Usage(path);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].used_bytes, core::kGiB);
  EXPECT_EQ((*usage)[0].limit_bytes, ~0ull) << "no limit is taken from a job's file";
  auto pids = store.Pids(path);
  ASSERT_TRUE(pids.ok());
  EXPECT_EQ(*pids, std::vector<int32_t>{getpid()});
  // Its processes follow their region: a change has to go there.
  SliceLimits l = Limits(5, {"GPU-aaaa"});
  l.memory_bytes_per_device = 2 * core::kGiB;
  l.launches_paused = true;
  l.compute_milli = 300;
  l.work_conserving = true;
  l.priority = core::Priority::kHigh;
  const uint64_t generation = (*old)->header().limits_generation.load();
  ASSERT_TRUE(store.Update(path, l).ok());
  EXPECT_EQ((*old)->LimitOf(0), 2 * core::kGiB);
  EXPECT_TRUE((*old)->LaunchesPausedOf(0));
  EXPECT_EQ((*old)->ShareOf(0), 300u);
  EXPECT_EQ((*old)->ModeOf(0), 2u);
  EXPECT_EQ((*old)->PriorityOf(0), uint32_t(core::Priority::kHigh) + 1);
  EXPECT_EQ((*old)->header().limits_generation.load(), generation + 1);
  auto devices = store.Devices(path);
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(*devices, std::vector<std::string>{"GPU-aaaa"});
  ASSERT_TRUE(store.Remove(path).ok());
  EXPECT_FALSE(store.Exists(path));
}

TEST_F(ShimRegionStoreTest, AMoveRenamesTheDeviceInThePageAndInTheJobsRegion) {
  ShimRegionStore store(dir_ + "/slices");
  auto path = store.Create(Limits(4, {"GPU-aaaa", "GPU-bbbb"}));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto region = slice::Region::Open(*path);
  ASSERT_TRUE(region.ok());
  const uint64_t generation = (*region)->header().limits_generation.load();
  ASSERT_TRUE(store.Move(*path, {{"GPU-aaaa", "GPU-cccc"}}, Limits(4, {})).ok());
  auto devices = store.Devices(*path);
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ(*devices, std::vector<std::string>({"GPU-cccc", "GPU-bbbb"}));
  // The region keeps the entry's index (its counters go on) under the new name.
  EXPECT_EQ(*(*region)->FindDevice("GPU-cccc"), 0u);
  EXPECT_FALSE((*region)->FindDevice("GPU-aaaa").ok());
  EXPECT_EQ((*region)->header().limits_generation.load(), generation + 1);
  // Onto a device the slice has already: refused, nothing renamed.
  EXPECT_FALSE(store.Move(*path, {{"GPU-cccc", "GPU-bbbb"}}, Limits(4, {})).ok());
  EXPECT_EQ(*store.Devices(*path), std::vector<std::string>({"GPU-cccc", "GPU-bbbb"}));
}

// A daemon that read a job's region through a mapping would die (SIGBUS)
// within seconds of a job shrinking and regrowing its file in a loop, and
// so would the restarted daemon. Every call the daemon makes
// on a slice, while the job's user does exactly that, in a child "daemon"
// process so that a fault fails the test rather than ending it. Whatever the
// file holds at each moment is a report or "no report".
TEST_F(ShimRegionStoreTest, AJobThatTruncatesItsRegionInALoopNeverFaultsTheDaemon) {
  ShimRegionStore store(dir_ + "/slices");
  const bool root = geteuid() == 0;
  SliceLimits l = Limits(8, {"GPU-aaaa"});
  if (root) l.uid = l.gid = kJobUid;
  auto path = store.Create(l);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  std::string header(slice::layout::kHeaderSize, '\0');
  {
    std::ifstream in(*path, std::ios::binary);
    in.read(header.data(), std::streamsize(header.size()));
  }
  pid_t attacker = fork();
  ASSERT_GE(attacker, 0);
  if (attacker == 0) {
    // The job's user, on its own file: shrink, regrow, header back.
    int fd = open(path->c_str(), O_RDWR);
    if (fd < 0) _exit(101);
    if (root && (setgid(kJobUid) != 0 || setuid(kJobUid) != 0)) _exit(100);
    while (true) {  // Until killed.
      if (ftruncate(fd, 0) != 0 || ftruncate(fd, slice::layout::kRegionSize) != 0 ||
          pwrite(fd, header.data(), header.size(), 0) != ssize_t(header.size())) {
        _exit(102);
      }
    }
  }
  pid_t daemon = fork();
  ASSERT_GE(daemon, 0);
  if (daemon == 0) {
    int reports = 0, none = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < end) {
      auto usage = store.Usage(*path);
      auto pids = store.Pids(*path);
      (usage.ok() ? reports : none) += 1;
      (void)store.Devices(*path);
      (void)store.Update(*path, l);
    }
    // Both outcomes were seen: the loop did race the reads.
    _exit(reports > 0 && none > 0 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(daemon, &status, 0), daemon);
  kill(attacker, SIGKILL);
  int attacker_status = 0;
  waitpid(attacker, &attacker_status, 0);
  ASSERT_TRUE(WIFSIGNALED(attacker_status) && WTERMSIG(attacker_status) == SIGKILL)
      << "the attacker itself stopped early (exit " << WEXITSTATUS(attacker_status) << ")";
  ASSERT_TRUE(WIFEXITED(status)) << "the daemon's side died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "no report, or no failure, was ever seen";
}

// Where the state disk has no room, Create says so and
// leaves nothing behind, and CheckRoom tells when there is room again.
TEST_F(ShimRegionStoreTest,
       OnAFullStateDiskCreateIsResourceExhaustedAndCheckRoomSeesTheRoomReturn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  const std::string disk = dir_ + "/disk";
  ASSERT_EQ(mkdir(disk.c_str(), 0755), 0);
  ASSERT_EQ(mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=4m"), 0) << strerror(errno);
  struct Unmount {
    std::string at;
    ~Unmount() { umount2(at.c_str(), MNT_DETACH); }
  } unmount{disk};
  ShimRegionStore store(disk + "/slices");
  EXPECT_TRUE(store.CheckRoom().ok());
  {
    std::ofstream fill(disk + "/fill");
    std::string block(64 << 10, 'x');
    while (fill.write(block.data(), std::streamsize(block.size()))) {
    }
  }
  core::Status room = store.CheckRoom();
  EXPECT_EQ(room.code(), core::StatusCode::kResourceExhausted) << room.ToString();
  auto path = store.Create(Limits(3, {"GPU-aaaa"}));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), core::StatusCode::kResourceExhausted) << path.status().ToString();
  EXPECT_NE(path.status().message().find(strerror(ENOSPC)), std::string::npos);
  EXPECT_FALSE(fs::exists(disk + "/slices/job-3"));
  ASSERT_TRUE(fs::remove(disk + "/fill"));
  EXPECT_TRUE(store.CheckRoom().ok());
  EXPECT_TRUE(store.Create(Limits(3, {"GPU-aaaa"})).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
