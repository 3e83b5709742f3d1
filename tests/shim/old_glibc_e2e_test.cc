// The shim must load in the images people run. Here it
// runs, with the simulated GPU and two CUDA programs built on this machine
// (glibc 2.36), inside a Debian 11 root file system (glibc 2.31) made by
// scripts/test-rootfs.sh with debootstrap: memory caps, the NVML view, the dlsym
// and cuGetProcAddress routes, threads, and the demo worker. A program built
// the ordinary way (compute_worker) fails there, so the root file system
// does tell old glibc from new.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "subprocess.h"

namespace gpuslice::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kRoot[] = "/var/cache/gpuslice/bullseye-rootfs";
constexpr uint64_t kGiB = 1ull << 30;

class OldGlibc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to chroot (CI runs as root)";
    ASSERT_TRUE(fs::exists(std::string(kRoot) + "/bin/sh"))
        << kRoot << " is missing: scripts/test-rootfs.sh builds it with debootstrap (as root)";
    char tmpl[] = "/var/cache/gpuslice/bullseye-rootfs/tmp/gpuslice-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    inside_ = dir_.substr(std::string(kRoot).size());
    for (const char* f : {GPUSLICE_SHIM_PATH, GPUSLICE_SIM_CUDA, GPUSLICE_SIM_NVML,
                          GPUSLICE_PROBE_PATH, GPUSLICE_WORKER_PATH, GPUSLICE_CONTROL_PATH}) {
      fs::copy_file(f, dir_ + "/" + fs::path(f).filename().string());
    }
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs `argv` (paths inside the root) in the root with the simulated GPU,
  // the shim preloaded and a standalone memory limit.
  Output InRoot(std::vector<std::string> argv, const std::string& limit = "") const {
    std::vector<std::string> cmd = {"/usr/sbin/chroot",
                                    kRoot,
                                    "/usr/bin/env",
                                    "-i",
                                    "PATH=/usr/bin:/bin",
                                    "LD_LIBRARY_PATH=" + inside_,
                                    "LD_PRELOAD=" + inside_ + "/libgpuslice.so",
                                    "GPUSLICE_SIM_STATE=" + inside_ + "/sim-state",
                                    "GPUSLICE_SIM_CONTEXT_MEM=0",
                                    "XDG_RUNTIME_DIR=" + inside_};
    if (!limit.empty()) cmd.push_back("GPUSLICE_MEMORY_LIMIT=" + limit);
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return gpuslice::testing::Run(cmd, {{"PATH", "/usr/sbin:/usr/bin:/bin"}}, 60);
  }
  std::string Probe() const { return inside_ + "/shim_probe"; }

  std::string dir_;     // The test's folder, seen from here.
  std::string inside_;  // The same, seen from inside the root.
};

TEST_F(OldGlibc, TheShimTheSimulatedGpuAndCudaProgramsRunOnGlibc231) {
  Output ldd = gpuslice::testing::Run({"/usr/sbin/chroot", kRoot, "/usr/bin/ldd", "--version"},
                                      {{"PATH", "/usr/bin"}});
  ASSERT_NE(ldd.out.find("2.31"), std::string::npos) << ldd.out << ldd.err;

  // The control: a CUDA program linked the ordinary way on this machine.
  Output control = InRoot({inside_ + "/compute_worker"});
  EXPECT_NE(control.exit_code, 0);
  EXPECT_NE(control.err.find("version `GLIBC"), std::string::npos) << control.err;

  Output info = InRoot({Probe(), "info"}, "4GiB");
  ASSERT_EQ(info.exit_code, 0) << info.out << info.err;
  EXPECT_EQ(uint64_t(info.Int("mem_total")), 4 * kGiB) << info.out;
  Output nvml = InRoot({Probe(), "nvml"}, "4GiB");
  ASSERT_EQ(nvml.exit_code, 0) << nvml.out << nvml.err;
  EXPECT_EQ(uint64_t(nvml.Int("nvml_total")), 4 * kGiB) << nvml.out;
  // The cap holds on every route the probe knows, from several threads.
  Output fill = InRoot({Probe(), "fill", "pool", std::to_string(256ull << 20)}, "1GiB");
  ASSERT_EQ(fill.exit_code, 0) << fill.out << fill.err;
  EXPECT_EQ(uint64_t(fill.Int("allocated")), 1 * kGiB) << fill.out;
  EXPECT_EQ(fill.Int("error"), 2) << "CUDA_ERROR_OUT_OF_MEMORY";
  Output dl = InRoot({Probe(), "dlsym", std::to_string(2 * kGiB)}, "1GiB");
  ASSERT_EQ(dl.exit_code, 0) << dl.out << dl.err;
  EXPECT_EQ(dl.Int("dlsym_result"), 2) << dl.out;
  EXPECT_EQ(dl.Int("rtld_next_ok"), 1) << dl.out;
  Output proc = InRoot({Probe(), "procaddr", std::to_string(2 * kGiB)}, "1GiB");
  ASSERT_EQ(proc.exit_code, 0) << proc.out << proc.err;
  EXPECT_EQ(proc.Int("v2_result"), 2) << proc.out;
  Output race = InRoot({Probe(), "race", "4", "200", std::to_string(1 * kGiB)}, "512MiB");
  ASSERT_EQ(race.exit_code, 0) << race.out << race.err;
  EXPECT_GT(race.Int("ok"), 0) << race.out;
  EXPECT_EQ(race.Int("other"), 0) << race.out;

  // The demo worker: runs kernels in its slice, and is refused past it.
  Output ok = InRoot({inside_ + "/gpuslice-demo-worker", "--name", "w", "--mem", "256MiB", "--duty",
                      "50%", "--seconds", "1"},
                     "1GiB");
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE((ok.out + ok.err).find("ran "), std::string::npos) << ok.out << ok.err;
  Output over =
      InRoot({inside_ + "/gpuslice-demo-worker", "--name", "w", "--mem", "2GiB", "--seconds", "1"},
             "1GiB");
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE((over.out + over.err).find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
      << over.out << over.err;
}

}  // namespace
}  // namespace gpuslice::testing
