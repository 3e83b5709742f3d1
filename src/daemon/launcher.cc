#include "daemon/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpuslice::daemon {
namespace {

using core::Result;
using core::Status;

// What the leader tells the daemon when it cannot exec: the step and errno.
struct ChildError {
  int32_t step;
  int32_t err;
};
constexpr const char* kSteps[] = {"open /dev/null", "redirect output", "set groups", "set gid",
                                  "set uid",        "change directory", "exec"};

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

Result<int> OpenLog(const std::string& path, uint32_t uid, uint32_t gid) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (fd < 0) return ErrnoError(errno, "open " + path);
  if (geteuid() == 0 && fchown(fd, uid, gid) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError(err, "chown " + path);
  }
  return fd;
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

RealLauncher::RealLauncher() {
  // Orphaned job processes are re-parented to us and reaped by Reap(), so
  // they never linger as zombies and GroupAlive stays accurate.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
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

  GPUSLICE_ASSIGN_OR_RETURN(int out_fd, OpenLog(spec.stdout_path, spec.uid, spec.gid));
  auto err_fd_or = OpenLog(spec.stderr_path, spec.uid, spec.gid);
  if (!err_fd_or.ok()) {
    close(out_fd);
    return err_fd_or.status();
  }
  int err_fd = *err_fd_or;

  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string status_tmp = spec.status_path + ".tmp";

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    int err = errno;
    close(out_fd);
    close(err_fd);
    return ErrnoError(err, "pipe");
  }
  pid_t sup = fork();
  if (sup < 0) {
    int err = errno;
    close(out_fd);
    close(err_fd);
    close(report[0]);
    close(report[1]);
    return ErrnoError(err, "fork");
  }
  if (sup == 0) {
    // Supervisor. The daemon is single-threaded, so the heap is consistent,
    // but keep to plain system calls anyway.
    close(report[0]);
    setsid();
    signal(SIGHUP, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    pid_t leader = fork();
    if (leader == 0) {
      setpgid(0, 0);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int s : {SIGHUP, SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGQUIT}) signal(s, SIG_DFL);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull < 0) ChildFail(report[1], 0);
      if (dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) {
        ChildFail(report[1], 1);
      }
      if (root) {
        if (setgroups(groups.size(), groups.data()) != 0) ChildFail(report[1], 2);
        if (setgid(spec.gid) != 0) ChildFail(report[1], 3);
        if (setuid(spec.uid) != 0) ChildFail(report[1], 4);
      }
      // After dropping privileges, so the caller's own permissions apply.
      if (chdir(spec.cwd.c_str()) != 0) ChildFail(report[1], 5);
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
    close(out_fd);
    close(err_fd);
    // Not a copy of the daemon's sockets (listener, connections) may stay
    // open here for the job's lifetime.
    if (close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 65536; ++fd) close(fd);
    }
    if (leader < 0) _exit(1);
    int status = 0;
    while (waitpid(leader, &status, 0) < 0 && errno == EINTR) {
    }
    char line[64];
    int n = WIFSIGNALED(status) ? std::snprintf(line, sizeof line, "signal %d\n", WTERMSIG(status))
                                : std::snprintf(line, sizeof line, "exit %d\n",
                                                WIFEXITED(status) ? WEXITSTATUS(status) : 255);
    int fd = open(status_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      WriteAll(fd, line, static_cast<size_t>(n));
      fsync(fd);
      close(fd);
      rename(status_tmp.c_str(), spec.status_path.c_str());
    }
    _exit(0);
  }
  close(report[1]);
  close(out_fd);
  close(err_fd);
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
  if (got < sizeof(int64_t)) {
    return core::InternalError("job supervisor died before starting the command");
  }
  std::memcpy(&ref.pid, buf, sizeof(int64_t));
  if (ref.pid <= 0) return core::ResourceExhaustedError("fork of the job leader failed");
  if (got == sizeof buf) {
    ChildError e;
    std::memcpy(&e, buf + sizeof(int64_t), sizeof e);
    const char* step = e.step >= 0 && e.step < 7 ? kSteps[e.step] : "start";
    std::string what = std::string("cannot start '") + spec.argv[0] + "': " + step;
    if (e.step == 5) what += " " + spec.cwd;
    return ErrnoError(e.err, what);
  }
  ref.start_time = ProcessStartTime(ref.pid);
  return ref;
}

bool RealLauncher::GroupAlive(int64_t pgid) {
  if (pgid <= 0) return false;
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
  if (kill(-static_cast<pid_t>(pgid), sig) != 0 && errno != ESRCH) {
    return ErrnoError(errno, "signal process group " + std::to_string(pgid));
  }
  return Status::Ok();
}

std::vector<int64_t> RealLauncher::Reap() {
  std::vector<int64_t> reaped;
  int status;
  pid_t p;
  while ((p = waitpid(-1, &status, WNOHANG)) > 0) reaped.push_back(p);
  return reaped;
}

}  // namespace gpuslice::daemon
