#include "daemon/launch/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "core/units.h"
#include "daemon/base/log.h"
#include "daemon/launch/job_log.h"

namespace gpuslice::daemon {
namespace {

using core::Result;
using core::Status;

// What the leader tells the daemon when it cannot exec: the step and errno.
struct ChildError {
  int32_t step;
  int32_t err;
};
constexpr const char* kSteps[] = {"open /dev/null", "redirect output", "set groups",
                                  "set gid",        "set uid",         "change directory",
                                  "exec",           "join its cgroup"};
constexpr int kStepCount = sizeof kSteps / sizeof kSteps[0];

void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void ChildFail(int pipe_fd, int step) {
  ChildError e{step, errno};
  WriteAll(pipe_fd, &e, sizeof e);
  _exit(127);
}

Result<int> OpenLog(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoError(errno, "open " + path);
  return fd;
}

// The supervisor's work once the leader runs: copies the job's output into
// its logs, waits for the leader, and writes the leader's wait status to
// `status_path` (through `status_tmp` and rename) once its output is all in
// the logs: every writer closed the pipes, or no process of the job is left
// (`tracking_procs` empty, else the leader's process group gone), as a
// process outside the job may hold a copy of the pipe. Then relays until the
// pipes close. System calls only (runs after fork).
void RelayAndWait(pid_t leader, int out_pipe, int err_pipe, LogWriter out, LogWriter err,
                  const char* tracking_procs, const sigset_t* unblocked, const char* status_tmp,
                  const char* status_path) {
  struct pollfd fds[2] = {{out_pipe, POLLIN, 0}, {err_pipe, POLLIN, 0}};
  LogWriter* writers[2] = {&out, &err};
  bool leader_done = false, status_written = false;
  int status = 0;
  static char buf[16 * 1024];
  auto job_empty = [&] {
    if (tracking_procs == nullptr) return kill(-leader, 0) != 0 && errno == ESRCH;
    int fd = open(tracking_procs, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    char c;
    ssize_t n = read(fd, &c, 1);
    close(fd);
    return n <= 0;
  };
  // Reads what each pipe has; `wait` blocks (until output, EOF, SIGCHLD or
  // the timeout).
  auto pump = [&](const struct timespec* timeout) {
    int n = ppoll(fds, 2, timeout, unblocked);
    if (n <= 0) return false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        writers[i]->Write(buf, static_cast<size_t>(r));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
    return true;
  };
  const struct timespec check = {0, 100 * 1000 * 1000}, now = {0, 0};
  for (;;) {
    if (!leader_done) {
      pid_t r = waitpid(leader, &status, WNOHANG);
      if (r == leader || (r < 0 && errno == ECHILD)) leader_done = true;
    }
    bool pipes_closed = fds[0].fd < 0 && fds[1].fd < 0;
    if (leader_done && !status_written && (pipes_closed || job_empty())) {
      // What is already in the pipes (bounded: a writer outside the job
      // could keep them full).
      for (int i = 0; i < 256 && !pipes_closed && pump(&now); ++i) {
        pipes_closed = fds[0].fd < 0 && fds[1].fd < 0;
      }
      char line[64];
      int n = WIFSIGNALED(status)
                  ? std::snprintf(line, sizeof line, "signal %d\n", WTERMSIG(status))
                  : std::snprintf(line, sizeof line, "exit %d\n",
                                  WIFEXITED(status) ? WEXITSTATUS(status) : 255);
      int fd = open(status_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        WriteAll(fd, line, static_cast<size_t>(n));
        fsync(fd);
        close(fd);
        rename(status_tmp, status_path);
      }
      status_written = true;
    }
    if (pipes_closed) {
      if (status_written) return;
      // Only the leader's end is awaited: SIGCHLD interrupts this.
      ppoll(nullptr, 0, nullptr, unblocked);
      continue;
    }
    pump(leader_done ? &check : nullptr);
  }
}

}  // namespace

Status ErrnoError(int err, const std::string& what) {
  std::string msg = what + ": " + strerror(err);
  switch (err) {
    case ENOENT:
      return core::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return core::PermissionDeniedError(msg);
    case ENOMEM:
    case EAGAIN:
    case ENOSPC:
    case EMFILE:
      return core::ResourceExhaustedError(msg);
    case EINVAL:
    case ENOEXEC:
    case ENOTDIR:
      return core::InvalidArgumentError(msg);
    default:
      return core::InternalError(msg);
  }
}

int ExitCodeOfWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::optional<int> ReadExitStatusFile(const std::string& path) {
  std::ifstream in(path);
  std::string kind;
  int n = 0;
  if (!(in >> kind >> n)) return std::nullopt;
  if (kind == "exit") return n;
  if (kind == "signal") return 128 + n;
  return std::nullopt;
}

uint64_t ProcessStartTime(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // Fields 3..22; start time is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

bool ProcessIsZombie(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

Result<std::string> ResolveProgram(const std::string& program, const std::string& path_env,
                                   const std::string& cwd) {
  if (program.empty()) return core::InvalidArgumentError("empty command");
  if (program.find('/') != std::string::npos) {
    return program[0] == '/' ? program : cwd + "/" + program;
  }
  std::string path = path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    if (dir[0] != '/') dir = cwd + "/" + dir;
    std::string candidate = dir + "/" + program;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
      return candidate;
    }
    start = end + 1;
  }
  return core::NotFoundError("command '" + program + "' not found in PATH " + path);
}

RealLauncher::RealLauncher() : RealLauncher(LauncherOptions{}) {}

RealLauncher::RealLauncher(LauncherOptions options) : max_log_bytes_(options.max_log_bytes) {
  // Orphaned job processes are re-parented to us and reaped by Reap(), so
  // they never linger as zombies and GroupAlive stays accurate.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  if (options.cgroups != nullptr && options.cgroups->available()) {
    cgroups_ = options.cgroups;
  } else {
    cgroup_problem_ = options.cgroups != nullptr ? options.cgroups->Describe()
                                                 : std::string("cgroups not configured");
  }
}

std::string RealLauncher::Tracking() const {
  if (cgroups_ != nullptr) return cgroups_->Describe();
  return "process groups (" + cgroup_problem_ + ")";
}

const RealLauncher::Tracked* RealLauncher::Find(int64_t pgid) const {
  auto it = tracked_.find(pgid);
  return it == tracked_.end() ? nullptr : &it->second;
}

Result<ProcessRef> RealLauncher::Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return core::InvalidArgumentError("no command to run");
  bool root = geteuid() == 0;
  if (!root && spec.uid != geteuid()) {
    return core::PermissionDeniedError(
        "the daemon runs unprivileged (uid " + std::to_string(geteuid()) +
        ") and cannot start jobs for uid " + std::to_string(spec.uid));
  }
  std::string path_env;
  for (const std::string& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path_env = e.substr(5);
  }
  GPUSLICE_ASSIGN_OR_RETURN(std::string program, ResolveProgram(spec.argv[0], path_env, spec.cwd));

