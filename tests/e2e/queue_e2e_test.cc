// The queue as Slurm users and admins use it: lists filtered and
// paged by the daemon, summaries, hold/release/update, jobs by name, HEAD,
// and a restart after a pool change that keeps the running jobs.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string Submit(Daemon& d, const std::vector<std::string>& args) {
  std::vector<std::string> full = {"submit"};
  full.insert(full.end(), args.begin(), args.end());
  CliResult r = d.Cli(full);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Trim(r.out);
}

// The one GPU held by a job that sleeps, so what follows waits.
std::string Holder(Daemon& d, const std::string& gpus = "1") {
  std::string id = Submit(d, {"--gpus", gpus, "--name", "holder", "--", "sleep", "600"});
  EXPECT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; })) << id;
  return id;
}

TEST(QueueE2E, AHeldJobWaitsUntilReleasedAndUpdateChangesAQueuedOne) {
  Daemon d;
  ASSERT_TRUE(d.Start());
  const std::string holder = Holder(d);
  const std::string id = Submit(d, {"--mem", "8GiB", "--name", "w", "--", "true"});
  ASSERT_EQ(State(d, id), "queued");
  CliResult hold = d.Cli({"hold", id});
  ASSERT_EQ(hold.exit_code, 0) << hold.err;
  EXPECT_NE(hold.out.find("job " + id + ": held"), std::string::npos) << hold.out;
  EXPECT_EQ(Job(d, id).value("hold", ""), "user");
  EXPECT_NE(d.Cli({"ps"}).out.find("held (gpuslice release " + id + ")"), std::string::npos);
  CliResult update = d.Cli({"update", id, "--mem", "16GiB", "--priority", "high"});
  ASSERT_EQ(update.exit_code, 0) << update.err;
  json job = Job(d, id);
  EXPECT_EQ(job["request"].value("memory_bytes", uint64_t{0}), 16ull << 30);
  EXPECT_EQ(job["request"].value("priority", ""), "high");
  CliResult running = d.Cli({"update", holder, "--priority", "low"});
  EXPECT_EQ(running.exit_code, 125);
  EXPECT_NE(running.err.find("gpuslice resize"), std::string::npos) << running.err;
  CliResult bad = d.Cli({"update", id, "--mem", "8"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  // Room frees, but the job is held.
  ASSERT_EQ(d.Cli({"cancel", holder}).exit_code, 0);
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, holder) == "cancelled"; }));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(State(d, id), "queued");
    usleep(100'000);
  }
  CliResult release = d.Cli({"release", id});
  ASSERT_EQ(release.exit_code, 0) << release.err;
  EXPECT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "exited"; })) << State(d, id);
  EXPECT_TRUE(HasEvent(d, id, "held"));
  EXPECT_TRUE(HasEvent(d, id, "released"));
  EXPECT_TRUE(HasEvent(d, id, "updated", "8 GiB -> 16 GiB"));
}

