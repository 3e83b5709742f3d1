#include "daemon/node/child_probe.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace gpuslice::daemon {

ProbeResult RunInChild(const std::vector<std::string>& env,
                       const std::function<ProbeResult()>& fn, int timeout_ms) {
  int fds[2];
  if (pipe(fds) != 0) return {false, "pipe failed"};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return {false, "fork failed"};
  }
  if (pid == 0) {
    close(fds[0]);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    ProbeResult p = fn();
    std::string line = (p.ok ? "1" : "0") + p.text;
    const char* data = line.data();
    size_t n = line.size();
    while (n > 0) {
      ssize_t w = write(fds[1], data, n);
      if (w <= 0) break;
      data += w;
      n -= static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool hung = false;
  while (true) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) {
      hung = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (hung) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (hung) return {false, "the probe hung (killed after " + std::to_string(timeout_ms) + " ms)"};
  if (WIFSIGNALED(status)) {
    return {false, "the probe crashed with signal " + std::to_string(WTERMSIG(status))};
  }
  if (out.empty()) return {false, "the probe reported nothing"};
  return {out[0] == '1', out.substr(1)};
}

}  // namespace gpuslice::daemon
