// End-to-end: the real gpusliced, gpuslice, shim and simulated GPU.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

class E2E : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "daemon log:\n" << ReadFile(d.dir() + "/daemon.log");
  }
  Daemon d;
};

TEST_F(E2E, RunStreamsOutputAndExitsWithTheJobsExitCode) {
  CliResult r = d.Cli({"run", "--mem", "1GiB", "--compute", "10%", "--", "sh", "-c",
                       "echo out; echo err >&2; echo $CUDA_VISIBLE_DEVICES; exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.out.find("out\n"), std::string::npos);
  EXPECT_NE(r.out.find("GPU-"), std::string::npos) << "CUDA_VISIBLE_DEVICES by UUID";
  EXPECT_NE(r.err.find("err\n"), std::string::npos);
}

TEST_F(E2E, RunsInTheCallersDirectoryAndEnvironment) {
  std::string sub = d.dir() + "/work";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  CliResult r = d.Cli({"run", "--mem", "1GiB", "--", "sh", "-c",
                       "cd " + sub + " && pwd; echo $GPUSLICE_SOCKET"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(sub), std::string::npos);
  EXPECT_NE(r.out.find(d.socket()), std::string::npos) << "the caller's environment";
}

TEST_F(E2E, ShimEnforcesTheSliceMemoryLimit) {
  CliResult ok = d.Cli({"run", "--mem", "4GiB", "--compute", "20%", "--", WorkerPath(), "--name",
                        "fits", "--mem", "2GiB", "--seconds", "0.3"});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  CliResult over = d.Cli({"run", "--mem", "4GiB", "--compute", "20%", "--", WorkerPath(),
                          "--name", "over", "--mem", "6GiB", "--seconds", "0.3"});
  EXPECT_EQ(over.exit_code, 3) << over.out << over.err;  // CUDA_ERROR_OUT_OF_MEMORY.
  EXPECT_NE(over.err.find("OUT_OF_MEMORY"), std::string::npos) << over.err;
}

TEST_F(E2E, SubmitPsLogsAndCancel) {
  CliResult s = d.Cli({"submit", "--mem", "1GiB", "--name", "sleeper", "--", "sh", "-c",
                       "echo started; exec sleep 60"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::string id = Trim(s.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return d.Cli({"logs", id}).out == "started\n"; }));
  CliResult ps = d.Cli({"ps"});
  EXPECT_NE(ps.out.find("sleeper"), std::string::npos);
  EXPECT_NE(ps.out.find("running"), std::string::npos);
  CliResult c = d.Cli({"cancel", id});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }));
  EXPECT_EQ(Job(d, id)["exit_code"], 128 + SIGTERM);
}

// `submit --after ID[:ok]`, Slurm's afterany/afterok.
TEST_F(E2E, SubmitAfterWaitsForItsDependencyAndAfterOkIsCancelledWhenItFails) {
  std::string marker = d.dir() + "/go";
  // Fails, but only once the marker exists: the others are seen waiting.
  CliResult a = d.Cli({"submit", "--mem", "1GiB", "--", "sh", "-c",
                       "while [ ! -e " + marker + " ]; do sleep 0.05; done; false"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::string ida = Trim(a.out);
  CliResult ok = d.Cli({"submit", "--mem", "1GiB", "--after", ida + ":ok", "--", "true"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  CliResult any =
      d.Cli({"submit", "--mem", "1GiB", "--array", "1-2", "--after", ida, "--", "true"});
  ASSERT_EQ(any.exit_code, 0) << any.err;
  std::string idok = Trim(ok.out);
  std::vector<std::string> ids_any;
  for (size_t at = 0, nl; (nl = any.out.find('\n', at)) != std::string::npos; at = nl + 1) {
    ids_any.push_back(any.out.substr(at, nl - at));
  }
  ASSERT_EQ(ids_any.size(), 2u) << any.out;
  // Waiting, and saying for what, though the GPU has room.
  EXPECT_EQ(State(d, idok), "queued");
  EXPECT_EQ(Job(d, idok)["waiting_for"], "after job " + ida + ":ok (running)");
  for (const std::string& id : ids_any) {
    EXPECT_EQ(State(d, id), "queued") << id;
    EXPECT_EQ(Job(d, id)["after"][0]["job"].get<uint64_t>(), std::stoull(ida))
        << "every array member gets the dependency";
  }
  EXPECT_NE(d.Cli({"ps"}).out.find("after job " + ida + ":ok (running)"), std::string::npos);
  CliResult show = d.Cli({"show", idok});
  EXPECT_NE(show.out.find(ida + ":ok (running, waiting)"), std::string::npos) << show.out;
  std::ofstream(marker) << "go";
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, idok) == "cancelled"; }, 60)) << State(d, idok);
  EXPECT_EQ(Job(d, idok)["reason"], "dependency job " + ida + " did not succeed (exit 1)");
  for (const std::string& id : ids_any) {
    ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "exited"; }, 60)) << id;
    EXPECT_EQ(Job(d, id)["exit_code"], 0);
  }
  // Refused at submission: :ok on a job that already failed, an unknown job
  // (the daemon: 125), a malformed spec (the CLI: a usage error, 2).
  CliResult never = d.Cli({"submit", "--mem", "1GiB", "--after", ida + ":ok", "--", "true"});
  EXPECT_EQ(never.exit_code, 125);
  EXPECT_NE(never.err.find("could never start"), std::string::npos) << never.err;
  CliResult unknown = d.Cli({"submit", "--mem", "1GiB", "--after", "999", "--", "true"});
  EXPECT_EQ(unknown.exit_code, 125);
  EXPECT_NE(unknown.err.find("no job 999"), std::string::npos) << unknown.err;
  for (const char* bad : {"x", "3:maybe"}) {
    CliResult r = d.Cli({"submit", "--mem", "1GiB", "--after", bad, "--", "true"});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--after '"), std::string::npos) << r.err;
  }
}