TEST(QueueE2E, ANamePicksJobsForPsShowAndCancel) {
  Daemon d;
  ASSERT_TRUE(d.Start());
  Holder(d);
  CliResult array =
      d.Cli({"submit", "--array", "1-3", "--name", "sweep", "--mem", "1GiB", "--", "true"});
  ASSERT_EQ(array.exit_code, 0) << array.err;
  const std::string other = Submit(d, {"--name", "other", "--mem", "1GiB", "--", "true"});
  CliResult ps = d.Cli({"ps", "--name", "sweep", "-o", "id,name,state"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  ASSERT_EQ(Lines(ps.out).size(), 4u) << ps.out;
  EXPECT_EQ(Lines(ps.out)[0], "ID  NAME      STATE") << ps.out;
  CliResult show = d.Cli({"show", "--name", "other"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  bool id_line = false;
  for (const std::string& line : Lines(show.out)) {
    id_line = id_line || (line.rfind("id ", 0) == 0 && Trim(line).size() >= other.size() &&
                          Trim(line).substr(Trim(line).size() - other.size()) == other);
  }
  EXPECT_TRUE(id_line) << show.out;
  CliResult several = d.Cli({"show", "--name", "sweep"});
  EXPECT_EQ(several.exit_code, 2);
  EXPECT_NE(several.err.find("several jobs are named 'sweep'"), std::string::npos) << several.err;
  CliResult cancel = d.Cli({"cancel", "--name", "sweep"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(Lines(cancel.out).size(), 3u) << cancel.out;
  for (const std::string& id : Lines(array.out)) EXPECT_EQ(State(d, Trim(id)), "cancelled");
  EXPECT_EQ(State(d, other), "queued");
}

TEST(QueueE2E, PsShowsAPageByDefaultAndASummaryCollapsesTheArray) {
  Daemon d;
  ASSERT_TRUE(d.Start());
  Holder(d);
  CliResult array = d.Cli(
      {"submit", "--array", "0-149", "--name", "big", "--mem", "1GiB", "--", "true"}, -1, 300);
  ASSERT_EQ(array.exit_code, 0) << array.err;
  CliResult ps = d.Cli({"ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_EQ(Lines(ps.out).size(), 101u) << "the header and the first 100 jobs";
  EXPECT_NE(ps.err.find("the first 100 jobs shown"), std::string::npos) << ps.err;
  EXPECT_EQ(Lines(d.Cli({"ps", "-n", "0"}).out).size(), 152u);
  json page = json::parse(d.Cli({"ps", "--json", "--limit", "10"}).out);
  EXPECT_EQ(page["jobs"].size(), 10u);
  EXPECT_TRUE(page.contains("next_cursor"));
  CliResult summary = d.Cli({"ps", "--summary"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  EXPECT_NE(summary.out.find("queued 150  running 1  (151 jobs)"), std::string::npos)
      << summary.out;
  EXPECT_NE(summary.out.find("big[0-149]"), std::string::npos) << summary.out;
  EXPECT_LE(Lines(summary.out).size(), 6u) << summary.out;
}

// `HEAD /status` answers as GET does, not 404.
TEST(QueueE2E, HeadOfTheStatusPageIsItsGetWithoutTheBody) {
  Daemon d;
  ASSERT_TRUE(d.Start());
  for (const char* path : {"/status", "/v1/status"}) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", d.socket().c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string req =
        std::string("HEAD ") + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    close(fd);
    EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << path << ":\n" << reply;
    const size_t end = reply.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << reply;
    EXPECT_EQ(end + 4, reply.size()) << "no body after the headers";
    EXPECT_EQ(reply.find("Content-Length: 0\r\n"), std::string::npos) << reply;
  }
}

// `gpusliced ARGS` with the daemon's environment; its output and exit code.
CliResult Gpusliced(Daemon& d, const std::vector<std::string>& args) {
  const std::string out = d.dir() + "/gpusliced.out";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> argv = {GPUSLICE_E2E_DAEMON};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> a, e;
    for (std::string& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    std::vector<std::string> env = d.Env();
    for (std::string& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  return r;
}

// Changing pools and restarting the daemon must not kill a running 2-GPU
// job ("allocation could not be restored after a restart: GPU 2 of node
// 'local0' is a model the demand does not allow").
TEST(QueueE2E, ARestartAfterAPoolChangeKeepsTheRunningTwoGpuJobFlagged) {
  Daemon d("4xH100-80GB", {"--set", "pool.train=1,2"});
  ASSERT_TRUE(d.Start());
  const std::string id =
      Submit(d, {"--gpus", "2", "--pool", "train", "--name", "big", "--", "sleep", "600"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "running"; }));
  json before = Job(d, id);
  ASSERT_EQ(before["allocation"]["gpu_indices"], json({1, 2})) << before.dump();
  const int64_t pid = before.value("pid", int64_t{0});
  ASSERT_GT(pid, 0);

  // GPU 2 moves to another pool.
  const std::string conf = d.dir() + "/new.conf";
  std::ofstream(conf) << "pool.train = 1\npool.infer = 2,3\n";
  const std::vector<std::string> flags = {"--state-dir",   d.state_dir(),
                                          "--socket",      d.socket(),
                                          "--shim",        GPUSLICE_E2E_SHIM,
                                          "--sim-lib-dir", GPUSLICE_E2E_SIM_DIR,
                                          "--set",         "kill_grace=2s",
                                          "--set",         "cgroup_base=" + d.cgroup_base(),
                                          "--set",         "cdi_dir=" + d.dir() + "/cdi"};
  std::vector<std::string> check = {"--check-config", conf};
  check.insert(check.end(), flags.begin(), flags.end());
  CliResult report = Gpusliced(d, check);
  EXPECT_EQ(report.exit_code, 0) << report.out;
  EXPECT_NE(report.out.find("ends none of them"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("job " + id + " "), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("GPU 2 would be in pool 'infer'"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("flagged outside_pool"), std::string::npos) << report.out;
  // A configuration the daemon would refuse is said so, with its line.
  const std::string broken = d.dir() + "/broken.conf";
  std::ofstream(broken) << "pool.train = 1\npool.infer = 1\n";
  check[1] = broken;
  CliResult refused = Gpusliced(d, check);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("GPU 1 is in two pools"), std::string::npos) << refused.out;

  d.Kill(SIGTERM);
  d.set_extra_args({"--config", conf});
  ASSERT_TRUE(d.Start());
  json after = Job(d, id);
  EXPECT_EQ(after.value("state", ""), "running") << after.dump();
  EXPECT_EQ(after.value("pid", int64_t{0}), pid);
  EXPECT_EQ(kill(static_cast<pid_t>(pid), 0), 0) << "its processes live on";
  const json flags_after = after.value("flags", json::array());
  EXPECT_NE(std::find(flags_after.begin(), flags_after.end(), "outside_pool"), flags_after.end())
      << after.dump();
  EXPECT_TRUE(HasEvent(d, id, "outside_pool", "GPU 2 is in pool 'infer'"));
  EXPECT_NE(d.Cli({"ps"}).out.find("outside_pool"), std::string::npos);
  // Its GPUs take no new work of its pool, and the new pool gets the free one.
  const std::string infer = Submit(d, {"--gpus", "1", "--pool", "infer", "--", "sleep", "600"});
  ASSERT_TRUE(Daemon::WaitFor([&] { return State(d, infer) == "running"; }));
  EXPECT_EQ(Job(d, infer)["allocation"]["gpu_indices"], json({3}));
  const std::string train = Submit(d, {"--gpus", "1", "--pool", "train", "--", "true"});
  EXPECT_EQ(State(d, train), "queued");
  EXPECT_EQ(d.Cli({"cancel", id, infer, train}).exit_code, 0);
}

}  // namespace
}  // namespace gpuslice::e2e
