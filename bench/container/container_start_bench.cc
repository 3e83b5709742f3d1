// How much gpuslice adds to starting a container (target: <= 300 ms, median
// of 10, side by side in one run). Each iteration starts the same
// container twice, interleaved: plain `podman run --rm IMAGE true`, and
// `gpuslice run --mem 1GiB --image IMAGE -- true` against a real gpusliced
// on a simulated GPU (the CLI's submission, the daemon's scheduling and
// launch, the slice's mounts and flags, the CLI noticing the end). The
// manual time of an iteration is the difference; the counters are medians.
//
// Needs root (rootful podman, as the daemon runs it) and the image the e2e
// tests import (localhost/gpuslice-e2e:bullseye, from scripts/test-rootfs.sh's
// root file system); it is imported here when missing.

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_daemon.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kImage[] = "localhost/gpuslice-e2e:bullseye";
constexpr char kRootfs[] = "/var/cache/gpuslice/bullseye-rootfs";
// What podman needs on these machines (see tests/e2e/podman.h).
const std::vector<std::string> kPodmanArgs = {"--runtime", "runc", "--ulimit", "nofile=1024:1024",
                                              "--ulimit", "nproc=1024:1024"};

// Runs argv (output to /dev/null) and returns its wall time in ms, or -1 if
// it failed.
double RunMs(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void BM_ContainerStart(benchmark::State& state) {
  if (geteuid() != 0) {
    state.SkipWithError("needs root (rootful podman)");
    return;
  }
  if (RunMs({"podman", "image", "exists", kImage}) < 0 &&
      std::system((std::string("tar -C ") + kRootfs + " -c . | podman import - " + kImage +
                   " >/dev/null")
                      .c_str()) != 0) {
    state.SkipWithError("no image: run scripts/test-rootfs.sh first");
    return;
  }
  std::string podman_args;
  for (const std::string& a : kPodmanArgs) podman_args += (podman_args.empty() ? "" : " ") + a;
  gpuslice::bench::BenchDaemon d;
  if (!d.Start({"--set", "podman_args=" + podman_args})) {
    state.SkipWithError("gpusliced did not start");
    return;
  }
  std::vector<std::string> plain = {"podman", "run", "--rm"};
  plain.insert(plain.end(), kPodmanArgs.begin(), kPodmanArgs.end());
  plain.insert(plain.end(), {kImage, "true"});
  const std::vector<std::string> sliced = {GPUSLICE_BENCH_CLI, "run",   "--mem", "1GiB", "--image",
                                           kImage,             "--", "true"};
  const std::vector<std::string> env = {"GPUSLICE_SOCKET=" + d.socket};
  // One of each first: the image's layers and podman's state warm up.
  if (RunMs(plain) < 0 || RunMs(sliced, env) < 0) {
    state.SkipWithError("a container did not run");
    return;
  }
  std::vector<double> plain_ms, sliced_ms, extra_ms;
  for (auto _ : state) {
    double p = RunMs(plain);
    double s = RunMs(sliced, env);
    if (p < 0 || s < 0) {
      state.SkipWithError("a container did not run");
      return;
    }
    plain_ms.push_back(p);
    sliced_ms.push_back(s);
    extra_ms.push_back(s - p);
    state.SetIterationTime((s - p) / 1000.0);
  }
  state.counters["plain_median_ms"] = Median(plain_ms);
  state.counters["gpuslice_median_ms"] = Median(sliced_ms);
  state.counters["added_median_ms"] = Median(extra_ms);
  state.counters["added_max_ms"] = *std::max_element(extra_ms.begin(), extra_ms.end());
}
BENCHMARK(BM_ContainerStart)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
