// The target's side of CUDA's checkpoint API (docs/SIMULATOR.md,
// "Checkpoint and restore"): a service thread, started by cuInit, takes the
// requests other processes post in this process's slot (CheckpointChannel)
// and locks, checkpoints, restores or unlocks this process's GPU state.
//
// Lock closes the gate of Driver::mu (API calls wait) and waits for work
// already submitted. Checkpoint moves every allocation's contents into host
// memory of this process and gives the device memory back: the device
// model's charges drop to zero, the address ranges stay reserved (empty), so
// device pointers are valid again after restore. Restore takes the charges
// again (on other GPUs when remapped) and moves the contents back.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "sim/checkpoint_channel.h"
#include "sim/driver/driver.h"
#include "sim/sim_clock.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4  // Linux 5.7; older C libraries lack the name.
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14.
#endif

namespace gpuslice::sim::driver {
namespace {

using layout::CheckpointState;

// How the contents of device memory (private anonymous mappings) reach host
// memory and come back. GPUSLICE_SIM_CHECKPOINT_TRANSFER:
// "copy" (default) copies into a new mapping and drops the device pages with
// MADV_DONTNEED, and copies back on restore: what the real driver does (its
// device memory is elsewhere), so a checkpoint takes time in proportion to
// the memory, as on a GPU. "copy-populate" also pre-faults the device range
// with MADV_POPULATE_WRITE before copying back. "move" hands the pages over
// with mremap(MREMAP_DONTUNMAP), no copy (the device range stays mapped and
// empty): about a millisecond whatever the size, for demos that should not
// wait; it falls back to copying where the kernel lacks MREMAP_DONTUNMAP
// (before 5.7).
enum class Transfer { kMove, kCopy, kCopyPopulate };

Transfer TransferFromEnvironment() {
  const char* v = std::getenv("GPUSLICE_SIM_CHECKPOINT_TRANSFER");
  if (v != nullptr && std::strcmp(v, "move") == 0) return Transfer::kMove;
  if (v != nullptr && std::strcmp(v, "copy-populate") == 0) return Transfer::kCopyPopulate;
  return Transfer::kCopy;
}

// Device memory backed by a private anonymous mapping: allocations of every
// kind but VMM, arrays.
struct SavedRange {
  void* device = nullptr;
  size_t size = 0;
  void* host = nullptr;
};

// A VMM physical allocation: its memfd's contents.
struct SavedPhysical {
  Physical* physical = nullptr;
  void* host = nullptr;
};

// What a checkpoint took away, to give back on restore.
struct Image {
  std::vector<SavedRange> ranges;
  std::vector<SavedPhysical> physicals;
  std::map<uint32_t, uint64_t> charges;  // Unit -> bytes charged there.
  std::map<uint32_t, int> contexts;      // Unit -> active contexts there.
};

void* MapHost(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // As device memory (driver.cc): large pages, so the copy is not a page
  // fault per 4 KiB.
  if (size >= (size_t{2} << 20)) (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

// Copies travel in chunks of one huge page, and each chunk's source pages
// are given back as soon as it is copied: the next chunk's destination (in
// huge pages, as device memory is) then gets the huge page just freed,
// which the machine has at hand, instead of memory it must provide afresh,
// and the process never holds the memory twice. Copying everything first
// and dropping the source after needed twice the memory, and on a virtual
// machine whose host takes back the guest's free memory (a balloon's free
// page reporting) every fresh page cost a fault in the host: a 2 GiB
// checkpoint took seconds where a copy between buffers already in memory
// takes a fraction of one. (Source memory the kernel gave small pages,
// having no huge page free when it was touched, frees no huge page: there
// the destination still gets fresh memory.)
constexpr size_t kChunk = size_t{2} << 20;

// The length of the chunk at `at`: up to the next chunk boundary of the
// address (so that a chunk's huge page is freed whole), at most `left`.
size_t ChunkAt(const char* at, size_t left) {
  const size_t to_boundary = kChunk - reinterpret_cast<uintptr_t>(at) % kChunk;
  return std::min(to_boundary, left);
}

// Device range -> host; null when there is no host memory for it (nothing
// changed then).
void* SaveRange(void* device, size_t size, Transfer how) {
  if (how == Transfer::kMove) {
    // new_address must be given (null: anywhere): with MREMAP_DONTUNMAP the
    // kernel checks it even without MREMAP_FIXED.
    void* host = mremap(device, size, size, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, nullptr);
    if (host != MAP_FAILED) return host;
    if (errno != EINVAL) return nullptr;  // EINVAL: no MREMAP_DONTUNMAP here; copy.
  }
  void* host = MapHost(size);
  if (host == nullptr) return nullptr;
  auto* from = static_cast<char*>(device);
  auto* to = static_cast<char*>(host);
  for (size_t done = 0, n = 0; done < size; done += n) {
    n = ChunkAt(from + done, size - done);
    std::memcpy(to + done, from + done, n);
    madvise(from + done, n, MADV_DONTNEED);  // The range stays reserved, empty.
  }
  return host;
}

// Host -> device range, freeing the host memory. Only a copy can fail (no
// memory to fault the device pages in): false, with the device range partly
// restored and the rest of the contents lost.
bool RestoreRange(void* host, void* device, size_t size, Transfer how) {
  if (how == Transfer::kMove) {
    void* r = mremap(host, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, device);
    if (r == device) return true;
  }
  auto* from = static_cast<char*>(host);
  auto* to = static_cast<char*>(device);
  bool ok = true;
  for (size_t done = 0, n = 0; done < size; done += n) {
    n = ChunkAt(from + done, size - done);
    if (how == Transfer::kCopyPopulate && madvise(to + done, n, MADV_POPULATE_WRITE) != 0 &&
        errno == ENOMEM) {
      ok = false;
      break;
    }
    std::memcpy(to + done, from + done, n);
    madvise(from + done, n, MADV_DONTNEED);
  }
  munmap(host, size);
  return ok;
}

bool ReadAll(int fd, void* buf, size_t size, off_t offset) {
  auto* p = static_cast<char*>(buf);
  for (size_t done = 0; done < size;) {
    ssize_t n = pread(fd, p + done, size - done, offset + static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool WriteAll(int fd, const void* buf, size_t size, off_t offset) {
  const auto* p = static_cast<const char*>(buf);
  for (size_t done = 0; done < size;) {
    ssize_t n = pwrite(fd, p + done, size - done, offset + static_cast<off_t>(done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// A VMM physical allocation's memfd -> host, in chunks, each punched out of
// the memfd once read (mappings of it read zeros until restore). On a failed
// read what was taken is written back and the result is null; `intact` says
// whether the memfd is as it was (false only if that write failed too).
void* SavePhysical(const Physical& p, bool* intact) {
  *intact = true;
  void* host = MapHost(p.size);
  if (host == nullptr) return nullptr;
  auto* to = static_cast<char*>(host);
  for (size_t done = 0, n = 0; done < p.size; done += n) {
    n = ChunkAt(to + done, p.size - done);
    const off_t at = static_cast<off_t>(done);
    if (!ReadAll(p.fd, to + done, n, at)) {
      *intact = WriteAll(p.fd, to, done, 0);
      munmap(host, p.size);
      return nullptr;
    }
    fallocate(p.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, static_cast<off_t>(n));
  }
  return host;
}

bool RestorePhysical(const Physical& p, void* host) {
  auto* from = static_cast<char*>(host);
  for (size_t done = 0, n = 0; done < p.size; done += n) {
    n = ChunkAt(from + done, p.size - done);
    if (!WriteAll(p.fd, from + done, n, static_cast<off_t>(done))) return false;
    madvise(from + done, n, MADV_DONTNEED);
  }
  munmap(host, p.size);
  return true;
}

// Whether a process may move from unit `from` to unit `to`: the same GPU
// model (name and compute capability) and, for MIG instances, the same
// profile.
bool SameModel(DeviceModel* model, uint32_t from, uint32_t to) {
  UnitInfo a = model->Unit(from), b = model->Unit(to);
  DeviceInfo da = model->Device(a.device), db = model->Device(b.device);
  if (da.name != db.name || da.cc_major != db.cc_major || da.cc_minor != db.cc_minor) return false;
  if ((a.mig_index < 0) != (b.mig_index < 0)) return false;
  if (a.mig_index >= 0 && da.mig[a.mig_index].profile != db.mig[b.mig_index].profile) return false;
  return true;
}

class Service {
 public:
  explicit Service(DeviceModel* model)
      : model_(model), channel_(model), transfer_(TransferFromEnvironment()) {}

  void Run() {
    tls_passes_checkpoint_gate = true;
    prctl(PR_SET_NAME, "gpuslice-ckpt", 0, 0, 0);
    channel_.SetServiceTid(static_cast<pid_t>(syscall(SYS_gettid)));
    while (true) {
      uint32_t seq = 0;
      CheckpointRequest req = channel_.Next(&seq);
      CUresult r;
      switch (req.op) {
        case layout::kCkptOpLock:
          r = Lock(req.timeout_ms);
          break;
        case layout::kCkptOpCheckpoint:
          r = Checkpoint();
          break;
        case layout::kCkptOpRestore:
          r = Restore(req.pairs);
          break;
        case layout::kCkptOpUnlock:
          r = Unlock();
          break;
        default:
          return;  // The process is exiting.
      }
      channel_.Answer(seq, static_cast<uint32_t>(r));
    }
  }

 private:
  void SetState(CheckpointState s) {
    state_ = s;
    channel_.SetState(s);
  }

  CUresult Lock(uint32_t timeout_ms) {
    if (state_ != layout::kCkptRunning) return CUDA_ERROR_ILLEGAL_STATE;
    Driver& drv = Driver::Get();
    const uint64_t now = MonotonicNs();
    const uint64_t deadline = timeout_ms == 0 ? 0 : now + uint64_t{timeout_ms} * 1000000;
    auto reopen = [&drv] {
      std::lock_guard<std::mutex> lock(drv.mu.native());
      drv.mu.OpenGate();
      return CUDA_ERROR_NOT_READY;
    };
    std::vector<std::pair<Executor*, uint64_t>> pending;
    {
      std::unique_lock<std::mutex> lock(drv.mu.native());
      // From here on no API thread gets the mutex, so nothing new is
      // submitted; synchronous copies already past it finish first.
      drv.mu.CloseGate();
      auto no_sync = [&drv] { return drv.sync_in_flight == 0; };
      if (deadline == 0) {
        drv.mu.cv().wait(lock, no_sync);
      } else if (!drv.mu.cv().wait_for(lock, std::chrono::nanoseconds(deadline - now), no_sync)) {
        drv.mu.OpenGate();
        return CUDA_ERROR_NOT_READY;
      }
      for (const auto& d : drv.devices) {
        if (d->executor) pending.emplace_back(d->executor.get(), d->executor->last_submitted());
      }
    }
    for (const auto& [exec, seq] : pending) {
      if (!exec->WaitFor(seq, deadline)) return reopen();
    }
    SetState(layout::kCkptLocked);
    return CUDA_SUCCESS;
  }

  CUresult Unlock() {
    if (state_ != layout::kCkptLocked) return CUDA_ERROR_ILLEGAL_STATE;
    Driver& drv = Driver::Get();
    SetState(layout::kCkptRunning);
    std::lock_guard<std::mutex> lock(drv.mu.native());
    drv.mu.OpenGate();
    return CUDA_SUCCESS;
  }

  CUresult Checkpoint() {
    if (state_ != layout::kCkptLocked) return CUDA_ERROR_ILLEGAL_STATE;
    Driver& drv = Driver::Get();
    std::lock_guard<std::mutex> lock(drv.mu.native());
    Image image;
    for (const auto& [base, a] : drv.allocations) {
      if (a.kind == AllocKind::kPhysical) continue;  // Its contents are the Physical's.
      image.ranges.push_back({a.mapping, a.mapping_size, nullptr});
      image.charges[a.unit] += a.charged;
    }
    for (const Array* a : drv.arrays) {
      image.ranges.push_back({reinterpret_cast<void*>(a->base), a->bytes, nullptr});
      image.charges[a->ctx->device->unit] += a->bytes;
    }
    for (Physical* p : drv.physicals) {
      image.physicals.push_back({p, nullptr});
      image.charges[p->unit] += p->size;
    }
    for (const Context* c : drv.contexts) {
      if (c->active) ++image.contexts[c->device->unit];
    }
    // Contents to host memory. Without host memory for all of it, what was
    // moved goes back and the process stays LOCKED (nothing lost).
    size_t moved = 0, saved = 0;
    bool ok = true;
    for (; moved < image.ranges.size(); ++moved) {
      SavedRange& r = image.ranges[moved];
      r.host = SaveRange(r.device, r.size, transfer_);
      if (r.host == nullptr) {
        ok = false;
        break;
      }
    }
    bool intact = true;  // False: a physical allocation could not be put back.
    for (; ok && saved < image.physicals.size(); ++saved) {
      SavedPhysical& p = image.physicals[saved];
      p.host = SavePhysical(*p.physical, &intact);
      if (p.host == nullptr) ok = false;
      if (!ok) break;
    }
    if (!ok) {
      bool undone = intact;
      for (size_t i = 0; i < moved; ++i) {
        const SavedRange& r = image.ranges[i];
        undone &= RestoreRange(r.host, r.device, r.size, transfer_);
      }
      for (size_t i = 0; i < saved; ++i) {
        undone &= RestorePhysical(*image.physicals[i].physical, image.physicals[i].host);
      }
      if (!undone) {
        SetState(layout::kCkptFailed);
        return CUDA_ERROR_UNKNOWN;
      }
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // The device memory is free: charges and contexts go.
    for (const auto& [unit, bytes] : image.charges) model_->ReleaseMemory(unit, bytes);
    for (const auto& [unit, n] : image.contexts) {
      for (int i = 0; i < n; ++i) model_->RemoveContext(unit);
    }
    image_ = std::move(image);
    SetState(layout::kCkptCheckpointed);
    return CUDA_SUCCESS;
  }

  CUresult Restore(const std::vector<std::pair<uint32_t, uint32_t>>& pairs) {
    if (state_ != layout::kCkptCheckpointed) return CUDA_ERROR_ILLEGAL_STATE;
    Driver& drv = Driver::Get();
    std::lock_guard<std::mutex> lock(drv.mu.native());
    std::map<uint32_t, uint32_t> remap(pairs.begin(), pairs.end());
    auto final_unit = [&remap](uint32_t u) {
      auto it = remap.find(u);
      return it == remap.end() ? u : it->second;
    };
    if (!remap.empty()) {
      // Every GPU the process had must be named, onto one of its model,
      // and no two of the process's devices may end on the same unit.
      std::set<uint32_t> had;
      for (const auto& [unit, bytes] : image_.charges) had.insert(unit);
      for (const auto& [unit, n] : image_.contexts) had.insert(unit);
      for (uint32_t unit : had) {
        if (remap.count(unit) == 0) return CUDA_ERROR_INVALID_VALUE;
      }
      for (const auto& [from, to] : remap) {
        if (!SameModel(model_, from, to)) return CUDA_ERROR_INVALID_VALUE;
      }
      std::set<uint32_t> ends;
      for (const auto& d : drv.devices) {
        if (!ends.insert(final_unit(d->unit)).second) return CUDA_ERROR_INVALID_VALUE;
      }
    }
    // The charges again, all or nothing: without room the process stays
    // CHECKPOINTED with nothing lost.
    std::vector<std::pair<uint32_t, uint64_t>> taken;
    std::vector<uint32_t> contexts_taken;
    auto give_back = [&] {
      for (const auto& [unit, bytes] : taken) model_->ReleaseMemory(unit, bytes);
      for (uint32_t unit : contexts_taken) model_->RemoveContext(unit);
      return CUDA_ERROR_OUT_OF_MEMORY;
    };
    for (const auto& [unit, bytes] : image_.charges) {
      if (bytes == 0) continue;
      if (!model_->ReserveMemory(final_unit(unit), bytes).ok()) return give_back();
      taken.emplace_back(final_unit(unit), bytes);
    }
    for (const auto& [unit, n] : image_.contexts) {
      for (int i = 0; i < n; ++i) {
        if (!model_->AddContext(final_unit(unit)).ok()) return give_back();
        contexts_taken.push_back(final_unit(unit));
      }
    }
    if (!remap.empty()) ApplyRemap(remap);
    bool ok = true;
    for (const SavedRange& r : image_.ranges) {
      ok &= RestoreRange(r.host, r.device, r.size, transfer_);
    }
    for (const SavedPhysical& p : image_.physicals) ok &= RestorePhysical(*p.physical, p.host);
    image_ = Image();
    if (!ok) {
      SetState(layout::kCkptFailed);
      return CUDA_ERROR_UNKNOWN;
    }
    SetState(layout::kCkptLocked);
    return CUDA_SUCCESS;
  }

  // The process's devices, memory and executors move to other units. Its
  // CUdevice ordinals stay; they name the new units from now on. Caller
  // holds Driver::mu's native mutex.
  void ApplyRemap(const std::map<uint32_t, uint32_t>& remap) {
    Driver& drv = Driver::Get();
    for (const auto& d : drv.devices) {
      auto it = remap.find(d->unit);
      if (it == remap.end() || it->second == d->unit) continue;
      d->unit = it->second;
      d->info = model_->Unit(d->unit);
      d->gpu = model_->Device(d->info.device);
      if (d->executor) d->executor->Rebind(d->unit);
    }
    for (auto& [base, a] : drv.allocations) {
      auto it = remap.find(a.unit);
      if (it != remap.end()) a.unit = it->second;
    }
    for (Physical* p : drv.physicals) {
      auto it = remap.find(p->unit);
      if (it != remap.end()) p->unit = it->second;
    }
    for (const auto& [from, to] : remap) {
      if (from != to) model_->ForgetUnit(from);
    }
  }

  DeviceModel* model_;
  CheckpointChannel channel_;
  const Transfer transfer_;
  CheckpointState state_ = layout::kCkptRunning;  // Service thread only.
  Image image_;                                   // While CHECKPOINTED.
};

}  // namespace

void StartCheckpointService() {
  auto* service = new Service(Driver::Get().model());  // Lives as long as the process.
  std::thread([service] { service->Run(); }).detach();
}

}  // namespace gpuslice::sim::driver
