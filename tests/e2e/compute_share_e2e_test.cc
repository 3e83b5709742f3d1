// End-to-end: the daemon's compute shares reach the shim. Two jobs with
// --compute 30% and 70% saturate the one simulated GPU side by side; the
// shims of the two slices take turns through the daemon's coordination
// directory, so the GPU time they get splits 30/70 (without shares, or
// without a common coordination file, it would be about 50/50).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

struct WorkerReport {
  long kernels = 0;
  double gpu_ms = 0;
  double wall_ms = 0;
};

// Parses the worker's "[name] held X, ran N kernels, GPU time G ms of W ms".
bool ParseReport(const std::string& out, WorkerReport* r) {
  size_t at = out.find("ran ");
  if (at == std::string::npos) return false;
  return std::sscanf(out.c_str() + at, "ran %ld kernels, GPU time %lf ms of %lf ms", &r->kernels,
                     &r->gpu_ms, &r->wall_ms) == 3;
}

// The share of the GPU the worker reaches alone and without the shim, on this
// machine now: the ceiling any slice can reach here (issue 18 item 15: a
// fixed bound failed on slower machines).
double UnshimmedCeiling(const Daemon& d, unsigned kernel_us) {
  std::string cmd = "env -u LD_PRELOAD LD_LIBRARY_PATH=" + std::string(GPUSLICE_E2E_SIM_DIR);
  for (const std::string& e : d.Env()) {
    if (e.rfind("GPUSLICE_SIM_", 0) == 0) cmd += " " + e;
  }
  cmd += " " + WorkerPath() + " --name ceiling --mem 256MiB --duty 100% --seconds 2 --kernel-us " +
         std::to_string(kernel_us) + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
  }
  WorkerReport rep;
  if (!ParseReport(out, &rep) || rep.wall_ms <= 0) return 0;
  return rep.kernels * kernel_us / 1000.0 / rep.wall_ms;
}

class E2ECompute : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "daemon log:\n" << ReadFile(d.dir() + "/daemon.log");
  }
  Daemon d;
};

TEST_F(E2ECompute, TwoSlicesAt30And70PercentSplitTheGpu30To70) {
  // Short kernels: with the worker's one-kernel-then-synchronise loop, the
  // shim (at this commit) does not hold the split for kernels of 2 ms or
  // more (both tenants ran ~50/50 with --kernel-us 2000 and 20000; reported).
  constexpr unsigned kKernelUs = 200;
  auto submit = [&](const std::string& share, const std::string& name) {
    CliResult r = d.Cli({"submit", "--mem", "2GiB", "--compute", share, "--name", name, "--",
                         WorkerPath(), "--name", name, "--mem", "256MiB", "--duty", "100%",
                         "--seconds", "2", "--kernel-us", std::to_string(kKernelUs)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Trim(r.out);
  };
  std::string a = submit("30%", "thirty");
  std::string b = submit("70%", "seventy");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  ASSERT_TRUE(Daemon::WaitFor(
      [&] { return State(d, a) == "exited" && State(d, b) == "exited"; }, 90));
  std::string out_a = d.Cli({"logs", a}).out, out_b = d.Cli({"logs", b}).out;
  WorkerReport ra, rb;
  ASSERT_TRUE(ParseReport(out_a, &ra)) << out_a << d.Cli({"logs", a}).err;
  ASSERT_TRUE(ParseReport(out_b, &rb)) << out_b << d.Cli({"logs", b}).err;
  // GPU time each got: its kernels are kKernelUs of work each. (The worker's
  // event-timed figure also counts time its launches waited for their turn.)
  const double got_a = ra.kernels * kKernelUs / 1000.0, got_b = rb.kernels * kKernelUs / 1000.0;
  ASSERT_GT(got_a + got_b, 0);
  const double split = got_a / (got_a + got_b);
  std::cerr << "30%: " << got_a << " ms of " << ra.wall_ms << " ms; 70%: " << got_b << " ms of "
            << rb.wall_ms << " ms; split " << split << "\n";
  EXPECT_NEAR(split, 0.30, 0.10) << out_a << out_b << d.Cli({"logs", a}).err
                                 << d.Cli({"logs", b}).err;
  // Hard caps: neither above its share (+ slack for a loaded machine).
  EXPECT_LE(got_a / ra.wall_ms, 0.30 + 0.10) << out_a;
  EXPECT_LE(got_b / rb.wall_ms, 0.70 + 0.10) << out_b;
  // They met in the daemon's coordination directory, not a per-user one.
  bool coord_file = false;
  for (const auto& e : std::filesystem::directory_iterator(d.state_dir() + "/coord")) {
    coord_file = coord_file || e.path().extension() == ".coord";
  }
  EXPECT_TRUE(coord_file) << "no coordination file in " << d.state_dir() << "/coord";
}

// --compute-mode reaches the slice: alone on the GPU, a hard 30% job stays
// near 30%, a work-conserving 30% job uses the idle rest.
TEST_F(E2ECompute, AWorkConservingJobAloneUsesTheIdleGpuAHardOneDoesNot) {
  constexpr unsigned kKernelUs = 200;
  auto run_alone = [&](const std::string& mode) {
    CliResult r = d.Cli({"submit", "--mem", "2GiB", "--compute", "30%", "--compute-mode", mode,
                         "--name", mode, "--", WorkerPath(), "--name", mode, "--mem", "256MiB",
                         "--duty", "100%", "--seconds", "2", "--kernel-us",
                         std::to_string(kKernelUs)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = Trim(r.out);
    EXPECT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "exited"; }, 60));
    json job = json::parse(d.Cli({"ps", "--all", "--json"}).out, nullptr, false);
    for (const json& j : job["jobs"]) {
      if (std::to_string(j["id"].get<uint64_t>()) == id) {
        EXPECT_EQ(j["request"]["compute_mode"], mode);
      }
    }
    std::string out = d.Cli({"logs", id}).out;
    WorkerReport rep;
    EXPECT_TRUE(ParseReport(out, &rep)) << out;
    double use = rep.wall_ms > 0 ? rep.kernels * kKernelUs / 1000.0 / rep.wall_ms : 0;
    std::cerr << mode << " 30% alone: " << use << " of the GPU\n";
    return use;
  };
  double hard = run_alone("hard");
  double wc = run_alone("work-conserving");
  double ceiling = UnshimmedCeiling(d, kKernelUs);
  std::cerr << "the worker alone without the shim: " << ceiling << " of the GPU\n";
  EXPECT_LE(hard, 0.30 + 0.10);
  // Nearer this machine's own ceiling than the 30% share: a work-conserving
  // slice held to its share fails this on any machine that can exceed it.
  ASSERT_GT(ceiling, 0.40) << "this machine cannot tell 30% from its ceiling";
  EXPECT_GE(wc, (0.30 + ceiling) / 2) << "a work-conserving slice alone may use the idle GPU";
  // A bad mode is refused, naming the flag.
  CliResult bad = d.Cli({"submit", "--mem", "1GiB", "--compute", "30%", "--compute-mode", "soft",
                         "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--compute-mode"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace gpuslice::e2e
