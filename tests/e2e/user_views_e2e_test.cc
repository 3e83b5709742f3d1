// End-to-end: the user-facing views over the real gpusliced on the
// simulated GPU: `gpuslice top` (plain, --json, and live under a pty),
// `gpuslice usage`, and the status page rendered by headless Chromium.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "harness.h"

namespace gpuslice::e2e {
namespace {

using nlohmann::json;

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

class UserViews : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log"); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "daemon log:\n" << ReadFile(d.dir() + "/daemon.log");
  }

  // Submits a job that holds `mem` of the GPU in a slice for a while; waits
  // until it runs and the daemon has sampled its usage.
  std::string StartWorker(const std::string& name, const std::string& mem = "2GiB") {
    CliResult s = d.Cli({"submit", "--mem", "8GiB", "--compute", "30%", "--name", name, "--",
                         WorkerPath(), "--name", name, "--mem", mem, "--seconds", "60"});
    EXPECT_EQ(s.exit_code, 0) << s.err;
    std::string id = Trim(s.out);
    EXPECT_TRUE(Daemon::WaitFor(
        [&] {
          json j = json::parse(d.Cli({"top", "--json"}).out, nullptr, false);
          if (!j.is_object()) return false;
          for (const json& sl : j["gpus"][0]["slices"]) {
            if (std::to_string(sl["job"].get<uint64_t>()) == id &&
                sl["memory_used_bytes"].is_number() &&
                sl["memory_used_bytes"].get<uint64_t>() > 0) {
              return true;
            }
          }
          return false;
        },
        60))
        << "job " << id << " never showed memory in use";
    return id;
  }

  Daemon d;
};

