// Contexts admitted before they are created, end to end: CUDA
// programs (shim_probe) over the simulated driver with the shim preloaded,
// while this test reads the simulator's per-process memory, the figure NVML
// reports, every millisecond.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "shim/base/context_charge.h"
#include "slice/region/region.h"
#include "sim/device_model.h"
#include "subprocess.h"

namespace gpuslice::shim {
namespace {

using core::kGiB;
using core::kMiB;
using testing::Env;
using testing::Output;
using testing::Session;

constexpr int kOk = 0;           // CUDA_SUCCESS
constexpr int kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
constexpr uint64_t kContext = 300 * kMiB;

// Samples the simulator's per-process memory (what its NVML reports per
// process) every millisecond on a thread of its own, summed over every
// process on the GPU: all of them are the slice's here.
class NvmlSampler {
 public:
  explicit NvmlSampler(sim::DeviceModel* model) : model_(model) {
    thread_ = std::thread([this] { Run(); });
  }
  ~NvmlSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t samples() const { return samples_; }
  uint64_t max_sum() const { return max_sum_; }
  // Samples above `cap`, and by how much at most.
  uint64_t over(uint64_t cap) const { return max_sum_ > cap ? max_sum_ - cap : 0; }

 private:
  void Run() {
    timespec next{};
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!stop_) {
      uint64_t sum = 0;
      for (const sim::layout::ProcessSlot& s : model_->state()->slots) {
        if (s.state.load(std::memory_order_acquire) != sim::layout::kSlotLive) continue;
        sum += s.units[0].used_bytes.load(std::memory_order_relaxed);
      }
      if (sum > max_sum_) max_sum_ = sum;
      ++samples_;
      next.tv_nsec += 1000000;
      if (next.tv_nsec >= 1000000000) {
        next.tv_nsec -= 1000000000;
        ++next.tv_sec;
      }
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
    }
  }

