// The simulated libnvidia-ml.so.1 as programs use it: loaded with dlopen by
// soname (CTest puts the simulator's library directory on LD_LIBRARY_PATH),
// observing other processes that use the simulated CUDA driver. NVML must
// agree with what the driver tells those processes: memory per process with
// its context, device memory, the process list, utilisation while kernels
// run, and the clean-up of killed processes.
//
// Built with (tests/sim/nvml.cmake):
//   GPUSLICE_TEST_NVML_LIBRARY  the library the loader must pick
//   GPUSLICE_TEST_CUDA_PEER     tests/sim/nvml_cuda_peer

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/nvml_abi.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr unsigned long long kGiB = 1ull << 30;
constexpr unsigned long long kMiB = 1ull << 20;

// Every entry point of the ABI, resolved from the loaded library.
struct Nvml {
#define GPUSLICE_NVML_MEMBER_(name, params) name##_fn name = nullptr;
  GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_MEMBER_)
#undef GPUSLICE_NVML_MEMBER_
  nvmlErrorString_fn nvmlErrorString = nullptr;
  std::vector<std::string> missing;
};

void* Library() {
  static void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle;
}

const Nvml& Api() {
  static const Nvml api = [] {
    Nvml n;
    auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(Library(), name));
      if (fn == nullptr) n.missing.push_back(name);
    };
#define GPUSLICE_NVML_RESOLVE_(name, params) resolve(n.name, #name);
    GPUSLICE_NVML_FUNCTIONS(GPUSLICE_NVML_RESOLVE_)
#undef GPUSLICE_NVML_RESOLVE_
    resolve(n.nvmlErrorString, "nvmlErrorString");
    return n;
  }();
  return api;
}

