#include "slice/region/limits_page.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "slice/base/allocate_file.h"
#include "slice/base/posix_error.h"

namespace gpuslice::slice {
namespace {

using core::Result;
using core::Status;
using layout::LimitsEntry;
using layout::LimitsHeader;

uint64_t UnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The region's encodings (region_layout.h, DeviceEntry), so the compute
// gate decodes either source the same way.
uint32_t EncodeMode(ComputeMode mode) { return mode == ComputeMode::kWorkConserving ? 2u : 0u; }
uint32_t EncodePriority(core::Priority p) { return uint32_t(p) + 1; }
ComputeMode DecodeMode(uint32_t v) {
  return v == 2 ? ComputeMode::kWorkConserving : ComputeMode::kHard;
}
core::Priority DecodePriority(uint32_t v) {
  if (v == 0 || v > uint32_t(core::Priority::kHigh) + 1) return core::Priority::kNormal;
  return core::Priority(v - 1);
}

// Stores one device's controls. Mode and priority before the share
// (release), so a gate that loads the new share with acquire sees the
// settings that go with it; the limit is a plain number (relaxed); the
// pause flag is released on its own (paired with the gate's acquire).
void Store(LimitsEntry& e, const DeviceControls& c) {
  e.limit_bytes.store(c.limit_bytes, std::memory_order_relaxed);
  e.compute_mode.store(EncodeMode(c.mode), std::memory_order_relaxed);
  e.priority.store(EncodePriority(c.priority), std::memory_order_relaxed);
  e.compute_share_milli.store(c.share_milli, std::memory_order_release);
  e.launches_paused.store(c.launches_paused ? 1u : 0u, std::memory_order_release);
}

Status CheckControls(const DeviceControls& c) {
  if (c.uuid.empty() || c.uuid.size() >= layout::kUuidBytes) {
    return core::InvalidArgumentError("bad device UUID '" + c.uuid +
                                      "': must be 1 to 63 characters");
  }
  if (c.share_milli > 1000) {
    return core::InvalidArgumentError("compute share " + std::to_string(c.share_milli) +
                                      "/1000 is above 100%");
  }
  return Status::Ok();
}

}  // namespace

LimitsPage::LimitsPage(std::string path, void* base, bool writable)
    : path_(std::move(path)),
      base_(base),
      writable_(writable),
      header_(static_cast<LimitsHeader*>(base)) {}

LimitsPage::~LimitsPage() { munmap(base_, layout::kLimitsPageSize); }

const LimitsEntry& LimitsPage::entry(uint32_t index) const {
  return reinterpret_cast<const LimitsEntry*>(static_cast<const char*>(base_) +
                                              layout::kLimitsEntriesOffset)[index];
}

Result<std::unique_ptr<LimitsPage>> LimitsPage::Create(const std::string& path,
                                                       const LimitsOptions& options) {
  if ((options.mode & 0022) != 0 || (options.mode & 0400) == 0) {
    return core::InvalidArgumentError(
        "a limits page must be readable by its owner and writable by nobody else");
  }
  if (options.devices.size() > layout::kMaxDevices) {
    return core::InvalidArgumentError("a slice has at most 16 devices");
  }
  if (options.name.size() >= layout::kNameBytes) {
    return core::InvalidArgumentError("slice name '" + options.name + "' is longer than 63 bytes");
  }
  for (size_t i = 0; i < options.devices.size(); ++i) {
    GPUSLICE_RETURN_IF_ERROR(CheckControls(options.devices[i]));
    for (size_t j = 0; j < i; ++j) {
      if (SameUuid(options.devices[i].uuid, options.devices[j].uuid)) {
        return core::InvalidArgumentError("device " + options.devices[i].uuid + " is listed twice");
      }
    }
  }

  char tmp[4096];
  std::snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%llu", path.c_str(), int(getpid()),
                static_cast<unsigned long long>(UnixNanos()));
  // A new file is writable through the descriptor that created it whatever
  // its mode, so a 0444 page can be filled in here.
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, options.mode);
  if (fd < 0) return PosixError("create " + std::string(tmp), errno);
  // The umask may have removed bits we want; it cannot add any.
  if (fchmod(fd, options.mode) != 0) {
    Status s = PosixError("chmod " + std::string(tmp), errno);
    close(fd);
    unlink(tmp);
    return s;
  }
  // Allocated, not sparse: a store to a hole of a full disk is SIGBUS.
  if (int e = AllocateFile(fd, layout::kLimitsPageSize); e != 0) {
    close(fd);
    unlink(tmp);
    return PosixError("allocate " + std::string(tmp), e);
  }
  void* base = mmap(nullptr, layout::kLimitsPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(tmp);
    return PosixError("map " + std::string(tmp), err);
  }
  std::unique_ptr<LimitsPage> page(new LimitsPage(path, base, true));
  LimitsHeader& h = *page->header_;
  h.version = layout::kLimitsVersion;
  h.header_size = layout::kLimitsHeaderSize;
  h.total_size = layout::kLimitsPageSize;
  h.device_capacity = layout::kMaxDevices;
  h.entry_size = layout::kLimitsEntrySize;
  h.entries_offset = layout::kLimitsEntriesOffset;
  h.flags = layout::kLimitsFlagClosed;
  h.device_count = uint32_t(options.devices.size());
  h.created_unix_ns = UnixNanos();
  h.job_id = options.job_id;
  h.shared_gid = options.shared_gid;
  std::memcpy(h.slice_name, options.name.data(), options.name.size());
  for (size_t i = 0; i < options.devices.size(); ++i) {
    LimitsEntry& e = const_cast<LimitsEntry&>(page->entry(uint32_t(i)));
    std::memcpy(e.uuid, options.devices[i].uuid.data(), options.devices[i].uuid.size());
    Store(e, options.devices[i]);
  }
  page->count_ = h.device_count;
  // Release: whoever maps the file and sees the magic sees everything above.
  h.magic.store(layout::kLimitsMagic, std::memory_order_release);

  if (link(tmp, path.c_str()) != 0) {
    err = errno;
    unlink(tmp);
    return PosixError("publish limits page " + path, err);
  }
  unlink(tmp);
  return page;
}

