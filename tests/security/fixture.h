#pragma once

// The security suite's fixture: a ROOT gpusliced over the simulated GPU in a
// throw-away directory, and three unprivileged users who attack it:
//   gsattack_a, gsattack_b  members of the socket group gsattack_sock (they
//                           may submit jobs; one is the attacker, the other
//                           the victim, depending on the test)
//   gsattack_c              not in the socket group (may not use the socket)
// Users and group are created idempotently (useradd -M -r -s nologin); the
// suite needs root and skips, saying so, without it.
//
// Everything a test starts is ended in TearDown, even on failure: the jobs'
// process groups, processes the fixture spawned, and any process of the
// attacker users whose environment names this test's directory (escapees
// that left their job); then the daemon, the job cgroups left empty, and the
// directory. Binaries the users run are copied into the test's 0755
// directory, so the suite works from a build tree other users cannot enter.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpuslice::security {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ProcResult {
  int exit_code = -1;  // 128 + signal when killed; -1: could not start.
  std::string out;
  std::string err;
};

struct DaemonOptions {
  std::string gpus = "1xH100-80GB";
  std::vector<std::string> sets;  // "key=value", passed as --set.
  bool tcp = false;               // A TCP listener on 127.0.0.1 with a bearer token.
  bool metrics = false;           // The unauthenticated metrics listener.
  // The daemon's soft RLIMIT_NOFILE at start: systemd's default, which the
  // daemon must raise itself.
  rlim_t nofile = 1024;
  // Set up as the README's quick start: nobody sets the
  // simulated GPU's state file mode, and users' environments name none of
  // the simulator's variables.
  bool quick_start = false;

  DaemonOptions& Gpus(std::string g) {
    gpus = std::move(g);
    return *this;
  }
  DaemonOptions& Set(std::string key_value) {
    sets.push_back(std::move(key_value));
    return *this;
  }
  DaemonOptions& Tcp() {
    tcp = true;
    return *this;
  }
  DaemonOptions& Metrics() {
    metrics = true;
    return *this;
  }
  // The state directory on a tmpfs of this size ("16m"), mounted before the
  // daemon starts and unmounted in TearDown, even on failure. "": none.
  std::string state_tmpfs;
  DaemonOptions& StateOnTmpfs(std::string size) {
    state_tmpfs = std::move(size);
    return *this;
  }
  DaemonOptions& QuickStart() {
    quick_start = true;
    return *this;
  }
};

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts the daemon; fails the test (fatal) when it does not answer.
  void StartDaemon(const DaemonOptions& o = DaemonOptions());

  // Runs ARGV as `u` (nullptr: root) with its groups, in the drop directory,
  // with the users' base environment plus `env`; waits for it.
  ProcResult RunAs(const User* u, const std::vector<std::string>& argv,
                   const std::vector<std::string>& env = {}, int timeout_s = 60);
  // Starts ARGV as `u` without waiting; its stdout and stderr go to
  // SpawnLog(name) + ".out"/".err" (root's files, apart from the drop
  // directory the attackers write to). The fixture kills its process group
  // in TearDown.
  pid_t SpawnAs(const User* u, const std::vector<std::string>& argv,
                const std::vector<std::string>& env, const std::string& name);
  std::string SpawnLog(const std::string& name) const { return dir_ + "/logs/" + name; }
  // `gpuslice ARGS` as `u` (nullptr: root).
  ProcResult Cli(const User* u, const std::vector<std::string>& args, int timeout_s = 60,
                 const std::vector<std::string>& env = {});
  // `gpuslice-attacker ARGS` as `u`.
  ProcResult Attack(const User* u, const std::vector<std::string>& args,
                    const std::vector<std::string>& env = {}, int timeout_s = 120);
  // `gpuslice submit ARGS` as `u`; the job's id ("" when refused: a test failure).
  std::string Submit(const User* u, const std::vector<std::string>& args);
  // The job as root sees it in `ps --all --json`; null when absent.
  nlohmann::json Job(const std::string& id);
  std::string State(const std::string& id);
  // The job's event messages of `kind` ("" for all), as root sees them.
  std::vector<std::string> Events(const std::string& id, const std::string& kind);
  // The GPUs as `gpuslice gpus --json` shows them.
  nlohmann::json Gpus();

  // Polls `pred` every 50 ms for up to `timeout_s`.
  static bool WaitFor(const std::function<bool()>& pred, double timeout_s);

  std::string Attacker() const { return bin_ + "/gpuslice-attacker"; }
  // A path in the drop directory (01777, the users' working directory).
  std::string Drop(const std::string& name) const { return drop_ + "/" + name; }
  std::string state_dir() const { return dir_ + "/state"; }
  // In a folder of its own: a container job gets the state file's folder
  // mounted (docs/CONTAINERS.md), which must not be the test's.
  std::string sim_state() const { return dir_ + "/gpu/state"; }
  std::string socket_path() const { return dir_ + "/run/gpuslice.sock"; }
  std::string unix_ep() const { return "unix:" + socket_path(); }
  std::string tcp_ep() const { return "tcp:127.0.0.1:" + std::to_string(tcp_port_); }
  // A copy of the TCP bearer token readable by every user: "a token holder".
  std::string token_copy() const { return drop_ + "/token"; }
  // Environment of a process that uses the simulated GPU without a job (no shim).
  std::vector<std::string> ForeignEnv() const;
  std::string DaemonLog() const;
  pid_t daemon_pid() const { return daemon_; }

  User a_, b_, c_;
  gid_t sock_gid_ = 0;

 private:
  std::vector<std::string> BaseEnv(const User* u) const;
  pid_t Fork(const User* u, const std::vector<std::string>& argv,
             const std::vector<std::string>& env, const std::string& out, const std::string& err,
             rlim_t nofile = 0);
  void KillStrays();
  void RemoveCgroupBase();

  std::string dir_, bin_, drop_;
  std::string gpus_ = "1xH100-80GB";
  std::string cgroup_base_;  // Empty: the daemon does not know cgroup_base.
  bool quick_start_ = false;
  int tcp_port_ = 0;
  pid_t daemon_ = -1;
  bool state_mounted_ = false;  // DaemonOptions::state_tmpfs.
  std::vector<pid_t> spawned_;
  std::vector<std::string> cgroups_;
  int counter_ = 0;
};

// Lines of an attacker's output file.
std::vector<std::string> Lines(const std::string& path);
// The `at=MS` of the first (or last) line starting with `prefix`; nullopt if none.
std::optional<int64_t> FirstAt(const std::string& path, const std::string& prefix);
std::optional<int64_t> LastAt(const std::string& path, const std::string& prefix);
// A `work` output's share of the GPU over [from_ms, to_ms]: kernels done in
// the window x kernel_us / window (interpolating its 100 ms progress lines).
double WorkShare(const std::string& path, unsigned kernel_us, int64_t from_ms, int64_t to_ms);
// The [start, end] of a `work` output's launching ("go" to "done"/last progress).
std::pair<int64_t, int64_t> WorkSpan(const std::string& path);
std::string ReadFile(const std::string& path);
std::string Trim(std::string s);
int64_t NowMs();

}  // namespace gpuslice::security
