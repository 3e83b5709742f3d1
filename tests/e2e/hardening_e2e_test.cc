// End-to-end: the real gpusliced, SIGKILLed again and
// again while jobs are submitted and started, never runs a job twice.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

// POSTs `body` to /v1/jobs on `socket`; the HTTP status (0: no daemon).
int SubmitOverSocket(const std::string& socket_path, const std::string& body) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return 0;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  // MSG_NOSIGNAL: the daemon is SIGKILLed under this write at random; a
  // plain write then raised SIGPIPE and ended the whole test binary.
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return 0;
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  if (out.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::atoi(out.c_str() + 9);
}

// A daemon SIGKILL at a bad moment must not run a job twice at the same
// time (6 of 204 did, the first copy untracked). Each job appends its id to a
// file (O_APPEND); no id may appear twice.
TEST(HardeningE2E, NoJobRunsTwiceWhenTheDaemonIsKilledDuringLaunches) {
  Daemon d("2xH100-80GB");
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  const std::string ran = d.dir() + "/ran";
  std::ofstream(ran).flush();
  constexpr int kJobs = 200;
  json body = {{"mem", "1GiB"},
               {"compute", "5%"},
               {"argv", {"/bin/sh", "-c", "echo $GPUSLICE_JOB_ID >> " + ran + "; sleep 0.2"}},
               {"cwd", "/tmp"},
               {"env", {"PATH=/usr/bin:/bin"}}};
  const std::string text = body.dump();
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  std::thread submitter([&] {
    while (accepted < kJobs && !stop) {
      if (SubmitOverSocket(d.socket(), text) == 201) {
        ++accepted;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  });
  std::mt19937 rng(13);
  int kills = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  // At least five kills, also after the last submission was accepted: a
  // fast machine accepted all 200 within two kills, and the jobs still
  // queued or launching are what a kill must not run twice.
  constexpr int kMinKills = 5;
  while ((accepted < kJobs || kills < kMinKills) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
    d.Kill(SIGKILL);
    ++kills;
    if (!d.Start()) {
      ADD_FAILURE() << "gpusliced did not restart after SIGKILL " << kills << ":\n"
                    << ReadFile(d.dir() + "/daemon.log.2") << ReadFile(d.dir() + "/daemon.out");
      break;
    }
  }
  stop = true;
  submitter.join();
  ASSERT_TRUE(d.running() || d.Start()) << ReadFile(d.dir() + "/daemon.log");
  EXPECT_GE(kills, kMinKills);
  EXPECT_EQ(accepted.load(), kJobs);
  // Every job ends (re-adopted ones too).
  EXPECT_TRUE(Daemon::WaitFor(
      [&] {
        CliResult ps = d.Cli({"ps", "--json"}, -1, 20);
        auto j = json::parse(ps.out, nullptr, false);
        return !j.is_discarded() && j.contains("jobs") && j["jobs"].empty();
      },
      120));
  std::map<std::string, int> runs;
  std::ifstream in(ran);
  for (std::string line; std::getline(in, line);) ++runs[line];
  int twice = 0;
  for (const auto& [id, n] : runs) {
    if (n > 1) {
      ++twice;
      ADD_FAILURE() << "job " << id << " ran " << n << " times";
    }
  }
  std::cerr << kills << " SIGKILLs, " << accepted << " jobs accepted, " << runs.size() << " ran, "
            << twice << " ran twice\n";
  EXPECT_EQ(twice, 0);
}

}  // namespace
}  // namespace gpuslice::e2e
