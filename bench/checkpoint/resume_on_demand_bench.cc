// Resume on demand (docs/SUSPEND.md) against a resume by hand and against the
// copy a resume has to make (the target: "a suspended notebook's
// first CUDA call resumes it in <= 1.5x the time of copying its memory
// back"; figures in docs/PERFORMANCE.md).
//
// Each run starts a real gpusliced on a simulated H100
// (bench/common/bench_daemon.h) and one job: gpuslice-demo-worker holding
// N GiB of patterned device memory, idle (no CUDA call at all, as a notebook
// between two cells) while it waits for a file. Then, side by side on the
// same job:
//   on demand  `gpuslice suspend`; the file appears; the worker's next call,
//              a kernel launch, asks the daemon to resume the job and returns
//              once it has: the worker times that call;
//   by hand    `gpuslice suspend`; `gpuslice resume`, timed from the
//              command's start to its return (it returns once the daemon
//              says the job runs); then the worker's next call (no wait);
//   copy       the worker checks every byte (0 may differ), frees its
//              memory and times a host-to-device copy of N GiB into fresh
//              device memory (what a restore has to fill: the checkpoint gave
//              the device pages back), and again into the same memory.
// Reported: the medians over the runs and on demand / copy into fresh
// memory (the target's ratio), also against the touched copy.
//
//   resume_on_demand_bench [--mem-gib 1,4] [--runs 5]
//
// Needs about 3 x N GiB of host memory (the job's memory, its checkpoint,
// the copy's host buffer).

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  int exit_code = -1;
  std::string out;
  double ms = 0;
};

// `gpuslice ARGS` against the daemon; its stdout, exit status and wall time.
Run Cli(const gpuslice::bench::BenchDaemon& d, const std::vector<std::string>& args) {
  const std::string path = d.dir + "/cli.out";
  const auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(out, 1);
    setenv("GPUSLICE_SOCKET", d.socket.c_str(), 1);
    std::vector<std::string> argv = {GPUSLICE_BENCH_CLI};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(raw[0], raw.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Run r;
  r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
    std::fclose(f);
  }
  return r;
}

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "resume_on_demand_bench: %s\n", what.c_str());
  std::exit(1);
}

// Polls `gpuslice logs ID` (every 20 ms, up to `seconds`) until it holds
// `needle`; returns the log.
std::string AwaitLog(const gpuslice::bench::BenchDaemon& d, const std::string& id,
                     const std::string& needle, double seconds = 120) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    Run r = Cli(d, {"logs", id});
    if (r.out.find(needle) != std::string::npos) return r.out;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Fail("job " + id + " never logged '" + needle + "': " + Cli(d, {"logs", id}).out);
}

// The number after `key` on the first line of `log` that has it.
double After(const std::string& log, const std::string& key) {
  size_t at = log.find(key);
  if (at == std::string::npos) Fail("no '" + key + "' in " + log);
  return std::atof(log.c_str() + at + key.size());
}

void Touch(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) Fail("cannot create " + path);
  std::fclose(f);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Figures {
  double on_demand_ms, by_hand_ms, copy_fresh_ms, copy_touched_ms;
  long differ;
};

Figures OneRun(uint64_t gib) {
  gpuslice::bench::BenchDaemon d;
  if (!d.Start()) Fail("gpusliced did not start");
  const std::string first = d.dir + "/first", second = d.dir + "/second";
  const std::string mem = std::to_string(gib) + "GiB";
  Run sub = Cli(d, {"submit",
                    "--mem",
                    std::to_string(2 * gib + 2) + "GiB",
                    "--compute",
                    "50%",
                    "--",
                    GPUSLICE_BENCH_WORKER,
                    "--name",
                    "notebook",
                    "--mem",
                    mem,
                    "--verify",
                    "--wait-file",
                    first,
                    "--wait-file",
                    second,
                    "--first-call",
                    "launch",
                    "--duty",
                    "50%",
                    "--kernel-us",
                    "1000",
                    "--seconds",
                    "0.1",
                    "--time-copy"});
  if (sub.exit_code != 0) Fail("submit failed: " + sub.out);
  std::string id = sub.out.substr(0, sub.out.find_first_of("\n "));
  AwaitLog(d, id, "waiting for " + first);

  Figures f{};
  if (Cli(d, {"suspend", id}).exit_code != 0) Fail("suspend failed");
  Touch(first);
  std::string log = AwaitLog(d, id, "first call after " + first);
  f.on_demand_ms = After(log, "first call after " + first + " (launch): ");

  // The daemon sees the job running once its worker is done (next tick).
  for (int i = 0; i < 500 && Cli(d, {"show", id}).out.find("resuming") != std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (Cli(d, {"suspend", id}).exit_code != 0) Fail("second suspend failed");
  Run resume = Cli(d, {"resume", id});
  if (resume.exit_code != 0) Fail("resume failed: " + resume.out);
  f.by_hand_ms = resume.ms;
  Touch(second);
  log = AwaitLog(d, id, "copy of ");
  // The worker prints sizes as core::FormatBytes does ("1 GiB").
  f.differ = static_cast<long>(After(log, "verified " + std::to_string(gib) + " GiB: "));
  f.copy_fresh_ms = After(log, "to the device: fresh ");
  f.copy_touched_ms = After(log, " ms, touched ");
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {1};
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) Fail(a + " needs a value (--mem-gib 1,4 | --runs N)");
    const std::string v = argv[++i];
    if (a == "--mem-gib") {
      sizes.clear();
      for (size_t at = 0; at < v.size();) {
        size_t comma = v.find(',', at);
        sizes.push_back(std::strtoull(v.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma == std::string::npos ? v.size() : comma + 1;
      }
    } else if (a == "--runs") {
      runs = std::atoi(v.c_str());
    } else {
      Fail("unknown option " + a);
    }
  }
  std::printf("%-6s %5s | %12s %12s | %12s %12s | %14s %14s | %s\n", "size", "runs", "on demand",
              "by hand", "copy fresh", "copy touched", "demand/fresh", "demand/touched",
              "bytes differ");
  for (uint64_t gib : sizes) {
    std::vector<double> demand, hand, fresh, touched;
    long differ = 0;
    for (int r = 0; r < runs; ++r) {
      Figures f = OneRun(gib);
      demand.push_back(f.on_demand_ms);
      hand.push_back(f.by_hand_ms);
      fresh.push_back(f.copy_fresh_ms);
      touched.push_back(f.copy_touched_ms);
      differ += f.differ;
      std::fprintf(stderr, "  run %d: on demand %.1f ms, by hand %.1f ms, copy %.1f / %.1f ms\n",
                   r + 1, f.on_demand_ms, f.by_hand_ms, f.copy_fresh_ms, f.copy_touched_ms);
    }
    std::printf("%3llu GiB %5d | %9.1f ms %9.1f ms | %9.1f ms %9.1f ms | %14.2f %14.2f | %ld\n",
                static_cast<unsigned long long>(gib), runs, Median(demand), Median(hand),
                Median(fresh), Median(touched), Median(demand) / Median(fresh),
                Median(demand) / Median(touched), differ);
  }
  return 0;
}
