#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gpuslice::testing {
namespace {

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> v;
  for (const std::string& a : args) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

std::vector<std::string> EnvStrings(const Env& env) {
  std::vector<std::string> v;
  for (const auto& [k, val] : env) v.push_back(k + "=" + val);
  return v;
}

void ParseValues(Output* o) {
  size_t start = 0;
  while (start < o->out.size()) {
    size_t end = o->out.find('\n', start);
    if (end == std::string::npos) end = o->out.size();
    std::string line = o->out.substr(start, end - start);
    size_t eq = line.find('=');
    if (eq != std::string::npos) o->values[line.substr(0, eq)] = line.substr(eq + 1);
    start = end + 1;
  }
}

}  // namespace

long long Output::Int(const std::string& key) const {
  auto it = values.find(key);
  return it == values.end() ? -1 : std::strtoll(it->second.c_str(), nullptr, 10);
}

Output Run(const std::vector<std::string>& argv, const Env& env, int timeout_s) {
  int out[2], err[2];
  Output o;
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return o;
  std::vector<std::string> env_strings = EnvStrings(env);
  std::vector<char*> envp = Argv(env_strings);
  std::vector<char*> args = Argv(argv);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (open_fds > 0) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > timeout_s) {
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, 1000) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? o.out : o.err).append(buf, size_t(n));
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  ParseValues(&o);
  return o;
}

Session::Session(const std::vector<std::string>& argv, const Env& env) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
  std::vector<std::string> env_strings = EnvStrings(env);
  std::vector<char*> envp = Argv(env_strings);
  std::vector<char*> args = Argv(argv);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  to_ = in[1];
  from_ = out[0];
}

Session::~Session() {
  if (to_ >= 0) close(to_);
  if (from_ >= 0) close(from_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string Session::WaitFor(const std::string& key) {
  while (true) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
    }
    pollfd p{from_, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0) return "";
    char buf[1024];
    ssize_t n = read(from_, buf, sizeof(buf));
    if (n <= 0) return "";
    buffer_.append(buf, size_t(n));
  }
}

std::string Session::Ask(const std::string& line, const std::string& key) {
  if (!Send(line)) return "";
  return WaitFor(key);
}

bool Session::Send(const std::string& line) {
  std::string l = line + "\n";
  return write(to_, l.data(), l.size()) == ssize_t(l.size());
}

void Session::Kill(int signal) {
  kill(pid_, signal);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace gpuslice::testing
