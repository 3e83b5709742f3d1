#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpuslice::e2e {

namespace fs = std::filesystem;

std::string WorkerPath() { return GPUSLICE_E2E_WORKER; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Daemon::Daemon(std::string gpus, std::vector<std::string> extra_args)
    : gpus_(std::move(gpus)), extra_args_(std::move(extra_args)) {
  char tmpl[] = "/tmp/gpuslice-e2e-XXXXXX";
  if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  // Other users (the permissions test) must reach the socket and /tmp paths.
  chmod(dir_.c_str(), 0755);
  // The simulated GPU's state file lives alone in sim/ (Env()); other
  // users' processes may replace a stale one there.
  mkdir((dir_ + "/sim").c_str(), 0777);
  chmod((dir_ + "/sim").c_str(), 01777);
}

Daemon::~Daemon() {
  // Jobs still running (a failed test) are ended so they do not outlive it:
  // the daemon leaves running jobs alone when it stops, by design.
  if (pid_ > 0) {
    CliResult ps = Cli({"ps", "--json", "-n", "0"}, -1, 10);
    size_t at = 0;
    const std::string key = "\"pid\": ";
    while ((at = ps.out.find(key, at)) != std::string::npos) {
      at += key.size();
      long pid = std::strtol(ps.out.c_str() + at, nullptr, 10);
      if (pid > 0) kill(-static_cast<pid_t>(pid), SIGKILL);
    }
    Kill(SIGTERM);
  }
  RemoveCgroups();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string Daemon::cgroup_base() const {
  return "gpuslice-e2e-" + fs::path(dir_).filename().string();
}

std::vector<std::string> Daemon::CgroupDirs() const {
  // Every hierarchy the daemon may have used: a v2 mount at the top or at
  // unified/, and the v1 controllers.
  std::vector<std::string> out;
  for (const char* m : {"", "unified/", "pids/", "freezer/", "cpu/", "cpu,cpuacct/", "memory/"}) {
    std::string base = std::string("/sys/fs/cgroup/") + m + cgroup_base();
    if (fs::is_directory(base)) out.push_back(base);
  }
  return out;
}

void Daemon::RemoveCgroups() {
  // Processes of jobs that outlive the test (escapees of a failed one) die,
  // then their cgroups and our base go.
  for (const std::string& base : CgroupDirs()) {
    std::error_code ec;
    // A container job's engine nests cgroups below the job's.
    for (const auto& e : fs::recursive_directory_iterator(base, ec)) {
      if (e.path().filename() != "cgroup.procs") continue;
      std::ifstream procs(e.path());
      long pid;
      while (procs >> pid) kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
  for (const std::string& base : CgroupDirs()) {
    std::error_code ec;
    std::vector<fs::path> dirs;  // Deepest first.
    for (const auto& e : fs::recursive_directory_iterator(base, ec)) {
      if (e.is_directory()) dirs.push_back(e.path());
    }
    std::sort(dirs.begin(), dirs.end(),
              [](const fs::path& a, const fs::path& b) { return a.string() > b.string(); });
    for (const fs::path& dir : dirs) {
      WaitFor([&] { return rmdir(dir.c_str()) == 0 || errno == ENOENT; }, 5);
    }
    rmdir(base.c_str());
  }
}

std::vector<std::string> Daemon::Env() const {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string s = *e;
    if (s.rfind("GPUSLICE_", 0) == 0 || s.rfind("LD_PRELOAD=", 0) == 0) continue;
    env.push_back(s);
  }
  env.push_back("GPUSLICE_SOCKET=" + socket());
  // In a folder of its own: a container joining a job's slice gets the
  // state file's folder mounted (docs/CONTAINERS.md), not the test's.
  env.push_back("GPUSLICE_SIM_STATE=" + dir_ + "/sim/state");
  env.push_back("GPUSLICE_SIM_GPUS=" + gpus_);
  // Jobs of other users open the simulated device's state too.
  env.push_back("GPUSLICE_SIM_STATE_MODE=0666");
  return env;
}

namespace {

// fork + exec with stdout/stderr to files; optional uid switch.
int Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
          const std::string& out, const std::string& err, int uid,
          const std::string& in = "/dev/null") {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  dup2(o, 1);
  dup2(e, 2);
  int input = open(in.c_str(), O_RDONLY);
  dup2(input, 0);
  setpgid(0, 0);
  if (uid >= 0) {
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(99);
    if (chdir("/tmp") != 0) _exit(98);
  }
  std::vector<char*> a, v;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) v.push_back(const_cast<char*>(s.c_str()));
  v.push_back(nullptr);
  execve(a[0], a.data(), v.data());
  _exit(127);
}

}  // namespace

bool Daemon::WaitFor(const std::function<bool()>& pred, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

bool Daemon::Start() {
  std::vector<std::string> argv = {GPUSLICE_E2E_DAEMON,
                                   "--state-dir", state_dir(),
                                   "--socket",    socket(),
                                   "--shim",      GPUSLICE_E2E_SHIM,
                                   "--sim-lib-dir", GPUSLICE_E2E_SIM_DIR,
                                   "--set",       "kill_grace=2s",
                                   // Daemons of concurrent tests must not share job cgroups.
                                   "--set",       "cgroup_base=" + cgroup_base(),
                                   // Nor CDI specs (engines read /var/run/cdi).
                                   "--set",       "cdi_dir=" + dir_ + "/cdi"};
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  std::string log = dir_ + "/daemon.log";
  pid_ = Spawn(argv, Env(), dir_ + "/daemon.out", log + (fs::exists(log) ? ".2" : ""), -1);
  return WaitFor([&] {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;  // Died: reported below.
    }
    return Cli({"status"}, -1, 10).exit_code == 0;
  }) && pid_ > 0;
}

void Daemon::Kill(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

CliResult Daemon::CliWithInput(const std::vector<std::string>& args, const std::string& input,
                               const std::vector<std::string>& extra_env) {
  return RunCli(args, -1, 60, input, extra_env);
}

CliResult Daemon::Cli(const std::vector<std::string>& args, int uid, int timeout_s) {
  return RunCli(args, uid, timeout_s, std::nullopt, {});
}

CliResult Daemon::RunCli(const std::vector<std::string>& args, int uid, int timeout_s,
                         const std::optional<std::string>& input,
                         const std::vector<std::string>& extra_env) {
  static int counter = 0;
  std::string base = dir_ + "/cli" + std::to_string(++counter);
  std::vector<std::string> argv = {GPUSLICE_E2E_CLI};
  if (uid >= 0) {
    // The build tree may sit below a directory other users cannot enter (a
    // clone in a mktemp -d folder is 0700), so another user runs a copy of
    // the CLI kept in this test's own 0755 directory.
    std::string copy = dir_ + "/gpuslice-cli";
    if (access(copy.c_str(), X_OK) != 0) {
      std::ifstream src(GPUSLICE_E2E_CLI, std::ios::binary);
      std::ofstream(copy, std::ios::binary) << src.rdbuf();
      chmod(copy.c_str(), 0755);
    }
    argv[0] = copy;
  }
  argv.insert(argv.end(), args.begin(), args.end());
  std::string in = "/dev/null";
  if (input) {
    in = base + ".in";
    std::ofstream(in) << *input;
  }
  std::vector<std::string> env = Env();
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  int pid = Spawn(argv, env, base + ".out", base + ".err", uid, in);
  CliResult r;
  int status = 0;
  bool done = WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout_s);
  if (!done) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    r.err = "TIMED OUT\n";
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(base + ".out");
  r.err += ReadFile(base + ".err");
  return r;
}

int Daemon::CliAsync(const std::vector<std::string>& args, const std::string& out_path) {
  std::vector<std::string> argv = {GPUSLICE_E2E_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  return Spawn(argv, Env(), out_path, out_path + ".err", -1);
}

nlohmann::json Job(Daemon& d, const std::string& id) {
  CliResult r = d.Cli({"ps", "--all", "--json", "-n", "0"});
  // Held in a variable: a range-for over a member of a temporary dangles.
  nlohmann::json list = nlohmann::json::parse(r.out, nullptr, false);
  if (!list.is_object()) return nlohmann::json();
  for (const nlohmann::json& j : list["jobs"]) {
    if (std::to_string(j["id"].get<uint64_t>()) == id) return j;
  }
  return nlohmann::json();
}

std::string State(Daemon& d, const std::string& id) {
  nlohmann::json j = Job(d, id);
  return j.is_null() ? "" : j["state"].get<std::string>();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool HasEvent(Daemon& d, const std::string& id, const std::string& kind,
              const std::string& needle) {
  CliResult r = d.Cli({"events", "--job", id, "--json"});
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_object() || !j.contains("events")) return false;
  for (const nlohmann::json& e : j["events"]) {
    if (e.value("kind", "") == kind && e.value("message", "").find(needle) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace gpuslice::e2e
