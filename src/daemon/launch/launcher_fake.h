#pragma once

// A Launcher for unit tests: records launches, and lets the test end a job's
// processes (with an exit code written where the supervisor would) or keep
// them alive.

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/launch/launcher.h"

namespace gpuslice::daemon {

class FakeLauncher : public Launcher {
 public:
  core::Result<ProcessRef> Launch(const LaunchSpec& spec) override {
    if (!fail_with.ok()) return fail_with;
    int64_t pid = next_pid_++;
    launches[pid] = spec;
    alive.insert(pid);
    return ProcessRef{pid, 1000 + static_cast<uint64_t>(pid), 0};
  }
  bool GroupAlive(int64_t pgid) override { return alive.count(pgid) > 0; }
  bool ProcessAlive(int64_t pid, uint64_t) override { return alive.count(pid) > 0; }
  core::Status SignalGroup(int64_t pgid, int signal) override {
    signals.emplace_back(pgid, signal);
    if (die_on_signal && alive.erase(pgid)) WriteStatus(pgid, "signal", signal);
    return core::Status::Ok();
  }
  std::vector<int64_t> Reap() override { return {}; }
  core::Status StopGroup(int64_t pgid, bool stop) override {
    if (stop) {
      stopped.insert(pgid);
    } else {
      stopped.erase(pgid);
    }
    return core::Status::Ok();
  }
  bool Adopt(uint64_t job_id, int64_t pgid) override {
    adopted[job_id] = pgid;
    return cgroups;
  }
  std::vector<std::string> EndStrays(const std::vector<uint64_t>& keep) override {
    strays_kept = keep;
    return {};
  }
  std::string EndNote(int64_t pgid) override {
    auto it = end_notes.find(pgid);
    return it == end_notes.end() ? std::string() : it->second;
  }
  void Release(int64_t pgid) override { released.push_back(pgid); }
  void RunHelper(const std::vector<std::string>& argv, const std::vector<std::string>&,
                 int) override {
    helpers.push_back(argv);
  }
  std::string CgroupParent(uint64_t job_id) const override {
    return cgroups ? "/gpuslice/job-" + std::to_string(job_id) : "";
  }
  bool UsesCgroups() const override { return cgroups; }

  // Ends job `pid` with exit code `code`, as its supervisor would record it.
  void Exit(int64_t pid, int code) {
    alive.erase(pid);
    WriteStatus(pid, "exit", code);
  }
  void WriteStatus(int64_t pid, const char* kind, int n) {
    auto it = launches.find(pid);
    if (it == launches.end()) return;
    std::ofstream(it->second.status_path) << kind << " " << n << "\n";
  }

  std::map<int64_t, LaunchSpec> launches;
  std::set<int64_t> alive;
  std::vector<std::pair<int64_t, int>> signals;
  bool die_on_signal = true;
  core::Status fail_with;
  // Cgroup tracking, as the daemon sees it through the launcher.
  bool cgroups = false;
  std::set<int64_t> stopped;
  std::map<uint64_t, int64_t> adopted;  // Job id -> leader, from Adopt.
  std::vector<uint64_t> strays_kept;    // What the last EndStrays kept.
  std::map<int64_t, std::string> end_notes;
  std::vector<int64_t> released;
  std::vector<std::vector<std::string>> helpers;  // RunHelper calls.

 private:
  int64_t next_pid_ = 5000;
};

}  // namespace gpuslice::daemon