  // The job's cgroup, made before the leader exists so that it joins before
  // it can fork.
  std::string cgroup;
  std::vector<std::string> join;
  if (cgroups_ != nullptr && spec.job_id != 0) {
    cgroup = "job-" + std::to_string(spec.job_id);
    auto files = cgroups_->Create(cgroup, spec.host_limits);
    if (!files.ok()) {
      (void)cgroups_->Remove(cgroup);
      return Status(files.status().code(),
                    "cannot set up the job's cgroup: " + files.status().message());
    }
    join = std::move(*files);
  } else if (spec.host_limits.any()) {
    return core::FailedPreconditionError(
        "--cpus and --host-mem need cgroups, which this daemon does not use: " + cgroup_problem_);
  }
  // The supervisor tells "no process of the job is left" from this file
  // (empty) or, without a cgroup, from the process group.
  std::string tracking_procs = join.empty() ? std::string() : join.front();

  // Supplementary groups of the target user, computed before fork (NSS
  // lookups are not safe after fork).
  std::vector<gid_t> groups;
  if (root) {
    struct passwd pw;
    struct passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(spec.uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      int n = 64;
      groups.resize(n);
      if (getgrouplist(pw.pw_name, spec.gid, groups.data(), &n) < 0) {
        groups.resize(n);
        getgrouplist(pw.pw_name, spec.gid, groups.data(), &n);
      }
      groups.resize(n);
    } else {
      groups = {spec.gid};
    }
  }

