#pragma once

// Processes the daemon did not start but must judge, behind a seam: the GPU
// processes NVML lists (the watchdog's and foreign-use checks). The real one
// reads /proc and sends signals; FakeProcessTable serves unit tests.
//
// Nothing here is trusted from a job: owners, groups and process groups come
// from the kernel (/proc), never from a slice region.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpuslice::daemon {

struct ProcessOwner {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;                 // The uid's name, or the uid in digits.
  std::vector<std::string> groups;  // Names of the gid and supplementary groups.
};

// The name of group `gid`, or the gid in digits when it has none (the names
// ProcessOwner::groups holds).
std::string GroupNameOf(uint32_t gid);

class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  // The real uid and groups of `pid`; nullopt when it does not exist.
  virtual std::optional<ProcessOwner> OwnerOf(int64_t pid) = 0;
  // The process group of `pid`, or -1 when it does not exist.
  virtual int64_t ProcessGroupOf(int64_t pid) = 0;
  // kill(pid, signal) of one process (not its group).
  virtual core::Status Signal(int64_t pid, int signal) = 0;
  // Signals `pid` only if it is (still) a process of real uid `uid`, with no
  // window in which the pid could be reused by someone else's process
  // between the check and the signal (a pidfd holds the process checked).
  // NotFound when it is gone, PermissionDenied when it is not that uid's.
  virtual core::Status SignalIfOwnedBy(int64_t pid, uint32_t uid, int signal) = 0;
  // Every process below `pid` in the process tree (children, their children,
  // ...), not `pid` itself: an external job's processes under the process
  // that holds it (a Slurm step's slurmstepd). A process that left the tree
  // by double-forking is no longer below it; see docs/SLURM.md.
  virtual std::vector<int64_t> DescendantsOf(int64_t pid) = 0;
};

// /proc and kill(2).
class ProcProcessTable : public ProcessTable {
 public:
  std::optional<ProcessOwner> OwnerOf(int64_t pid) override;
  int64_t ProcessGroupOf(int64_t pid) override;
  core::Status Signal(int64_t pid, int signal) override;
  core::Status SignalIfOwnedBy(int64_t pid, uint32_t uid, int signal) override;
  std::vector<int64_t> DescendantsOf(int64_t pid) override;
};

class FakeProcessTable : public ProcessTable {
 public:
  std::optional<ProcessOwner> OwnerOf(int64_t pid) override {
    auto it = owners.find(pid);
    if (it == owners.end()) return std::nullopt;
    return it->second;
  }
  int64_t ProcessGroupOf(int64_t pid) override {
    auto it = groups.find(pid);
    return it == groups.end() ? -1 : it->second;
  }
  core::Status Signal(int64_t pid, int signal) override {
    signals.emplace_back(pid, signal);
    return core::Status::Ok();
  }
  core::Status SignalIfOwnedBy(int64_t pid, uint32_t uid, int signal) override {
    auto it = owners.find(pid);
    if (it == owners.end()) return core::NotFoundError("no process " + std::to_string(pid));
    if (it->second.uid != uid) return core::PermissionDeniedError("not that user's");
    return Signal(pid, signal);
  }

  std::vector<int64_t> DescendantsOf(int64_t pid) override {
    std::vector<int64_t> out;
    std::vector<int64_t> todo{pid};
    while (!todo.empty()) {
      int64_t p = todo.back();
      todo.pop_back();
      for (const auto& [child, parent] : parents) {
        if (parent == p) {
          out.push_back(child);
          todo.push_back(child);
        }
      }
    }
    return out;
  }

  std::map<int64_t, ProcessOwner> owners;
  std::map<int64_t, int64_t> groups;   // pid -> process group.
  std::map<int64_t, int64_t> parents;  // pid -> parent pid.
  std::vector<std::pair<int64_t, int>> signals;
};

}  // namespace gpuslice::daemon
