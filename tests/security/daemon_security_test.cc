// The daemon itself as the target: its files, what its API
// shows to whom, what a TCP token may do, idle connections, and per-user
// limits on what a user may make it hold.

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "fixture.h"

namespace gpuslice::security {
namespace {

using nlohmann::json;

std::string Secret() {
  std::random_device rd;
  return "gsattack-secret-" + std::to_string(rd()) + std::to_string(rd());
}

// "status N\nBODY" from `gpuslice-attacker http`.
int StatusOf(const ProcResult& r) {
  return r.out.rfind("status ", 0) == 0 ? std::atoi(r.out.c_str() + 7) : -1;
}

// The daemon's resident memory, in KiB.
long RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

class DaemonHardening : public SecurityTest {
 protected:
  std::string Http(const User* u, const std::string& ep, const std::string& path,
                   const std::string& method = "GET", const std::string& body = "",
                   bool token = false) {
    std::vector<std::string> args = {"http", "--to", ep, "--method", method, "--path", path};
    if (!body.empty()) args.insert(args.end(), {"--body", body});
    if (token) args.insert(args.end(), {"--token-file", token_copy()});
    ProcResult r = Attack(u, args);
    return r.out;
  }
  // A job of gsattack_a with `secret` in its environment, running.
  std::string SecretJob(const std::string& secret) {
    ProcResult r = Cli(&a_, {"submit", "--mem", "1GiB", "--name", "secretive", "--", "sleep", "60"},
                       60, {"GSATTACK_SECRET=" + secret});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = Trim(r.out);
    EXPECT_TRUE(WaitFor([&] { return State(id) == "running"; }, 30)) << Job(id).dump();
    return id;
  }
};

// The ledger (ledger.db, -wal, -shm) must not be 0644 in a 0755 state
// directory: any local user would read every job's environment.
TEST_F(DaemonHardening, TheLedgerAndStateFilesAreNotReadableByAnotherUser) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const std::string secret = Secret();
  std::string id = SecretJob(secret);
  for (const std::string name : {"ledger.db", "ledger.db-wal", "ledger.db-shm"}) {
    struct stat st;
    if (stat((state_dir() + "/" + name).c_str(), &st) != 0) continue;
    EXPECT_EQ(st.st_mode & 077, 0u)
        << name << " is readable by others: mode " << std::oct << (st.st_mode & 07777);
  }
  struct stat st;
  ASSERT_EQ(stat(state_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0004, 0u)
      << "the state directory is listable by others: mode " << std::oct << (st.st_mode & 07777);
  // Whatever the layout: neither another member of the socket group nor a
  // user outside it finds the secret in any file it can read.
  for (const User* u : {&b_, &c_}) {
    const std::string report = Drop("grep-" + u->name);
    Attack(u, {"grep", "--root", state_dir(), "--root", "/dev/shm", "--needle", secret, "--report",
               report});
    std::string found = ReadFile(report);
    EXPECT_EQ(found.find("HIT "), std::string::npos)
        << u->name << " read gsattack_a's environment from:\n"
        << found;
    EXPECT_EQ(found.find("R " + state_dir() + "/ledger.db"), std::string::npos)
        << u->name << " can open the ledger:\n"
        << found;
  }
  Cli(nullptr, {"cancel", id});
}

// Never show another user's environment, even to TCP token holders.
TEST_F(DaemonHardening, AnotherUsersEnvironmentIsNeverShown) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions().Tcp().Metrics()));
  const std::string secret = Secret();
  std::string id = SecretJob(secret);
  // A shell job (its owner gets the environment to start the shell with).
  ProcResult shell = Attack(&a_, {"submit", "--to", unix_ep(), "--mode", "shell", "--env",
                                  "GSATTACK_SECRET=" + secret, "--cwd", "/tmp"});
  std::string shell_id;
  size_t at = shell.out.find("ids ");
  if (at != std::string::npos)
    shell_id = Trim(shell.out.substr(at + 4, shell.out.find('\n', at) - at - 4));
  ASSERT_FALSE(shell_id.empty()) << shell.out << shell.err;
  ASSERT_TRUE(WaitFor([&] { return State(shell_id) == "running"; }, 30)) << Job(shell_id).dump();

  struct Look {
    std::string who, what, text;
  };
  std::vector<Look> looks;
  for (const std::string& j : {id, shell_id}) {
    looks.push_back({"gsattack_b", "GET /v1/jobs/" + j, Http(&b_, unix_ep(), "/v1/jobs/" + j)});
    looks.push_back({"token holder", "GET /v1/jobs/" + j,
                     Http(&c_, tcp_ep(), "/v1/jobs/" + j, "GET", "", true)});
  }
  for (const std::string path :
       {"/v1/jobs?all=1", "/v1/events?limit=1000", "/status", "/status.json", "/metrics"}) {
    looks.push_back({"gsattack_b", "GET " + path, Http(&b_, unix_ep(), path)});
    looks.push_back({"token holder", "GET " + path, Http(&c_, tcp_ep(), path, "GET", "", true)});
  }
  looks.push_back({"gsattack_b", "ps --all --json", Cli(&b_, {"ps", "--all", "--json"}).out});
  looks.push_back({"gsattack_b", "ps --all", Cli(&b_, {"ps", "--all"}).out});
  const std::string metrics_addr = Trim(ReadFile(state_dir() + "/metrics.addr"));
  if (!metrics_addr.empty()) {
    for (const std::string path : {"/status", "/status.json", "/metrics"}) {
      looks.push_back(
          {"anyone", "metrics listener GET " + path, Http(&c_, "tcp:" + metrics_addr, path)});
    }
  }
  for (const Look& l : looks) {
    EXPECT_EQ(l.text.find(secret), std::string::npos)
        << l.who << " saw gsattack_a's environment in " << l.what << ":\n"
        << l.text.substr(0, 800);
  }
  EXPECT_NE(looks[0].text.find("\"id\""), std::string::npos) << "the reads themselves failed:\n"
                                                             << looks[0].text;
  Cli(nullptr, {"cancel", id});
  Cli(nullptr, {"cancel", shell_id});
}

