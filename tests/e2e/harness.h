#pragma once

// A throw-away gpusliced for end-to-end tests: its own temp directory,
// socket, state dir and simulated-GPU state file; the real daemon, CLI, shim
// and simulator, found through paths CMake passes in (GPUSLICE_E2E_*).
// Everything waits by polling with generous timeouts, never fixed sleeps, so
// a busy 2-core machine slows the tests down without breaking them.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpuslice::e2e {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class Daemon {
 public:
  // `gpus`: GPUSLICE_SIM_GPUS, e.g. "1xH100-80GB".
  explicit Daemon(std::string gpus = "1xH100-80GB", std::vector<std::string> extra_args = {});
  ~Daemon();

  // Starts gpusliced and waits until it answers; false on timeout.
  bool Start();
  void Kill(int signal);  // Signals the daemon and reaps it.
  bool running() const { return pid_ > 0; }
  // The flags of the next Start (a restart with another configuration).
  void set_extra_args(std::vector<std::string> args) { extra_args_ = std::move(args); }

  // Runs `gpuslice ARGS...` against this daemon, as `uid` when given (root
  // only). Returns once it exits (or kills it after `timeout_s`).
  CliResult Cli(const std::vector<std::string>& args, int uid = -1, int timeout_s = 60);
  // Same, with `input` on its stdin and extra "K=V" environment entries.
  CliResult CliWithInput(const std::vector<std::string>& args, const std::string& input,
                         const std::vector<std::string>& extra_env);
  void RemoveCgroups();
  // Starts `gpuslice ARGS...` without waiting; returns its pid.
  int CliAsync(const std::vector<std::string>& args, const std::string& out_path);

  // Polls `pred` every 50 ms for up to `timeout_s`.
  static bool WaitFor(const std::function<bool()>& pred, int timeout_s = 30);

  const std::string& dir() const { return dir_; }
  std::string socket() const { return dir_ + "/gpuslice.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  std::vector<std::string> Env() const;
  // This daemon's job cgroups live under <hierarchy>/<cgroup_base()>; the
  // directories that exist now.
  std::string cgroup_base() const;
  std::vector<std::string> CgroupDirs() const;

 private:
  CliResult RunCli(const std::vector<std::string>& args, int uid, int timeout_s,
                   const std::optional<std::string>& input,
                   const std::vector<std::string>& extra_env);

  std::string dir_;
  std::string gpus_;
  std::vector<std::string> extra_args_;
  int pid_ = -1;
};

std::string WorkerPath();
std::string ReadFile(const std::string& path);

// Job `id` as `gpuslice ps --all --json` shows it; null when absent.
nlohmann::json Job(Daemon& d, const std::string& id);
// Its state ("queued", "running", "exited"...), "" when absent.
std::string State(Daemon& d, const std::string& id);
// `s` without trailing newlines and spaces (a CLI's printed id, say).
std::string Trim(std::string s);
// Whether job `id` has an event of `kind` whose message contains `needle`.
bool HasEvent(Daemon& d, const std::string& id, const std::string& kind,
              const std::string& needle = "");

}  // namespace gpuslice::e2e
