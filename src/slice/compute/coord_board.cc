#include "slice/compute/coord_board.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "slice/base/allocate_file.h"
#include "slice/compute/coord.h"
#include "slice/base/posix_error.h"

namespace gpuslice::slice {
namespace {

using board::BoardHeader;
using board::BoardSlice;
using board::MemberSlot;
using board::MembersHeader;

uint64_t UnixNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

core::Status Errno(const std::string& what, const std::string& path) {
  return core::InternalError(what + " " + path + ": " + std::strerror(errno));
}

constexpr uint64_t MemberOwner(int32_t pid) { return (uint64_t{uint32_t(pid)} << 32) | 1; }

// Fills a fresh board at `base`.
void InitBoard(void* base, std::string_view uuid) {
  auto* h = new (base) BoardHeader{};
  h->version = board::kBoardVersion;
  h->header_size = board::kBoardHeaderSize;
  h->total_size = board::kBoardSize;
  h->slice_capacity = board::kBoardSlices;
  h->slice_size = board::kBoardSliceSize;
  h->created_unix_ns = UnixNs();
  std::strncpy(h->uuid, std::string(uuid).c_str(), sizeof(h->uuid) - 1);
  h->holder.store(-1, std::memory_order_relaxed);
  h->magic.store(board::kBoardMagic, std::memory_order_release);
}

}  // namespace

std::string BoardPath(const std::string& dir, std::string_view uuid) {
  std::string path = CoordPath(dir, uuid);
  return path.substr(0, path.size() - std::strlen(".coord")) + ".board";
}

std::string MembersPath(const char* limits_path, const std::string& region_path) {
  auto dirname = [](const std::string& p) {
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
  };
  if (limits_path != nullptr && limits_path[0] != '\0') return dirname(limits_path) + "/members";
  constexpr std::string_view kSuffix = ".slice";
  if (region_path.size() > kSuffix.size() &&
      region_path.compare(region_path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
    return region_path.substr(0, region_path.size() - kSuffix.size()) + "/members";
  }
  return dirname(region_path) + "/members";
}

core::Status CheckDaemonWritten(const std::string& path, uid_t owner, mode_t mode, uid_t euid) {
  if ((mode & 0022) != 0) {
    return core::PermissionDeniedError(path + " is writable by its group or others; not the "
                                              "daemon's word");
  }
  if (owner != 0 && owner != euid) {
    return core::PermissionDeniedError(path + " belongs to uid " + std::to_string(owner) +
                                       ", neither root nor this process");
  }
  if (euid != 0 && owner == euid && (mode & 0200) != 0) {
    return core::PermissionDeniedError(path + " is writable by this process; not the "
                                              "daemon's word");
  }
  return core::Status::Ok();
}

core::Result<void*> CreateOrOpenBoard(const std::string& path, std::string_view uuid, mode_t mode) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    struct stat st {};
    bool reuse = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                 uint64_t(st.st_size) == board::kBoardSize;
    // A board of an older build may be sparse: its holes get their blocks
    // now (nothing to do for one made allocated), not at a store that faults.
    if (int e = reuse ? AllocateFile(fd, board::kBoardSize) : 0; e != 0) {
      close(fd);
      return PosixError("cannot allocate " + path, e);
    }
    void* base = MAP_FAILED;
    if (reuse) {
      base = mmap(nullptr, board::kBoardSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      const auto* h = static_cast<const BoardHeader*>(base);
      reuse = base != MAP_FAILED && h->magic.load(std::memory_order_acquire) == board::kBoardMagic &&
              h->version == board::kBoardVersion;
    }
    close(fd);
    if (reuse) {
      if (fchmodat(AT_FDCWD, path.c_str(), mode, 0) != 0) {
        munmap(base, board::kBoardSize);
        return Errno("cannot chmod", path);
      }
      return base;
    }
    if (base != MAP_FAILED) munmap(base, board::kBoardSize);
    // Another version (or not ours): replace it. Jobs that still map the old
    // one see its arbiter go stale and stop following it.
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot replace", path);
  } else if (errno != ENOENT) {
    return Errno("cannot open", path);
  }
  // Filled privately, then published under its name: nobody maps half a board.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  unlink(tmp.c_str());
  int t = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (t < 0) return Errno("cannot create", tmp);
  // Allocated, not sparse: the arbiter's store to a hole of a full disk
  // would be SIGBUS in the daemon.
  if (int e = AllocateFile(t, board::kBoardSize); e != 0) {
    close(t);
    unlink(tmp.c_str());
    return PosixError("cannot allocate " + tmp, e);
  }
  void* base = mmap(nullptr, board::kBoardSize, PROT_READ | PROT_WRITE, MAP_SHARED, t, 0);
  if (base == MAP_FAILED) {
    close(t);
    unlink(tmp.c_str());
    return Errno("cannot map", tmp);
  }
  InitBoard(base, uuid);
  const bool ok = fchmod(t, mode) == 0 && rename(tmp.c_str(), path.c_str()) == 0;
  const int err = errno;
  close(t);
  if (!ok) {
    unlink(tmp.c_str());
    munmap(base, board::kBoardSize);
    errno = err;
    return Errno("cannot publish", path);
  }
  return base;
}

core::Result<int> CreateMembersFile(const std::string& path, uint64_t job_id, uid_t uid,
                                    gid_t gid, mode_t mode) {
  unlink(path.c_str());  // A stale one (ids are unique: no live job uses it).
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno("cannot create", path);
  MembersHeader h{};
  h.version = board::kMembersVersion;
  h.header_size = board::kMembersHeaderSize;
  h.total_size = board::kMembersSize;
  h.member_capacity = board::kMembersPerSlice;
  h.member_size = board::kMemberSlotSize;
  h.job_id = job_id;
  h.created_unix_ns = UnixNs();
  h.magic.store(board::kMembersMagic, std::memory_order_relaxed);
  // Allocated, not sparse: the job's shim writes its slots through a
  // mapping, and a store to a hole of a full disk would be SIGBUS there.
  if (int e = AllocateFile(fd, board::kMembersSize); e != 0) {
    close(fd);
    unlink(path.c_str());
    return PosixError("cannot allocate " + path, e);
  }
  const bool ok = pwrite(fd, &h, sizeof(h), 0) == ssize_t(sizeof(h)) && fchmod(fd, mode) == 0 &&
                  (geteuid() != 0 || fchown(fd, uid, gid) == 0);
  if (!ok) {
    core::Status s = Errno("cannot prepare", path);
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return fd;
}

core::Result<std::unique_ptr<BoardView>> BoardView::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Errno("cannot stat", path);
  }
  core::Status trusted = S_ISREG(st.st_mode)
                             ? CheckDaemonWritten(path, st.st_uid, st.st_mode, geteuid())
                             : core::FailedPreconditionError(path + " is not a regular file");
  if (!trusted.ok()) {
    close(fd);
    return trusted;
  }
  if (uint64_t(st.st_size) != board::kBoardSize) {
    close(fd);
    return core::FailedPreconditionError("board " + path + " has size " +
                                         std::to_string(st.st_size));
  }
  void* base = mmap(nullptr, board::kBoardSize, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("cannot map", path);
  const auto* h = static_cast<const BoardHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != board::kBoardMagic ||
      h->version != board::kBoardVersion) {
    munmap(base, board::kBoardSize);
    return core::FailedPreconditionError("board " + path + " has a foreign magic or version " +
                                         std::to_string(h->version));
  }
  return std::unique_ptr<BoardView>(new BoardView(base));
}

