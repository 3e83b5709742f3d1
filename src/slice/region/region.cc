#include "slice/region/region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "slice/region/admission.h"
#include "slice/base/allocate_file.h"
#include "slice/region/limits_page.h"
#include "slice/base/pid_namespace.h"
#include "slice/base/posix_error.h"

namespace gpuslice::slice {
namespace {

using core::Result;
using core::Status;
using layout::DeviceEntry;
using layout::ProcessSlot;

uint64_t UnixNanos() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void SleepMillis(int ms) {
  timespec ts{0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

std::string_view UuidKey(std::string_view uuid) {
  if (uuid.size() > 4 && (uuid.substr(0, 4) == "GPU-" || uuid.substr(0, 4) == "MIG-" ||
                          uuid.substr(0, 4) == "gpu-" || uuid.substr(0, 4) == "mig-")) {
    uuid.remove_prefix(4);
  }
  return uuid;
}

Status CheckUuid(std::string_view uuid) {
  if (uuid.empty() || uuid.size() >= layout::kUuidBytes) {
    return core::InvalidArgumentError("bad device UUID '" + std::string(uuid) +
                                      "': must be 1 to 63 characters");
  }
  return Status::Ok();
}

class RealProbe final : public ProcessProbe {
 public:
  bool IsAlive(int32_t pid, uint64_t start_time) const override {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    if (start_time == 0) return true;
    Result<uint64_t> now = ProcessStartTime(pid);
    if (!now.ok()) return now.status().code() != core::StatusCode::kNotFound;
    return *now == start_time;
  }
};

}  // namespace

bool SameUuid(std::string_view a, std::string_view b) {
  a = UuidKey(a);
  b = UuidKey(b);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const ProcessProbe& RealProcessProbe() {
  static const RealProbe probe;
  return probe;
}

Result<uint64_t> ProcessStartTime(int32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError(path, errno);
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  int err = errno;
  close(fd);
  if (n <= 0) return PosixError(std::string("read ") + path, n < 0 ? err : EIO);
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses; the
  // fields we want follow the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return core::InternalError(std::string("unparsable ") + path);
  ++p;
  // Field 3 is the first after ')'; starttime is field 22.
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  while (*p == ' ') ++p;
  char* end = nullptr;
  unsigned long long value = std::strtoull(p, &end, 10);
  if (end == p) return core::InternalError(std::string("no start time in ") + path);
  return uint64_t{value};
}

// What a device gets when the daemon's limits page says nothing for it (or
// could not be used): no memory, no share, normal priority, not paused.
constinit const layout::LimitsEntry kNothingGranted{};

Region::Region(std::string path, void* base)
    : path_(std::move(path)), base_(base), header_(static_cast<layout::RegionHeader*>(base)) {
  // Until a limits page is attached, each device's own entry decides.
  for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
    const DeviceEntry& d = device(i);
    controls_[i] = {&d.limit_bytes, &d.compute_share_milli, &d.compute_mode, &d.priority,
                    &d.launches_paused};
    page_index_[i] = -1;
  }
}

void Region::AttachLimits(std::unique_ptr<LimitsPage> page) {
  limits_refused_ = page == nullptr;
  for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
    const layout::LimitsEntry* e = &kNothingGranted;
    page_index_[i] = -1;
    const DeviceEntry& d = device(i);
    // Acquire: pairs with the release that made the entry ready, so the
    // UUID we match is the one its claimer wrote. Matched once: a later
    // rewrite of the region (the job owns it) changes nothing here.
    if (page != nullptr &&
        layout::OwnerState(d.owner.load(std::memory_order_acquire)) == layout::kEntryReady) {
      const layout::LimitsEntry* listed =
          page->Find(std::string_view(d.uuid, strnlen(d.uuid, sizeof(d.uuid))));
      if (listed != nullptr) {
        e = listed;
        page_index_[i] = int32_t(listed - &page->entry(0));
      }
    }
    controls_[i] = {&e->limit_bytes, &e->compute_share_milli, &e->compute_mode, &e->priority,
                    &e->launches_paused};
  }
  limits_ = std::move(page);
}

const std::atomic<uint64_t>* Region::SuspensionWord() const {
  return limits_ == nullptr ? nullptr : &limits_->header().suspension;
}

Region::~Region() { munmap(base_, layout::kRegionSize); }

DeviceEntry& Region::device(uint32_t index) const {
  return reinterpret_cast<DeviceEntry*>(static_cast<char*>(base_) + layout::kDevicesOffset)[index];
}

ProcessSlot& Region::slot(uint32_t index) const {
  return reinterpret_cast<ProcessSlot*>(static_cast<char*>(base_) +
                                        layout::kProcessesOffset)[index];
}

Result<std::unique_ptr<Region>> Region::Create(const std::string& path,
                                               const RegionOptions& options) {
  if ((options.mode & 0022) != 0 || (options.mode & 0600) != 0600) {
    return core::InvalidArgumentError("region mode must give the owner read/write and nobody "
                                      "else write access");
  }
  if (options.devices.size() > layout::kMaxDevices) {
    return core::InvalidArgumentError("a slice has at most 16 devices");
  }
  if (options.name.size() >= layout::kNameBytes) {
    return core::InvalidArgumentError("slice name '" + options.name + "' is longer than 63 bytes");
  }
  for (size_t i = 0; i < options.devices.size(); ++i) {
    GPUSLICE_RETURN_IF_ERROR(CheckUuid(options.devices[i].uuid));
    for (size_t j = 0; j < i; ++j) {
      if (SameUuid(options.devices[i].uuid, options.devices[j].uuid)) {
        return core::InvalidArgumentError("device " + options.devices[i].uuid +
                                          " is listed twice");
      }
    }
  }

  char tmp[4096];
  std::snprintf(tmp, sizeof(tmp), "%s.tmp.%d.%llu", path.c_str(), int(getpid()),
                static_cast<unsigned long long>(UnixNanos()));
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
  if (int e = AllocateFile(fd, layout::kRegionSize); e != 0) {
    close(fd);
    unlink(tmp);
    return PosixError("allocate " + std::string(tmp), e);
  }
  void* base = mmap(nullptr, layout::kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(tmp);
    return PosixError("map " + std::string(tmp), err);
  }
  std::unique_ptr<Region> region(new Region(path, base));
  layout::RegionHeader& h = region->header();
  h.version = layout::kRegionVersion;
  h.header_size = layout::kHeaderSize;
  h.total_size = layout::kRegionSize;
  h.device_capacity = layout::kMaxDevices;
  h.process_capacity = layout::kMaxProcesses;
  h.device_entry_size = layout::kDeviceEntrySize;
  h.process_slot_size = layout::kProcessSlotSize;
  h.devices_offset = layout::kDevicesOffset;
  h.processes_offset = layout::kProcessesOffset;
  h.owner_uid = geteuid();
  h.flags = options.closed ? layout::kFlagClosed : 0;
  h.created_unix_ns = UnixNanos();
  h.creator_pid = getpid();
  std::memcpy(h.slice_name, options.name.data(), options.name.size());
  for (size_t i = 0; i < options.devices.size(); ++i) {
    DeviceEntry& d = region->device(uint32_t(i));
    std::memcpy(d.uuid, options.devices[i].uuid.data(), options.devices[i].uuid.size());
    d.limit_bytes.store(options.devices[i].limit_bytes, std::memory_order_relaxed);
    d.owner.store(layout::MakeOwner(getpid(), layout::kEntryReady), std::memory_order_relaxed);
  }
  // Release: whoever maps the file and sees the magic sees everything above.
  h.magic.store(layout::kRegionMagic, std::memory_order_release);

  if (link(tmp, path.c_str()) != 0) {
    err = errno;
    unlink(tmp);
    return PosixError("publish region " + path, err);
  }
  unlink(tmp);
  return region;
}

Result<std::unique_ptr<Region>> Region::Open(const std::string& path, uint32_t shared_gid) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return PosixError("open region " + path, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    Status s = PosixError("stat region " + path, errno);
    close(fd);
    return s;
  }
  auto fail = [&](Status s) {
    close(fd);
    return s;
  };
  if (!S_ISREG(st.st_mode)) return fail(core::InvalidArgumentError(path + " is not a file"));
  // The slice's own group, as the daemon's page names it: writable by that
  // group and nobody else.
  const bool shared = shared_gid != 0 && st.st_gid == shared_gid && (st.st_mode & 0002) == 0;
  if (st.st_uid != geteuid() && geteuid() != 0 && !shared) {
    return fail(core::PermissionDeniedError("region " + path + " belongs to uid " +
                                            std::to_string(st.st_uid) + ", not to us"));
  }
  if ((st.st_mode & 0022) != 0 && !shared) {
    return fail(core::PermissionDeniedError("region " + path +
                                            " is writable by group or others; refusing it"));
  }
  if (uint64_t(st.st_size) != layout::kRegionSize) {
    return fail(core::FailedPreconditionError(
        "region " + path + " has size " + std::to_string(st.st_size) + ", expected " +
        std::to_string(layout::kRegionSize) + " (different version?)"));
  }
  void* base = mmap(nullptr, layout::kRegionSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return PosixError("map region " + path, err);
  std::unique_ptr<Region> region(new Region(path, base));
  const layout::RegionHeader& h = region->header();
  // Acquire: pairs with the creator's release store of the magic.
  if (h.magic.load(std::memory_order_acquire) != layout::kRegionMagic) {
    return core::FailedPreconditionError("region " + path + " has a bad magic number");
  }
  if (h.version != layout::kRegionVersion || h.header_size != layout::kHeaderSize ||
      h.total_size != layout::kRegionSize || h.device_capacity != layout::kMaxDevices ||
      h.process_capacity != layout::kMaxProcesses ||
      h.device_entry_size != layout::kDeviceEntrySize ||
      h.process_slot_size != layout::kProcessSlotSize ||
      h.devices_offset != layout::kDevicesOffset ||
      h.processes_offset != layout::kProcessesOffset) {
    return core::FailedPreconditionError("region " + path + " has version " +
                                         std::to_string(h.version) + " or a layout this build (" +
                                         std::to_string(layout::kRegionVersion) +
                                         ") does not understand");
  }
  return region;
}

Result<std::unique_ptr<Region>> Region::OpenOrCreate(const std::string& path,
                                                     const RegionOptions& options) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<std::unique_ptr<Region>> opened = Open(path);
    if (opened.ok() || opened.status().code() != core::StatusCode::kNotFound) return opened;
    Result<std::unique_ptr<Region>> created = Create(path, options);
    if (created.ok() || created.status().code() != core::StatusCode::kAlreadyExists) {
      return created;
    }
    // Lost the race: another process published first; open theirs.
  }
  return core::UnavailableError("region " + path + " keeps appearing and disappearing");
}