Result<std::unique_ptr<LimitsPage>> LimitsPage::Map(const std::string& path, int fd,
                                                    bool writable) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = PosixError("stat limits page " + path, errno);
    close(fd);
    return s;
  }
  auto fail = [&](Status s) {
    close(fd);
    return s;
  };
  if (!S_ISREG(st.st_mode)) return fail(core::InvalidArgumentError(path + " is not a file"));
  if ((st.st_mode & 0022) != 0) {
    return fail(core::PermissionDeniedError("limits page " + path +
                                            " is writable by group or others; refusing it"));
  }
  if (!writable && geteuid() != 0 && st.st_uid == geteuid() && (st.st_mode & S_IWUSR) != 0) {
    // Our own job could rewrite it: then it decides nothing. Root is not
    // refused: root can write any file, so the check could not protect
    // anything, and refusing would take the memory of every root job.
    return fail(core::PermissionDeniedError(
        "limits page " + path + " belongs to this process's uid " + std::to_string(st.st_uid) +
        " and is writable by it (mode " + std::to_string((st.st_mode >> 6) & 7) +
        std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
        "); a page the job can rewrite decides nothing, refusing it"));
  }
  if (uint64_t(st.st_size) != layout::kLimitsPageSize) {
    return fail(core::FailedPreconditionError(
        "limits page " + path + " has size " + std::to_string(st.st_size) + ", expected " +
        std::to_string(layout::kLimitsPageSize) + " (different version?)"));
  }
  const int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* base = mmap(nullptr, layout::kLimitsPageSize, prot, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return PosixError("map limits page " + path, err);
  std::unique_ptr<LimitsPage> page(new LimitsPage(path, base, writable));
  const LimitsHeader& h = *page->header_;
  // Acquire: pairs with the creator's release store of the magic.
  if (h.magic.load(std::memory_order_acquire) != layout::kLimitsMagic) {
    return core::FailedPreconditionError("limits page " + path + " has a bad magic number");
  }
  if (h.version != layout::kLimitsVersion || h.header_size != layout::kLimitsHeaderSize ||
      h.total_size != layout::kLimitsPageSize || h.device_capacity != layout::kMaxDevices ||
      h.entry_size != layout::kLimitsEntrySize ||
      h.entries_offset != layout::kLimitsEntriesOffset || h.device_count > layout::kMaxDevices) {
    return core::FailedPreconditionError(
        "limits page " + path + " has version " + std::to_string(h.version) +
        " or a layout this build (" + std::to_string(layout::kLimitsVersion) + ") does not read");
  }
  page->count_ = h.device_count;
  return page;
}

Result<std::unique_ptr<LimitsPage>> LimitsPage::OpenReadOnly(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return PosixError("open limits page " + path, errno);
  return Map(path, fd, false);
}

Result<std::unique_ptr<LimitsPage>> LimitsPage::OpenForUpdate(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == EACCES) {
    // A page a daemon that is not root made 0444 for itself (its jobs run
    // as its own user). Lift the owner-write bit just for the open; a job
    // process that checks the page in that instant refuses it and gets no
    // memory, never more.
    int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (ro >= 0 && fstat(ro, &st) == 0 && st.st_uid == geteuid() &&
        fchmod(ro, (st.st_mode & 07777) | S_IWUSR) == 0) {
      fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      int err = errno;
      (void)fchmod(ro, st.st_mode & 07777);
      errno = err;
    } else {
      errno = EACCES;
    }
    if (ro >= 0) {
      int err = errno;
      close(ro);
      errno = err;
    }
  }
  if (fd < 0) return PosixError("open limits page " + path + " for update", errno);
  return Map(path, fd, true);
}

