// End-to-end: what a new user trips over, with the real programs.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

// Runs `command` through the shell; returns its exit code and stdout+stderr.
CliResult Shell(const std::string& command) {
  CliResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Item 11: every program answers --version.
TEST(Usability, EveryProgramPrintsItsVersion) {
  const std::pair<const char*, const char*> programs[] = {
      {GPUSLICE_E2E_CLI, "gpuslice "},
      {GPUSLICE_E2E_DAEMON, "gpusliced "},
      {GPUSLICE_E2E_REPLAY, "gpuslice-replay "},
      {GPUSLICE_E2E_SMI, "gpuslice-smi "},
      {GPUSLICE_E2E_WORKER, "gpuslice-demo-worker "},
      {GPUSLICE_E2E_SIM_FAULT, "gpuslice-sim-fault "},
  };
  for (const auto& [path, name] : programs) {
    // The worker and the simulator's tools load the simulated driver.
    CliResult r =
        Shell("LD_LIBRARY_PATH=" + std::string(GPUSLICE_E2E_SIM_DIR) + " " + path + " --version");
    EXPECT_EQ(r.exit_code, 0) << path << ": " << r.out;
    EXPECT_EQ(r.out, std::string(name) + GPUSLICE_E2E_VERSION + "\n") << path;
  }
}

// Item 11: a mistyped subcommand gets the nearest one, and exits 2.
TEST(Usability, AMistypedCommandSuggestsTheNearestAndExitsTwo) {
  Daemon d;
  CliResult r = d.Cli({"sumbit", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'sumbit'; did you mean 'submit'?"), std::string::npos)
      << r.err;
  r = d.Cli({"--json", "xyzzy"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'xyzzy'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

// Item 11: "top -n 0" printed the limits of a double (a 300-digit number).
TEST(Usability, TopRefusesZeroIterationsBriefly) {
  Daemon d;
  CliResult r = d.Cli({"top", "-n", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("a count of 1 or more"), std::string::npos) << r.err;
  EXPECT_LT(r.err.size(), 300u) << r.err;
}

// Item 3: "--help" says what GB means.
TEST(Usability, HelpSaysGbIsTenToTheNine) {
  Daemon d;
  for (const char* cmd : {"submit", "run", "resize", "service"}) {
    CliResult r = d.Cli({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    if (std::string(cmd) == "service") continue;  // Its --mem is under "service create".
    EXPECT_NE(r.out.find("GB = 10^9"), std::string::npos) << cmd << ":\n" << r.out;
  }
}

// Item 5: the worker answers --help, finds the simulated driver beside it
// without LD_LIBRARY_PATH, and reports its kernels' own time as GPU time.
TEST(Usability, DemoWorkerHelpsRunsWithoutLdLibraryPathAndReportsKernelTime) {
  CliResult help = Shell(std::string("env -u LD_LIBRARY_PATH ") + GPUSLICE_E2E_WORKER + " --help");
  EXPECT_EQ(help.exit_code, 0) << help.out;
  EXPECT_NE(help.out.find("usage: gpuslice-demo-worker"), std::string::npos) << help.out;
  Daemon d;  // Only for its temp dir: a simulated GPU of this test's own.
  CliResult r = Shell("env -u LD_LIBRARY_PATH -u LD_PRELOAD GPUSLICE_SIM_STATE=" + d.dir() +
                      "/sim-state GPUSLICE_SIM_GPUS=1xH100-80GB " + GPUSLICE_E2E_WORKER +
                      " --name w --mem 64MiB --duty 50% --seconds 1 --kernel-us 1000");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  long kernels = 0;
  double gpu_ms = 0, wall_ms = 0, waited_ms = -1;
  size_t at = r.out.find("ran ");
  ASSERT_NE(at, std::string::npos) << r.out;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                        "ran %ld kernels, GPU time %lf ms of %lf ms (%*f%%); launches waited %lf ms",
                        &kernels, &gpu_ms, &wall_ms, &waited_ms),
            4)
      << r.out;
  EXPECT_GT(kernels, 0);
  EXPECT_NEAR(gpu_ms, kernels * 1.0, 1.0) << "GPU time is the kernels' own: " << r.out;
  EXPECT_GE(waited_ms, 0);
}

// --duty is an open loop. Requests of --kernel-us arrive on a
// schedule fixed from the start (2 ms every 6.67 ms for 30%), however long
// each one waits for the GPU: beside a neighbour running kernels flat out on
// the same simulated GPU (no shim: the GPU time-slices the two processes),
// the worker still offers exactly 300 requests in 2 s and is served nearly
// all of them. Idling in proportion to how long its last kernel took, every
// wait for the GPU would lower what it asks for.
TEST(Usability, DemoWorkerOffersRequestsOnAFixedScheduleWhateverItsKernelsWait) {
  Daemon d;  // Only for its temp dir: a simulated GPU of this test's own.
  const std::string env = "env -u LD_LIBRARY_PATH -u LD_PRELOAD GPUSLICE_SIM_STATE=" + d.dir() +
                          "/sim-state GPUSLICE_SIM_GPUS=1xH100-80GB ";
  CliResult r = Shell(env + GPUSLICE_E2E_WORKER +
                      " --name busy --mem 64MiB --duty 100% --seconds 3 --kernel-us 2000 & " + env +
                      GPUSLICE_E2E_WORKER +
                      " --name open --mem 64MiB --duty 30% --seconds 2 --kernel-us 2000; wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("[open] requests: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  unsigned kernel_us = 0;
  double period_ms = 0, delivered = 0, p50 = 0, p99 = 0;
  unsigned long offered = 0, served = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                        "[open] requests: demand 30%% (%u us every %lf ms), offered %lu, served "
                        "%lu, delivered %lf%% of the offered GPU time; latency p50 %lf ms, p99 "
                        "%lf ms",
                        &kernel_us, &period_ms, &offered, &served, &delivered, &p50, &p99),
            7)
      << r.out;
  EXPECT_EQ(kernel_us, 2000u);
  EXPECT_NEAR(period_ms, 6.67, 0.01);
  EXPECT_EQ(offered, 300u) << r.out;
  EXPECT_GE(served, 270u) << r.out;
  EXPECT_NEAR(delivered, 100.0 * served / offered, 0.1) << r.out;
  EXPECT_GE(p50, 2.0) << "a request's latency includes its 2 ms kernel: " << r.out;
  EXPECT_GE(p99, p50) << r.out;
}

// The quick start's demo runs to the end and shows what it says: the memory
// story (a job queued until memory frees, one refused its extra memory by
// the shim) and a table of each job's share, demand and what it
// got, with its requests' latency, as measured in the run.
TEST(Usability, TheDemoShowsEachJobsShareDemandAndWhatItGot) {
  CliResult r =
      Shell(std::string("env -u GPUSLICE_SOCKET GPUSLICE_BUILD_DIR=") + GPUSLICE_E2E_BUILD_DIR +
            " bash " + GPUSLICE_E2E_SOURCE_DIR + "/scripts/demo.sh");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << r.out;
  const size_t table = r.out.find("== Compute: what each job was guaranteed, asked for and got");
  ASSERT_NE(table, std::string::npos) << r.out;
  const std::string tail = r.out.substr(table);
  // The header, then a row per job: its name and cells (a latency is two
  // words, "2.1 ms").
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream lines(tail);
  std::string line;
  std::getline(lines, line);  // The title.
  std::getline(lines, line);
  EXPECT_EQ(line.find("job"), 3u) << tail;
  for (const char* column : {"share", "demand", "got (own)", "got (NVML)", "delivered", "p50"}) {
    EXPECT_NE(line.find(column), std::string::npos) << column << ": " << tail;
  }
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream words(line);
    std::vector<std::string> cells;
    for (std::string w; words >> w;) cells.push_back(w);
    if (!cells.empty()) rows[cells[0]] = cells;
  }
  ASSERT_EQ(rows.size(), 4u) << tail;
  // train-a is guaranteed 30% for a demand of 30%; the others have no share;
  // greedy never got to run a request. Every figure a job that ran shows is
  // a measurement (a percentage or a latency), never a placeholder.
  EXPECT_EQ(rows["train-a"][1], "30.0%") << tail;
  EXPECT_EQ(rows["train-a"][2], "30.0%") << tail;
  EXPECT_EQ(rows["train-b"][1], "-") << tail;
  EXPECT_EQ(rows["train-b"][2], "80.0%") << tail;
  EXPECT_EQ(rows["notebook"][2], "50.0%") << tail;
  for (const char* job : {"train-a", "train-b", "notebook"}) {
    ASSERT_EQ(rows[job].size(), 10u) << job << ": " << tail;
    // Its own count of GPU time and its delivered fraction, and NVML's
    // figure for the two that run 4 s (the daemon samples once a second).
    EXPECT_NE(rows[job][3].find('%'), std::string::npos) << job << ": " << tail;
    EXPECT_NE(rows[job][5].find('%'), std::string::npos) << job << ": " << tail;
    if (std::string(job) != "notebook") {
      EXPECT_NE(rows[job][4].find('%'), std::string::npos) << job << ": " << tail;
    }
    EXPECT_EQ(rows[job][7], "ms") << tail;
    EXPECT_EQ(rows[job][9], "ms") << tail;
  }
  ASSERT_EQ(rows["greedy"].size(), 8u) << tail;
  for (size_t i : {1, 2, 3, 5, 6, 7}) EXPECT_EQ(rows["greedy"][i], "-") << tail;
  EXPECT_NE(tail.find("train-a: owed 30% of the GPU"), std::string::npos) << tail;
  EXPECT_NE(tail.find("greedy: no requests ran"), std::string::npos) << tail;
}

class UsabilityDaemon : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "daemon log:\n" << ReadFile(d.dir() + "/daemon.log");
  }
  Daemon d;
};

// Items 3 and 11: "--mem 8" was 8 bytes, accepted; a bad value exited 125.
TEST_F(UsabilityDaemon, ABareMemorySizeIsAUsageErrorWithAHint) {
  CliResult r = d.Cli({"submit", "--mem", "8", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--mem: size '8' has no unit: did you mean '8GiB'?"), std::string::npos)
      << r.err;
  CliResult bad = d.Cli({"submit", "--mem", "12XB", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  CliResult never = d.Cli({"submit", "--mem", "100GiB", "--", "true"});
  EXPECT_EQ(never.exit_code, 125) << "a request the daemon refuses is not a usage error";
}

}  // namespace
}  // namespace gpuslice::e2e

namespace gpuslice::e2e {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    if (nl > start) out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

// Item 13: cancel several jobs at once, all of mine, or those in a state.
TEST_F(UsabilityDaemon, CancelTakesIdsTheUserAndAState) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    CliResult r = d.Cli({"submit", "--mem", "1GiB", "--", "sleep", "60"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ids.push_back(Trim(r.out));
  }
  CliResult big = d.Cli({"submit", "--mem", "79GiB", "--", "sleep", "60"});
  ASSERT_EQ(big.exit_code, 0) << big.err;
  std::string queued = Trim(big.out);
  for (const std::string& id : ids) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; })) << id;
  }
  ASSERT_EQ(State(d, queued), "queued");
  CliResult ps = d.Cli({"ps", "--state", "queued"});
  EXPECT_EQ(Lines(ps.out).size(), 2u) << ps.out;
  CliResult c = d.Cli({"cancel", "--state", "queued"});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(State(d, queued), "cancelled");
  EXPECT_EQ(State(d, ids[0]), "running");
  c = d.Cli({"cancel", ids[0], ids[1]});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("job " + ids[0] + ": "), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("job " + ids[1] + ": "), std::string::npos) << c.out;
  c = d.Cli({"cancel", "--user"});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("job " + ids[2] + ": "), std::string::npos) << c.out;
  EXPECT_TRUE(Daemon::WaitFor([&] { return State(d, ids[2]) == "cancelled"; }));
  ps = d.Cli({"ps", "--user", "--state", "queued,running"});
  EXPECT_EQ(Lines(ps.out).size(), 1u) << "only the header:\n" << ps.out;
  CliResult none = d.Cli({"cancel"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  CliResult bad = d.Cli({"ps", "--state", "pending"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("unknown job state 'pending'"), std::string::npos) << bad.err;
}

// Item 13: job arrays, and everything about one job.
TEST_F(UsabilityDaemon, ArrayJobsGetTheirIndexAndShowTellsEverything) {
  CliResult r = d.Cli({"submit", "--array", "1-3", "--mem", "1GiB", "--name", "arr", "--", "sh",
                       "-c", "echo index=$GPUSLICE_ARRAY_INDEX"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> ids = Lines(r.out);
  ASSERT_EQ(ids.size(), 3u) << r.out;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, ids[i]) == "exited"; })) << ids[i];
    EXPECT_EQ(d.Cli({"logs", ids[i]}).out, "index=" + std::to_string(i + 1) + "\n");
    EXPECT_EQ(Job(d, ids[i])["name"], "arr[" + std::to_string(i + 1) + "]");
  }
  CliResult show = d.Cli({"show", ids[1]});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  for (const char* want : {"arr[2]", "exited", "exit code", "sh -c echo index=$GPUSLICE_ARRAY_INDEX",
                           "elapsed", "submitted", "Transitions:", "queued", "running"}) {
    EXPECT_NE(show.out.find(want), std::string::npos) << want << " in\n" << show.out;
  }
  CliResult missing = d.Cli({"show", "999"});
  EXPECT_EQ(missing.exit_code, 125);
  CliResult ps = d.Cli({"ps", "--all"});
  EXPECT_NE(ps.out.find("ELAPSED"), std::string::npos) << ps.out;
  CliResult bad = d.Cli({"submit", "--array", "3-1", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
}  // namespace gpuslice::e2e

namespace gpuslice::e2e {
namespace {

// Items 8, 9 and 10 on a GPU in MIG mode beside one that is not: the
// Kubernetes spelling of a profile works, `gpus` says which instances are
// free and whose, and a request that never fits says MIG mode in its words.
TEST(UsabilityMig, ProfilesInKubernetesSpellingWhoseInstanceAndNeverFitInUserTerms) {
  Daemon d("1xA100-40GB:mig=1g.5gb*2,1xA100-40GB");
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  CliResult r = d.Cli({"submit", "--mig", "nvidia.com/mig-1g.5gb", "--", "sleep", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = Trim(r.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  CliResult g = d.Cli({"gpus"});
  EXPECT_NE(g.out.find("job " + id + " ("), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("free"), std::string::npos) << g.out;
  CliResult never = d.Cli({"submit", "--gpus", "2", "--", "true"});
  EXPECT_EQ(never.exit_code, 125);
  EXPECT_NE(never.err.find("2 GPUs can never fit on this machine: 1 GPU is outside MIG mode; 1 "
                           "GPU is in MIG mode"),
            std::string::npos)
      << never.err;
  EXPECT_NE(never.err.find("--mig PROFILE, here 1g.5gb"), std::string::npos) << never.err;
  CliResult bad = d.Cli({"submit", "--mig", "5g.20gb", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("compute slices must be 1, 2, 3, 4 or 7"), std::string::npos) << bad.err;
}

// Item 10: two 20 GiB jobs that use nothing: NVML says 0 B in use, but only
// 40 GiB are left for jobs; `gpus` shows both.
TEST_F(UsabilityDaemon, GpusShowsWhatJobsReservedBesideWhatNvmlSees) {
  for (int i = 0; i < 2; ++i) {
    CliResult r = d.Cli({"submit", "--mem", "20GiB", "--", "sleep", "60"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string id = Trim(r.out);
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  }
  CliResult g = d.Cli({"gpus"});
  EXPECT_NE(g.out.find("RESERVED"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("40 GiB (40 GiB free)"), std::string::npos) << g.out;
}

}  // namespace
}  // namespace gpuslice::e2e
