// gpuslice-attacker ask-resume: resume on demand (docs/SUSPEND.md) played
// against the daemon. A process of a suspended job asks to be resumed by
// copying the suspension id the daemon's limits page shows into its own
// slice region. This subcommand asks for everybody: it reads the suspension
// id of every version-1 limits page it can read (its own, from
// GPUSLICE_LIMITS, and those of other jobs whose path it guesses:
// <state>/slices/job-1..N/limits, which are world-readable in a traversable
// directory), then, from several threads, for as long as it is told, writes
// each of those ids and random values into the request word of every
// version-1 region it can open for writing (its own, from GPUSLICE_SLICE, and
// every guessed one), through a shared mapping, as fast as it can. With
// --private it does the same work into words of its own memory instead: the
// same load on the machine's CPUs, no request reaching the daemon (a
// baseline for what the requests themselves cost the daemon).
//   id path=P value=V at=MS        a suspension id read
//   writable path=P at=MS          a region it can write
//   refused path=P errno=E at=MS   a region it cannot open for writing
//   writes n=N at=MS               at the end

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attacker.h"

namespace gpuslice::security {
namespace {

// Version-1 layouts, as an attacker would learn them (docs/SLICE_REGION.md).
constexpr uint64_t kLimitsMagic = 0x544d494c53555047ull;  // "GPUSLIMT"
constexpr size_t kLimitsSuspension = 144;
constexpr uint64_t kRegionMagic = 0x4e47455253555047ull;  // "GPUSREGN"
constexpr size_t kRegionRequest = 192;
constexpr size_t kRegionHeader = 512;

// The u64 at `offset` of the file at `path` when it starts with `magic`.
bool ReadWord(const std::string& path, uint64_t magic, size_t offset, uint64_t* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint64_t head = 0;
  const bool ok = pread(fd, &head, sizeof(head), 0) == sizeof(head) && head == magic &&
                  pread(fd, out, sizeof(*out), static_cast<off_t>(offset)) == sizeof(*out);
  close(fd);
  return ok;
}

}  // namespace

int AskResume(const Flags& f) {
  const std::string out = f.Get("out");
  const double seconds = f.GetDouble("seconds", 5);
  const int threads = std::max(1, static_cast<int>(f.GetDouble("threads", 4)));
  const int guesses = static_cast<int>(f.GetDouble("ids", 64));
  std::vector<std::string> pages, regions;
  if (const char* own = getenv("GPUSLICE_LIMITS")) pages.push_back(own);
  if (const char* own = getenv("GPUSLICE_SLICE")) regions.push_back(own);
  if (f.Has("state")) {
    for (int id = 1; id <= guesses; ++id) {
      const std::string dir = f.Get("state") + "/slices/job-" + std::to_string(id);
      pages.push_back(dir + "/limits");
      regions.push_back(dir + "/region");
    }
  }
  std::vector<uint64_t> ids;
  for (const std::string& page : pages) {
    uint64_t id = 0;
    if (!ReadWord(page, kLimitsMagic, kLimitsSuspension, &id) || id == 0) continue;
    ids.push_back(id);
    AppendLine(
        out, "id path=" + page + " value=" + std::to_string(id) + " at=" + std::to_string(NowMs()));
  }
  std::vector<std::atomic<uint64_t>*> words;
  for (const std::string& region : regions) {
    const int fd = open(region.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) {
        AppendLine(out, "refused path=" + region + " errno=" + std::to_string(errno) +
                            " at=" + std::to_string(NowMs()));
      }
      continue;
    }
    void* base = mmap(nullptr, kRegionHeader, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) continue;
    uint64_t magic = 0;
    std::memcpy(&magic, base, sizeof(magic));
    if (magic != kRegionMagic) continue;
    words.push_back(
        reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base) + kRegionRequest));
    AppendLine(out, "writable path=" + region + " at=" + std::to_string(NowMs()));
  }
  // As many words as it found, in private memory, when told to ask no one.
  std::vector<std::atomic<uint64_t>> own(f.Has("private") ? words.size() : 0);
  if (f.Has("private")) {
    for (size_t i = 0; i < words.size(); ++i) words[i] = &own[i];
    AppendLine(out,
               "private words=" + std::to_string(words.size()) + " at=" + std::to_string(NowMs()));
  }
  std::atomic<uint64_t> writes{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + static_cast<uint64_t>(NowMs()));
      uint64_t n = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        for (int burst = 0; burst < 1024; ++burst) {
          for (std::atomic<uint64_t>* w : words) {
            // Every id it found, and noise, in turn.
            const size_t pick = static_cast<size_t>(rng() % (ids.size() + 1));
            w->store(pick < ids.size() ? ids[pick] : rng(), std::memory_order_relaxed);
            ++n;
          }
        }
      }
      writes.fetch_add(n);
    });
  }
  for (std::thread& th : pool) th.join();
  AppendLine(out, "writes n=" + std::to_string(writes.load()) + " at=" + std::to_string(NowMs()));
  return 0;
}

}  // namespace gpuslice::security