Status Region::Remove(const std::string& path) {
  if (unlink(path.c_str()) != 0) return PosixError("remove region " + path, errno);
  return Status::Ok();
}

Result<uint32_t> Region::FindDevice(std::string_view uuid) const {
  for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
    const DeviceEntry& d = device(i);
    // Acquire: pairs with the release that made the entry ready, so the
    // UUID we compare is the one the claimer wrote.
    if (layout::OwnerState(d.owner.load(std::memory_order_acquire)) == layout::kEntryReady &&
        SameUuid(d.uuid, uuid)) {
      return i;
    }
  }
  return core::NotFoundError("device " + std::string(uuid) + " is not part of slice " + path_);
}

Result<uint32_t> Region::FindOrAddDevice(std::string_view uuid, uint64_t limit_bytes) {
  GPUSLICE_RETURN_IF_ERROR(CheckUuid(uuid));
  const int32_t me = getpid();
  // Bounded: claims in progress take microseconds; a claimer that died is
  // detected by pid and its claim undone. 2000 x 1 ms is a generous cap.
  for (int round = 0; round < 2000; ++round) {
    bool pending = false;
    int32_t free_index = -1;
    // The state words below use seq_cst: two claimers of the same UUID each
    // store "named" and then scan, and seq_cst guarantees at least one of
    // them sees the other, so the rule "the lower index wins" settles it.
    for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
      DeviceEntry& d = device(i);
      uint64_t owner = d.owner.load(std::memory_order_seq_cst);
      layout::EntryState state = layout::OwnerState(owner);
      if (state == layout::kEntryReady && SameUuid(d.uuid, uuid)) return i;
      if (state == layout::kEntryClaiming || state == layout::kEntryNamed) {
        if (!RealProcessProbe().IsAlive(layout::OwnerPid(owner), 0)) {
          d.owner.compare_exchange_strong(owner, 0, std::memory_order_seq_cst);
        }
        pending = true;
      }
      if (state == layout::kEntryEmpty && free_index < 0) free_index = int32_t(i);
    }
    if (closed()) {
      return core::NotFoundError("device " + std::string(uuid) + " is not part of slice " +
                                 path_);
    }
    if (pending) {
      SleepMillis(1);
      continue;
    }
    if (free_index < 0) {
      return core::ResourceExhaustedError("slice " + path_ + " already has 16 devices");
    }
    DeviceEntry& d = device(uint32_t(free_index));
    uint64_t expected = 0;
    if (!d.owner.compare_exchange_strong(expected, layout::MakeOwner(me, layout::kEntryClaiming),
                                         std::memory_order_seq_cst)) {
      continue;  // Someone took that entry; look again.
    }
    std::memset(d.uuid, 0, sizeof(d.uuid));
    std::memcpy(d.uuid, uuid.data(), uuid.size());
    d.limit_bytes.store(limit_bytes, std::memory_order_relaxed);
    d.used_bytes.store(0, std::memory_order_relaxed);
    d.peak_bytes.store(0, std::memory_order_relaxed);
    d.owner.store(layout::MakeOwner(me, layout::kEntryNamed), std::memory_order_seq_cst);
    bool lost = false;
    bool wait = false;
    for (uint32_t i = 0; i < uint32_t(free_index); ++i) {
      layout::EntryState s = layout::OwnerState(device(i).owner.load(std::memory_order_seq_cst));
      if (s == layout::kEntryClaiming) wait = true;
      if ((s == layout::kEntryNamed || s == layout::kEntryReady) &&
          SameUuid(device(i).uuid, uuid)) {
        lost = true;
      }
    }
    if (lost || wait) {
      // Give the entry back and start over: either a lower entry for the
      // same UUID exists, or one is being filled in and might be it.
      d.owner.store(0, std::memory_order_seq_cst);
      if (wait) SleepMillis(1);
      continue;
    }
    d.owner.store(layout::MakeOwner(me, layout::kEntryReady), std::memory_order_seq_cst);
    return uint32_t(free_index);
  }
  return core::UnavailableError("gave up adding device " + std::string(uuid) + " to slice " +
                                path_ + ": other processes keep claiming entries");
}