  // The logs belong to the daemon: the job writes into pipes, the
  // supervisor writes the files (and caps them).
  GPUSLICE_ASSIGN_OR_RETURN(int out_fd, OpenLog(spec.stdout_path));
  auto err_fd_or = OpenLog(spec.stderr_path);
  if (!err_fd_or.ok()) {
    close(out_fd);
    return err_fd_or.status();
  }
  int err_fd = *err_fd_or;
  std::string stdout_tmp = spec.stdout_path + ".trim";
  std::string stderr_tmp = spec.stderr_path + ".trim";

  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string status_tmp = spec.status_path + ".tmp";

  int report[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out_fd, err_fd, report[0], report[1], out_pipe[0], out_pipe[1], err_pipe[0],
                   err_pipe[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (pipe2(report, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    close_all();
    return ErrnoError(err, "pipe");
  }
  uint64_t cap = max_log_bytes_;
  pid_t sup = fork();
  if (sup < 0) {
    int err = errno;
    close_all();
    return ErrnoError(err, "fork");
  }
  if (sup == 0) {
    // Supervisor. Only system calls from here: the daemon may have other
    // threads, whose locks (malloc's) a forked child must not touch.
    close(report[0]);
    setsid();
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    // SIGCHLD stays blocked except inside ppoll below, so the leader's end
    // interrupts the wait for output without a race.
    struct sigaction on_child = {};
    on_child.sa_handler = [](int) {};
    sigaction(SIGCHLD, &on_child, nullptr);
    sigset_t chld, unblocked;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &unblocked);
    sigdelset(&unblocked, SIGCHLD);
    pid_t leader = fork();
    if (leader == 0) {
      setpgid(0, 0);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s : {SIGHUP, SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGQUIT}) signal(s, SIG_DFL);
      // Into the job's cgroup first, while still root: every process the
      // job starts from here on is born in it.
      for (const std::string& procs : join) {
        int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) ChildFail(report[1], 7);
        close(fd);
      }
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull < 0) ChildFail(report[1], 0);
      if (dup2(devnull, 0) < 0 || dup2(out_pipe[1], 1) < 0 || dup2(err_pipe[1], 2) < 0) {
        ChildFail(report[1], 1);
      }
      if (root && spec.engine_as_root) {
        // Effective ids only: the directory is entered with the job's
        // rights, then root's are taken back for the engine's client.
        if (setgroups(groups.size(), groups.data()) != 0) ChildFail(report[1], 2);
        if (setegid(spec.gid) != 0) ChildFail(report[1], 3);
        if (seteuid(spec.uid) != 0) ChildFail(report[1], 4);
        if (chdir(spec.cwd.c_str()) != 0) ChildFail(report[1], 5);
        gid_t root_group = 0;
        if (seteuid(0) != 0 || setegid(0) != 0 || setgroups(1, &root_group) != 0) {
          ChildFail(report[1], 4);
        }
      } else if (root) {
        if (setgroups(groups.size(), groups.data()) != 0) ChildFail(report[1], 2);
        if (setgid(spec.gid) != 0) ChildFail(report[1], 3);
        if (setuid(spec.uid) != 0) ChildFail(report[1], 4);
      }
      // After dropping privileges, so the caller's own permissions apply.
      if (!(root && spec.engine_as_root) && chdir(spec.cwd.c_str()) != 0) {
        ChildFail(report[1], 5);
      }
      // Every inherited descriptor but 0-2 closes on exec (report[1]
      // already does). All of them: the daemon raises its open-file limit,
      // so a client connection may be above 1023.
      if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        for (int fd = 3; fd < 65536; ++fd) {
          if (fd != report[1]) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
      }
      execve(program.c_str(), argv.data(), envp.data());
      ChildFail(report[1], 6);
    }
    int64_t leader64 = leader;
    WriteAll(report[1], &leader64, sizeof leader64);
    close(report[1]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    // Not a copy of the daemon's sockets (listener, connections) may stay
    // open here for the job's lifetime, whatever the fd limit: close every
    // descriptor but the four the relay needs, in the gaps between them.
    {
      int keep[] = {out_fd, err_fd, out_pipe[0], err_pipe[0]};
      std::sort(std::begin(keep), std::end(keep));
      unsigned from = 3;
      for (int k : keep) {
        if (k < 0 || static_cast<unsigned>(k) < from) continue;
        if (static_cast<unsigned>(k) > from) close_range(from, static_cast<unsigned>(k) - 1, 0);
        from = static_cast<unsigned>(k) + 1;
      }
      close_range(from, ~0U, 0);
    }
    if (leader < 0) _exit(1);
    RelayAndWait(leader, out_pipe[0], err_pipe[0],
                 LogWriter(spec.stdout_path.c_str(), stdout_tmp.c_str(), out_fd, cap),
                 LogWriter(spec.stderr_path.c_str(), stderr_tmp.c_str(), err_fd, cap),
                 tracking_procs.empty() ? nullptr : tracking_procs.c_str(), &unblocked,
                 status_tmp.c_str(), spec.status_path.c_str());
    _exit(0);
  }
  for (int* fd :
       {&report[1], &out_fd, &err_fd, &out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1]}) {
    close(*fd);
    *fd = -1;
  }
  // Read the leader's pid from the supervisor, then either EOF (exec
  // succeeded: the descriptor closed on exec) or the leader's error.
  char buf[sizeof(int64_t) + sizeof(ChildError)];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t r = read(report[0], buf + got, sizeof buf - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(report[0]);
  ProcessRef ref;
  ref.supervisor_pid = sup;
  auto forget_cgroup = [&] {
    if (!cgroup.empty()) (void)cgroups_->Remove(cgroup);
  };
  if (got < sizeof(int64_t)) {
    forget_cgroup();
    return core::InternalError("job supervisor died before starting the command");
  }
  std::memcpy(&ref.pid, buf, sizeof(int64_t));
  if (ref.pid <= 0) {
    forget_cgroup();
    return core::ResourceExhaustedError("fork of the job leader failed");
  }
  if (got == sizeof buf) {
    ChildError e;
    std::memcpy(&e, buf + sizeof(int64_t), sizeof e);
    const char* step = e.step >= 0 && e.step < kStepCount ? kSteps[e.step] : "start";
    std::string what = std::string("cannot start '") + spec.argv[0] + "': " + step;
    if (e.step == 5) what += " " + spec.cwd;
    // The leader exits at once; its cgroup goes when it is empty.
    for (int i = 0; i < 100 && !cgroup.empty() && cgroups_->Populated(cgroup); ++i) usleep(1000);
    forget_cgroup();
    return ErrnoError(e.err, what);
  }
  ref.start_time = ProcessStartTime(ref.pid);
  if (!cgroup.empty()) {
    // A requeued job runs again in the same cgroup under a new leader.
    std::erase_if(tracked_, [&](const auto& t) { return t.second.cgroup == cgroup; });
    tracked_[ref.pid] = Tracked{cgroup, spec.host_limits};
  }
  return ref;
}