// A running nvml_cuda_peer: holds `bytes` on one CUDA device and runs
// kernels until stopped.
class Peer {
 public:
  // `visible_devices`: CUDA_VISIBLE_DEVICES for the peer ("" = unset).
  Peer(int ordinal, unsigned long long bytes, const std::string& visible_devices = "") {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      close(in[0]), close(in[1]), close(out[0]), close(out[1]);
      if (!visible_devices.empty()) setenv("CUDA_VISIBLE_DEVICES", visible_devices.c_str(), 1);
      const char* peer = GPUSLICE_TEST_CUDA_PEER;
      std::string o = std::to_string(ordinal), b = std::to_string(bytes);
      execl(peer, peer, o.c_str(), b.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Peer() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
  }

  // Waits for "ready <pid> <free> <total>"; false on timeout or early exit.
  bool WaitReady() {
    std::string line = ReadLine(std::chrono::seconds(20));
    int pid = 0;
    return std::sscanf(line.c_str(), "ready %d %llu %llu", &pid, &driver_free_, &driver_total_) ==
               3 &&
           pid == pid_;
  }
  // Asks the peer to stop and returns its exit status (-1 if killed).
  int Stop() {
    close(stdin_);
    stdin_ = -1;
    return Wait();
  }
  void Kill() {
    kill(pid_, SIGKILL);
    Wait();
  }

  pid_t pid() const { return pid_; }
  // The driver's view at "ready", from inside the peer.
  unsigned long long driver_used() const { return driver_total_ - driver_free_; }
  unsigned long long driver_total() const { return driver_total_; }

 private:
  std::string ReadLine(Clock::duration timeout) {
    std::string line;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      pollfd p = {stdout_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c = 0;
      if (read(stdout_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  bool reaped_ = false;
  unsigned long long driver_free_ = 0, driver_total_ = 0;
};

class NvmlAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(Library(), nullptr) << dlerror();
    ASSERT_TRUE(Api().missing.empty()) << "missing " << Api().missing.front();
    char dir[] = "/tmp/gpuslice-nvml-agree-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    setenv("GPUSLICE_SIM_STATE", (dir_ + "/state").c_str(), 1);
    unsetenv("GPUSLICE_SIM_CONFIG");
    unsetenv("CUDA_VISIBLE_DEVICES");
    setenv("GPUSLICE_SIM_GPUS", "2xH100-80GB", 1);
  }
  void TearDown() override {
    while (Api().nvmlShutdown() == NVML_SUCCESS) {
    }
    std::filesystem::remove_all(dir_);
  }

  nvmlDevice_t Gpu(unsigned int index) {
    nvmlDevice_t d = nullptr;
    EXPECT_EQ(Api().nvmlDeviceGetHandleByIndex_v2(index, &d), NVML_SUCCESS);
    return d;
  }
  std::vector<nvmlProcessInfo_t> Processes(nvmlDevice_t d) {
    std::vector<nvmlProcessInfo_t> rows(8);
    unsigned int count = static_cast<unsigned int>(rows.size());
    EXPECT_EQ(Api().nvmlDeviceGetComputeRunningProcesses_v3(d, &count, rows.data()), NVML_SUCCESS);
    rows.resize(count);
    return rows;
  }
  unsigned long long Used(nvmlDevice_t d) {
    nvmlMemory_t m = {};
    EXPECT_EQ(Api().nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    return m.used;
  }
  // Polls `done` every 50 ms for up to `seconds`; generous, for loaded machines.
  static bool Eventually(const std::function<bool()>& done, int seconds = 10) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return done();
  }

  std::string dir_;
};

TEST_F(NvmlAgreementTest, TheLoaderPicksTheSimulatorsLibraryWithEveryEntryPoint) {
  Dl_info info = {};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(Api().nvmlInit_v2), &info), 0);
  EXPECT_EQ(std::filesystem::canonical(info.dli_fname),
            std::filesystem::canonical(GPUSLICE_TEST_NVML_LIBRARY));
  // The daemon's view: init, enumerate, describe, shut down.
  ASSERT_EQ(Api().nvmlInit_v2(), NVML_SUCCESS);
  unsigned int count = 0;
  ASSERT_EQ(Api().nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 2u);
  char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  ASSERT_EQ(Api().nvmlDeviceGetName(Gpu(1), text, sizeof(text)), NVML_SUCCESS);
  EXPECT_STREQ(text, "NVIDIA H100 80GB HBM3");
  EXPECT_STREQ(Api().nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
  EXPECT_EQ(Api().nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(Api().nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
}

TEST_F(NvmlAgreementTest, AgreesWithTheDriverWhileProgramsRunKernels) {
  ASSERT_EQ(Api().nvmlInit_v2(), NVML_SUCCESS);
  Peer a(1, 1 * kGiB);
  ASSERT_TRUE(a.WaitReady());
  Peer b(1, 512 * kMiB);
  ASSERT_TRUE(b.WaitReady());

  // Memory: the driver's used (total - free, seen by the later peer) is
  // NVML's, and each process's share is its allocation plus one context.
  nvmlMemory_t mem = {};
  ASSERT_EQ(Api().nvmlDeviceGetMemoryInfo(Gpu(1), &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, b.driver_total());
  EXPECT_EQ(mem.used, b.driver_used());
  EXPECT_EQ(Used(Gpu(0)), 0u);
  std::vector<nvmlProcessInfo_t> rows = Processes(Gpu(1));
  ASSERT_EQ(rows.size(), 2u);
  const unsigned long long context = a.driver_used() - 1 * kGiB;
  EXPECT_GT(context, 0u);
  for (const nvmlProcessInfo_t& p : rows) {
    ASSERT_TRUE(p.pid == static_cast<unsigned>(a.pid()) || p.pid == static_cast<unsigned>(b.pid()));
    EXPECT_EQ(p.usedGpuMemory,
              (p.pid == static_cast<unsigned>(a.pid()) ? 1 * kGiB : 512 * kMiB) + context);
    EXPECT_EQ(p.gpuInstanceId, 0xFFFFFFFFu);
  }
  EXPECT_EQ(rows[0].usedGpuMemory + rows[1].usedGpuMemory, mem.used);
  EXPECT_TRUE(Processes(Gpu(0)).empty());

  // Utilisation: both keep GPU 1 busy, GPU 0 stays idle.
  nvmlUtilization_t util = {};
  EXPECT_TRUE(Eventually([&] {
    return Api().nvmlDeviceGetUtilizationRates(Gpu(1), &util) == NVML_SUCCESS && util.gpu >= 50;
  })) << "GPU 1 utilisation stayed at "
      << util.gpu << "%";
  ASSERT_EQ(Api().nvmlDeviceGetUtilizationRates(Gpu(0), &util), NVML_SUCCESS);
  EXPECT_EQ(util.gpu, 0u);

  // Per-process samples: each peer has one with a share of the GPU.
  bool a_seen = false, b_seen = false;
  EXPECT_TRUE(Eventually([&] {
    nvmlProcessUtilizationSample_t samples[8];
    unsigned int count = 8;
    if (Api().nvmlDeviceGetProcessUtilization(Gpu(1), samples, &count, 0) != NVML_SUCCESS) {
      return false;
    }
    for (unsigned int i = 0; i < count; ++i) {
      a_seen |= samples[i].pid == static_cast<unsigned>(a.pid()) && samples[i].smUtil > 0;
      b_seen |= samples[i].pid == static_cast<unsigned>(b.pid()) && samples[i].smUtil > 0;
    }
    return a_seen && b_seen;
  })) << "samples of a: "
      << a_seen << ", of b: " << b_seen;

  // A SIGKILLed process vanishes with its memory; a clean exit too.
  a.Kill();
  rows = Processes(Gpu(1));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].pid, static_cast<unsigned>(b.pid()));
  EXPECT_EQ(Used(Gpu(1)), 512 * kMiB + context);
  EXPECT_EQ(b.Stop(), 0);
  EXPECT_TRUE(Processes(Gpu(1)).empty());
  EXPECT_EQ(Used(Gpu(1)), 0u);
}

TEST_F(NvmlAgreementTest, ProgramsOnAMigDeviceShowUpThereAndOnTheParent) {
  setenv("GPUSLICE_SIM_GPUS", "1xA100-40GB:mig=3g.20gb+1g.5gb*2", 1);
  ASSERT_EQ(Api().nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t mig = nullptr;
  ASSERT_EQ(Api().nvmlDeviceGetMigDeviceHandleByIndex(Gpu(0), 2, &mig), NVML_SUCCESS);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  ASSERT_EQ(Api().nvmlDeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
  unsigned int gi = 0;
  ASSERT_EQ(Api().nvmlDeviceGetGpuInstanceId(mig, &gi), NVML_SUCCESS);

  Peer p(0, 256 * kMiB, uuid);
  ASSERT_TRUE(p.WaitReady());
  nvmlMemory_t mem = {};
  ASSERT_EQ(Api().nvmlDeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, p.driver_total());
  EXPECT_EQ(mem.total, 5 * kGiB);
  EXPECT_EQ(mem.used, p.driver_used());
  std::vector<nvmlProcessInfo_t> rows = Processes(mig);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].pid, static_cast<unsigned>(p.pid()));
  EXPECT_EQ(rows[0].usedGpuMemory, p.driver_used());
  EXPECT_EQ(rows[0].gpuInstanceId, gi);
  rows = Processes(Gpu(0));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gpuInstanceId, gi);
  nvmlDevice_t other = nullptr;
  ASSERT_EQ(Api().nvmlDeviceGetMigDeviceHandleByIndex(Gpu(0), 0, &other), NVML_SUCCESS);
  EXPECT_TRUE(Processes(other).empty());
  EXPECT_EQ(p.Stop(), 0);
  EXPECT_TRUE(Processes(mig).empty());
}

}  // namespace