Status Region::SetLimit(std::string_view uuid, uint64_t limit_bytes) {
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t index, FindDevice(uuid));
  // Relaxed is enough for the limit itself (admission.h); the generation is
  // released after it so a reader that sees the new generation sees the new
  // limit.
  device(index).limit_bytes.store(limit_bytes, std::memory_order_relaxed);
  header_->limits_generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status Region::SetComputeShare(std::string_view uuid, uint32_t share_milli, ComputeMode mode,
                               core::Priority priority) {
  if (share_milli > 1000) {
    return core::InvalidArgumentError("compute share " + std::to_string(share_milli) +
                                      "/1000 is above 100%");
  }
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t index, FindDevice(uuid));
  layout::DeviceEntry& d = device(index);
  // Mode and priority before the share (release), so a process that reads
  // the new share with acquire sees the settings that go with it; the
  // processes' gates pick it up within one tick (docs/COMPUTE.md).
  d.compute_mode.store(mode == ComputeMode::kWorkConserving ? 2u : 0u, std::memory_order_relaxed);
  d.priority.store(uint32_t(priority) + 1, std::memory_order_relaxed);
  d.compute_share_milli.store(share_milli, std::memory_order_release);
  header_->limits_generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

Status Region::SetLaunchesPaused(std::string_view uuid, bool paused) {
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t index, FindDevice(uuid));
  // Release, paired with the gate's acquire: nothing else is published with
  // the flag, but a gate that sees it cleared must not act on older state.
  device(index).launches_paused.store(paused ? 1u : 0u, std::memory_order_release);
  return Status::Ok();
}