  sim::DeviceModel* model_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> samples_{0};
  std::atomic<uint64_t> max_sum_{0};
};

class ContextAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-context-e2e-XXXXXX";
    dir_ = mkdtemp(tmpl);
    mkdir((dir_ + "/xdg").c_str(), 0700);
    // The simulated GPU, made here with 300 MiB contexts; the programs
    // attach to it.
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/sim-state").c_str(), 1);
    setenv("GPUSLICE_SIM_CONTEXT_MEM", "300MiB", 1);
    auto options = sim::ModelOptionsFromEnvironment();
    ASSERT_TRUE(options.ok()) << options.status().ToString();
    auto model = sim::DeviceModel::Open(*options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
    uuid_ = model_->Unit(0).uuid;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Env Bare() const {
    return {{"PATH", "/usr/bin:/bin"},
            {"LD_LIBRARY_PATH", GPUSLICE_SIM_DIR},
            {"GPUSLICE_SIM_STATE", dir_ + "/sim-state"},
            {"XDG_RUNTIME_DIR", dir_ + "/xdg"}};
  }
  Env InSlice() const {
    Env e = Bare();
    e["LD_PRELOAD"] = GPUSLICE_SHIM_PATH;
    e["GPUSLICE_SLICE"] = RegionPath();
    return e;
  }
  std::string RegionPath() const { return dir_ + "/slice.region"; }
  // A daemon-style (closed) region of the GPU with `limit`, made afresh.
  std::unique_ptr<slice::Region> MakeRegion(uint64_t limit) {
    std::filesystem::remove(RegionPath());
    slice::RegionOptions options;
    options.name = "test";
    options.closed = true;
    options.devices = {{uuid_, limit}};
    auto r = slice::Region::Create(RegionPath(), options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // Memory the simulator holds for live processes on the GPU (reaps first).
  uint64_t SimUsed() {
    uint64_t sum = 0;
    for (const sim::ProcessUsage& p : model_->UnitProcesses(0)) sum += p.used_bytes;
    return sum;
  }

  struct RaceResult {
    int contexts = 0;  // Processes that got their context.
    int refused = 0;   // ... that were refused it with CUDA_ERROR_OUT_OF_MEMORY.
    int allocations = 0;
    std::vector<std::string> other;  // Anything else, for the failure message.
  };
  // `processes` programs of one slice, each with a context by one of
  // `routes` in turn and `bytes` allocated in it, all told to go at once;
  // all hold what they got until every one has answered.
  RaceResult Race(const Env& env, int processes, uint64_t bytes,
                  const std::vector<std::string>& routes) {
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < processes; ++i) {
      const std::string& route = routes[size_t(i) % routes.size()];
      sessions.push_back(std::make_unique<Session>(
          std::vector<std::string>{GPUSLICE_PROBE_PATH, "ctx", route, std::to_string(bytes)}, env));
    }
    for (auto& s : sessions) EXPECT_EQ(s->WaitFor("ready"), "1");
    for (auto& s : sessions) EXPECT_TRUE(s->Send("go"));
    RaceResult result;
    for (int i = 0; i < processes; ++i) {
      const std::string ctx = sessions[size_t(i)]->WaitFor("ctx");
      const std::string alloc = sessions[size_t(i)]->WaitFor("alloc");
      if (ctx == std::to_string(kOk)) {
        ++result.contexts;
        if (alloc == std::to_string(kOk)) {
          ++result.allocations;
        } else {
          result.other.push_back(routes[size_t(i) % routes.size()] + ": alloc=" + alloc);
        }
      } else if (ctx == std::to_string(kOutOfMemory)) {
        ++result.refused;
      } else {
        result.other.push_back(routes[size_t(i) % routes.size()] + ": ctx=" + ctx);
      }
    }
    // A little longer with everything held, then everyone lets go.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& s : sessions) s->Send("quit");
    for (auto& s : sessions) s->WaitFor("never");  // Until it exits (EOF).
    return result;
  }

  std::string dir_;
  std::string uuid_;
  std::unique_ptr<sim::DeviceModel> model_;
};

// Every route that creates a context, in one race.
const std::vector<std::string> kRoutes = {"primary", "runtime", "v2", "v3", "v4", "dlsym"};

// Eight processes of a slice that holds three contexts create
// theirs and allocate at once, on every route. Sampled every millisecond,
// what NVML shows for them never passes the cap, not by one byte: each
// context is reserved before it is created (the slice's first one holding
// all the room while its size is learnt). Exactly three get a context and
// their allocation; the five others are refused with
// CUDA_ERROR_OUT_OF_MEMORY; everything comes back when they exit.
TEST_F(ContextAdmissionTest, RacingContextCreationsNeverTakeTheSliceOverItsCap) {
  constexpr int kProcesses = 8;
  constexpr int kRounds = 20;
  const uint64_t cap = kGiB;              // 3 x (300 + 32) MiB fit, a fourth context does not.
  const uint64_t allocation = 32 * kMiB;  // Each process's allocation in its context.
  std::unique_ptr<slice::Region> region;
  uint64_t samples = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Even rounds race on a fresh region (the size is learnt in the race),
    // odd ones on the region whose size the round before learnt.
    if (round % 2 == 0) {
      region = MakeRegion(cap);
      ASSERT_NE(region, nullptr);
    }
    NvmlSampler sampler(model_.get());
    RaceResult r = Race(InSlice(), kProcesses, allocation, kRoutes);
    sampler.Stop();
    samples += sampler.samples();
    EXPECT_EQ(sampler.over(cap), 0u) << "NVML saw the slice at " << sampler.max_sum() << " bytes";
    EXPECT_EQ(r.contexts, 3);
    EXPECT_EQ(r.allocations, 3);
    EXPECT_EQ(r.refused, kProcesses - 3);
    EXPECT_TRUE(r.other.empty()) << ::testing::PrintToString(r.other);
    EXPECT_GT(sampler.max_sum(), 2 * kContext) << "the sampler saw nothing of the race";
    EXPECT_LE(region->device(0).peak_bytes.load(), cap);
    uint64_t learnt = 0;
    EXPECT_TRUE(LearntContextSize(region->device(0), &learnt));
    EXPECT_EQ(learnt, kContext);
    // Nothing is lost: exited processes hold nothing, in the driver or the slice.
    EXPECT_EQ(SimUsed(), 0u);
    EXPECT_EQ(region->device(0).used_bytes.load(), 0u);
  }
  std::printf("samples=%llu rounds=%d\n", static_cast<unsigned long long>(samples), kRounds);
  EXPECT_GT(samples, uint64_t{kRounds});
}

// Proves the sampler can see an overshoot: the same race without the shim
// goes far over the cap.
TEST_F(ContextAdmissionTest, WithoutTheShimTheSameRaceGoesOverTheCap) {
  NvmlSampler sampler(model_.get());
  RaceResult r = Race(Bare(), 8, 32 * kMiB, kRoutes);
  sampler.Stop();
  EXPECT_EQ(r.contexts, 8);
  EXPECT_GE(sampler.max_sum(), 8 * (kContext + 32 * kMiB));
}

// A retain of a primary context that exists takes no memory and is charged
// nothing; the last release returns the context's charge.
TEST_F(ContextAdmissionTest, ARetainOfALivePrimaryContextChargesNothing) {
  auto region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
  ASSERT_EQ(s.WaitFor("ready"), "1");
  auto used = [&] { return region->device(0).used_bytes.load(); };
  ASSERT_EQ(s.Ask("retain", "result"), "0");
  EXPECT_EQ(used(), kContext);
  ASSERT_EQ(s.Ask("retain", "result"), "0");
  EXPECT_EQ(used(), kContext);
  ASSERT_EQ(s.Ask("release", "result"), "0");
  EXPECT_EQ(used(), kContext);
  ASSERT_EQ(s.Ask("release", "result"), "0");
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(SimUsed(), 0u);
}

// A creation the driver refuses gives its reservation back; one that
// succeeds then charges exactly one context, and its destroy returns it.
TEST_F(ContextAdmissionTest, AFailedCreationGivesItsReservationBack) {
  auto region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
  ASSERT_EQ(s.WaitFor("ready"), "1");
  auto used = [&] { return region->device(0).used_bytes.load(); };
  ASSERT_EQ(s.Ask("retain", "result"), "0");  // Learns the size.
  EXPECT_NE(s.Ask("badcreate", "result"), "0");
  EXPECT_EQ(used(), kContext);
  for (const std::string route : {"v2", "v3", "v4", "dlsym"}) {
    SCOPED_TRACE(route);
    ASSERT_EQ(s.Ask("create " + route, "result"), "0");
    EXPECT_EQ(used(), 2 * kContext);
    EXPECT_EQ(SimUsed(), 2 * kContext);
    ASSERT_EQ(s.Ask("destroy", "result"), "0");
    EXPECT_EQ(used(), kContext);
  }
  // Before the limit: refused without being created.
  ASSERT_EQ(s.Ask("create v2", "result"), "0");
  ASSERT_EQ(s.Ask("create v2", "result"), "0");
  EXPECT_EQ(s.Ask("create v2", "result"), std::to_string(kOutOfMemory));
  EXPECT_EQ(SimUsed(), 3 * kContext);
  EXPECT_EQ(region->device(0).refused_allocs.load(), 1u);
}

// Without NVML a process charges the learnt size for each context, and
// each destroy returns exactly that (the process cannot re-measure).
TEST_F(ContextAdmissionTest, WithoutNvmlADestroyReturnsExactlyWhatWasCharged) {
  auto region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  {
    Session learner({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
    ASSERT_EQ(learner.WaitFor("ready"), "1");
    ASSERT_EQ(learner.Ask("retain", "result"), "0");
    ASSERT_EQ(learner.Ask("release", "result"), "0");
    learner.Send("quit");
    learner.WaitFor("never");  // Until it has exited.
  }
  ASSERT_EQ(region->device(0).used_bytes.load(), 0u);
  const std::string no_nvml = dir_ + "/no-nvml";
  mkdir(no_nvml.c_str(), 0700);
  ASSERT_EQ(symlink(GPUSLICE_SIM_DIR "/libcuda.so.1", (no_nvml + "/libcuda.so.1").c_str()), 0);
  Env env = InSlice();
  env["LD_LIBRARY_PATH"] = no_nvml;
  Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, env);
  ASSERT_EQ(s.WaitFor("ready"), "1");
  auto used = [&] { return region->device(0).used_bytes.load(); };
  ASSERT_EQ(s.Ask("create v2", "result"), "0");
  ASSERT_EQ(s.Ask("create v3", "result"), "0");
  EXPECT_EQ(used(), 2 * kContext);
  ASSERT_EQ(s.Ask("destroy", "result"), "0");
  EXPECT_EQ(used(), kContext);
  ASSERT_EQ(s.Ask("destroy", "result"), "0");
  EXPECT_EQ(used(), 0u);
}

// A reset takes the primary context down while the process still retains
// it; the driver brings it back on its next use, which no hook sees, so its
// charge stays until the last release.
TEST_F(ContextAdmissionTest, AResetPrimaryContextStaysChargedUntilItsLastRelease) {
  auto region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
  ASSERT_EQ(s.WaitFor("ready"), "1");
  auto used = [&] { return region->device(0).used_bytes.load(); };
  ASSERT_EQ(s.Ask("retain", "result"), "0");
  ASSERT_EQ(s.Ask("reset", "result"), "0");
  EXPECT_EQ(SimUsed(), 0u);
  EXPECT_EQ(used(), kContext);
  // The next use re-creates it: the slice had room for it all along.
  ASSERT_EQ(s.Ask("alloc " + std::to_string(700 * kMiB), "result"), "0");
  EXPECT_EQ(SimUsed(), kContext + 700 * kMiB);
  EXPECT_EQ(used(), kContext + 700 * kMiB);
  EXPECT_EQ(s.Ask("alloc " + std::to_string(64 * kMiB), "result"), std::to_string(kOutOfMemory));
  ASSERT_EQ(s.Ask("free", "result"), "0");
  ASSERT_EQ(s.Ask("release", "result"), "0");
  EXPECT_EQ(used(), 0u);
  EXPECT_EQ(SimUsed(), 0u);
}

// A learner killed while creating the slice's first context (its claim and
// its hold on the whole room left in the region) holds nobody up for long:
// the next creator sweeps it away and learns the size itself.
TEST_F(ContextAdmissionTest, AContextWhoseLearnerDiedIsLearntByTheNextCreator) {
  auto region = MakeRegion(kGiB);
  ASSERT_NE(region, nullptr);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  int status = 0;
  ASSERT_EQ(waitpid(dead, &status, 0), dead);
  auto slot = region->ClaimSlot(dead, 0);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  ASSERT_EQ(ReserveHeadroom(region->device(0), region->slot(*slot), 0, kGiB), kGiB);
  region->device(0).context_learner.store(LearnerWord(dead, *slot));
  Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
  ASSERT_EQ(s.WaitFor("ready"), "1");
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(s.Ask("retain", "result"), "0");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  uint64_t learnt = 0;
  EXPECT_TRUE(LearntContextSize(region->device(0), &learnt));
  EXPECT_EQ(learnt, kContext);
  EXPECT_EQ(region->device(0).used_bytes.load(), kContext);
}

// The slice's first context does not fit at all: measured, then undone and
// refused; the size is learnt, so the next creator is refused before it
// creates anything.
TEST_F(ContextAdmissionTest, AContextLargerThanTheSliceIsRefusedAndItsSizeKept) {
  auto region = MakeRegion(200 * kMiB);
  ASSERT_NE(region, nullptr);
  for (int i = 0; i < 2; ++i) {
    Session s({GPUSLICE_PROBE_PATH, "ctxserve"}, InSlice());
    ASSERT_EQ(s.WaitFor("ready"), "1");
    EXPECT_EQ(s.Ask("retain", "result"), std::to_string(kOutOfMemory));
    EXPECT_EQ(s.Ask("create v2", "result"), std::to_string(kOutOfMemory));
    EXPECT_EQ(SimUsed(), 0u);
    EXPECT_EQ(region->device(0).used_bytes.load(), 0u);
  }
  uint64_t learnt = 0;
  EXPECT_TRUE(LearntContextSize(region->device(0), &learnt));
  EXPECT_EQ(learnt, kContext);
}

}  // namespace
}  // namespace gpuslice::shim