// The TCP token may read and cancel only (docs/API.md), never `quota set`.
TEST_F(DaemonHardening, ATcpTokenCanReadButCannotSetQuotasOrResize) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions().Tcp()));
  EXPECT_EQ(StatusOf({0, Http(&c_, tcp_ep(), "/v1/status", "GET", "", true), ""}), 200)
      << "the token should still read";
  ProcResult root_quota = Cli(nullptr, {"quota", "set", "--user", a_.name, "--mem", "8GiB"});
  ASSERT_EQ(root_quota.exit_code, 0) << root_quota.err;
  std::string set = Http(&c_, tcp_ep(), "/v1/quotas", "POST",
                         R"({"scope": "user", "name": "gsattack_c", "mem": "80GiB"})", true);
  int s = StatusOf({0, set, ""});
  EXPECT_TRUE(s == 401 || s == 403) << "a TCP token set a quota:\n" << set;
  std::string rm = Http(&c_, tcp_ep(), "/v1/quotas/user/" + a_.name, "DELETE", "", true);
  s = StatusOf({0, rm, ""});
  EXPECT_TRUE(s == 401 || s == 403) << "a TCP token removed a quota:\n" << rm;
  std::string id = Submit(&a_, {"--mem", "2GiB", "--compute", "20%", "--", "sleep", "60"});
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 30));
  std::string resize =
      Http(&c_, tcp_ep(), "/v1/jobs/" + id + "/resize", "POST", R"({"mem": "6GiB"})", true);
  s = StatusOf({0, resize, ""});
  EXPECT_TRUE(s == 401 || s == 403) << "a TCP token resized a job:\n" << resize;
  // Nothing changed.
  std::string quotas = Cli(nullptr, {"quota", "ls", "--json"}).out;
  EXPECT_EQ(quotas.find("gsattack_c"), std::string::npos) << quotas;
  EXPECT_NE(quotas.find(a_.name), std::string::npos) << quotas;
  Cli(nullptr, {"cancel", id});
}