Status Region::RenameDevice(std::string_view from, std::string_view to) {
  GPUSLICE_RETURN_IF_ERROR(CheckUuid(to));
  GPUSLICE_ASSIGN_OR_RETURN(uint32_t index, FindDevice(from));
  if (SameUuid(from, to)) return Status::Ok();
  if (FindDevice(to).ok()) {
    return core::AlreadyExistsError("device " + std::string(to) + " is part of slice " + path_ +
                                    " already");
  }
  // Plain bytes: the job's processes are checkpointed while the daemon
  // renames, and this copy decides nothing (the limits page does).
  DeviceEntry& d = device(index);
  std::memset(d.uuid, 0, sizeof(d.uuid));
  std::memcpy(d.uuid, to.data(), to.size());
  header_->limits_generation.fetch_add(1, std::memory_order_release);
  return Status::Ok();
}

bool Region::PlacementOf(uint32_t index, std::string* uuid, uint32_t* placement) const {
  if (index >= layout::kMaxDevices) return false;
  if (limits_ != nullptr && page_index_[index] >= 0) {
    return limits_->ReadPlacement(uint32_t(page_index_[index]), uuid, placement);
  }
  const DeviceEntry& d = device(index);
  *uuid = std::string(d.uuid, strnlen(d.uuid, sizeof(d.uuid)));
  *placement = 0;
  return true;
}