TEST_F(E2E, QueuedJobWaitsWithAReasonAndStartsWhenMemoryFrees) {
  CliResult a = d.Cli({"submit", "--mem", "60GiB", "--compute", "50%", "--", "sleep", "2"});
  CliResult b = d.Cli({"submit", "--mem", "30GiB", "--compute", "50%", "--", "true"});
  std::string ida = Trim(a.out), idb = Trim(b.out);
  json queued = Job(d, idb);
  if (queued["state"] == "queued") {  // Unless job a already ended (very slow machine).
    EXPECT_EQ(queued["queue_position"], 1);
    EXPECT_NE(queued["waiting_for"].get<std::string>().find("30 GiB"), std::string::npos);
    CliResult ps = d.Cli({"ps"});
    EXPECT_NE(ps.out.find("first in line"), std::string::npos) << ps.out;
  }
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, idb) == "exited"; }, 60));
  EXPECT_EQ(State(d, ida), "exited");
  EXPECT_GE(Job(d, idb)["started_ms"].get<int64_t>(), Job(d, ida)["ended_ms"].get<int64_t>());
}

TEST_F(E2E, RequestThatCanNeverFitIsRefusedAtOnce) {
  CliResult r = d.Cli({"submit", "--mem", "100GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("never fit"), std::string::npos) << r.err;
  CliResult g = d.Cli({"submit", "--gpus", "2", "--", "true"});
  EXPECT_EQ(g.exit_code, 125);
  CliResult bad = d.Cli({"submit", "--mem", "12XB", "--", "true"});
  EXPECT_EQ(bad.exit_code, 2) << "a bad value is a usage error";
  EXPECT_NE(bad.err.find("--mem"), std::string::npos) << bad.err;
  CliResult missing = d.Cli({"run", "--mem", "1GiB", "--", "no-such-command-xyz"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("not found"), std::string::npos) << missing.err;
  EXPECT_TRUE(json::parse(d.Cli({"ps", "--json"}).out)["jobs"].empty());
}

TEST_F(E2E, RestartAfterSigkillReadoptsRunningJobs) {
  std::string marker = d.dir() + "/marker";
  CliResult a = d.Cli({"submit", "--gpus", "1", "--", "sh", "-c",
                       "while [ ! -e " + marker + " ]; do sleep 0.05; done; exit 5"});
  CliResult b = d.Cli({"submit", "--mem", "1GiB", "--", "true"});  // Waits for the GPU.
  std::string ida = Trim(a.out), idb = Trim(b.out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, ida) == "running"; }));
  ASSERT_EQ(State(d, idb), "queued");
  d.Kill(SIGKILL);
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log.2");
  EXPECT_EQ(State(d, ida), "running");  // Re-adopted, not lost...
  EXPECT_EQ(State(d, idb), "queued");   // ...and not doubled.
  std::ofstream(marker) << "go";
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, idb) == "exited"; }, 60));
  json ja = Job(d, ida);
  EXPECT_EQ(ja["state"], "exited");
  EXPECT_EQ(ja["exit_code"], 5) << "the exit status survives the restart";
}