bool RealLauncher::GroupAlive(int64_t pgid) {
  if (pgid <= 0) return false;
  if (const Tracked* t = Find(pgid)) return cgroups_->Populated(t->cgroup);
  return kill(-static_cast<pid_t>(pgid), 0) == 0 || errno == EPERM;
}

bool RealLauncher::ProcessAlive(int64_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  if (start_time == 0) return true;
  uint64_t now = ProcessStartTime(pid);
  // A zombie (ended, not yet reaped) still has its stat entry; treat zombies
  // of our own children as alive until Reap() collects them.
  return now == start_time;
}

Status RealLauncher::SignalGroup(int64_t pgid, int sig) {
  if (pgid <= 0) return core::InvalidArgumentError("no process group");
  if (const Tracked* t = Find(pgid)) {
    return sig == SIGKILL ? cgroups_->Kill(t->cgroup) : cgroups_->Signal(t->cgroup, sig);
  }
  if (kill(-static_cast<pid_t>(pgid), sig) != 0 && errno != ESRCH) {
    return ErrnoError(errno, "signal process group " + std::to_string(pgid));
  }
  return Status::Ok();
}

std::optional<std::vector<int64_t>> RealLauncher::GroupPids(int64_t pgid) {
  const Tracked* t = Find(pgid);
  if (t == nullptr) return std::nullopt;
  return cgroups_->Pids(t->cgroup);
}

Status RealLauncher::StopGroup(int64_t pgid, bool stop) {
  if (const Tracked* t = Find(pgid)) {
    Status s = cgroups_->Freeze(t->cgroup, stop);
    if (s.code() != core::StatusCode::kFailedPrecondition) return s;  // No freezer: signals.
  }
  return SignalGroup(pgid, stop ? SIGSTOP : SIGCONT);
}

