#pragma once

// Runs a function in a forked child and brings back its verdict and a line of
// text. Used for anything that loads a foreign library into a process (the
// CUDA driver, the shim, a CUDA runtime): a crash or hang there must not take
// the daemon down. A probe that runs longer than `timeout_ms` is killed.

#include <functional>
#include <string>
#include <vector>

namespace gpuslice::daemon {

struct ProbeResult {
  bool ok = false;
  std::string text;
};

// `env`: "K=V" entries set in the child before `fn` runs.
ProbeResult RunInChild(const std::vector<std::string>& env,
                       const std::function<ProbeResult()>& fn, int timeout_ms = 5000);

}  // namespace gpuslice::daemon