TEST_F(E2E, GpusAndDoctorSaySimulatedAndJsonParses) {
  CliResult g = d.Cli({"gpus"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find("SIMULATED"), std::string::npos) << g.out;
  json gj = json::parse(d.Cli({"gpus", "--json"}).out);
  EXPECT_TRUE(gj["simulated"].get<bool>());
  EXPECT_EQ(gj["gpus"].size(), 1u);
  CliResult doc = d.Cli({"doctor", "--json"});
  json dj = json::parse(doc.out);
  bool shim_ok = false;
  for (const json& c : dj["checks"]) {
    if (c["name"] == "shim") shim_ok = c["ok"];
  }
  EXPECT_TRUE(shim_ok) << doc.out;
  EXPECT_EQ(json::parse(d.Cli({"status", "--json"}).out)["state"], "ok");
}

// The Slurm checks are the CLI's (the daemon links no integration): on a
// node with a slurm.conf they join the daemon's, judging the socket the CLI
// reached the daemon at; without one there are none.
TEST_F(E2E, DoctorOnASlurmNodeAddsTheSlurmChecksForTheSocketItReached) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const std::string node = std::string(host).substr(0, std::string(host).find('.'));
  const std::string conf_dir = d.dir() + "/slurm";
  ASSERT_EQ(mkdir(conf_dir.c_str(), 0755), 0);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(conf_dir + "/" + name) << text;
  };
  write("slurm.conf", "ClusterName=c\nGresTypes=gpu\nProctrackType=proctrack/cgroup\nNodeName=" +
                          node + " Gres=gpu:1\n");
  write("gres.conf", "NodeName=" + node + " Name=gpu File=" + conf_dir + "/no-such-device\n");
  auto doctor = [&](const std::string& socket) {
    write("plugstack.conf",
          "required /usr/lib/gpuslice/libgpuslice_spank.so socket=" + socket + "\n");
    CliResult r =
        d.CliWithInput({"doctor", "--json"}, "", {"SLURM_CONF=" + conf_dir + "/slurm.conf"});
    const json out = json::parse(r.out);
    json checks = json::object();
    for (const json& c : out["checks"]) checks[c["name"].get<std::string>()] = c;
    return std::make_pair(r, checks);
  };

  auto [right, checks] = doctor(d.socket());
  for (const char* name :
       {"slurm_gres_types", "slurm_plugstack", "slurm_plugin_socket", "slurm_gres_devices"}) {
    ASSERT_TRUE(checks.contains(name)) << name << " missing: " << right.out;
  }
  EXPECT_TRUE(checks["slurm_gres_types"]["ok"].get<bool>()) << right.out;
  EXPECT_TRUE(checks["slurm_plugstack"]["ok"].get<bool>()) << right.out;
  // Whether a user of the socket's group gets in depends on this machine's
  // groups; that the plugin's socket= is the one reached does not.
  const std::string socket_detail = checks["slurm_plugin_socket"]["detail"];
  EXPECT_NE(socket_detail.find(d.socket()), std::string::npos) << right.out;
  EXPECT_EQ(socket_detail.find("but gpusliced listens on"), std::string::npos) << right.out;
  // The device gres.conf names is not there: a failed check fails doctor.
  EXPECT_FALSE(checks["slurm_gres_devices"]["ok"].get<bool>()) << right.out;
  EXPECT_NE(checks["slurm_gres_devices"]["detail"].get<std::string>().find("no-such-device"),
            std::string::npos)
      << right.out;
  EXPECT_EQ(right.exit_code, 1) << right.out;

  auto [wrong, wrong_checks] = doctor("/run/elsewhere.sock");
  EXPECT_FALSE(wrong_checks["slurm_plugin_socket"]["ok"].get<bool>()) << wrong.out;
  EXPECT_NE(wrong_checks["slurm_plugin_socket"]["detail"].get<std::string>().find(
                "connects to /run/elsewhere.sock but gpusliced listens on " + d.socket()),
            std::string::npos)
      << wrong.out;

  CliResult plain =
      d.CliWithInput({"doctor", "--json"}, "", {"SLURM_CONF=" + conf_dir + "/none.conf"});
  const json plain_out = json::parse(plain.out);
  for (const json& c : plain_out["checks"]) {
    EXPECT_NE(c["name"].get<std::string>().rfind("slurm_", 0), 0u) << plain.out;
  }
  // Without Slurm checks, doctor's verdict is the daemon's own.
  EXPECT_EQ(plain.exit_code, plain_out["ok"].get<bool>() ? 0 : 1) << plain.out;
}

