// gpuslice-attacker: entry point, command-line flags and the small helpers
// the subcommands share. See attacker.h.

#include "attacker.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "core/units.h"

namespace gpuslice::security {

Flags::Flags(int argc, char** argv, int first, const std::vector<std::string>& booleans) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) Die("unexpected argument '" + a + "'");
    std::string key = a.substr(2);
    if (std::find(booleans.begin(), booleans.end(), key) != booleans.end()) {
      values_.emplace(key, "1");
      continue;
    }
    if (i + 1 >= argc) Die("missing value after " + a);
    values_.emplace(key, argv[++i]);
  }
}

std::string Flags::Get(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::vector<std::string> Flags::GetAll(const std::string& key) const {
  std::vector<std::string> out;
  auto [b, e] = values_.equal_range(key);
  for (auto it = b; it != e; ++it) out.push_back(it->second);
  return out;
}

double Flags::GetDouble(const std::string& key, double fallback) const {
  return Has(key) ? std::atof(Get(key).c_str()) : fallback;
}

uint64_t Flags::GetBytes(const std::string& key, uint64_t fallback) const {
  if (!Has(key)) return fallback;
  std::string v = Get(key);
  if (v == "unlimited") return ~0ull;
  auto r = core::ParseBytes(v);
  if (!r.ok()) Die("--" + key + ": " + r.status().message());
  return *r;
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1'000'000;
}

void AppendLine(const std::string& path, const std::string& line) {
  if (path.empty()) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return;
  }
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  // The test's drop directory is shared; the file must stay readable by it
  // and writable by this user's other processes whatever the umask.
  fchmod(fd, 0666);
  std::string l = line + "\n";
  ssize_t n = write(fd, l.data(), l.size());
  (void)n;
  close(fd);
}

void Die(const std::string& what) {
  std::fprintf(stderr, "gpuslice-attacker: %s\n", what.c_str());
  std::exit(2);
}

bool WaitForFile(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace gpuslice::security

namespace {

struct Command {
  const char* name;
  int (*run)(const gpuslice::security::Flags&);
  std::vector<std::string> booleans;
  const char* help;
};

const std::vector<Command>& Commands() {
  namespace s = gpuslice::security;
  static const std::vector<Command> kCommands = {
      {"scribble",
       s::Scribble,
       {"unpause", "starve", "zero-used", "random-all", "hide-gpu-time"},
       "--root DIR... [--shared-root DIR...] [--exclude PATH...] [--limit SIZE] [--own-share "
       "MILLI] "
       "[--unpause] [--starve] [--zero-used] [--hide-gpu-time] [--subst64 OLD=NEW...] [--subst32 "
       "OLD=NEW...] "
       "[--random N] [--random-all] [--seconds S] [--interval-ms MS|--interval-us US] [--wait-file "
       "F] [--report F]"},
      {"grep", s::Grep, {}, "--root DIR... --needle S [--report F]"},
      {"truncate-loop", s::TruncateLoop, {}, "[--file F] [--seconds S] [--report F]"},
      {"alloc",
       s::Alloc,
       {},
       "--bytes SIZE [--hold S] [--device N] [--then-wait-file F [--then-bytes SIZE]] [--out F]"},
      {"ask-resume",
       s::AskResume,
       {"private"},
       "[--state DIR] [--ids N] [--threads N] [--seconds S] [--private] [--out F]"},
      {"unsuspend", s::Unsuspend, {}, "--pid P [--out F]"},
      {"setsid-hold",
       s::SetsidHold,
       {"unset-preload", "double-fork"},
       "--bytes SIZE [--hold S] --out F [--unset-preload] [--double-fork]"},
      {"swarm", s::Swarm, {}, "--procs N --bytes SIZE [--hold S] [--device N] --out F"},
      {"work",
       s::Work,
       {"private-driver"},
       "[--seconds S] [--kernel-us US] [--batch N] [--think-us US] [--mem SIZE] [--wait-file F] "
       "[--delay-ms MS] [--private-driver] "
       "--out F"},
      {"http",
       s::Http,
       {},
       "--to unix:PATH|tcp:HOST:PORT [--method M] --path P [--body S] "
       "[--token-file F]"},
      {"submit",
       s::Submit,
       {"stop-at-refusal"},
       "--to EP [--count N] [--mem SIZE] [--gpus N] [--env K=V...] "
       "[--env-bytes N] [--mode submit|shell] [--argv A...] [--cwd DIR]"},
      {"flood", s::Flood, {}, "--to EP --count N [--hold S] [--half-sent-every K] [--out F]"},
      {"hand-over",
       s::HandOver,
       {},
       "--to EP --go F --out F [--method M] [--path P] [--body S] [--wait S]"},
      {"latency",
       s::Latency,
       {},
       "--to EP --path P [--count N] [--token-file F] [--timeout-ms T] [--max-failures N]"},
  };
  return kCommands;
}

}  // namespace

int main(int argc, char** argv) {
  // A server closing a connection mid-write is an answer, not a crash.
  signal(SIGPIPE, SIG_IGN);
  std::string name = argc > 1 ? argv[1] : "";
  for (const Command& c : Commands()) {
    if (name == c.name) return c.run(gpuslice::security::Flags(argc, argv, 2, c.booleans));
  }
  std::fprintf(stderr, "usage: gpuslice-attacker COMMAND [FLAGS]\n");
  for (const Command& c : Commands()) std::fprintf(stderr, "  %s %s\n", c.name, c.help);
  return 2;
}