const LimitsEntry* LimitsPage::Find(std::string_view uuid) const {
  for (uint32_t i = 0; i < count_; ++i) {
    const LimitsEntry& e = entry(i);
    if (SameUuid(std::string_view(e.uuid, strnlen(e.uuid, sizeof(e.uuid))), uuid)) return &e;
  }
  return nullptr;
}

std::vector<DeviceControls> LimitsPage::Devices() const {
  std::vector<DeviceControls> out;
  for (uint32_t i = 0; i < count_; ++i) {
    const LimitsEntry& e = entry(i);
    DeviceControls c;
    c.uuid = std::string(e.uuid, strnlen(e.uuid, sizeof(e.uuid)));
    c.limit_bytes = e.limit_bytes.load(std::memory_order_relaxed);
    c.share_milli = e.compute_share_milli.load(std::memory_order_acquire);
    c.mode = DecodeMode(e.compute_mode.load(std::memory_order_relaxed));
    c.priority = DecodePriority(e.priority.load(std::memory_order_relaxed));
    c.launches_paused = e.launches_paused.load(std::memory_order_acquire) != 0;
    out.push_back(std::move(c));
  }
  return out;
}

Result<LimitsEntry*> LimitsPage::Writable(std::string_view uuid) {
  if (!writable_) {
    return core::FailedPreconditionError("limits page " + path_ + " is mapped read-only");
  }
  const LimitsEntry* e = Find(uuid);
  if (e == nullptr) {
    return core::NotFoundError("device " + std::string(uuid) + " is not part of the slice of " +
                               path_);
  }
  return const_cast<LimitsEntry*>(e);
}

Status LimitsPage::Set(const DeviceControls& controls) {
  GPUSLICE_RETURN_IF_ERROR(CheckControls(controls));
  GPUSLICE_ASSIGN_OR_RETURN(LimitsEntry * e, Writable(controls.uuid));
  Store(*e, controls);
  header_->generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status LimitsPage::SetLimit(std::string_view uuid, uint64_t limit_bytes) {
  GPUSLICE_ASSIGN_OR_RETURN(LimitsEntry * e, Writable(uuid));
  e->limit_bytes.store(limit_bytes, std::memory_order_relaxed);
  header_->generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status LimitsPage::SetLaunchesPaused(std::string_view uuid, bool paused) {
  GPUSLICE_ASSIGN_OR_RETURN(LimitsEntry * e, Writable(uuid));
  e->launches_paused.store(paused ? 1u : 0u, std::memory_order_release);
  header_->generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status LimitsPage::SetSuspension(uint64_t id) {
  if (!writable_) {
    return core::FailedPreconditionError("limits page " + path_ + " is mapped read-only");
  }
  if (header_->suspension.load(std::memory_order_relaxed) == id) return Status::Ok();
  header_->suspension.store(id, std::memory_order_release);
  header_->generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status LimitsPage::MoveDevice(std::string_view from, std::string_view to) {
  DeviceControls check;
  check.uuid = std::string(to);
  GPUSLICE_RETURN_IF_ERROR(CheckControls(check));
  GPUSLICE_ASSIGN_OR_RETURN(LimitsEntry * e, Writable(from));
  if (SameUuid(from, to)) return Status::Ok();
  if (Find(to) != nullptr) {
    return core::AlreadyExistsError("device " + std::string(to) + " is part of the slice of " +
                                    path_ + " already");
  }
  // A sequence lock: odd while the bytes change. The fences order the
  // plain byte stores between the two counter stores for a reader that
  // pairs them with its own (ReadPlacement).
  const uint32_t seq = e->placement.load(std::memory_order_relaxed);
  e->placement.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memset(e->uuid, 0, sizeof(e->uuid));
  std::memcpy(e->uuid, to.data(), to.size());
  e->placement.store(seq + 2, std::memory_order_release);
  header_->generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

bool LimitsPage::ReadPlacement(uint32_t index, std::string* uuid, uint32_t* placement) const {
  if (index >= count_) return false;
  const LimitsEntry& e = entry(index);
  const uint32_t before = e.placement.load(std::memory_order_acquire);
  if (before % 2 != 0) return false;
  char copy[layout::kUuidBytes];
  std::memcpy(copy, e.uuid, sizeof(copy));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.placement.load(std::memory_order_relaxed) != before) return false;
  *uuid = std::string(copy, strnlen(copy, sizeof(copy)));
  *placement = before;
  return true;
}

}  // namespace gpuslice::slice