TEST_F(E2E, ShellRunsInASliceAndReleasesItOnExit) {
  CliResult r = d.CliWithInput({"shell", "--mem", "2GiB", "--compute", "10%"},
                               "echo in-shell $CUDA_VISIBLE_DEVICES\nexit 4\n",
                               {"SHELL=/bin/sh"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.out.find("in-shell GPU-"), std::string::npos) << r.out;
  json list = json::parse(d.Cli({"ps", "--all", "--json"}).out);
  ASSERT_EQ(list["jobs"].size(), 1u);
  EXPECT_EQ(list["jobs"][0]["state"], "exited");
  EXPECT_EQ(list["jobs"][0]["exit_code"], 4);
}

TEST_F(E2E, RunInteractiveGivesTheCommandThisStdinAndItsExitCode) {
  // run -i: the daemon grants the slice, the CLI starts the command with its
  // own stdin, stdout and stderr (so input reaches it and the two outputs
  // keep their order).
  CliResult r = d.CliWithInput(
      {"run", "-i", "--mem", "1GiB", "--name", "attached", "--", "sh", "-c",
       "cat; echo \"slice=$GPUSLICE_SLICE gpu=$CUDA_VISIBLE_DEVICES\"; exit 7"},
      "hello\nworld\n", {});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out.rfind("hello\nworld\nslice=/", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" gpu=GPU-"), std::string::npos) << r.out;
  json list = json::parse(d.Cli({"ps", "--all", "--json"}).out);
  ASSERT_EQ(list["jobs"].size(), 1u);
  const json& job = list["jobs"][0];
  EXPECT_EQ(job["state"], "exited");
  EXPECT_EQ(job["exit_code"], 7);
  EXPECT_EQ(job["name"], "attached");
  EXPECT_EQ(job["argv"][0], "sh") << job.dump();

  CliResult missing = d.CliWithInput({"run", "-i", "--mem", "1GiB", "--", "no-such-command-xyz"},
                                     "", {});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("no-such-command-xyz"), std::string::npos) << missing.err;

  CliResult both = d.Cli({"run", "-i", "--restartable", "--mem", "1GiB", "--", "true"});
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("--restartable"), std::string::npos) << both.err;
  EXPECT_EQ(json::parse(d.Cli({"ps", "--all", "--json"}).out)["jobs"].size(), 2u)
      << "the refused request created no job";
}

TEST_F(E2E, RunInteractiveForwardsCtrlCAndCancelEndsTheCommandsGroup) {
  // stdin is not a terminal here, so Ctrl-C reaches gpuslice: it passes the
  // signal on to the command's process group.
  std::string out = d.dir() + "/run-i.out";
  int pid = d.CliAsync({"run", "-i", "--mem", "1GiB", "--", "sh", "-c",
                        "trap 'echo got-int; exit 9' INT; echo up; while :; do sleep 0.05; done"},
                       out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return ReadFile(out) == "up\n"; }));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_TRUE(Daemon::WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }));
  EXPECT_EQ(WEXITSTATUS(status), 9) << ReadFile(out);
  EXPECT_EQ(ReadFile(out), "up\ngot-int\n");

  // `gpuslice cancel` from elsewhere: the daemon signals the command's group
  // (its own, set up by the CLI), a child of it included.
  std::string out2 = d.dir() + "/run-i2.out";
  int pid2 = d.CliAsync({"run", "-i", "--mem", "1GiB", "--", "sh", "-c",
                         "sleep 60 & echo up; wait"},
                        out2);
  ASSERT_TRUE(Daemon::WaitFor([&] { return ReadFile(out2) == "up\n"; }));
  json running = json::parse(d.Cli({"ps", "--json"}).out)["jobs"];
  ASSERT_EQ(running.size(), 1u);
  const std::string id = std::to_string(running[0]["id"].get<uint64_t>());
  EXPECT_EQ(d.Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return waitpid(pid2, &status, WNOHANG) == pid2; }));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }));
}