TEST_F(UserViews, TopPrintsAPlainSnapshotWhenNotATerminal) {
  std::string id = StartWorker("top-plain");
  CliResult queued = d.Cli({"submit", "--mem", "79GiB", "--name", "waiter", "--", "true"});
  ASSERT_EQ(queued.exit_code, 0) << queued.err;
  CliResult r = d.Cli({"top"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "no escape codes into a file";
  for (const char* want :
       {"gpuslice top", "daemon ok", "SIMULATED", "GPU 0", "UTIL", "MEM", "top-plain",
        "QUEUE (1 waiting)", "waiter", "79 GiB", "EVENTS", "submitted"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << "missing '" << want << "' in\n" << r.out;
  }
  EXPECT_NE(r.out.find("    " + id + " "), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, "gpuslice top "), 1u);

  CliResult two = d.Cli({"top", "-n", "2", "--interval", "200ms"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(Count(two.out, "gpuslice top "), 2u) << two.out;
}

TEST_F(UserViews, TopJsonIsOneSnapshotWithTheSliceAndItsUsage) {
  std::string id = StartWorker("top-json", "3GiB");
  CliResult r = d.Cli({"top", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["state"], "ok");
  EXPECT_TRUE(j["simulated"].get<bool>());
  ASSERT_EQ(j["gpus"].size(), 1u);
  ASSERT_EQ(j["gpus"][0]["slices"].size(), 1u);
  const json& s = j["gpus"][0]["slices"][0];
  EXPECT_EQ(std::to_string(s["job"].get<uint64_t>()), id);
  EXPECT_EQ(s["name"], "top-json");
  EXPECT_EQ(s["memory_limit_bytes"], 8ull << 30);
  EXPECT_EQ(s["compute_milli"], 300);
  // The worker holds 3 GiB through the shim, plus its context.
  EXPECT_GE(s["memory_used_bytes"].get<uint64_t>(), 3ull << 30);
  EXPECT_GT(j["gpus"][0]["memory_total_bytes"].get<uint64_t>(), 0u);
}

TEST_F(UserViews, TopFailsClearlyWithoutADaemon) {
  d.Kill(SIGTERM);
  CliResult r = d.Cli({"top"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find(d.socket()), std::string::npos) << r.err;
  CliResult bad = d.Cli({"top", "--interval", "soon"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--interval"), std::string::npos) << bad.err;
}

// `gpuslice top` on a pseudo-terminal, as over SSH.
class Pty {
 public:
  Pty(Daemon& d, std::vector<std::string> args, unsigned short cols, unsigned short rows,
      const std::string& lang = "C.UTF-8") {
    struct winsize ws {};
    ws.ws_col = cols;
    ws.ws_row = rows;
    std::vector<std::string> env;
    for (const std::string& e : d.Env()) {
      if (e.rfind("LC_", 0) != 0 && e.rfind("LANG=", 0) != 0 && e.rfind("TERM=", 0) != 0) {
        env.push_back(e);
      }
    }
    env.push_back("LANG=" + lang);
    env.push_back("TERM=xterm");
    args.insert(args.begin(), GPUSLICE_E2E_CLI);
    pid_ = forkpty(&master_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      std::vector<char*> a, e;
      for (auto& s : args) a.push_back(s.data());
      a.push_back(nullptr);
      for (auto& s : env) e.push_back(s.data());
      e.push_back(nullptr);
      execve(a[0], a.data(), e.data());
      _exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  // Reads what the program drew until `pred(all output)` or the timeout.
  bool ReadUntil(const std::function<bool(const std::string&)>& pred, int timeout_s = 30) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!pred(out_)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      struct pollfd p = {master_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) return pred(out_);  // EIO: the program has exited.
      out_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void Send(const std::string& keys) {
    ASSERT_EQ(write(master_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
  }
  void Resize(unsigned short cols, unsigned short rows) {
    struct winsize ws {};
    ws.ws_col = cols;
    ws.ws_row = rows;
    ioctl(master_, TIOCSWINSZ, &ws);
  }
  // Waits for the exit and returns the exit status (128+signal if killed).
  int Wait(int timeout_s = 30) {
    int status = 0;
    auto drain = [&] {
      char buf[4096];
      struct pollfd p = {master_, POLLIN, 0};
      while (poll(&p, 1, 0) > 0) {
        ssize_t n = read(master_, buf, sizeof buf);
        if (n <= 0) break;
        out_.append(buf, static_cast<size_t>(n));
      }
    };
    bool done = Daemon::WaitFor(
        [&] {
          drain();
          return waitpid(pid_, &status, WNOHANG) == pid_;
        },
        timeout_s);
    if (!done) return -1;
    // What it wrote between the last read and its exit (the terminal's
    // restore sequence, say) is still in the master's buffer: without this,
    // TopRestoresTheTerminalOnCtrlCAndSigterm once missed it.
    drain();
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  bool TerminalIsCooked() {
    struct termios t {};
    if (tcgetattr(master_, &t) != 0) return false;
    return (t.c_lflag & ICANON) && (t.c_lflag & ECHO);
  }
  int pid() const { return pid_; }
  const std::string& out() const { return out_; }

 private:
  int master_ = -1;
  int pid_ = -1;
  std::string out_;
};

constexpr const char* kEnterAltScreen = "\x1b[?1049h";
constexpr const char* kHideCursor = "\x1b[?25l";
constexpr const char* kRestore = "\x1b[?25h\x1b[?1049l";

// The width of each frame's header line (reverse video, padded to the width).
std::vector<size_t> HeaderWidths(const std::string& out) {
  std::vector<size_t> widths;
  const std::string open = "\x1b[7mgpuslice top", close = "\x1b[0m";
  for (size_t at = out.find(open); at != std::string::npos; at = out.find(open, at + 1)) {
    size_t start = at + 4, end = out.find(close, start);
    if (end == std::string::npos) break;
    widths.push_back(end - start);  // The header is ASCII: bytes are columns.
  }
  return widths;
}

TEST_F(UserViews, TopOnATerminalRedrawsFollowsResizesAndRestoresTheTerminalOnQ) {
  StartWorker("top-pty");
  Pty t(d, {"top", "--interval", "200ms"}, 100, 30);
  ASSERT_GT(t.pid(), 0);
  ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return HeaderWidths(o).size() >= 2; }))
      << t.out();
  EXPECT_NE(t.out().find(kEnterAltScreen), std::string::npos);
  EXPECT_NE(t.out().find(kHideCursor), std::string::npos);
  EXPECT_NE(t.out().find("top-pty"), std::string::npos);
  EXPECT_NE(t.out().find("\u2588"), std::string::npos) << "UTF-8 bars under a UTF-8 locale";
  EXPECT_EQ(HeaderWidths(t.out()).back(), 100u);
  EXPECT_FALSE(t.TerminalIsCooked()) << "keys are read one by one while it runs";

  t.Resize(140, 40);
  ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return HeaderWidths(o).back() == 140; }))
      << "redrawn at the new width after SIGWINCH";

  t.Send("q");
  EXPECT_EQ(t.Wait(), 0) << t.out();
  ASSERT_GE(t.out().size(), std::string(kRestore).size());
  EXPECT_EQ(t.out().substr(t.out().size() - std::string(kRestore).size()), kRestore)
      << "cursor shown and alternate screen left, last";
  EXPECT_TRUE(t.TerminalIsCooked()) << "line mode and echo are back";
}

TEST_F(UserViews, TopScrollsWhatDoesNotFitWithTheKeys) {
  // 12 rows: the header, 10 lines of the view, the key line; the view is longer.
  Pty t(d, {"top", "--interval", "200ms"}, 80, 12);
  ASSERT_TRUE(t.ReadUntil([](const std::string& o) {
    return o.find("lines 1-10 of ") != std::string::npos;
  })) << t.out();
  t.Send("j");
  ASSERT_TRUE(t.ReadUntil([](const std::string& o) {
    return o.find("lines 2-11 of ") != std::string::npos;
  })) << t.out();
  t.Send("\x1b[A");  // Up arrow.
  size_t before = Count(t.out(), "lines 1-10 of ");
  ASSERT_TRUE(t.ReadUntil([&](const std::string& o) {
    return Count(o, "lines 1-10 of ") > before;
  })) << t.out();
  t.Send("q");
  EXPECT_EQ(t.Wait(), 0) << t.out();
}

// nvitop users expect to act on what they see.
TEST_F(UserViews, TopCancelsTheSelectedJobOnlyAfterAYes) {
  const std::string id = StartWorker("top-victim");
  Pty t(d, {"top", "--interval", "200ms"}, 120, 40);
  ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return o.find("top-victim") != std::string::npos; }))
      << t.out();
  t.Send("j");  // The first job shown: the only one.
  ASSERT_TRUE(t.ReadUntil([&](const std::string& o) { return o.find("\x1b[7m>") != std::string::npos; }))
      << "the selected job's rows are marked";
  t.Send("c");
  ASSERT_TRUE(t.ReadUntil([&](const std::string& o) {
    return o.find("cancel job " + id + "? y to confirm") != std::string::npos;
  })) << t.out();
  t.Send("n");  // Anything but y leaves it.
  ASSERT_TRUE(t.ReadUntil([&](const std::string& o) {
    return o.find("job " + id + ": left as it is") != std::string::npos;
  })) << t.out();
  EXPECT_EQ(State(d, id), "running");
  t.Send("c");
  t.Send("y");
  ASSERT_TRUE(t.ReadUntil([&](const std::string& o) {
    return o.find("job " + id + ": cancelling") != std::string::npos;
  })) << t.out();
  EXPECT_TRUE(Daemon::WaitFor([&] { return State(d, id) == "cancelled"; }));
  // Each process of a job has its row (pid, user, memory, SM use).
  EXPECT_NE(t.out().find("GPU MEM"), std::string::npos) << t.out();
  t.Send("q");
  EXPECT_EQ(t.Wait(), 0) << t.out();
}

TEST_F(UserViews, TopRestoresTheTerminalOnCtrlCAndSigterm) {
  {
    Pty t(d, {"top", "--interval", "200ms"}, 80, 24);
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return !HeaderWidths(o).empty(); }))
        << t.out();
    t.Send("\x03");  // Ctrl-C through the terminal's line discipline: SIGINT.
    EXPECT_EQ(t.Wait(), 0) << t.out();
    EXPECT_NE(t.out().rfind(kRestore), std::string::npos);
    EXPECT_TRUE(t.TerminalIsCooked());
  }
  {
    Pty t(d, {"top", "--interval", "200ms"}, 80, 24);
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return !HeaderWidths(o).empty(); }));
    kill(t.pid(), SIGTERM);
    EXPECT_EQ(t.Wait(), 128 + SIGTERM) << t.out();
    EXPECT_NE(t.out().rfind(kRestore), std::string::npos);
    EXPECT_TRUE(t.TerminalIsCooked());
  }
}

