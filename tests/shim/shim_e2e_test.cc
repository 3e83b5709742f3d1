// libgpuslice.so end to end: real CUDA programs over the simulated driver,
// with the shim preloaded, each test in its own temporary directory (its own
// simulated device state and slice regions).

#include <cuda.h>  // CUDA_VERSION: which hooks the shim and the probe were built with.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "slice/region/limits_page.h"
#include "slice/region/region.h"
#include "subprocess.h"

namespace gpuslice::shim {
namespace {

using core::kGiB;
using core::kMiB;
using testing::Env;
using testing::Output;
using RunProgram = decltype(&testing::Run);
constexpr RunProgram RunCmd = &testing::Run;
using testing::Session;

constexpr int kOk = 0;            // CUDA_SUCCESS
constexpr int kOutOfMemory = 2;   // CUDA_ERROR_OUT_OF_MEMORY

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-shim-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
    mkdir((dir_ + "/xdg").c_str(), 0700);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The environment of a program on the simulated GPU, without the shim.
  Env Bare() const {
    return {{"PATH", "/usr/bin:/bin"},
            {"LD_LIBRARY_PATH", GPUSLICE_SIM_DIR},
            {"GPUSLICE_SIM_STATE", dir_ + "/sim-state"},
            {"GPUSLICE_SIM_CONTEXT_MEM", "0"},
            {"XDG_RUNTIME_DIR", dir_ + "/xdg"}};
  }
  // ... with the shim preloaded.
  Env Shimmed() const {
    Env e = Bare();
    e["LD_PRELOAD"] = GPUSLICE_SHIM_PATH;
    return e;
  }
  Env Standalone(const std::string& limit) const {
    Env e = Shimmed();
    e["GPUSLICE_MEMORY_LIMIT"] = limit;
    return e;
  }
  Env InSlice(const std::string& region) const {
    Env e = Shimmed();
    e["GPUSLICE_SLICE"] = region;
    return e;
  }

  Output Probe(std::vector<std::string> args, const Env& env) const {
    args.insert(args.begin(), GPUSLICE_PROBE_PATH);
    return RunCmd(args, env, 60);
  }

  std::string DeviceUuid(const Env& env, int index = 0) const {
    Output o = Probe({"info"}, env);
    return o.values["uuid" + std::to_string(index)];
  }