// 1,019 idle connections from a user outside the socket group must not
// freeze the daemon; it keeps answering (p99 <= 50 ms) while 2,000 idle
// connections are held by an unauthorised user.
// The daemon starts with a soft fd limit of 1024, as a systemd service does.
TEST_F(DaemonHardening, TwoThousandIdleConnectionsOfAnOutsiderDoNotStopTheDaemonAnswering) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon(DaemonOptions().Tcp().Metrics()));
  auto latency = [&](const std::string& tag) {
    ProcResult r = Attack(&a_, {"latency", "--to", unix_ep(), "--path", "/v1/status", "--count",
                                "200", "--timeout-ms", "2000"});
    int n = 0, ok = 0;
    double p50 = 0, p99 = 0, max = 0;
    std::sscanf(r.out.c_str(), "n %d ok %d p50 %lf p99 %lf max %lf", &n, &ok, &p50, &p99, &max);
    std::cerr << tag << ": " << r.out;
    return std::make_tuple(ok, p99);
  };
  auto [ok_base, p99_base] = latency("baseline");
  ASSERT_EQ(ok_base, 200) << "the baseline itself failed";
  const std::string flood = Drop("flood.out");
  pid_t attacker = SpawnAs(&c_,
                           {Attacker(), "flood", "--to", tcp_ep(), "--count", "2000",
                            "--half-sent-every", "2", "--hold", "120", "--out", flood},
                           {}, "flood");
  ASSERT_GT(attacker, 0);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(flood).find("opened") != std::string::npos; }, 60))
      << ReadFile(SpawnLog("flood") + ".err");
  std::cerr << "flood: " << ReadFile(flood);
  auto [ok_flood, p99_flood] = latency("under 2,000 idle connections");
  EXPECT_EQ(ok_flood, 200) << "the daemon stopped answering its socket's users";
  // The target is p99 <= 50 ms; a slow machine's own baseline may already be
  // above it, then the flood may not make it worse than 3 times that.
  EXPECT_LE(p99_flood, std::max(50.0, 3 * p99_base)) << "baseline p99 " << p99_base << " ms";
  EXPECT_EQ(Cli(&a_, {"status"}, 10).exit_code, 0);
  kill(-attacker, SIGKILL);
}

