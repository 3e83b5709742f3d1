#pragma once

// Cgroups for unit tests: records what the launcher asks, and lets the test
// say whether a job's cgroup is populated or was OOM-killed. Create hands
// out a plain file per job as its "cgroup.procs", so a real leader can join
// (write "0" to it) and the test can check it did.

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/launch/cgroup.h"

namespace gpuslice::daemon {

class FakeCgroups : public Cgroups {
 public:
  explicit FakeCgroups(std::string dir) : dir_(std::move(dir)) {}

  bool available() const override { return is_available; }
  std::string Describe() const override {
    return is_available ? "cgroup fake" : "cgroups unavailable (fake)";
  }
  core::Result<std::vector<std::string>> Create(const std::string& name,
                                               const HostLimits& limits) override {
    if (!create_error.ok()) return create_error;
    created[name] = limits;
    std::string procs = ProcsFile(name);
    std::ofstream(procs, std::ios::trunc).flush();
    return std::vector<std::string>{procs};
  }
  bool Exists(const std::string& name) override { return created.count(name) > 0; }
  bool Populated(const std::string& name) override { return populated.count(name) > 0; }
  std::vector<int64_t> Pids(const std::string&) override { return {}; }
  core::Status Signal(const std::string& name, int signal) override {
    signals.emplace_back(name, signal);
    return core::Status::Ok();
  }
  core::Status Kill(const std::string& name) override {
    kills.push_back(name);
    populated.erase(name);
    return core::Status::Ok();
  }
  core::Status Freeze(const std::string& name, bool frozen) override {
    this->frozen[name] = frozen;
    return core::Status::Ok();
  }
  bool OomKilled(const std::string& name) override { return oom_killed.count(name) > 0; }
  core::Status Remove(const std::string& name) override {
    created.erase(name);
    removed.push_back(name);
    return core::Status::Ok();
  }
  std::vector<std::string> List() override {
    std::vector<std::string> names;
    for (const auto& [name, limits] : created) names.push_back(name);
    return names;
  }

  // Where job `name`'s leader writes itself.
  std::string ProcsFile(const std::string& name) const { return dir_ + "/" + name + ".procs"; }

  bool is_available = true;
  core::Status create_error;
  std::map<std::string, HostLimits> created;
  std::set<std::string> populated;
  std::set<std::string> oom_killed;
  std::map<std::string, bool> frozen;
  std::vector<std::pair<std::string, int>> signals;
  std::vector<std::string> kills;
  std::vector<std::string> removed;

 private:
  std::string dir_;
};

}  // namespace gpuslice::daemon