  // A daemon-style (closed) region listing the given devices.
  std::unique_ptr<slice::Region> MakeRegion(const std::vector<slice::DeviceLimit>& devices) {
    slice::RegionOptions options;
    options.name = "test";
    options.closed = true;
    options.devices = devices;
    auto r = slice::Region::Create(dir_ + "/slice.region", options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::string RegionPath() const { return dir_ + "/slice.region"; }

  // A slice as the daemon makes it (docs/SLICE_REGION.md): a directory the
  // job cannot write, the daemon's limits page (root 0644) listing `uuid`
  // with `limit`, and the job's region (0600, owned by `job_uid`).
  struct DaemonSlice {
    std::unique_ptr<slice::LimitsPage> limits;  // The daemon's writable mapping.
    std::unique_ptr<slice::Region> region;
    std::string limits_path;
    std::string region_path;
  };
  DaemonSlice MakeDaemonSlice(const std::string& uuid, uint64_t limit, uid_t job_uid) {
    DaemonSlice s;
    const std::string dir = dir_ + "/job-1";
    EXPECT_EQ(mkdir(dir.c_str(), 0755), 0);
    chmod(dir.c_str(), 0755);
    s.limits_path = dir + "/limits";
    s.region_path = dir + "/region";
    slice::LimitsOptions page;
    page.name = "job-1";
    page.job_id = 1;
    slice::DeviceControls c;
    c.uuid = uuid;
    c.limit_bytes = limit;
    page.devices = {c};
    auto limits = slice::LimitsPage::Create(s.limits_path, page);
    EXPECT_TRUE(limits.ok()) << limits.status().ToString();
    if (limits.ok()) s.limits = std::move(*limits);
    slice::RegionOptions region;
    region.name = "job-1";
    region.closed = true;
    region.devices = {{uuid, 0}};
    auto r = slice::Region::Create(s.region_path, region);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) s.region = std::move(*r);
    EXPECT_EQ(chown(s.region_path.c_str(), job_uid, job_uid), 0);
    return s;
  }
  Env InDaemonSlice(const DaemonSlice& s) const {
    Env e = InSlice(s.region_path);
    e["GPUSLICE_LIMITS"] = s.limits_path;
    return e;
  }

  std::string dir_;
};

// Every allocation route stops at the limit, and frees return exactly what
// was charged (the same amount fits again).
TEST_F(ShimTest, EveryAllocationRouteStopsAtTheLimit) {
  const uint64_t limit = kGiB;
  const uint64_t chunk = 64 * kMiB;
  for (const char* route : {"alloc", "pitch", "managed", "async", "pool", "vmm", "array",
                            "array3d"}) {
    SCOPED_TRACE(route);
    Output o = Probe({"fill", route, std::to_string(chunk)}, Standalone("1GiB"));
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
    EXPECT_EQ(o.Int("error"), kOutOfMemory) << o.out;
    EXPECT_LE(uint64_t(o.Int("allocated")), limit);
    // Pitch rows and pools may round up; never by more than two chunks.
    EXPECT_GE(uint64_t(o.Int("allocated")), limit - 2 * chunk);
    EXPECT_EQ(o.Int("again"), o.Int("allocated")) << "frees must uncount exactly";
    EXPECT_EQ(uint64_t(o.Int("full_total")), limit);
    EXPECT_EQ(uint64_t(o.Int("after_total")), limit);
  }
}

TEST_F(ShimTest, WithoutTheShimTheSameProgramIsNotLimited) {
  // Proves the test above can fail: the probe itself imposes nothing.
  Output o = Probe({"alloc", "alloc", std::to_string(4 * kGiB)}, Bare());
  EXPECT_EQ(o.Int("result"), kOk) << o.out;
}

TEST_F(ShimTest, MemoryQueriesShowTheSlice) {
  Output o = Probe({"info"}, Standalone("4GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(uint64_t(o.Int("device_total0")), 4 * kGiB);
  EXPECT_EQ(uint64_t(o.Int("mem_total")), 4 * kGiB);
  EXPECT_EQ(uint64_t(o.Int("mem_free")), 4 * kGiB);  // Context memory is 0 here.
  Output n = Probe({"nvml"}, Standalone("4GiB"));
  ASSERT_EQ(n.exit_code, 0) << n.out << n.err;
  EXPECT_EQ(uint64_t(n.Int("nvml_total")), 4 * kGiB);
  EXPECT_EQ(uint64_t(n.Int("nvml_free")), 4 * kGiB);
  EXPECT_EQ(uint64_t(n.Int("nvml2_total")), 4 * kGiB);
}

TEST_F(ShimTest, ContextMemoryIsChargedToTheSlice) {
  Env env = Standalone("1GiB");
  env["GPUSLICE_SIM_CONTEXT_MEM"] = "256MiB";
  Output o = Probe({"fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(uint64_t(o.Int("allocated")), kGiB - 256 * kMiB) << o.out;
  EXPECT_EQ(uint64_t(o.Int("after_free")), kGiB - 256 * kMiB);
}

// The first process of a slice learns a context's size from NVML and caches
// it in the region; later processes charge the cached size without NVML.
// The second process cannot load NVML at all (its library path holds only
// the driver), so only the cache can make it charge the context.
TEST_F(ShimTest, LaterProcessesChargeTheCachedContextSize) {
  Env env = Bare();
  env["GPUSLICE_SIM_CONTEXT_MEM"] = "256MiB";  // Fixed when the state is made.
  auto region = MakeRegion({{DeviceUuid(env), kGiB}});
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->device(0).context_bytes.load(), 0u);
  env = InSlice(RegionPath());
  Output first = Probe({"fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(uint64_t(first.Int("allocated")), kGiB - 256 * kMiB) << first.out;
  EXPECT_EQ(region->device(0).context_bytes.load(), 256 * kMiB);

  const std::string no_nvml = dir_ + "/no-nvml";
  mkdir(no_nvml.c_str(), 0700);
  ASSERT_EQ(symlink(GPUSLICE_SIM_DIR "/libcuda.so.1", (no_nvml + "/libcuda.so.1").c_str()), 0);
  env["LD_LIBRARY_PATH"] = no_nvml;
  Output second = Probe({"fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(uint64_t(second.Int("allocated")), kGiB - 256 * kMiB) << second.out;
  EXPECT_EQ(region->device(0).used_bytes.load(), 0u);  // All given back at exit.

  // Proves the check can fail: with no cache and no NVML nothing is charged.
  region->device(0).context_bytes.store(0);
  region->device(0).context_learner.store(0);
  Output uncached = Probe({"fill", "alloc", std::to_string(64 * kMiB)}, env);
  ASSERT_EQ(uncached.exit_code, 0) << uncached.out << uncached.err;
  EXPECT_EQ(uint64_t(uncached.Int("allocated")), kGiB) << uncached.out;
}

TEST_F(ShimTest, AContextThatDoesNotFitIsRefused) {
  Env env = Standalone("128MiB");
  env["GPUSLICE_SIM_CONTEXT_MEM"] = "256MiB";
  Output o = Probe({"info"}, env);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.out.find("fatal=cuDevicePrimaryCtxRetain:2"), std::string::npos) << o.out;
}

TEST_F(ShimTest, CuGetProcAddressRoutesAreLimited) {
  Output o = Probe({"procaddr", std::to_string(2 * kGiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.Int("ptsz_result"), kOutOfMemory);
  EXPECT_EQ(o.Int("v1_result"), kOutOfMemory);
  EXPECT_NE(o.Int("legacy_result"), kOk);  // The 32-bit allocator is not handed out.
  Output bare = Probe({"procaddr", std::to_string(2 * kGiB)}, Bare());
  ASSERT_EQ(bare.exit_code, 0) << bare.out << bare.err;
  EXPECT_EQ(bare.Int("v1_result"), kOk) << bare.out;
  EXPECT_EQ(bare.Int("ptsz_result"), kOk) << bare.out;
}

// A shim built against a pre-12.0 cuda.h interposes
// cuGetProcAddress_v2 too (the route of every CUDA 12+ runtime).
TEST_F(ShimTest, CuGetProcAddressV2RouteIsLimited) {
  Output o = Probe({"procaddr", std::to_string(2 * kGiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  if (o.Int("v2_available") != 1) {
    // The simulated driver follows the same header: before 12.0 it has no
    // cuGetProcAddress_v2, so this route cannot be driven end to end here
    // (the hook's export is checked by TheShimExportsExactlyTheHookedSymbols).
    GTEST_SKIP() << "the simulated driver built against cuda.h " << CUDA_VERSION
                 << " exports no cuGetProcAddress_v2";
  }
  EXPECT_EQ(o.Int("v2_status"), 0) << o.out;
  EXPECT_EQ(o.Int("v2_result"), kOutOfMemory) << o.out;
  if (CUDA_VERSION >= 12000) {
    EXPECT_EQ(o.Int("v2_header_result"), kOutOfMemory) << o.out;
  }
  Output bare = Probe({"procaddr", std::to_string(2 * kGiB)}, Bare());
  EXPECT_EQ(bare.Int("v2_result"), kOk) << bare.out;
  if (CUDA_VERSION >= 12000) {
    EXPECT_EQ(bare.Int("v2_header_result"), kOk) << bare.out;
  }
}

TEST_F(ShimTest, DlsymRoutesAreLimitedAndRtldNextKeepsItsMeaning) {
  Output o = Probe({"dlsym", std::to_string(2 * kGiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.Int("dlsym_result"), kOutOfMemory);
  EXPECT_EQ(o.Int("dlvsym_result"), kOutOfMemory);
  EXPECT_EQ(o.Int("rtld_next_ok"), 1);
}

// N processes x M threads against one slice: the slice's high-water mark
// never passes the limit, not by one byte.
TEST_F(ShimTest, RacingProcessesAndThreadsNeverOvershoot) {
  const uint64_t limit = 512 * kMiB;
  auto region = MakeRegion({{DeviceUuid(Bare()), limit}});
  ASSERT_NE(region, nullptr);
  std::vector<std::thread> runners;
  std::vector<Output> outputs(4);
  for (int p = 0; p < 4; ++p) {
    runners.emplace_back([&, p] {
      outputs[p] = Probe({"race", "4", "1500", std::to_string(96 * kMiB)}, InSlice(RegionPath()));
    });
  }
  for (auto& t : runners) t.join();
  long ok = 0, oom = 0;
  for (const Output& o : outputs) {
    ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
    EXPECT_EQ(o.Int("other"), 0) << o.out;
    ok += o.Int("ok");
    oom += o.Int("oom");
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(oom, 0) << "no contention: the race did not test anything";
  EXPECT_LE(region->device(0).peak_bytes.load(), limit);
  EXPECT_EQ(region->device(0).used_bytes.load(), 0u) << "exited processes return everything";
}

TEST_F(ShimTest, MemoryOfASigkilledProcessIsReclaimed) {
  auto region = MakeRegion({{DeviceUuid(Bare()), kGiB}});
  ASSERT_NE(region, nullptr);
  Session holder({GPUSLICE_PROBE_PATH, "serve", "alloc"}, InSlice(RegionPath()));
  ASSERT_EQ(holder.WaitFor("ready"), "1");
  ASSERT_EQ(holder.Ask("alloc " + std::to_string(700 * kMiB), "result"), "0");
  Output blocked = Probe({"alloc", "alloc", std::to_string(700 * kMiB)}, InSlice(RegionPath()));
  EXPECT_EQ(blocked.Int("result"), kOutOfMemory) << blocked.out << blocked.err;
  holder.Kill(SIGKILL);
  Output after = Probe({"alloc", "alloc", std::to_string(700 * kMiB)}, InSlice(RegionPath()));
  EXPECT_EQ(after.Int("result"), kOk) << after.out << after.err;
}

TEST_F(ShimTest, LiveLimitChangesApplyToTheNextAllocation) {
  std::string uuid = DeviceUuid(Bare());
  auto region = MakeRegion({{uuid, kGiB}});
  ASSERT_NE(region, nullptr);
  Session s({GPUSLICE_PROBE_PATH, "serve", "alloc"}, InSlice(RegionPath()));
  ASSERT_EQ(s.WaitFor("ready"), "1");
  EXPECT_EQ(s.Ask("alloc " + std::to_string(768 * kMiB), "result"), "0");
  EXPECT_EQ(s.Ask("alloc " + std::to_string(512 * kMiB), "result"), "2");
  ASSERT_TRUE(region->SetLimit(uuid, 2 * kGiB).ok());
  EXPECT_EQ(s.Ask("alloc " + std::to_string(512 * kMiB), "result"), "0");
  EXPECT_EQ(s.Ask("info", "total"), std::to_string(2 * kGiB));
  ASSERT_TRUE(region->SetLimit(uuid, 512 * kMiB).ok());
  EXPECT_EQ(s.Ask("alloc " + std::to_string(kMiB), "result"), "2");
  EXPECT_EQ(s.Ask("info", "free"), "0");
  EXPECT_EQ(s.Ask("free", "freed"), "1");  // Memory from before the change uncounts.
  EXPECT_EQ(region->device(0).used_bytes.load(), 0u);
  EXPECT_EQ(s.Ask("alloc " + std::to_string(256 * kMiB), "result"), "0");
}

// A job owns its region and may write a 40 GiB limit into its 4 GiB slice. The
// shim takes the limit from the daemon's limits page, so the process is still
// refused past 4 GiB, and sees a 4 GiB GPU.
TEST_F(ShimTest, ARegionLimitRewrittenTo40GiBDoesNotLiftTheLimitsPage) {
  const std::string uuid = DeviceUuid(Bare());
  DaemonSlice slice = MakeDaemonSlice(uuid, 4 * kGiB, getuid());
  ASSERT_NE(slice.region, nullptr);
  ASSERT_TRUE(slice.region->SetLimit(uuid, 40 * kGiB).ok());
  ASSERT_TRUE(
      slice.region
          ->SetComputeShare(uuid, 1000, slice::ComputeMode::kWorkConserving, core::Priority::kHigh)
          .ok());
  const Env env = InDaemonSlice(slice);
  Output fill = Probe({"fill", "alloc", std::to_string(512 * kMiB)}, env);
  ASSERT_EQ(fill.exit_code, 0) << fill.out << fill.err;
  EXPECT_EQ(fill.Int("error"), kOutOfMemory) << fill.out;
  EXPECT_EQ(uint64_t(fill.Int("allocated")), 4 * kGiB) << fill.out;
  EXPECT_EQ(uint64_t(fill.Int("full_total")), 4 * kGiB) << fill.out;
  Output big = Probe({"alloc", "alloc", std::to_string(5 * kGiB)}, env);
  EXPECT_EQ(big.Int("result"), kOutOfMemory) << big.out << big.err;
  Output info = Probe({"info"}, env);
  EXPECT_EQ(uint64_t(info.Int("device_total0")), 4 * kGiB) << info.out;
  // Proves the test can fail: without the page the rewritten region decides.
  Output lifted = Probe({"alloc", "alloc", std::to_string(5 * kGiB)}, InSlice(slice.region_path));
  EXPECT_EQ(lifted.Int("result"), kOk) << lifted.out << lifted.err;
}

// The daemon's live changes reach a running process through the page.
TEST_F(ShimTest, LiveChangesOfTheLimitsPageApplyToTheNextAllocation) {
  const std::string uuid = DeviceUuid(Bare());
  DaemonSlice slice = MakeDaemonSlice(uuid, kGiB, getuid());
  ASSERT_NE(slice.limits, nullptr);
  Session s({GPUSLICE_PROBE_PATH, "serve", "alloc"}, InDaemonSlice(slice));
  ASSERT_EQ(s.WaitFor("ready"), "1");
  EXPECT_EQ(s.Ask("alloc " + std::to_string(768 * kMiB), "result"), "0");
  EXPECT_EQ(s.Ask("alloc " + std::to_string(512 * kMiB), "result"), "2");
  ASSERT_TRUE(slice.limits->SetLimit(uuid, 2 * kGiB).ok());
  EXPECT_EQ(s.Ask("alloc " + std::to_string(512 * kMiB), "result"), "0");
  EXPECT_EQ(s.Ask("info", "total"), std::to_string(2 * kGiB));
  // The job's own region write changes nothing, live either.
  ASSERT_TRUE(slice.region->SetLimit(uuid, 40 * kGiB).ok());
  EXPECT_EQ(s.Ask("alloc " + std::to_string(kGiB), "result"), "2");
  EXPECT_EQ(s.Ask("info", "total"), std::to_string(2 * kGiB));
}

// A page the process could write decides nothing: the slice gets no
// memory, never no limit, and the process says why.
TEST_F(ShimTest, ALimitsPageTheJobCouldWriteOrCannotOpenGivesNoMemory) {
  const std::string uuid = DeviceUuid(Bare());
  DaemonSlice slice = MakeDaemonSlice(uuid, 4 * kGiB, getuid());
  ASSERT_EQ(chmod(slice.limits_path.c_str(), 0666), 0);
  Output o = Probe({"alloc", "alloc", std::to_string(kMiB)}, InDaemonSlice(slice));
  EXPECT_EQ(o.Int("result"), kOutOfMemory) << o.out << o.err;
  EXPECT_NE(o.err.find("GPUSLICE_LIMITS"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("writable by group or others"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("no GPU memory"), std::string::npos) << o.err;
  Env missing = InDaemonSlice(slice);
  missing["GPUSLICE_LIMITS"] = dir_ + "/job-1/nothing";
  Output m = Probe({"alloc", "alloc", std::to_string(kMiB)}, missing);
  EXPECT_EQ(m.Int("result"), kOutOfMemory) << m.out << m.err;
}

// A job that overwrites its own region (its file) must not make later
// processes run "without a memory limit" until the daemon's watchdog stops
// them (the container attack does it). A process that finds its region
// unusable is held to the daemon's limits page on its own.
TEST_F(ShimTest, AProcessWhoseRegionTheJobBrokeIsStillHeldToTheLimitsPage) {
  const std::string uuid = DeviceUuid(Bare());
  DaemonSlice slice = MakeDaemonSlice(uuid, kGiB, getuid());
  slice.region.reset();
  {
    std::ofstream scribble(slice.region_path, std::ios::binary | std::ios::in | std::ios::out);
    const std::string ones(4096, '\xff');
    scribble.write(ones.data(), static_cast<std::streamsize>(ones.size()));
  }
  Output over = Probe({"alloc", "alloc", std::to_string(2 * kGiB)}, InDaemonSlice(slice));
  EXPECT_EQ(over.Int("result"), kOutOfMemory) << over.out << over.err;
  EXPECT_NE(over.err.find("alone is held to the slice's limits"), std::string::npos) << over.err;
  Output fits = Probe({"alloc", "alloc", std::to_string(512 * kMiB)}, InDaemonSlice(slice));
  EXPECT_EQ(fits.Int("result"), kOk) << fits.out << fits.err;
}

// The same attack as the job's own user (not root): it can rewrite its
// region, not the page, and its processes are held to the page.
TEST_F(ShimTest, AJobUserCannotWriteItsLimitsPageAndIsHeldToIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the job as another user";
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no setpriv";
  constexpr uid_t kJob = 65534;
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  // The job's simulated GPU state, which it must be able to write.
  const std::string home = dir_ + "/job-home";
  ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
  ASSERT_EQ(chown(home.c_str(), kJob, kJob), 0);
  Env env = Bare();
  env["GPUSLICE_SIM_STATE"] = home + "/sim-state";
  env["XDG_RUNTIME_DIR"] = home;
  auto as_job = [&](std::vector<std::string> args, const Env& e) {
    args.insert(args.begin(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                               "--clear-groups", "--", GPUSLICE_PROBE_PATH});
    return RunCmd(args, e, 60);
  };
  const std::string uuid = as_job({"info"}, env).values["uuid0"];
  ASSERT_FALSE(uuid.empty());
  DaemonSlice slice = MakeDaemonSlice(uuid, 4 * kGiB, kJob);
  ASSERT_NE(slice.region, nullptr);
  // The writer, as the job's user.
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(kJob) != 0 || setuid(kJob) != 0) _exit(100);
    auto region = slice::Region::Open(slice.region_path);  // Its own: allowed.
    if (!region.ok() || !(*region)->SetLimit(uuid, 40 * kGiB).ok()) _exit(1);
    if (open(slice.limits_path.c_str(), O_RDWR) >= 0 || errno != EACCES) _exit(2);
    if (open(slice.limits_path.c_str(), O_WRONLY | O_TRUNC) >= 0) _exit(3);
    if (slice::LimitsPage::OpenForUpdate(slice.limits_path).ok()) _exit(4);
    if (chmod(slice.limits_path.c_str(), 0666) == 0) _exit(5);
    if (rename(slice.region_path.c_str(), slice.limits_path.c_str()) == 0) _exit(6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the check that failed (see the child above)";
  EXPECT_EQ(slice.region->device(0).limit_bytes.load(), 40 * kGiB) << "the job did write";

  env["LD_PRELOAD"] = GPUSLICE_SHIM_PATH;
  env["GPUSLICE_SLICE"] = slice.region_path;
  env["GPUSLICE_LIMITS"] = slice.limits_path;
  Output fill = as_job({"fill", "alloc", std::to_string(512 * kMiB)}, env);
  ASSERT_EQ(fill.exit_code, 0) << fill.out << fill.err;
  EXPECT_EQ(uint64_t(fill.Int("allocated")), 4 * kGiB) << fill.out << fill.err;
  Output big = as_job({"alloc", "alloc", std::to_string(5 * kGiB)}, env);
  EXPECT_EQ(big.Int("result"), kOutOfMemory) << big.out << big.err;
}

TEST_F(ShimTest, CudaVisibleDevicesRemappingIsFollowedByUuid) {
  Env bare = Bare();
  bare["GPUSLICE_SIM_GPUS"] = "2xH100-80GB";
  std::string uuid0 = DeviceUuid(bare, 0), uuid1 = DeviceUuid(bare, 1);
  ASSERT_FALSE(uuid0.empty());
  ASSERT_NE(uuid0, uuid1);
  auto region = MakeRegion({{uuid0, 3 * kGiB}, {uuid1, kGiB}});
  ASSERT_NE(region, nullptr);
  Env env = InSlice(RegionPath());
  env["GPUSLICE_SIM_GPUS"] = "2xH100-80GB";
  env["CUDA_VISIBLE_DEVICES"] = "1";
  Output o = Probe({"info"}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.Int("count"), 1);
  EXPECT_EQ(o.values["uuid0"], uuid1);
  EXPECT_EQ(uint64_t(o.Int("device_total0")), kGiB);
  Output fill = Probe({"fill", "alloc", std::to_string(256 * kMiB)}, env);
  EXPECT_EQ(uint64_t(fill.Int("allocated")), kGiB) << fill.out;
  env["CUDA_VISIBLE_DEVICES"] = "0";
  EXPECT_EQ(uint64_t(Probe({"info"}, env).Int("device_total0")), 3 * kGiB);
}

TEST_F(ShimTest, AProgramThatNeverUsesCudaIsUntouched) {
  Output o = RunCmd({"/bin/sh", "-c", "echo hello; exit 3"}, Standalone("1GiB"), 60);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.out, "hello\n");
  EXPECT_EQ(o.err, "");
  // No region was created for it.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/xdg/gpuslice"));
  Output bad = RunCmd({"/bin/sh", "-c", "echo hello"}, Standalone("4XB"), 60);
  EXPECT_EQ(bad.out, "hello\n");
  EXPECT_EQ(bad.err, "");
}

TEST_F(ShimTest, ABadLimitIsReportedOnceAndTheProcessRunsUnlimited) {
  Output o = Probe({"alloc", "alloc", std::to_string(2 * kGiB)}, Standalone("4XB"));
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.Int("result"), kOk);
  EXPECT_NE(o.err.find("GPUSLICE_MEMORY_LIMIT"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("'4XB'"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

TEST_F(ShimTest, RegionLimitsWinOverTheEnvironment) {
  auto region = MakeRegion({{DeviceUuid(Bare()), kGiB}});
  ASSERT_NE(region, nullptr);
  for (const char* limit : {"8GiB", "4XB"}) {
    Env env = InSlice(RegionPath());
    env["GPUSLICE_MEMORY_LIMIT"] = limit;
    Output o = Probe({"alloc", "alloc", std::to_string(2 * kGiB)}, env);
    EXPECT_EQ(o.Int("result"), kOutOfMemory) << limit << "\n" << o.out << o.err;
  }
}

TEST_F(ShimTest, AMissingDaemonRegionIsReportedAndTheProcessRuns) {
  Output o = Probe({"alloc", "alloc", std::to_string(kMiB)}, InSlice(dir_ + "/missing.region"));
  EXPECT_EQ(o.Int("result"), kOk);
  EXPECT_NE(o.err.find("GPUSLICE_SLICE"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("missing.region"), std::string::npos) << o.err;
}

TEST_F(ShimTest, SeveralDevicesHaveTheirOwnLimits) {
  Env env = Standalone("0=1GiB,1=512MiB");
  env["GPUSLICE_SIM_GPUS"] = "2xH100-80GB";
  Output o = Probe({"fill2", std::to_string(128 * kMiB)}, env);
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(uint64_t(o.Int("allocated0")), kGiB);
  EXPECT_EQ(uint64_t(o.Int("allocated1")), 512 * kMiB);
}

TEST_F(ShimTest, DisableMakesTheShimAPassThrough) {
  Env env = Standalone("1GiB");
  env["GPUSLICE_DISABLE"] = "1";
  EXPECT_EQ(Probe({"alloc", "alloc", std::to_string(2 * kGiB)}, env).Int("result"), kOk);
}

TEST_F(ShimTest, ForkedChildrenShareTheStandaloneSlice) {
  Output o = Probe({"forkalloc", "3", std::to_string(400 * kMiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.Int("granted"), 2);
}

TEST_F(ShimTest, ExecedDescendantsShareTheStandaloneSlice) {
  Output o = Probe({"spawn", std::to_string(700 * kMiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_EQ(o.Int("first_result"), kOk) << o.out;
  EXPECT_EQ(o.Int("result"), kOutOfMemory) << o.out;  // The second child's.
  // The region lived in the per-user directory, private to its owner.
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/xdg/gpuslice").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // The last process of the slice removed the region on its way out.
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/xdg/gpuslice"));
}

TEST_F(ShimTest, TheStandaloneRegionIsRemovedWhenTheSliceEnds) {
  Output o = Probe({"alloc", "alloc", std::to_string(kMiB)}, Standalone("1GiB"));
  ASSERT_EQ(o.Int("result"), kOk);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/xdg/gpuslice")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 0);
}

TEST_F(ShimTest, TheShimExportsExactlyTheHookedSymbols) {
  Output o = RunCmd({"/usr/bin/nm", "-D", "--defined-only", GPUSLICE_SHIM_PATH}, Bare(), 60);
  if (o.exit_code == 127) GTEST_SKIP() << "nm is not installed";
  std::set<std::string> exported;
  size_t start = 0;
  while (start < o.out.size()) {
    size_t end = o.out.find('\n', start);
    std::string line = o.out.substr(start, end - start);
    start = end == std::string::npos ? o.out.size() : end + 1;
    size_t space = line.rfind(' ');
    if (space != std::string::npos) exported.insert(line.substr(space + 1));
  }
  EXPECT_TRUE(exported.count("dlsym") && exported.count("dlvsym"));
  // cuGetProcAddress_v2 whatever the header (CUDA 12+ runtimes use it).
  EXPECT_TRUE(exported.count("cuMemAlloc_v2") && exported.count("cuGetProcAddress") &&
              exported.count("cuGetProcAddress_v2") && exported.count("nvmlDeviceGetMemoryInfo_v2"));
  // Hooks of entry points newer than the header exist exactly when it has them.
  const struct {
    const char* symbol;
    int since;
  } kGuarded[] = {{"cuLibraryLoadData", 12000},
                  {"cuLibraryLoadFromFile", 12000},
                  {"cuLibraryUnload", 12000},
                  {"cuCtxCreate_v4", 12050}};
  for (const auto& g : kGuarded) {
    EXPECT_EQ(exported.count(g.symbol), CUDA_VERSION >= g.since ? 1u : 0u)
        << g.symbol << " with cuda.h " << CUDA_VERSION;
  }
  for (const std::string& name : exported) {
    EXPECT_TRUE(name.rfind("cu", 0) == 0 || name.rfind("nvml", 0) == 0 || name == "dlsym" ||
                name == "dlvsym")
        << "unexpected export " << name;
  }
}

}  // namespace
}  // namespace gpuslice::shim