TEST_F(E2E, RunCtrlCCancelsTheJob) {
  std::string out = d.dir() + "/run.out";
  int pid = d.CliAsync({"run", "--mem", "1GiB", "--", "sh", "-c", "echo up; exec sleep 60"}, out);
  ASSERT_TRUE(Daemon::WaitFor([&] { return ReadFile(out) == "up\n"; }));
  kill(pid, SIGINT);
  int status = 0;
  ASSERT_TRUE(Daemon::WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(json::parse(d.Cli({"ps", "--json"}).out)["jobs"].empty());
}

// A raw HTTP/1.1 exchange over TCP (the CLI speaks only to the unix socket).
std::string TcpRequest(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  (void)!write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(E2ETcp, BearerTokenIsRequiredAndSubmissionsStayLocal) {
  int port = FreePort();
  std::string token = "0123456789abcdef-token";
  std::string token_file = "/tmp/gpuslice-e2e-token-" + std::to_string(getpid());
  std::ofstream(token_file) << token << "\n";
  Daemon d("1xH100-80GB",
           {"--tcp", "127.0.0.1:" + std::to_string(port), "--tcp-token-file", token_file});
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  std::string head = "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  std::string no_token = TcpRequest(port, head + "\r\n");
  EXPECT_NE(no_token.find("401"), std::string::npos) << no_token;
  std::string wrong = TcpRequest(port, head + "Authorization: Bearer nope\r\n\r\n");
  EXPECT_NE(wrong.find("401"), std::string::npos) << wrong;
  std::string ok = TcpRequest(port, head + "Authorization: Bearer " + token + "\r\n\r\n");
  EXPECT_NE(ok.find("200 OK"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\"state\":\"ok\""), std::string::npos) << ok;
  std::string body = R"({"mem":"1GiB","argv":["true"],"cwd":"/"})";
  std::string submit = TcpRequest(
      port, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " +
                token + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(submit.find("403"), std::string::npos) << submit;
  unlink(token_file.c_str());
}

class E2EDegraded : public ::testing::Test {};

TEST_F(E2EDegraded, UnreadableLedgerServesReadsAndRefusesWork) {
  Daemon d;
  ASSERT_EQ(mkdir(d.state_dir().c_str(), 0755), 0);
  std::ofstream(d.state_dir() + "/ledger.db") << std::string(8192, 'z');
  ASSERT_TRUE(d.Start());
  json s = json::parse(d.Cli({"status", "--json"}).out);
  EXPECT_EQ(s["state"], "degraded");
  EXPECT_NE(s["degraded_reason"].get<std::string>().find("ledger"), std::string::npos);
  EXPECT_EQ(d.Cli({"gpus"}).exit_code, 0);
  EXPECT_EQ(d.Cli({"ps"}).exit_code, 0);
  CliResult r = d.Cli({"submit", "--mem", "1GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("degraded"), std::string::npos) << r.err;
}

// Two Unix users: needs root to create the second user and switch to it.
class E2EUsers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the two-user test needs root (CI runs as root)";
    if (getpwnam("gpuslice-e2e") == nullptr &&
        system("useradd --no-create-home --shell /bin/sh gpuslice-e2e >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "cannot create user gpuslice-e2e (useradd failed)";
    }
    other_ = static_cast<int>(getpwnam("gpuslice-e2e")->pw_uid);
  }
  int other_ = -1;
};

TEST_F(E2EUsers, JobsRunAsTheCallerAndOnlyTheOwnerOrRootMayCancel) {
  // The socket is group-accessible; let the other user in through its group.
  Daemon d("1xH100-80GB", {"--socket-group", "gpuslice-e2e"});
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  CliResult mine = d.Cli({"run", "--mem", "1GiB", "--", "id", "-u"}, other_);
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(Trim(mine.out), std::to_string(other_));
  CliResult s = d.Cli({"submit", "--mem", "1GiB", "--", "sleep", "60"});  // As root.
  std::string id = Trim(s.out);
  CliResult denied = d.Cli({"cancel", id}, other_);
  EXPECT_EQ(denied.exit_code, 125);
  EXPECT_NE(denied.err.find("belongs to root"), std::string::npos) << denied.err;
  CliResult other_job = d.Cli({"submit", "--mem", "1GiB", "--", "sleep", "60"}, other_);
  std::string oid = Trim(other_job.out);
  EXPECT_EQ(d.Cli({"cancel", oid}).exit_code, 0) << "root may cancel anyone's job";
  EXPECT_EQ(d.Cli({"cancel", id}).exit_code, 0);
  CliResult logs = d.Cli({"logs", id}, other_);
  EXPECT_EQ(logs.exit_code, 125) << "logs are the owner's";
}

}  // namespace
}  // namespace gpuslice::e2e
