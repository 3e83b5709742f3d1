#include "slice/compute/coord.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <new>

#include "slice/base/allocate_file.h"
#include "slice/base/posix_error.h"

namespace gpuslice::slice {
namespace {

using coord::CoordHeader;
using coord::MemberEntry;
using coord::SliceEntry;

uint64_t UnixNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

core::Status Errno(const std::string& what, const std::string& path) {
  return core::InternalError(what + " " + path + ": " + std::strerror(errno));
}

constexpr uint64_t MemberOwner(int32_t pid) { return (uint64_t{uint32_t(pid)} << 32) | 1; }

}  // namespace

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string CoordPath(const std::string& dir, std::string_view uuid) {
  if (uuid.size() > 4 && (uuid.substr(0, 4) == "GPU-" || uuid.substr(0, 4) == "MIG-")) {
    uuid.remove_prefix(4);
  }
  std::string name;
  for (char c : uuid) {
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-'
                ? char(std::tolower(static_cast<unsigned char>(c)))
                : '_';
  }
  return dir + "/gpu-" + name + ".coord";
}

uint64_t SliceKey(std::string_view region_path, uint64_t created_unix_ns) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a.
  for (char c : region_path) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  for (int i = 0; i < 8; ++i) h = (h ^ ((created_unix_ns >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h == 0 ? 1 : h;
}

core::Result<std::unique_ptr<Coordinator>> Coordinator::OpenOrCreate(const std::string& path,
                                                                     std::string_view uuid,
                                                                     mode_t mode) {
  if ((mode & 0007) != 0) {
    return core::InvalidArgumentError("coordination file " + path +
                                      " must not be accessible by others");
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
      // Fill a private file, then publish it under its name.
      std::string tmp = path + ".tmp." + std::to_string(getpid());
      int t = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (t < 0) return Errno("cannot create", tmp);
      fchmod(t, mode);  // Not subject to the umask.
      // Allocated, not sparse: a store to a hole of a full disk is SIGBUS.
      if (int e = AllocateFile(t, coord::kCoordSize); e != 0) {
        close(t);
        unlink(tmp.c_str());
        return PosixError("cannot allocate " + tmp, e);
      }
      void* base = mmap(nullptr, coord::kCoordSize, PROT_READ | PROT_WRITE, MAP_SHARED, t, 0);
      if (base == MAP_FAILED) {
        close(t);
        unlink(tmp.c_str());
        return Errno("cannot map", tmp);
      }
      auto* h = new (base) CoordHeader{};
      h->version = coord::kCoordVersion;
      h->header_size = coord::kCoordHeaderSize;
      h->total_size = coord::kCoordSize;
      h->slice_capacity = coord::kMaxSlices;
      h->member_capacity = coord::kMaxMembers;
      h->slice_entry_size = coord::kSliceEntrySize;
      h->member_entry_size = coord::kMemberEntrySize;
      h->created_unix_ns = UnixNs();
      std::strncpy(h->uuid, std::string(uuid).c_str(), sizeof(h->uuid) - 1);
      h->holder.store(-1, std::memory_order_relaxed);
      h->last_tick_ns.store(MonotonicNs(), std::memory_order_relaxed);
      h->magic.store(coord::kCoordMagic, std::memory_order_release);
      munmap(base, coord::kCoordSize);
      const bool linked = link(tmp.c_str(), path.c_str()) == 0;
      const int link_errno = errno;
      unlink(tmp.c_str());
      close(t);
      if (!linked && link_errno != EEXIST) {
        errno = link_errno;
        return Errno("cannot publish", path);
      }
      continue;  // Open whichever file won.
    }
    if (fd < 0) return Errno("cannot open", path);
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      close(fd);
      return Errno("cannot stat", path);
    }
    if ((st.st_mode & 0002) != 0) {
      close(fd);
      return core::PermissionDeniedError("coordination file " + path +
                                         " is writable by others; refusing to use it");
    }
    if (uint64_t(st.st_size) != coord::kCoordSize) {
      close(fd);
      return core::FailedPreconditionError("coordination file " + path + " has size " +
                                           std::to_string(st.st_size) + ", expected " +
                                           std::to_string(coord::kCoordSize));
    }
    void* base = mmap(nullptr, coord::kCoordSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return Errno("cannot map", path);
    auto* h = static_cast<CoordHeader*>(base);
    if (h->magic.load(std::memory_order_acquire) != coord::kCoordMagic ||
        h->version != coord::kCoordVersion) {
      munmap(base, coord::kCoordSize);
      return core::FailedPreconditionError("coordination file " + path +
                                           " has a foreign magic or version " +
                                           std::to_string(h->version));
    }
    return std::unique_ptr<Coordinator>(new Coordinator(base));
  }
  return core::InternalError("coordination file " + path + " vanished while being opened");
}

Coordinator::Coordinator(void* base) : base_(base), header_(static_cast<CoordHeader*>(base)) {}
Coordinator::~Coordinator() { munmap(base_, coord::kCoordSize); }

SliceEntry& Coordinator::slice(uint32_t index) const {
  return reinterpret_cast<SliceEntry*>(static_cast<char*>(base_) + coord::kSlicesOffset)[index];
}
MemberEntry& Coordinator::member(uint32_t index) const {
  return reinterpret_cast<MemberEntry*>(static_cast<char*>(base_) + coord::kMembersOffset)[index];
}

bool Coordinator::TryLock(uint64_t now_ns) {
  const uint64_t me = MemberOwner(getpid());
  uint64_t cur = header_->lock.load(std::memory_order_relaxed);
  if (cur != 0) {
    // A lease older than kLeaseNs belongs to a process that died or stopped
    // inside a decision: break it.
    const uint64_t since = header_->lock_since_ns.load(std::memory_order_relaxed);
    if (now_ns < since + coord::kLeaseNs) return false;
  }
  // Acquire: the previous holder's decisions are visible to ours.
  if (!header_->lock.compare_exchange_strong(cur, me, std::memory_order_acquire)) return false;
  header_->lock_since_ns.store(now_ns, std::memory_order_relaxed);
  return true;
}

void Coordinator::Unlock() {
  // Release: our decisions are visible to the next holder.
  header_->lock.store(0, std::memory_order_release);
}

core::Result<uint32_t> Coordinator::Join(uint64_t key, int32_t pid, uint64_t now_ns) {
  for (int tries = 0; !TryLock(MonotonicNs()); ++tries) {
    if (tries > 2000) return core::UnavailableError("coordination lease stays busy");
    usleep(50);
  }
  int32_t found = -1, free_slice = -1;
  for (uint32_t i = 0; i < coord::kMaxSlices; ++i) {
    const uint64_t k = slice(i).key.load(std::memory_order_relaxed);
    if (k == key) found = int32_t(i);
    if (k == 0 && free_slice < 0) free_slice = int32_t(i);
  }
  if (found < 0) {
    if (free_slice < 0) {
      Unlock();
      return core::ResourceExhaustedError("coordination file full: " +
                                          std::to_string(coord::kMaxSlices) + " slices");
    }
    SliceEntry& s = slice(uint32_t(free_slice));
    s.tokens_ns.store(0, std::memory_order_relaxed);
    s.charged_ns.store(0, std::memory_order_relaxed);
    // A newcomer starts level with the others (see Rejoin in the policy).
    s.vtime.store(0, std::memory_order_relaxed);
    s.idle_since_ns.store(now_ns, std::memory_order_relaxed);
    s.gpu_ns.store(0, std::memory_order_relaxed);
    s.gpu_seen_ns.store(0, std::memory_order_relaxed);
    s.flags.store(0, std::memory_order_relaxed);  // Not co-running; duty not measured.
    s.duty_wall_ns.store(0, std::memory_order_relaxed);
    s.duty_gpu_ns.store(0, std::memory_order_relaxed);
    s.host_wall_ns.store(0, std::memory_order_relaxed);
    s.host_gpu_ns.store(0, std::memory_order_relaxed);
    s.host_measured_ns.store(0, std::memory_order_relaxed);
    s.key.store(key, std::memory_order_relaxed);
    found = free_slice;
  }
  for (uint32_t i = 0; i < coord::kMaxMembers; ++i) {
    MemberEntry& m = member(i);
    uint64_t owner = m.owner.load(std::memory_order_relaxed);
    const bool stale =
        owner != 0 && now_ns > m.heartbeat_ns.load(std::memory_order_relaxed) + coord::kMemberTimeoutNs;
    if (owner != 0 && !stale) continue;
    m.slice.store(found, std::memory_order_relaxed);
    m.flags.store(0, std::memory_order_relaxed);
    m.heartbeat_ns.store(now_ns, std::memory_order_relaxed);
    m.launches.store(0, std::memory_order_relaxed);
    m.owner.store(MemberOwner(pid), std::memory_order_relaxed);
    Unlock();
    return i;
  }
  Unlock();
  return core::ResourceExhaustedError("coordination file full: " +
                                      std::to_string(coord::kMaxMembers) + " processes");
}

void Coordinator::Leave(uint32_t index, int32_t pid) {
  MemberEntry& m = member(index);
  uint64_t expected = MemberOwner(pid);
  m.flags.store(0, std::memory_order_relaxed);
  m.owner.compare_exchange_strong(expected, 0, std::memory_order_release);
}

void Coordinator::Configure(uint32_t member_index, uint32_t share_milli, coord::Mode mode,
                            uint32_t priority) {
  const int32_t s = member(member_index).slice.load(std::memory_order_relaxed);
  if (s < 0 || uint32_t(s) >= coord::kMaxSlices) return;
  SliceEntry& e = slice(uint32_t(s));
  e.share_milli.store(share_milli, std::memory_order_relaxed);
  e.mode.store(mode, std::memory_order_relaxed);
  e.priority.store(priority, std::memory_order_relaxed);
}

bool Coordinator::Tick(uint64_t now_ns, const PolicyParams& params) {
  if (!TryLock(now_ns)) return false;
  SliceView views[coord::kMaxSlices];
  for (uint32_t i = 0; i < coord::kMaxSlices; ++i) {
    SliceEntry& e = slice(i);
    SliceView& v = views[i];
    if (e.key.load(std::memory_order_relaxed) == 0) continue;
    v.share_milli = e.share_milli.load(std::memory_order_relaxed);
    v.mode = coord::Mode(e.mode.load(std::memory_order_relaxed));
    v.priority = e.priority.load(std::memory_order_relaxed);
    v.tokens_ns = e.tokens_ns.load(std::memory_order_relaxed);
    v.vtime = e.vtime.load(std::memory_order_relaxed);
    v.charged_ns = e.charged_ns.load(std::memory_order_relaxed);
    v.idle_since_ns = e.idle_since_ns.load(std::memory_order_relaxed);
    const uint32_t flags = e.flags.load(std::memory_order_relaxed);
    v.corun = (flags & coord::kSliceCoRun) != 0;
    v.duty_milli = (flags & coord::kSliceDutyMeasured) != 0
                       ? std::min<uint32_t>(e.duty_milli.load(std::memory_order_relaxed), 1000)
                       : 1000;
    v.duty_wall_ns = e.duty_wall_ns.load(std::memory_order_relaxed);
    v.duty_gpu_ns = e.duty_gpu_ns.load(std::memory_order_relaxed);
    v.host_duty_milli =
        (flags & coord::kSliceHostDutyMeasured) != 0
            ? std::min<uint32_t>(e.host_duty_milli.load(std::memory_order_relaxed), 1000)
            : 1000;
    v.host_wall_ns = e.host_wall_ns.load(std::memory_order_relaxed);
    v.host_gpu_ns = e.host_gpu_ns.load(std::memory_order_relaxed);
    v.host_measured_ns = e.host_measured_ns.load(std::memory_order_relaxed);
    v.woke_ns = e.woke_ns.load(std::memory_order_relaxed);
    // GPU time its members added since the last decision.
    const uint64_t gpu = e.gpu_ns.load(std::memory_order_relaxed);
    const uint64_t seen = e.gpu_seen_ns.load(std::memory_order_relaxed);
    v.gpu_ns = gpu > seen ? gpu - seen : 0;
    e.gpu_seen_ns.store(gpu, std::memory_order_relaxed);
    v.gpu_time = true;  // Unless a live member does not report it (below).
  }
  for (uint32_t i = 0; i < coord::kMaxMembers; ++i) {
    MemberEntry& m = member(i);
    uint64_t owner = m.owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    const int32_t s = m.slice.load(std::memory_order_relaxed);
    if (now_ns > m.heartbeat_ns.load(std::memory_order_relaxed) + coord::kMemberTimeoutNs ||
        s < 0 || uint32_t(s) >= coord::kMaxSlices) {
      // Dead or stopped: it no longer holds up the GPU for anyone.
      m.owner.compare_exchange_strong(owner, 0, std::memory_order_relaxed);
      continue;
    }
    const uint32_t flags = m.flags.load(std::memory_order_relaxed);
    views[s].live = true;
    views[s].gpu_time &= (flags & coord::kMemberGpuTime) != 0;
    views[s].waiting |= (flags & coord::kMemberWaiting) != 0;
    views[s].inflight |= (flags & coord::kMemberInflight) != 0;
  }
  TurnView turn;
  turn.holder = header_->holder.load(std::memory_order_relaxed);
  turn.state = coord::TurnState(header_->turn_state.load(std::memory_order_relaxed));
  turn.start_ns = header_->turn_start_ns.load(std::memory_order_relaxed);
  turn.end_ns = header_->turn_end_ns.load(std::memory_order_relaxed);
  turn.handed_off =
      (header_->turn_flags.load(std::memory_order_relaxed) & coord::kTurnHandedOff) != 0;
  const uint64_t last = header_->last_tick_ns.load(std::memory_order_relaxed);
  Outcome out = Advance(now_ns, last, turn, views, params);
  header_->last_tick_ns.store(std::max(now_ns, last), std::memory_order_relaxed);
  for (uint32_t i = 0; i < coord::kMaxSlices; ++i) {
    SliceEntry& e = slice(i);
    if (e.key.load(std::memory_order_relaxed) == 0) continue;
    if (!views[i].live && int32_t(i) != turn.holder) {
      e.key.store(0, std::memory_order_relaxed);  // No process left: free it.
      continue;
    }
    e.tokens_ns.store(views[i].tokens_ns, std::memory_order_relaxed);
    e.vtime.store(views[i].vtime, std::memory_order_relaxed);
    e.charged_ns.store(views[i].charged_ns, std::memory_order_relaxed);
    e.idle_since_ns.store(views[i].idle_since_ns, std::memory_order_relaxed);
    e.duty_milli.store(views[i].duty_milli, std::memory_order_relaxed);
    e.duty_wall_ns.store(views[i].duty_wall_ns, std::memory_order_relaxed);
    e.duty_gpu_ns.store(views[i].duty_gpu_ns, std::memory_order_relaxed);
    e.host_duty_milli.store(views[i].host_duty_milli, std::memory_order_relaxed);
    e.host_wall_ns.store(views[i].host_wall_ns, std::memory_order_relaxed);
    e.host_gpu_ns.store(views[i].host_gpu_ns, std::memory_order_relaxed);
    e.host_measured_ns.store(views[i].host_measured_ns, std::memory_order_relaxed);
    e.woke_ns.store(views[i].woke_ns, std::memory_order_relaxed);
    e.flags.store((views[i].corun ? coord::kSliceCoRun : 0) |
                      (views[i].duty_milli < 1000 ? coord::kSliceDutyMeasured : 0) |
                      (views[i].host_duty_milli < 1000 ? coord::kSliceHostDutyMeasured : 0),
                  std::memory_order_relaxed);
  }
  if (out.changed) {
    header_->holder.store(turn.holder, std::memory_order_relaxed);
    header_->turn_state.store(turn.state, std::memory_order_relaxed);
    header_->turn_start_ns.store(turn.start_ns, std::memory_order_relaxed);
    header_->turn_flags.store(turn.handed_off ? coord::kTurnHandedOff : 0,
                              std::memory_order_relaxed);
    if (turn.state == coord::kTurnOpen) header_->turns.fetch_add(1, std::memory_order_relaxed);
    if (out.preempted) header_->preemptions.fetch_add(1, std::memory_order_relaxed);
  }
  header_->turn_end_ns.store(turn.end_ns, std::memory_order_relaxed);
  if (out.changed || out.corun_changed) {
    // Release: a launcher that sees the new sequence sees the new turn.
    header_->turn_seq.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->turn_seq), FUTEX_WAKE, INT32_MAX,
            nullptr, nullptr, 0);
  }
  Unlock();
  return true;
}

void Coordinator::WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const {
  timespec ts{time_t(timeout_ns / 1000000000ull), long(timeout_ns % 1000000000ull)};
  // Not FUTEX_PRIVATE: the word is in a file mapped by other processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->turn_seq), FUTEX_WAIT, seq, &ts,
          nullptr, 0);
}

}  // namespace gpuslice::slice