uint32_t Region::PlacementSeqOf(uint32_t index) const {
  if (index >= layout::kMaxDevices || limits_ == nullptr || page_index_[index] < 0) return 0;
  return limits_->entry(uint32_t(page_index_[index])).placement.load(std::memory_order_acquire);
}

Result<uint32_t> Region::ClaimSlot(int32_t pid, uint64_t start_time) {
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < layout::kMaxProcesses; ++i) {
      ProcessSlot& s = slot(i);
      uint64_t expected = 0;
      if (s.owner.load(std::memory_order_relaxed) != 0) continue;
      // Acquire: we must see the zeroed counters the previous owner's
      // reclaimer released along with the free state.
      if (!s.owner.compare_exchange_strong(expected,
                                           layout::MakeOwner(pid, layout::kEntryClaiming),
                                           std::memory_order_acq_rel)) {
        continue;
      }
      s.start_time = start_time;
      s.pid_ns = OwnPidNamespace();
      s.claimed_unix_ns = UnixNanos();
      for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
        s.used_bytes[d].store(0, std::memory_order_relaxed);
        s.overhead_bytes[d].store(0, std::memory_order_relaxed);
        s.launches[d].store(0, std::memory_order_relaxed);
        s.busy_ns[d].store(0, std::memory_order_relaxed);
      }
      // Release: the fields above are visible to whoever sees "ready".
      s.owner.store(layout::MakeOwner(pid, layout::kEntryReady), std::memory_order_release);
      header_->slot_claims.fetch_add(1, std::memory_order_acq_rel);
      return i;
    }
    if (pass == 0 && Sweep(RealProcessProbe()) == 0) break;
  }
  return core::ResourceExhaustedError("slice " + path_ + " already has " +
                                      std::to_string(layout::kMaxProcesses) + " live processes");
}