TEST_F(UserViews, RunInteractiveOnATerminalGivesTheCommandTheTerminal) {
  // run -i on a terminal: the command's process group is the terminal's
  // foreground group, so it may read the terminal (from a background group
  // it would be stopped by SIGTTIN) and Ctrl-C goes to it.
  {
    Pty t(d, {"run", "-i", "--mem", "1GiB", "--", "sh", "-c", "read x; echo got=$x; exit 3"}, 80,
          24);
    t.Send("abc\n");
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return o.find("got=abc") != o.npos; }))
        << t.out();
    EXPECT_EQ(t.Wait(), 3) << t.out();
  }
  {
    Pty t(d,
          {"run", "-i", "--mem", "1GiB", "--", "sh", "-c",
           "trap 'echo got-int; exit 9' INT; echo up; while :; do sleep 0.05; done"},
          80, 24);
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return o.find("up") != o.npos; }))
        << t.out();
    t.Send("\x03");  // Ctrl-C through the line discipline: SIGINT to the foreground group.
    EXPECT_EQ(t.Wait(), 9) << t.out();
    EXPECT_NE(t.out().find("got-int"), std::string::npos) << t.out();
  }
  {
    // Ctrl-Z stops the command; gpuslice takes the terminal back and would
    // stop too, but here no job-control shell is above it (its group is
    // orphaned, so SIGTSTP does not stop it): it continues the command at
    // once, which then reads on. Left stopped, it would never read "two".
    Pty t(d,
          {"run", "-i", "--mem", "1GiB", "--", "sh", "-c",
           "read a; echo got=$a; read b; echo got=$b; exit 5"},
          80, 24);
    t.Send("one\n");
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return o.find("got=one") != o.npos; }))
        << t.out();
    t.Send("\x1a");  // Ctrl-Z: SIGTSTP to the foreground group.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    t.Send("two\n");
    ASSERT_TRUE(t.ReadUntil([](const std::string& o) { return o.find("got=two") != o.npos; }))
        << t.out();
    EXPECT_EQ(t.Wait(), 5) << t.out();
  }
}

