// `gpuslice top`: the node at a glance, redrawn every --interval on a
// terminal (docs/USER_VIEWS.md). What is shown is decided by top_view.h; this
// file fetches the data and drives the terminal with plain VT100 sequences
// (alternate screen, cursor home, erase to end of line), which every terminal
// emulator and SSH session understands, so no terminfo is needed.
//
// On a terminal the arrow keys select a job, and c, s, r cancel, suspend or
// resume it after a `y`, through the daemon, which decides whether the user
// may (its owner or an admin).
//
// Not a terminal (a pipe, a file): plain snapshots without escape codes.
// The terminal is always restored: on q, Ctrl-C, SIGTERM and SIGHUP (the
// signals only set a flag through a pipe; the loop restores and exits).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/commands/monitor.h"
#include "cli/view/table.h"
#include "cli/view/top_view.h"
#include "core/units.h"

namespace gpuslice::cli {

using nlohmann::json;

namespace {

struct TopOptions {
  std::string interval = "1s";
  int iterations = 0;  // 0: until quit on a terminal, one snapshot otherwise.
  bool ascii = false;
  bool utf8 = false;
};
TopOptions g_top;

constexpr size_t kEventsShown = 20;
constexpr size_t kQueuedShown = 200;

// The self-pipe the signal handler writes the signal number to.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string LocalTime(int64_t ms) {
  time_t t = static_cast<time_t>(ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// One refresh. A failed status call is an error (nothing else can work); the
// other calls are best effort, so an older daemon still gets a view.
core::Result<TopModel> Fetch(Client& client) {
  auto status = client.Call("GET", "/v1/status");
  if (!status.ok()) return status.status();
  auto gpus = client.Call("GET", "/v1/gpus");
  if (!gpus.ok()) return gpus.status();
  // Every job that holds (or held) a GPU, and the start of the queue: with
  // thousands waiting, a screen shows a few of them anyway.
  auto jobs = client.Call("GET", "/v1/jobs?state=running%2Csuspended&limit=0");
  if (!jobs.ok()) return jobs.status();
  auto queued = client.Call("GET", "/v1/jobs?state=queued&limit=" + std::to_string(kQueuedShown));
  if (!queued.ok()) return queued.status();
  for (json& j : (*queued)["jobs"]) (*jobs)["jobs"].push_back(std::move(j));
  // More wait than the page holds: the view says how many (from status).
  if (queued->contains("next_cursor")) (*jobs)["next_cursor"] = (*queued)["next_cursor"];
  auto events = client.Call("GET", "/v1/events?limit=" + std::to_string(kEventsShown));
  TopModel m = ModelFromJson(*status, *gpus, *jobs, events.ok() ? *events : json());
  m.host = HostName();
  m.now_ms = NowMs();
  m.time_text = LocalTime(m.now_ms);
  return m;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// Snapshots for pipes and files: no escape codes, a blank line between them.
int Snapshots(Context& ctx, int count, int64_t interval_ms, bool utf8) {
  for (int i = 0; i < count; ++i) {
    if (i > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      std::cout << "\n";
    }
    auto m = Fetch(*ctx.client);
    if (!m.ok()) return ReportError(ctx, m.status());
    const char* cols = std::getenv("COLUMNS");
    size_t width = cols && std::atoi(cols) >= 40 ? static_cast<size_t>(std::atoi(cols)) : 100;
    std::cout << Join(RenderTop(*m, {.width = width, .utf8 = utf8, .max_events = 10}))
              << std::flush;
  }
  return 0;
}

// Raw keyboard input and the alternate screen while alive; restores both.
class Screen {
 public:
  Screen() {
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      struct termios raw = saved_;
      // No line buffering or echo, so single keys arrive; ISIG stays on so
      // Ctrl-C is a SIGINT like everywhere else.
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_termios_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    Write("\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  ~Screen() {
    Write("\x1b[0m\x1b[?25h\x1b[?1049l");
    if (restore_termios_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  // False when the terminal is gone (EPIPE, EIO after a hang-up).
  static bool Write(const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = write(STDOUT_FILENO, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  static void Size(size_t* width, size_t* height) {
    struct winsize ws {};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      *width = ws.ws_col;
      *height = ws.ws_row;
    } else {
      *width = 80;
      *height = 24;
    }
  }

 private:
  struct termios saved_ {};
  bool restore_termios_ = false;
};

// Draws a frame: the header, `lines` from `scroll` on, and the key line
// (`notice` instead when there is one); each line erased to its end so
// nothing of the previous frame remains. The selected job's lines are in
// reverse video.
bool Draw(const std::vector<std::string>& lines, const std::vector<uint64_t>& line_jobs,
          uint64_t selected, const std::string& notice, size_t width, size_t height,
          size_t* scroll) {
  size_t body_rows = height > 2 ? height - 2 : 1;
  size_t body = lines.size() > 1 ? lines.size() - 1 : 0;
  size_t max_scroll = body > body_rows ? body - body_rows : 0;
  *scroll = std::min(*scroll, max_scroll);
  std::string out = "\x1b[H";
  std::string head = lines.empty() ? "" : lines[0];
  size_t hw = DisplayWidth(head);
  out += "\x1b[7m" + head + std::string(hw < width ? width - hw : 0, ' ') + "\x1b[0m\r\n";
  for (size_t r = 0; r < body_rows; ++r) {
    size_t i = 1 + *scroll + r;
    if (i < lines.size()) {
      const bool mark = selected != 0 && i < line_jobs.size() && line_jobs[i] == selected;
      out += mark ? "\x1b[7m" + lines[i] + "\x1b[0m" : lines[i];
    }
    out += "\x1b[K\r\n";
  }
  std::string help =
      notice.empty() ? "q quit  j/k select  c cancel  s suspend  r resume  PgUp/PgDn" : notice;
  if (notice.empty() && max_scroll > 0) {
    help += "  lines " + std::to_string(*scroll + 1) + "-" +
            std::to_string(std::min(body, *scroll + body_rows)) + " of " + std::to_string(body);
  }
  out += "\x1b[7m" + Fit(help, width, false) + "\x1b[K\x1b[0m";
  return Screen::Write(out);
}

enum class Key {
  kNone,
  kQuit,
  kUp,
  kDown,
  kPageUp,
  kPageDown,
  kHome,
  kEnd,
  kCancel,
  kSuspend,
  kResume,
  kYes,
  kOther
};

// Keys in `buf` (one read may hold several, or an escape sequence).
std::vector<Key> ParseKeys(const std::string& buf) {
  std::vector<Key> keys;
  for (size_t i = 0; i < buf.size(); ++i) {
    char c = buf[i];
    if (c == 'q' || c == 'Q') {
      keys.push_back(Key::kQuit);
    } else if (c == 'j') {
      keys.push_back(Key::kDown);
    } else if (c == 'k') {
      keys.push_back(Key::kUp);
    } else if (c == ' ') {
      keys.push_back(Key::kPageDown);
    } else if (c == 'g') {
      keys.push_back(Key::kHome);
    } else if (c == 'G') {
      keys.push_back(Key::kEnd);
    } else if (c == 'c') {
      keys.push_back(Key::kCancel);
    } else if (c == 's') {
      keys.push_back(Key::kSuspend);
    } else if (c == 'r') {
      keys.push_back(Key::kResume);
    } else if (c == 'y' || c == 'Y') {
      keys.push_back(Key::kYes);
    } else if (c == '\x1b' && i + 2 < buf.size() && buf[i + 1] == '[') {
      char code = buf[i + 2];
      i += 2;
      if (code == 'A') keys.push_back(Key::kUp);
      if (code == 'B') keys.push_back(Key::kDown);
      if (code == 'H') keys.push_back(Key::kHome);
      if (code == 'F') keys.push_back(Key::kEnd);
      if ((code == '5' || code == '6') && i + 1 < buf.size() && buf[i + 1] == '~') {
        keys.push_back(code == '5' ? Key::kPageUp : Key::kPageDown);
        ++i;
      }
    } else {
      keys.push_back(Key::kOther);
    }
  }
  return keys;
}

// The jobs the view shows, in the order of their first line.
std::vector<uint64_t> JobsInOrder(const std::vector<uint64_t>& line_jobs) {
  std::vector<uint64_t> out;
  for (uint64_t j : line_jobs) {
    if (j != 0 && std::find(out.begin(), out.end(), j) == out.end()) out.push_back(j);
  }
  return out;
}

// An action on the selected job through the daemon, which decides whether
// the caller may (its owner or an admin); the answer, for the key line.
std::string ActOn(Context& ctx, Key action, uint64_t job) {
  const char* verb = action == Key::kCancel    ? "cancel"
                     : action == Key::kSuspend ? "suspend"
                                               : "resume";
  auto r = ctx.client->Call("POST", "/v1/jobs/" + std::to_string(job) + "/" + verb);
  if (!r.ok()) return "job " + std::to_string(job) + ": " + Clean(r.status().message());
  const std::string state = r->value("state", "");
  return "job " + std::to_string(job) + ": " +
         (action == Key::kCancel    ? (state == "running" ? "cancelling" : "cancelled")
          : action == Key::kSuspend ? "suspending"
                                    : "resuming");
}

int Live(Context& ctx, int iterations, int64_t interval_ms, bool utf8) {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return ReportError(ctx, core::InternalError(std::string("pipe: ") + std::strerror(errno)));
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  int exit_code = 0;
  {
    Screen screen;
    TopModel model;
    bool have_model = false;
    size_t scroll = 0;
    uint64_t selected = 0;     // The job the cursor is on (0: none).
    Key pending = Key::kNone;  // An action waiting for its `y`.
    uint64_t pending_job = 0;
    std::string notice;  // Shown on the key line until it expires.
    int64_t notice_until = 0;
    int frames = 0;
    int64_t next_fetch = 0;
    bool quit = false;
    const bool keyboard = isatty(STDIN_FILENO);
    while (!quit) {
      int64_t now = NowMs();
      if (now >= next_fetch) {
        if (iterations > 0 && frames >= iterations) break;
        auto m = Fetch(*ctx.client);
        if (m.ok()) {
          model = std::move(*m);
          have_model = true;
        } else {
          // Keep showing the last good data, and why it is stale.
          if (!have_model) model.host = HostName();
          model.error = m.status().message();
          model.time_text = LocalTime(NowMs());
        }
        ++frames;
        next_fetch = NowMs() + interval_ms;
      }
      size_t width, height;
      Screen::Size(&width, &height);
      std::vector<uint64_t> line_jobs;
      std::vector<std::string> lines = RenderTop(
          model,
          {.width = width, .utf8 = utf8, .max_events = kEventsShown, .selected_job = selected},
          &line_jobs);
      const std::vector<uint64_t> jobs = JobsInOrder(line_jobs);
      if (selected != 0 && std::find(jobs.begin(), jobs.end(), selected) == jobs.end()) {
        selected = 0;  // Ended, or no longer shown.
      }
      if (pending == Key::kNone && NowMs() >= notice_until) notice.clear();
      if (!Draw(lines, line_jobs, selected, notice, width, height, &scroll)) break;
      const size_t body_rows = height > 2 ? height - 2 : 1;
      // Moves the selection by `step` jobs and scrolls to keep it in view.
      auto select = [&](int step) {
        auto at = std::find(jobs.begin(), jobs.end(), selected);
        size_t i = at == jobs.end() ? (step > 0 ? 0 : jobs.size() - 1)
                   : step > 0 ? std::min<size_t>(size_t(at - jobs.begin()) + 1, jobs.size() - 1)
                   : at == jobs.begin() ? 0
                                        : size_t(at - jobs.begin()) - 1;
        selected = jobs[i];
        auto line = std::find(line_jobs.begin(), line_jobs.end(), selected);
        const size_t row = line == line_jobs.end() ? 0 : size_t(line - line_jobs.begin());
        if (row >= 1 && row - 1 < scroll) scroll = row - 1;
        if (row >= 1 && row - 1 >= scroll + body_rows) scroll = row - body_rows;
      };

      // The signal pipe always; the keyboard when stdin is a terminal.
      struct pollfd fds[2] = {{g_signal_pipe[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      int64_t wait_ms = std::max<int64_t>(0, next_fetch - NowMs());
      int n = poll(fds, keyboard ? 2 : 1, static_cast<int>(wait_ms));
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      if (fds[0].revents & POLLIN) {
        unsigned char sig;
        while (read(g_signal_pipe[0], &sig, 1) == 1) {
          if (sig == SIGWINCH) continue;  // Redrawn at the new size next pass.
          quit = true;
          exit_code = sig == SIGINT ? 0 : 128 + sig;
        }
      }
      if (keyboard && (fds[1].revents & (POLLIN | POLLHUP))) {
        char buf[64];
        ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
        if (got == 0 && (fds[1].revents & POLLHUP)) quit = true;  // The terminal is gone.
        size_t page = height > 4 ? height - 3 : 1;
        for (Key k : ParseKeys(std::string(buf, got > 0 ? static_cast<size_t>(got) : 0))) {
          if (pending != Key::kNone) {
            // The answer to "cancel job 12? y/n": anything but y keeps it.
            notice = k == Key::kYes ? ActOn(ctx, pending, pending_job)
                                    : "job " + std::to_string(pending_job) + ": left as it is";
            notice_until = NowMs() + 4000;
            pending = Key::kNone;
            next_fetch = 0;  // Show what changed at once.
            continue;
          }
          switch (k) {
            case Key::kQuit:
              quit = true;
              break;
            case Key::kUp:
              if (!jobs.empty()) {
                select(-1);
              } else {
                scroll = scroll > 0 ? scroll - 1 : 0;
              }
              break;
            case Key::kDown:
              if (!jobs.empty()) {
                select(+1);
              } else {
                ++scroll;
              }
              break;
            case Key::kCancel:
            case Key::kSuspend:
            case Key::kResume:
              if (selected == 0) {
                notice = "select a job first (up/down or j/k)";
                notice_until = NowMs() + 3000;
                break;
              }
              pending = k;
              pending_job = selected;
              notice = std::string(k == Key::kCancel    ? "cancel"
                                   : k == Key::kSuspend ? "suspend"
                                                        : "resume") +
                       " job " + std::to_string(selected) + "? y to confirm, any other key not";
              break;
            case Key::kYes:
            case Key::kOther:
              break;
            case Key::kPageUp:
              scroll = scroll > page ? scroll - page : 0;
              break;
            case Key::kPageDown:
              scroll += page;
              break;
            case Key::kHome:
              scroll = 0;
              break;
            case Key::kEnd:
              scroll = SIZE_MAX / 2;
              break;
            case Key::kNone:
              break;
          }
        }
      }
    }
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) signal(sig, SIG_DFL);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  return exit_code;
}

}  // namespace

void SetupTop(CLI::App* sub, Context*) {
  sub->add_option("-d,--interval", g_top.interval,
                  "Time between refreshes, e.g. 1s (default), 500ms, 5s");
  sub->add_option("-n,--iterations", g_top.iterations,
                  "Refreshes to show, then exit (default: until q on a terminal, 1 otherwise)")
      ->check(CLI::Validator(
          [](std::string& v) {
            // Not CLI::PositiveNumber: its message prints the limits of a double.
            return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos &&
                           v.size() < 10 &&
                           std::stoi(v) >= 1
                       ? std::string()
                       : "'" + v + "': a count of 1 or more (leave -n out to refresh until q)";
          },
          "N>=1"));
  sub->add_flag("--ascii", g_top.ascii, "ASCII bars even when the locale is UTF-8");
  sub->add_flag("--utf8", g_top.utf8, "Block-character bars even when the locale is not UTF-8");
}

int RunTop(Context& ctx) {
  auto interval = core::ParseDuration(g_top.interval);
  if (!interval.ok() || interval->count() < 100) {
    std::cerr << "gpuslice top: --interval: "
              << (interval.ok() ? "at least 100ms" : interval.status().message()) << "\n";
    return kExitUsage;
  }
  bool utf8 = g_top.ascii ? false : (g_top.utf8 || LocaleIsUtf8());
  if (ctx.json) {
    auto m = Fetch(*ctx.client);
    if (!m.ok()) return ReportError(ctx, m.status());
    std::cout << ModelToJson(*m).dump(2) << "\n";
    return 0;
  }
  if (!isatty(STDOUT_FILENO)) {
    return Snapshots(ctx, g_top.iterations > 0 ? g_top.iterations : 1, interval->count(), utf8);
  }
  return Live(ctx, g_top.iterations, interval->count(), utf8);
}

}  // namespace gpuslice::cli