// A user's queued jobs are capped per user, with a clear error (uncapped,
// 10,000 are accepted and `ps` takes 348 ms).
TEST_F(DaemonHardening, AUserCannotQueueMoreThanThePerUserCap) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // Root fills the GPU, so everything after it queues.
  std::string blocker = Submit(nullptr, {"--gpus", "1", "--", "sleep", "120"});
  ASSERT_TRUE(WaitFor([&] { return State(blocker) == "running"; }, 30));
  ProcResult r = Attack(
      &a_, {"submit", "--to", unix_ep(), "--count", "2000", "--mem", "1GiB", "--stop-at-refusal"},
      {}, 300);
  std::cerr << r.out.substr(0, r.out.find("\nids")) << "\n"
            << r.out.substr(r.out.find("first_refusal")) << "\n";
  int accepted = 0, refused = 0, failed = 0;
  std::sscanf(r.out.c_str(), "accepted %d refused %d failed %d", &accepted, &refused, &failed);
  EXPECT_GE(refused, 1) << "2,000 queued jobs of one user were all accepted";
  const std::string first = r.out.substr(r.out.find("first_refusal") + 14);
  if (refused >= 1) {
    EXPECT_TRUE(first.rfind("429", 0) == 0 || first.rfind("4", 0) == 0) << first;
    EXPECT_NE(first.find("\"message\""), std::string::npos) << "no clear error: " << first;
  }
  // The cap is per user: another user still gets in, and ps stays quick.
  auto t0 = std::chrono::steady_clock::now();
  ProcResult ps = Cli(&b_, {"ps"});
  double ps_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  std::cerr << "ps with " << accepted << " queued: " << ps_ms << " ms\n";
  ProcResult other = Cli(&b_, {"submit", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(other.exit_code, 0) << "another user was refused: " << other.err;
}

// A request's size is capped, with a clear error (a 7.4 MB env per job
// takes the daemon to 907 MiB).
TEST_F(DaemonHardening, AnOversizedRequestIsRefusedWithAClearError) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  const long rss_before = RssKiB(daemon_pid());
  ProcResult big = Attack(
      &a_, {"submit", "--to", unix_ep(), "--count", "3", "--mem", "1GiB", "--env-bytes", "7MiB"});
  std::cerr << big.out.substr(0, 200) << "\n";
  int accepted = 0, refused = 0, failed = 0;
  std::sscanf(big.out.c_str(), "accepted %d refused %d failed %d", &accepted, &refused, &failed);
  EXPECT_EQ(accepted, 0) << "jobs with a 7 MiB environment were accepted";
  const std::string first = big.out.substr(big.out.find("first_refusal") + 14);
  EXPECT_TRUE(first.rfind("413", 0) == 0 || first.rfind("400", 0) == 0) << first.substr(0, 300);
  EXPECT_NE(first.find("\"message\""), std::string::npos)
      << "no clear error: " << first.substr(0, 300);
  // Over the body limit altogether: still an HTTP answer with an error, not
  // a dropped connection.
  ProcResult huge =
      Attack(&a_, {"submit", "--to", unix_ep(), "--mem", "1GiB", "--env-bytes", "9MiB"});
  const std::string first_huge = huge.out.substr(huge.out.find("first_refusal") + 14);
  EXPECT_TRUE(first_huge.rfind("413", 0) == 0 || first_huge.rfind("400", 0) == 0)
      << "a 9 MiB request got no clear error: " << first_huge.substr(0, 300);
  const long rss_after = RssKiB(daemon_pid());
  std::cerr << "daemon RSS " << rss_before / 1024 << " -> " << rss_after / 1024 << " MiB\n";
  EXPECT_LT(rss_after - rss_before, 100 * 1024)
      << "the daemon grew by " << (rss_after - rss_before) / 1024 << " MiB";
  EXPECT_EQ(Cli(&b_, {"status"}, 10).exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::security

namespace gpuslice::security {
namespace {

// A shell job's client names the process the daemon moves into the
// job's cgroup (attach), and `cancel` then ends everything in it. A user
// must not be able to name anyone else's process (another user's, root's),
// nor one of their own that is not the calling client's child.
TEST_F(DaemonHardening, AttachTakesOnlyTheCallersOwnChildIntoItsJob) {
  StartDaemon();
  // The victims: a process of gsattack_b, and the root daemon itself.
  pid_t victim = SpawnAs(&b_, {"sleep", "60"}, {}, "victim");
  ASSERT_GT(victim, 0);
  auto shell_job = [&] {
    std::string out = Http(&a_, unix_ep(), "/v1/jobs", "POST",
                           R"({"mode":"shell","mem":"1GiB","argv":["sh"],"cwd":"/tmp",)"
                           R"("env":["PATH=/usr/bin:/bin"]})");
    EXPECT_EQ(out.rfind("status 201", 0), 0u) << out;
    auto j = nlohmann::json::parse(out.substr(out.find('\n') + 1), nullptr, false);
    return j.is_discarded() ? std::string() : std::to_string(j.value("id", 0));
  };
  std::string id = shell_job();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 30)) << Job(id).dump();
  for (pid_t target : {victim, daemon_pid(), getpid()}) {
    std::string out = Http(&a_, unix_ep(), "/v1/jobs/" + id + "/attach", "POST",
                           "{\"pid\":" + std::to_string(target) + "}");
    EXPECT_EQ(out.rfind("status 403", 0), 0u) << "pid " << target << ": " << out;
  }
  // Its own process, but not the calling client's child: refused too.
  pid_t own = SpawnAs(&a_, {"sleep", "60"}, {}, "own");
  std::string out = Http(&a_, unix_ep(), "/v1/jobs/" + id + "/attach", "POST",
                         "{\"pid\":" + std::to_string(own) + "}");
  EXPECT_EQ(out.rfind("status 403", 0), 0u) << out;
  EXPECT_NE(out.find("not a child of the calling process"), std::string::npos) << out;
  ASSERT_EQ(Cli(&a_, {"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return State(id) == "cancelled" || State(id) == "failed"; }, 30));
  EXPECT_EQ(kill(victim, 0), 0) << "another user's process was ended with the job";
  EXPECT_EQ(kill(daemon_pid(), 0), 0);
  kill(victim, SIGKILL);
  kill(own, SIGKILL);
}

}  // namespace
}  // namespace gpuslice::security
