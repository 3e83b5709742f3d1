#pragma once

// A throw-away gpusliced on simulated GPUs for benchmarks: its own temp
// directory, socket, state and simulated-GPU state; the binaries come from
// CMake (GPUSLICE_BENCH_DAEMON, GPUSLICE_BENCH_SIM_DIR).

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"

namespace gpuslice::bench {

struct BenchDaemon {
  std::string dir;
  pid_t pid = -1;
  std::string socket;

  bool Start(std::vector<std::string> extra = {}) {
    char tmpl[] = "/tmp/gpuslice-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return false;
    dir = tmpl;
    chmod(dir.c_str(), 0755);
    socket = dir + "/sock";
    std::vector<std::string> args = {GPUSLICE_BENCH_DAEMON, "--state-dir", dir + "/state",
                                     "--socket", socket, "--sim-lib-dir", GPUSLICE_BENCH_SIM_DIR,
                                     "--log-level", "warn",
                                     // Every submission queues: more than the default cap.
                                     "--set", "max_queued_jobs_per_user=100000",
                                     "--set", "cdi_dir=" + dir + "/cdi"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      // In a folder of its own: a container job gets the state file's
      // folder mounted (docs/CONTAINERS.md), not the benchmark's.
      mkdir((dir + "/sim").c_str(), 0755);
      setenv("GPUSLICE_SIM_STATE", (dir + "/sim/state").c_str(), 1);
      setenv("GPUSLICE_SIM_GPUS", "1xH100-80GB", 1);
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    gpuslice::client::Client probe(socket);
    for (int i = 0; i < 200; ++i) {
      if (probe.Call("GET", "/v1/status").ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  ~BenchDaemon() {
    if (pid > 0) {
      gpuslice::client::Client c(socket);
      auto jobs = c.Call("GET", "/v1/jobs?state=running&limit=0");
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      // The job that held the GPU: end its process group.
      if (jobs.ok()) {
        for (const auto& j : (*jobs)["jobs"]) {
          if (j["pid"].get<int64_t>() > 0) kill(-static_cast<pid_t>(j["pid"].get<int64_t>()), SIGKILL);
        }
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace gpuslice::bench
