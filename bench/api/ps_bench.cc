// `gpuslice ps` with 10,000 jobs queued (figures in
// docs/PERFORMANCE.md): a real gpusliced on the simulated GPU, one job
// holding its only GPU and 10,000 queued behind it, submitted over the
// socket by three users at once (root and, when run as root, uids 60001 and
// 60002 through the socket's group: no account is created). Then the CLI
// binary itself, end to end (exec, connect, the daemon's answer, parsing,
// rendering), output to a file:
//
//   ps                      the first page (100 jobs)
//   ps --summary            counts by state and groups of alike jobs
//   ps --json --limit 100   a page as JSON
//   ps --user U             one user's first page (the daemon filters)
//   ps -n 0                 every job: what an unpaged `ps` prints
//
// each run 10 times (ps -n 0: 3), median and max of the wall time, and the
// bytes printed. Targets: ps and ps --summary <= 50 ms, ps --json --limit
// 100 <= 20 ms (medians).
//
//   ps_bench [--jobs N]

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_daemon.h"
#include "client/client.h"

namespace {

using Clock = std::chrono::steady_clock;
using gpuslice::bench::BenchDaemon;

// Submits `count` queued jobs named after `name` (an array's members when
// `array`) as the process's user; false when one is refused.
bool SubmitJobs(const std::string& socket, int count, const std::string& name, bool array) {
  gpuslice::client::Client client(socket);
  for (int i = 0; i < count; ++i) {
    nlohmann::json body = {{"mem", "8GiB"},
                           {"compute", "30%"},
                           {"argv", {"true"}},
                           {"cwd", "/"},
                           {"name", array ? name + "[" + std::to_string(i % 1000) + "]" : name},
                           {"env", {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}}};
    auto r = client.Raw("POST", "/v1/jobs", body.dump());
    if (!r.ok() || r->status != 201) {
      std::fprintf(stderr, "submission refused: %s\n",
                   r.ok() ? r->body.c_str() : r.status().message().c_str());
      return false;
    }
  }
  return true;
}

struct Run {
  double ms = 0;
  size_t bytes = 0;
  int exit_code = -1;
};

// The CLI with `args`, stdout into `out`: wall time from fork to its exit.
Run RunCli(const std::string& socket, const std::vector<std::string>& args,
           const std::string& out) {
  auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(null, 2);
    std::vector<std::string> argv = {GPUSLICE_BENCH_CLI, "--socket", socket};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> a;
    for (std::string& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Run r;
  r.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  struct stat st;
  if (stat(out.c_str(), &st) == 0) r.bytes = static_cast<size_t>(st.st_size);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 10000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--jobs") jobs = std::atoi(argv[i + 1]);
  }
  BenchDaemon d;
  if (!d.Start()) {
    std::fprintf(stderr, "gpusliced did not start\n");
    return 1;
  }
  gpuslice::client::Client client(d.socket);
  nlohmann::json holder = {
      {"gpus", "1"}, {"argv", {"sleep", "100000"}}, {"cwd", "/"}, {"name", "holder"}};
  if (!client.Call("POST", "/v1/jobs", &holder).ok()) {
    std::fprintf(stderr, "the first job was refused\n");
    return 1;
  }
  // Three users at once: root's array, and two more through the socket's
  // group (root's) when this runs as root.
  const bool root = geteuid() == 0;
  struct Part {
    uid_t uid;
    int count;
    const char* name;
    bool array;
  };
  std::vector<Part> parts = {{0, jobs / 2, "sweep", true}};
  if (root) {
    parts.push_back({60001, jobs * 3 / 10, "train", true});
    parts.push_back({60002, jobs - jobs / 2 - jobs * 3 / 10, "eval", false});
  } else {
    parts[0].count = jobs;
  }
  auto t0 = Clock::now();
  std::vector<pid_t> children;
  for (const Part& p : parts) {
    pid_t pid = fork();
    if (pid == 0) {
      if (p.uid != 0) {
        const gid_t group = 0;  // The socket's group: the daemon's (root's).
        if (setgroups(1, &group) != 0 || setgid(p.uid) != 0 || setuid(p.uid) != 0) _exit(3);
      }
      _exit(SubmitJobs(d.socket, p.count, p.name, p.array) ? 0 : 1);
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) return 1;
  const double fill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = d.dir + "/ps.out";
  // The first list runs the queue plan the submissions deferred.
  RunCli(d.socket, {"ps"}, out);
  std::printf("%d jobs queued by %zu users in %.1f s; GPU held by one job\n", jobs, parts.size(),
              fill_s);
  std::printf("%-28s %6s %10s %10s %12s\n", "command", "runs", "median ms", "max ms", "bytes");
  struct Case {
    std::string label;
    std::vector<std::string> args;
    int runs;
  };
  const std::vector<Case> cases = {
      {"ps", {"ps"}, 10},
      {"ps --summary", {"ps", "--summary"}, 10},
      {"ps --json --limit 100", {"ps", "--json", "--limit", "100"}, 10},
      {"ps --user " + std::string(root ? "60002" : "root"),
       {"ps", "--user", root ? "60002" : "root"},
       10},
      {"ps -n 0 (all jobs)", {"ps", "-n", "0"}, 3},
  };
  for (const Case& c : cases) {
    std::vector<double> ms;
    size_t bytes = 0;
    for (int i = 0; i < c.runs; ++i) {
      Run r = RunCli(d.socket, c.args, out);
      if (r.exit_code != 0) {
        std::fprintf(stderr, "%s failed (exit %d)\n", c.label.c_str(), r.exit_code);
        return 1;
      }
      ms.push_back(r.ms);
      bytes = r.bytes;
    }
    std::printf("%-28s %6d %10.1f %10.1f %12zu\n", c.label.c_str(), c.runs, Median(ms),
                *std::max_element(ms.begin(), ms.end()), bytes);
  }
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) > 0)
    std::printf("load average %.1f on %ld cores\n", load[0], sysconf(_SC_NPROCESSORS_ONLN));
  return 0;
}