BoardView::BoardView(void* base) : base_(base), header_(static_cast<const BoardHeader*>(base)) {}
BoardView::~BoardView() { munmap(base_, board::kBoardSize); }

const BoardSlice& BoardView::slice(uint32_t index) const {
  return reinterpret_cast<const BoardSlice*>(static_cast<const char*>(base_) +
                                             board::kBoardSlicesOffset)[index];
}

int32_t BoardView::FindSlice(uint64_t job_id, int32_t hint) const {
  if (job_id == 0) return -1;
  if (hint >= 0 && uint32_t(hint) < board::kBoardSlices &&
      slice(uint32_t(hint)).job_id.load(std::memory_order_acquire) == job_id) {
    return hint;
  }
  for (uint32_t i = 0; i < board::kBoardSlices; ++i) {
    if (slice(i).job_id.load(std::memory_order_acquire) == job_id) return int32_t(i);
  }
  return -1;
}

bool BoardView::ArbiterStale(uint64_t now_ns) const {
  const uint64_t beat = header_->arbiter_beat_ns.load(std::memory_order_relaxed);
  return now_ns > beat + board::kArbiterStaleNs;
}

void BoardView::WaitTurnChange(uint32_t seq, uint64_t timeout_ns) const {
  timespec ts{time_t(timeout_ns / 1000000000ull), long(timeout_ns % 1000000000ull)};
  // Shared (not FUTEX_PRIVATE): the arbiter wakes it through its own mapping.
  syscall(SYS_futex, const_cast<std::atomic<uint32_t>*>(&header_->turn_seq), FUTEX_WAIT, seq, &ts,
          nullptr, 0);
}

