#pragma once

// A cuda_probe (tests/sim/cuda_probe.cc) run as a child process with pipes
// to its stdin, stdout and stderr: the simulated GPU's end-to-end tests
// drive real CUDA programs with it.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace gpuslice::sim::testing_probe {

// A running cuda_probe with pipes to its stdin and stdout.
class Probe {
 public:
  Probe(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
        std::string program = GPUSLICE_CUDA_PROBE) {
    int in[2], out[2], err[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) close(fd);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(program.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    stderr_ = err[0];
  }
  ~Probe() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  // Sends one line to its stdin.
  void Send(const std::string& line) {
    std::string l = line + "\n";
    EXPECT_EQ(write(stdin_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // Whether a line of stdout is ready within `ms` (does not read it).
  bool LineWithin(int ms) {
    pollfd p{stdout_, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
  }
  // Reads one line of stdout ("" at EOF).
  std::string ReadLine() {
    std::string line;
    char c;
    while (read(stdout_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  std::string ReadAll(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) s.append(buf, static_cast<size_t>(n));
    return s;
  }
  // Closes stdin and waits; returns the exit status, the rest of stdout in
  // *out and stderr in *err.
  int Finish(std::string* out = nullptr, std::string* err = nullptr) {
    close(stdin_);
    stdin_ = -1;
    std::string o = ReadAll(stdout_), e = ReadAll(stderr_);
    if (out) *out = o;
    if (err) *err = e;
    if (!e.empty()) std::fprintf(stderr, "probe stderr: %s", e.c_str());
    return Wait();
  }
  void Kill() {
    kill(pid_, SIGKILL);
    Wait();
  }
  pid_t pid() const { return pid_; }

 private:
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    for (int fd : {stdin_, stdout_, stderr_}) {
      if (fd >= 0) close(fd);
    }
    stdin_ = stdout_ = stderr_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
};

}  // namespace gpuslice::sim::testing_probe
