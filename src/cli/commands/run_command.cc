// `gpuslice run`, `gpuslice shell` and `gpuslice logs`: the commands that
// wait on a job and move its output. Output is polled from the daemon's log
// endpoint (a few requests per second per stream when idle), so it works the
// same for jobs started minutes ago and for jobs that just started.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string_view>
#include <thread>

#include "cli/commands/commands.h"
#include "cli/view/table.h"

namespace gpuslice::cli {

using nlohmann::json;

namespace {

volatile sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

// SIGINT/SIGTERM set a flag instead of killing the CLI, so it can cancel the
// job and still report how it ended.
void CatchInterrupts() {
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

bool IsTerminal(const std::string& state) { return state != "queued" && state != "running"; }

void WriteFd(int fd, const std::string& data) {
  const char* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The exit code `gpuslice run` ends with, from the job's final record.
int ExitCodeOf(const json& job) {
  std::string state = job["state"];
  int code = job.value("exit_code", -1);
  if (code >= 0) return code;
  if (state == "cancelled") return 130;
  if (state == "timed_out") return 124;
  return kExitDaemonError;
}

// Waits while the job is queued, telling the user why. Returns the job once
// it runs or ended; cancels it on Ctrl-C.
core::Result<json> WaitForStart(Context& ctx, uint64_t id) {
  std::string target = "/v1/jobs/" + std::to_string(id);
  std::string last_note;
  bool cancel_sent = false;
  while (true) {
    if (g_interrupted && !cancel_sent) {
      cancel_sent = true;
      (void)ctx.client->Call("POST", target + "/cancel");
    }
    GPUSLICE_ASSIGN_OR_RETURN(json job, ctx.client->Call("GET", target));
    if (job["state"] != "queued") return job;
    std::string note = "gpuslice: job " + std::to_string(id) + " queued (position " +
                       std::to_string(job.value("queue_position", 0)) +
                       "): " + job.value("waiting_for", std::string("waiting"));
    if (note != last_note && !ctx.json) std::cerr << Shown(note) << "\n";
    last_note = note;
    Sleep(100);
  }
}

// Whether `chunk`, read from stream offset `asked`, begins with the note a
// trimmed log starts with ("gpuslice: N bytes of older output dropped\n")
// for bytes this reader had not read (N > asked): output it skipped.
bool DroppedNoteAtStart(const std::string& chunk, uint64_t asked) {
  constexpr std::string_view kHead = "gpuslice: ", kTail = " bytes of older output dropped\n";
  if (chunk.compare(0, kHead.size(), kHead) != 0) return false;
  size_t i = kHead.size();
  uint64_t n = 0;
  const size_t digits = i;
  while (i < chunk.size() && i - digits < 20 && chunk[i] >= '0' && chunk[i] <= '9') {
    n = n * 10 + static_cast<uint64_t>(chunk[i++] - '0');
  }
  return i > digits && chunk.compare(i, kTail.size(), kTail) == 0 && n > asked;
}

}  // namespace

int FollowLogs(Context& ctx, uint64_t id, bool follow, bool for_run, int* exit_code) {
  std::string base = "/v1/jobs/" + std::to_string(id) + "/logs?stream=";
  const char* streams[2] = {"stdout", "stderr"};
  uint64_t offset[2] = {0, 0};
  // Whether the last byte shown of each stream ended a line: a chunk that
  // begins with the daemon's note on dropped output (the log was trimmed
  // while this reader was behind, docs/DAEMON.md) starts on a line of its
  // own, not glued to the part of a line shown before the gap.
  bool at_line_start[2] = {true, true};
  std::string collected[2];  // For --json.
  bool cancel_sent = false;
  std::string state;
  int code = -1;
  bool saw_end = false;
  while (true) {
    if (g_interrupted) {
      if (!for_run) return 130;
      if (!cancel_sent) {
        cancel_sent = true;
        (void)ctx.client->Call("POST", "/v1/jobs/" + std::to_string(id) + "/cancel");
      }
    }
    bool got = false;
    for (int s = 0; s < 2; ++s) {
      auto r = ctx.client->Raw("GET", base + streams[s] + "&offset=" + std::to_string(offset[s]));
      if (!r.ok()) return ReportError(ctx, r.status());
      if (r->status != 200) return ReportError(ctx, ErrorFromResponse(*r));
      const uint64_t asked = offset[s];
      offset[s] = std::stoull(r->headers["x-gpuslice-next-offset"]);
      state = r->headers["x-gpuslice-job-state"];
      code = std::stoi(r->headers["x-gpuslice-exit-code"]);
      if (!r->body.empty()) {
        got = true;
        const bool gap = !at_line_start[s] && DroppedNoteAtStart(r->body, asked);
        if (ctx.json && !for_run) {
          if (gap) collected[s] += '\n';
          collected[s] += r->body;
        } else {
          if (gap) WriteFd(s == 0 ? 1 : 2, "\n");
          WriteFd(s == 0 ? 1 : 2, r->body);
        }
        at_line_start[s] = r->body.back() == '\n';
      }
    }
    if (got) continue;
    // Ended and drained: one more empty pass after seeing the end, so output
    // written just before the end is not lost.
    if (IsTerminal(state)) {
      if (saw_end) break;
      saw_end = true;
      continue;
    }
    if (!follow) break;
    Sleep(50);
  }
  *exit_code = code;
  if (ctx.json && !for_run) {
    std::cout << json{{"id", id},
                      {"stdout", collected[0]},
                      {"stderr", collected[1]},
                      {"state", state},
                      {"exit_code", code}}
                     .dump(2)
              << "\n";
  }
  return 0;
}

int RunJob(Context& ctx, const std::string& mode) {
  if (core::Status s = CheckRequest(ctx.request); !s.ok()) return UsageError(ctx, s);
  if (ctx.request.interactive) {
    if (ctx.request.restartable) {
      return UsageError(ctx, core::InvalidArgumentError(
                                 "--restartable: a command run here (-i) cannot be restarted "
                                 "by the daemon; drop -i or --restartable"));
    }
    return AttachedJob(ctx, ctx.request.command);
  }
  CatchInterrupts();
  json body = SubmitBody(ctx.request, mode);
  auto job = ctx.client->Call("POST", "/v1/jobs", &body);
  if (!job.ok()) return ReportError(ctx, job.status());
  uint64_t id = (*job)["id"];
  auto started = WaitForStart(ctx, id);
  if (!started.ok()) return ReportError(ctx, started.status());
  int code = -1;
  int rc = FollowLogs(ctx, id, /*follow=*/true, /*for_run=*/true, &code);
  if (rc != 0) return rc;
  auto final_job = ctx.client->Call("GET", "/v1/jobs/" + std::to_string(id));
  if (!final_job.ok()) return ReportError(ctx, final_job.status());
  const json& f = *final_job;
  std::string state = f["state"];
  if (ctx.json) {
    std::cerr << f.dump() << "\n";
  } else if (state != "exited") {
    std::string reason = f.value("reason", "");
    std::cerr << "gpuslice: job " << id << " " << Shown(state)
              << (reason.empty() ? "" : ": " + Shown(reason)) << "\n";
  }
  return ExitCodeOf(f);
}

int ShellJob(Context& ctx) { return AttachedJob(ctx, {}); }

namespace {

// The attached command's process group, for the signal handler below.
volatile sig_atomic_t g_child_group = 0;

// SIGINT, SIGTERM and SIGHUP that reach gpuslice go on to the command's
// group (when stdin is not a terminal, Ctrl-C reaches gpuslice, not it).
void ForwardSignal(int sig) {
  if (g_child_group > 0) kill(-static_cast<pid_t>(g_child_group), sig);
}

void ForwardSignals() {
  struct sigaction sa = {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

// Makes `group` the terminal's foreground group (SIGTTOU ignored meanwhile:
// the caller may be in a background group).
void GiveTerminal(int tty, pid_t group) {
  struct sigaction ignore = {}, old = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGTTOU, &ignore, &old);
  (void)tcsetpgrp(tty, group);
  sigaction(SIGTTOU, &old, nullptr);
}

}  // namespace

int AttachedJob(Context& ctx, const std::vector<std::string>& command) {
  CatchInterrupts();
  const bool shell = command.empty();
  RequestOptions request = ctx.request;
  request.command = command;
  if (core::Status s = CheckRequest(request); !s.ok()) return UsageError(ctx, s);
  json body = SubmitBody(request, "shell");
  auto job = ctx.client->Call("POST", "/v1/jobs", &body);
  if (!job.ok()) return ReportError(ctx, job.status());
  uint64_t id = (*job)["id"];
  std::string target = "/v1/jobs/" + std::to_string(id);
  auto started = WaitForStart(ctx, id);
  if (!started.ok()) return ReportError(ctx, started.status());
  if ((*started)["state"] != "running") return ExitCodeOf(*started);
  std::vector<std::string> env = (*started).value("env", std::vector<std::string>());
  const char* shell_env = getenv("SHELL");
  std::vector<std::string> argv = command;
  if (shell) argv = {shell_env && *shell_env ? shell_env : "/bin/bash"};
  if (!ctx.json && shell) {
    std::cerr << "gpuslice: job " << id << ": shell in slice "
              << (*started)["request"]["describe"].get<std::string>() << " on "
              << (*started)["allocation"]["gpu_uuids"][0].get<std::string>()
              << " (exit the shell to release it)\n";
  }
  // A command gets its own process group (the daemon signals the group to
  // end it), in the terminal's foreground when stdin is one; an interactive
  // shell does its own job control.
  const int tty = !shell && isatty(STDIN_FILENO) ? STDIN_FILENO : -1;
  // The child waits for a go from this process before it runs anything: the
  // daemon first puts it in the job's cgroup (attach), so that nothing it
  // forks, setsid or not, can leave the job. EOF instead of the go (the
  // daemon refused it, or this process died): it never runs the command.
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) return ReportError(ctx, core::InternalError("pipe failed"));
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char byte = 0;
    ssize_t r;
    while ((r = read(go[0], &byte, 1)) < 0 && errno == EINTR) {
    }
    if (r != 1) _exit(126);
    close(go[0]);
    if (!shell) {
      setpgid(0, 0);
      if (tty >= 0) GiveTerminal(tty, getpid());
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    // execvpe: the command is looked up in the caller's PATH.
    execvpe(args[0], args.data(), envp.data());
    const int err = errno;
    std::fprintf(stderr, "gpuslice: %s: %s\n", args[0], std::strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  close(go[0]);
  if (pid < 0) {
    close(go[1]);
    return ReportError(ctx, core::InternalError("fork failed"));
  }
  if (!shell) {
    setpgid(pid, pid);  // Also here: whichever runs first.
    g_child_group = pid;
    ForwardSignals();
  }
  json attach = {{"pid", pid}};
  auto a = ctx.client->Call("POST", target + "/attach", &attach);
  if (!a.ok()) {
    // Not tracked by the daemon, the command must not run: it would hold
    // the slice's GPU outside the job. The child exits on EOF.
    close(go[1]);
    int ignored = 0;
    while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    json body = {{"exit_code", 126}};
    (void)ctx.client->Call("POST", target + "/exit", &body);
    return ReportError(
        ctx, core::Status(a.status().code(), "the daemon did not take the command into job " +
                                                 std::to_string(id) + ": " + a.status().message()));
  }
  (void)!write(go[1], "g", 1);
  close(go[1]);
  if (shell) {
    // The shell owns the terminal now: Ctrl-C is its business, not ours.
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
  }
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, tty >= 0 ? WUNTRACED : 0) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (!WIFSTOPPED(status)) break;
    // Ctrl-Z (or a read from the terminal in the background) stopped the
    // command: take the terminal back and stop as well, so that the user's
    // shell gets it; `fg` continues us, and we continue the command in the
    // foreground again. (A process group without a job-control shell above
    // it is not stopped by SIGTSTP: then the command simply goes on.)
    GiveTerminal(tty, getpgrp());
    raise(SIGTSTP);
    if (tcgetpgrp(tty) == getpgrp()) GiveTerminal(tty, pid);
    kill(-pid, SIGCONT);
  }
  if (tty >= 0) GiveTerminal(tty, getpgrp());
  g_child_group = 0;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  json exit_body = {{"exit_code", code}};
  (void)ctx.client->Call("POST", target + "/exit", &exit_body);
  return code;
}

}  // namespace gpuslice::cli