core::Result<std::unique_ptr<MembersFile>> MembersFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      uint64_t(st.st_size) != board::kMembersSize) {
    close(fd);
    return core::FailedPreconditionError("members file " + path + " is not one (size " +
                                         std::to_string(st.st_size) + ")");
  }
  void* base = mmap(nullptr, board::kMembersSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Errno("cannot map", path);
  auto* h = static_cast<MembersHeader*>(base);
  if (h->magic.load(std::memory_order_acquire) != board::kMembersMagic ||
      h->version != board::kMembersVersion) {
    munmap(base, board::kMembersSize);
    return core::FailedPreconditionError("members file " + path +
                                         " has a foreign magic or version");
  }
  return std::unique_ptr<MembersFile>(new MembersFile(base));
}

MembersFile::MembersFile(void* base) : base_(base), header_(static_cast<MembersHeader*>(base)) {}
MembersFile::~MembersFile() { munmap(base_, board::kMembersSize); }

uint64_t MembersFile::job_id() const { return header_->job_id; }

MemberSlot& MembersFile::slot(uint32_t index) const {
  return reinterpret_cast<MemberSlot*>(static_cast<char*>(base_) +
                                       board::kMembersSlotsOffset)[index];
}

core::Result<uint32_t> MembersFile::Claim(int32_t pid, uint32_t device_index, uint64_t now_ns) {
  for (uint32_t i = 0; i < board::kMembersPerSlice; ++i) {
    MemberSlot& m = slot(i);
    uint64_t owner = m.owner.load(std::memory_order_relaxed);
    const uint64_t beat = m.heartbeat_ns.load(std::memory_order_relaxed);
    const bool dead = owner != 0 && now_ns > beat + board::kMemberTimeoutNs;
    if (owner != 0 && !dead) continue;
    // Only processes of this slice contend here: a CAS is enough.
    if (!m.owner.compare_exchange_strong(owner, MemberOwner(pid), std::memory_order_acq_rel)) {
      continue;
    }
    m.flags.store(0, std::memory_order_relaxed);
    m.device_index.store(device_index, std::memory_order_relaxed);
    m.launches.store(0, std::memory_order_relaxed);
    m.gpu_ns.store(0, std::memory_order_relaxed);
    m.heartbeat_ns.store(now_ns, std::memory_order_release);
    return i;
  }
  return core::ResourceExhaustedError("members file full: " +
                                      std::to_string(board::kMembersPerSlice) + " processes");
}

void MembersFile::Leave(uint32_t index, int32_t pid) {
  MemberSlot& m = slot(index);
  uint64_t expected = MemberOwner(pid);
  m.flags.store(0, std::memory_order_relaxed);
  m.owner.compare_exchange_strong(expected, 0, std::memory_order_release);
  Ring();
}

void MembersFile::Ring() {
  header_->doorbell.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &header_->doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace gpuslice::slice