bool RealLauncher::Adopt(uint64_t job_id, int64_t pgid) {
  if (cgroups_ == nullptr || pgid <= 0) return false;
  std::string name = "job-" + std::to_string(job_id);
  if (!cgroups_->Exists(name)) return false;
  tracked_[pgid] = Tracked{name, {}};
  return true;
}

Status RealLauncher::AttachProcess(uint64_t job_id, int64_t pid, const HostLimits& limits) {
  if (cgroups_ == nullptr) return Launcher::AttachProcess(job_id, pid, limits);
  if (pid <= 0) return core::InvalidArgumentError("no process");
  const std::string name = "job-" + std::to_string(job_id);
  auto files = cgroups_->Create(name, limits);
  if (!files.ok()) {
    (void)cgroups_->Remove(name);
    return Status(files.status().code(),
                  "cannot set up the job's cgroup: " + files.status().message());
  }
  const std::string text = std::to_string(pid);
  for (const std::string& procs : *files) {
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && write(fd, text.data(), text.size()) == ssize_t(text.size());
    const int err = errno;
    if (fd >= 0) close(fd);
    if (!ok) {
      (void)cgroups_->Remove(name);
      return ErrnoError(err, "cannot move process " + text + " into " + procs);
    }
  }
  std::erase_if(tracked_, [&](const auto& t) { return t.second.cgroup == name; });
  tracked_[pid] = Tracked{name, limits};
  return Status::Ok();
}

std::vector<std::string> RealLauncher::EndStrays(const std::vector<uint64_t>& adopted) {
  std::vector<std::string> ended;
  if (cgroups_ == nullptr) return ended;
  std::set<std::string> keep;
  for (uint64_t id : adopted) keep.insert("job-" + std::to_string(id));
  for (const std::string& name : cgroups_->List()) {
    if (keep.count(name)) continue;
    bool had_processes = cgroups_->Populated(name);
    if (had_processes) (void)cgroups_->Kill(name);
    // SIGKILLed processes leave their cgroup within moments.
    for (int i = 0; i < 200 && cgroups_->Populated(name); ++i) {
      Reap();
      usleep(5000);
    }
    (void)cgroups_->Remove(name);
    if (had_processes) ended.push_back(name);
  }
  return ended;
}

std::string RealLauncher::EndNote(int64_t pgid) {
  const Tracked* t = Find(pgid);
  if (t == nullptr || !cgroups_->OomKilled(t->cgroup)) return {};
  std::string note = "killed by the kernel's OOM killer: the job reached its host memory limit";
  if (t->limits.memory_bytes)
    note += " (--host-mem " + core::FormatBytes(t->limits.memory_bytes) + ")";
  return note;
}

void RealLauncher::Release(int64_t pgid) {
  auto it = tracked_.find(pgid);
  if (it == tracked_.end()) return;
  // Still populated (a job failed while its processes die): the next
  // daemon start removes it (EndStrays).
  (void)cgroups_->Remove(it->second.cgroup);
  tracked_.erase(it);
}

void RealLauncher::RunHelper(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int attempts) {
  if (argv.empty()) return;
  // Everything the child needs is made before fork (no allocation after it).
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    // Its complaints go where the daemon's log goes.
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(2, 1);
    close_range(3, ~0U, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int i = 0; i < attempts; ++i) {
      if (i > 0) {
        struct timespec second = {1, 0};
        nanosleep(&second, nullptr);
      }
      pid_t run = fork();
      if (run == 0) {
        execve(args[0], args.data(), envp.data());
        _exit(127);
      }
      int status = 0;
      if (run > 0 && waitpid(run, &status, 0) == run && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0) {
        _exit(0);
      }
    }
    _exit(1);
  }
  if (pid < 0) LogWarn("cannot start " + argv[0] + ": " + std::strerror(errno));
}

std::vector<int64_t> RealLauncher::Reap() {
  std::vector<int64_t> reaped;
  int status;
  pid_t p;
  while ((p = waitpid(-1, &status, WNOHANG)) > 0) reaped.push_back(p);
  return reaped;
}

}  // namespace gpuslice::daemon
