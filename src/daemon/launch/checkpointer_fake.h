#pragma once

// A Checkpointer over a table of pids for the daemon's tests: the driver's
// state machine (running -> locked -> checkpointed -> locked -> running),
// with refusals in the wrong state and failures the test injects. Callable
// from the service's worker threads.

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/launch/checkpointer.h"

namespace gpuslice::daemon {

class FakeCheckpointer : public Checkpointer {
 public:
  core::Status Available() override {
    std::lock_guard<std::mutex> lock(mu);
    return available;
  }
  core::Result<GpuProcessState> StateOf(int64_t pid) override {
    std::lock_guard<std::mutex> lock(mu);
    auto it = states.find(pid);
    if (it == states.end()) return core::NotFoundError("process " + std::to_string(pid));
    return it->second;
  }
  core::Status Lock(int64_t pid, uint32_t) override {
    return Step("lock", pid, GpuProcessState::kRunning, GpuProcessState::kLocked);
  }
  core::Status Checkpoint(int64_t pid) override {
    return Step("checkpoint", pid, GpuProcessState::kLocked, GpuProcessState::kCheckpointed);
  }
  core::Status Restore(int64_t pid, const std::vector<GpuRemap>& remap) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      remaps.push_back(remap);
    }
    return Step("restore", pid, GpuProcessState::kCheckpointed, GpuProcessState::kLocked);
  }
  core::Status Unlock(int64_t pid) override {
    return Step("unlock", pid, GpuProcessState::kLocked, GpuProcessState::kRunning);
  }

  GpuProcessState Get(int64_t pid) {
    std::lock_guard<std::mutex> lock(mu);
    return states.at(pid);
  }
  void Set(int64_t pid, GpuProcessState s) {
    std::lock_guard<std::mutex> lock(mu);
    states[pid] = s;
  }
  void Fail(const std::string& op, int64_t pid, core::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    failures[{op, pid}] = std::move(s);
  }
  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }

  std::mutex mu;
  core::Status available;
  std::map<int64_t, GpuProcessState> states;  // Known (CUDA) processes.
  std::map<std::pair<std::string, int64_t>, core::Status> failures;
  std::vector<std::string> calls;  // "lock 5001", in order.
  std::vector<std::vector<GpuRemap>> remaps;

 private:
  core::Status Step(const std::string& op, int64_t pid, GpuProcessState from, GpuProcessState to) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(op + " " + std::to_string(pid));
    if (auto f = failures.find({op, pid}); f != failures.end()) return f->second;
    auto it = states.find(pid);
    if (it == states.end()) return core::NotFoundError(op + ": no process " + std::to_string(pid));
    if (it->second != from) {
      return core::FailedPreconditionError(op + ": process " + std::to_string(pid) + " is " +
                                           std::string(GpuProcessStateName(it->second)));
    }
    it->second = to;
    return core::Status::Ok();
  }
};

}  // namespace gpuslice::daemon