bool Region::Reclaim(uint32_t index, uint64_t owner) {
  ProcessSlot& s = slot(index);
  // Acquire: we read the counters the dead (or exiting) owner wrote.
  if (!s.owner.compare_exchange_strong(
          owner, layout::MakeOwner(layout::OwnerPid(owner), layout::kEntryReclaiming),
          std::memory_order_acq_rel)) {
    return false;  // Someone else reclaimed it, or its state moved on.
  }
  for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
    uint64_t used = s.used_bytes[d].exchange(0, std::memory_order_relaxed);
    if (used != 0) SaturatingSub(device(d).used_bytes, used);
    s.overhead_bytes[d].store(0, std::memory_order_relaxed);
  }
  s.start_time = 0;
  s.pid_ns = 0;
  // Release: the next claimer sees zeroed counters.
  s.owner.store(0, std::memory_order_release);
  return true;
}

void Region::ReleaseSlot(uint32_t index, int32_t pid) {
  if (index >= layout::kMaxProcesses) return;
  Reclaim(index, layout::MakeOwner(pid, layout::kEntryReady));
}

uint32_t Region::Sweep(const ProcessProbe& probe) {
  uint32_t reclaimed = 0;
  for (uint32_t i = 0; i < layout::kMaxProcesses; ++i) {
    ProcessSlot& s = slot(i);
    uint64_t owner = s.owner.load(std::memory_order_acquire);
    layout::EntryState state = layout::OwnerState(owner);
    if (state != layout::kEntryReady && state != layout::kEntryClaiming) continue;
    uint64_t start = state == layout::kEntryReady ? s.start_time : 0;
    if (state == layout::kEntryReady && s.pid_ns != 0 && s.pid_ns != OwnPidNamespace()) {
      // Another PID namespace's process: its pid means nothing here. Only a
      // reader that can see it gone reclaims its slot.
      if (LivenessOf(s.pid_ns, layout::OwnerPid(owner), start) != Liveness::kDead) continue;
    } else if (probe.IsAlive(layout::OwnerPid(owner), start)) {
      continue;
    }
    if (Reclaim(i, owner)) ++reclaimed;
  }
  return reclaimed;
}

std::vector<DeviceUsage> Region::Devices() const {
  std::vector<DeviceUsage> out;
  for (uint32_t i = 0; i < layout::kMaxDevices; ++i) {
    const DeviceEntry& d = device(i);
    if (layout::OwnerState(d.owner.load(std::memory_order_acquire)) != layout::kEntryReady) {
      continue;
    }
    DeviceUsage u;
    u.index = i;
    u.uuid = std::string(d.uuid, strnlen(d.uuid, sizeof(d.uuid)));
    u.limit_bytes = LimitOf(i);
    u.used_bytes = d.used_bytes.load(std::memory_order_relaxed);
    u.peak_bytes = d.peak_bytes.load(std::memory_order_relaxed);
    u.refused_allocs = d.refused_allocs.load(std::memory_order_relaxed);
    u.throttled_ns = d.throttled_ns.load(std::memory_order_relaxed);
    u.launches_paused = LaunchesPausedOf(i);
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<ProcessUsage> Region::Processes() const {
  std::vector<ProcessUsage> out;
  for (uint32_t i = 0; i < layout::kMaxProcesses; ++i) {
    const ProcessSlot& s = slot(i);
    uint64_t owner = s.owner.load(std::memory_order_acquire);
    if (layout::OwnerState(owner) != layout::kEntryReady) continue;
    ProcessUsage u;
    u.slot = i;
    u.pid = layout::OwnerPid(owner);
    if (s.pid_ns != 0 && s.pid_ns != OwnPidNamespace()) {
      // Named by the reader's pids, as NVML names them.
      pid_t visible = VisiblePid(s.pid_ns, u.pid, s.start_time);
      if (visible != 0) u.pid = visible;
    }
    for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
      u.used_bytes[d] = s.used_bytes[d].load(std::memory_order_relaxed);
      u.overhead_bytes[d] = s.overhead_bytes[d].load(std::memory_order_relaxed);
    }
    out.push_back(u);
  }
  return out;
}

}  // namespace gpuslice::slice