TEST_F(UserViews, TopUsesAsciiBarsWithoutAUtf8Locale) {
  // -n 1: one refresh, then it exits by itself.
  Pty c(d, {"top", "--interval", "200ms", "-n", "1"}, 80, 24, "C");
  EXPECT_EQ(c.Wait(), 0) << c.out();
  EXPECT_NE(c.out().find("UTIL ["), std::string::npos) << c.out();
  EXPECT_NE(c.out().find("UTIL [."), std::string::npos) << c.out();
  EXPECT_EQ(c.out().find("\u2591"), std::string::npos);
  Pty a(d, {"top", "--interval", "200ms", "-n", "1", "--ascii"}, 80, 24);
  EXPECT_EQ(a.Wait(), 0) << a.out();
  EXPECT_NE(a.out().find("UTIL [."), std::string::npos) << a.out();
  EXPECT_EQ(a.out().find("\u2591"), std::string::npos);
}

TEST_F(UserViews, UsageReportsGpuHoursOfFinishedJobsInEveryFormat) {
  CliResult run =
      d.Cli({"run", "--mem", "8GiB", "--compute", "50%", "--name", "acct", "--", "sleep", "1.5"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  // Whoever runs the tests owns the job; only root (or the admin group) sees all.
  const std::string me = getpwuid(geteuid())->pw_name;

  CliResult csv = d.Cli({"usage", "--since", "1h", "--by", "job", "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.substr(0, csv.out.find("\r\n")),
            "job,user,name,jobs,gpu_hours,memory_gib_hours,compute_share_hours,idle_hours,"
            "idle_gpu_hours,suspended_hours");
  std::regex row("\r\n1," + me + ",acct,1,([0-9.]+),([0-9.]+),([0-9.]+),");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(csv.out, m, row)) << csv.out;
  // About 1.5 s at half a GPU: 0.0002 GPU-hours; generous bounds for a busy machine.
  double gpu_h = std::stod(m[1]);
  EXPECT_GT(gpu_h, 0.5 * 1.4 / 3600);
  EXPECT_LT(gpu_h, 0.5 * 30 / 3600);
  EXPECT_NEAR(std::stod(m[2]) / gpu_h, 16.0, 0.5) << "8 GiB per half GPU";

  CliResult js = d.Cli({"usage", "--since", "2020-01-01", "--format", "json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  json j = json::parse(js.out);
  EXPECT_EQ(j["by"], "user");
  EXPECT_EQ(j["scope"], geteuid() == 0 ? "all" : "own");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["key"], me);
  EXPECT_EQ(j["total"]["jobs"], 1);

  CliResult table = d.Cli({"usage"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("Usage by user from "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("GPU-H"), std::string::npos);
  EXPECT_NE(table.out.find("\n" + me + " "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\nTOTAL "), std::string::npos) << table.out;
}

TEST(UserViewsUsers, UsageShowsOthersOnlyTheirOwnJobs) {
  if (geteuid() != 0) GTEST_SKIP() << "the two-user test needs root (CI runs as root)";
  if (getpwnam("gpuslice-e2e") == nullptr &&
      system("useradd --no-create-home --shell /bin/sh gpuslice-e2e >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "cannot create user gpuslice-e2e (useradd failed)";
  }
  int other = static_cast<int>(getpwnam("gpuslice-e2e")->pw_uid);
  Daemon d("1xH100-80GB", {"--socket-group", "gpuslice-e2e"});
  ASSERT_TRUE(d.Start()) << ReadFile(d.dir() + "/daemon.log");
  ASSERT_EQ(d.Cli({"run", "--mem", "1GiB", "--", "true"}).exit_code, 0);
  CliResult theirs = d.Cli({"run", "--mem", "1GiB", "--", "true"}, other);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.err;

  CliResult mine = d.Cli({"usage", "--since", "1h"}, other);
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out.find("\nroot "), std::string::npos) << mine.out;
  EXPECT_NE(mine.out.find("\ngpuslice-e2e "), std::string::npos) << mine.out;
  EXPECT_NE(mine.out.find("your jobs only"), std::string::npos) << mine.out;

  CliResult all = d.Cli({"usage", "--since", "1h"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("\nroot "), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("\ngpuslice-e2e "), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("your jobs only"), std::string::npos) << all.out;
}

TEST_F(UserViews, UsageNamesBadInput) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"usage", "--since", "7x"}, "'7x'"},
      {{"usage", "--since", "2026-13-01"}, "month 13"},
      {{"usage", "--since", "1h", "--until", "2h"}, "not before"},
      {{"usage", "--by", "team"}, "'team'"},
      {{"usage", "--format", "xml"}, "'xml'"},
  };
  for (const Case& c : cases) {
    CliResult r = d.Cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[1] << " " << c.args[2];
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

// The status page in a real browser: the daemon serves it on its metrics
// listener; Chromium runs the page's script and dumps the resulting DOM.
TEST(StatusPage, RendersInHeadlessChromiumWithHostileNamesEscaped) {
  if (access(GPUSLICE_E2E_CHROMIUM, X_OK) != 0) {
    GTEST_SKIP() << "no Chromium at '" GPUSLICE_E2E_CHROMIUM "' (Debian package chromium)";
  }
  Daemon d("1xH100-80GB", {"--metrics-listen", "127.0.0.1:0"});
  if (!d.Start()) {
    std::string log = ReadFile(d.dir() + "/daemon.log");
    if (log.find("--metrics-listen") != std::string::npos) {
      GTEST_SKIP() << "this gpusliced has no --metrics-listen listener yet: " << log;
    }
    FAIL() << log;
  }
  std::string addr_file = d.state_dir() + "/metrics.addr";
  if (!Daemon::WaitFor([&] { return !Trim(ReadFile(addr_file)).empty(); }, 10)) {
    GTEST_SKIP() << "the daemon wrote no " << addr_file
                 << " (its --metrics-listen listener is not there yet)";
  }
  std::string addr = Trim(ReadFile(addr_file));

  const std::string hostile_name = "<b>hostile<i>name";
  CliResult s =
      d.Cli({"submit", "--mem", "4GiB", "--compute", "25%", "--name", hostile_name, "--", "sh",
             "-c", "echo '<script>document.title=1</script>' >/dev/null; sleep 60"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::string id = Trim(s.out);

  std::string profile = d.dir() + "/chromium-profile";
  CliResult dom;
  std::vector<std::string> argv = {GPUSLICE_E2E_CHROMIUM,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--no-first-run",
                                   "--user-data-dir=" + profile,
                                   "--virtual-time-budget=5000",
                                   "--dump-dom",
                                   "http://" + addr + "/status"};
  {
    std::string out = d.dir() + "/dom.html", err = d.dir() + "/chromium.err";
    pid_t pid = fork();
    if (pid == 0) {
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      setenv("HOME", d.dir().c_str(), 1);
      std::vector<char*> a;
      for (auto& x : argv) a.push_back(x.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    int status = 0;
    bool done = Daemon::WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; }, 90);
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    ASSERT_TRUE(done) << "chromium did not finish: " << ReadFile(err);
    dom.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    dom.out = ReadFile(out);
    dom.err = ReadFile(err);
  }
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  const std::string& html = dom.out;
  // The script ran (the server's page says "loading" until it does).
  EXPECT_NE(html.find("daemon ok"), std::string::npos) << html;
  EXPECT_NE(html.find("GPU 0"), std::string::npos) << html;
  EXPECT_NE(html.find("H100"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>" + id + "</td>"), std::string::npos) << html;
  // The hostile name and command are text, not elements.
  EXPECT_NE(html.find("&lt;b&gt;hostile&lt;i&gt;name"), std::string::npos) << html;
  EXPECT_NE(html.find("&lt;script&gt;document.title=1&lt;/script&gt;"), std::string::npos) << html;
  EXPECT_EQ(html.find("<b>hostile"), std::string::npos) << html;
  EXPECT_EQ(html.find("<i>name"), std::string::npos) << html;
  EXPECT_EQ(html.find("<script>document.title"), std::string::npos) << html;
  EXPECT_NE(html.find("<title>gpuslice status</title>"), std::string::npos)
      << "the injected script did not run";
  d.Cli({"cancel", id});
}

}  // namespace
}  // namespace gpuslice::e2e
