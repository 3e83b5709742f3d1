#include "shim/context_admission.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "shim/base/context_charge.h"
#include "shim/driver.h"
#include "shim/base/log.h"
#include "slice/region/region.h"
#include "shim/shim_state.h"

namespace gpuslice::shim {
namespace {

constexpr int kMaxOrdinals = ContextLedger::kMaxOrdinals;

// How long a creator, or an allocation that did not fit, waits for the
// slice's learner. A first context on a real GPU takes tens of milliseconds,
// seconds where the driver must first bring the GPU up (no persistence
// mode); a learner still alive after this long is stuck, and waiting longer
// would only hang the waiter too.
constexpr int kLearnerWaitMs = 30000;
// While waiting, dead processes are swept this often, so that a learner
// killed mid-creation gives its claim and its hold on the room back.
constexpr int kSweepEveryMs = 50;

// Serialises this process's context bookkeeping and its resyncs (the slot's
// overhead_bytes has one writer at a time). A spin guard held at most for
// one NVML query and a few driver queries, on context and module events
// only, never by an allocation; cleared in a forked child.
std::atomic<bool> g_busy{false};
ContextLedger g_ledger;  // Guarded by g_busy.

// This thread is creating its slice's first context on a device: it must
// never wait for the learner, itself.
thread_local bool t_learning __attribute__((tls_model("initial-exec"))) = false;

class Guard {
 public:
  // Acquire/release: the ledger and the slot's overhead as the previous
  // holder left them.
  Guard() {
    while (g_busy.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  ~Guard() { g_busy.store(false, std::memory_order_release); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

enum class PrimaryState { kActive, kInactive, kUnknown };

PrimaryState StateOfPrimary(CUdevice ordinal) {
  auto get_state = Extras().cuDevicePrimaryCtxGetState;
  unsigned int flags = 0;
  int active = 0;
  if (get_state == nullptr || get_state(ordinal, &flags, &active) != CUDA_SUCCESS) {
    return PrimaryState::kUnknown;
  }
  return active != 0 ? PrimaryState::kActive : PrimaryState::kInactive;
}

// NVML's figure for this process on slice device `dev`, less what the shim
// charged for allocations: the driver memory the process holds there. False
// when NVML cannot tell: no NVML, no per-process figure for this process
// (NVML_VALUE_NOT_AVAILABLE, as under MIG), or, with `listed`, this process
// not in the list at all (a PID namespace NVML does not see: the figure
// would read 0 whatever the process holds).
bool DriverMemoryLocked(int dev, bool listed, uint64_t* driver) {
  const NvmlFunctions* nvml = NvmlForOwnUse();
  if (nvml == nullptr) return false;
  nvmlDevice_t handle = nullptr;
  if (nvml->nvmlDeviceGetHandleByUUID(SliceDevice(dev).uuid, &handle) != NVML_SUCCESS) {
    return false;
  }
  static nvmlProcessInfo_t infos[256];  // Guarded by g_busy.
  unsigned int count = 256;
  if (nvml->nvmlDeviceGetComputeRunningProcesses_v3(handle, &count, infos) != NVML_SUCCESS) {
    return false;
  }
  const unsigned int me = unsigned(getpid());
  uint64_t used = 0;
  bool found = false;
  for (unsigned int i = 0; i < count && i < 256; ++i) {
    if (infos[i].pid != me) continue;
    if (infos[i].usedGpuMemory == ~0ull) return false;
    used += infos[i].usedGpuMemory;
    found = true;
  }
  if (listed && !found) return false;
  const slice::layout::ProcessSlot& slot = OwnSlot();
  *driver = DriverMemoryTarget(used, slot.used_bytes[dev].load(std::memory_order_relaxed),
                               slot.overhead_bytes[dev].load(std::memory_order_relaxed), 0);
  return true;
}

// What this process holds on `dev` that NVML cannot show: reservations of
// creations under way, and primary contexts it still retains that a reset
// took down (the driver re-creates them on their next use, which no hook
// sees, so their charge stays).
uint64_t UnseenLocked(int dev) {
  uint64_t unseen = g_ledger.pending(dev);
  for (int o = 0; o < kMaxOrdinals; ++o) {
    const ContextLedger::Primary& p = g_ledger.primary(o);
    if (p.dev == dev && p.refs > 0 && p.bytes > 0 && StateOfPrimary(o) == PrimaryState::kInactive) {
      unseen += p.bytes;
    }
  }
  return unseen;
}

bool ResyncLocked(int dev) {
  if (!HaveSlot() || dev < 0) return false;
  uint64_t driver = 0;
  if (!DriverMemoryLocked(dev, /*listed=*/false, &driver)) return false;
  SetDriverMemory(SliceDevice(dev), OwnSlot(), uint32_t(dev), driver + UnseenLocked(dev));
  return true;
}

// A learner is alive while the slot it named is still its own: a dead
// learner's slot is reclaimed by a sweep (or freed at exit), which changes
// the owner word.
bool LearnerAlive(uint64_t word) {
  const uint32_t slot = LearnerSlot(word);
  if (slot >= slice::layout::kMaxProcesses) return false;  // No shim writes that: clear it.
  return SliceRegion()->slot(slot).owner.load(std::memory_order_relaxed) ==
         slice::layout::MakeOwner(LearnerPid(word), slice::layout::kEntryReady);
}

// Waits while another creation learns `dev`'s context size. True once
// nobody learns (the size is known, or the learner gave up or died); false
// after kLearnerWaitMs.
bool WaitWhileLearning(int dev) {
  slice::layout::DeviceEntry& entry = SliceDevice(dev);
  for (int ms = 0;; ++ms) {
    const uint64_t word = entry.context_learner.load(std::memory_order_acquire);
    if (!IsLearning(word)) return true;
    if (!LearnerAlive(word)) {
      AbandonLearning(entry, word);
      continue;
    }
    if (ms >= kLearnerWaitMs) return false;
    if (ms % kSweepEveryMs == kSweepEveryMs - 1) SliceRegion()->Sweep(slice::RealProcessProbe());
    timespec one_ms{0, 1000000};
    nanosleep(&one_ms, nullptr);
  }
}

bool OverLimit(int dev, bool grew) {
  const uint64_t limit = SliceLimit(dev);
  return grew && limit != slice::layout::kUnlimited && SliceUsed(dev) > limit;
}

// Reserves for a context about to be created on slice device `dev`.
CUresult Reserve(int dev, ContextTicket* t) {
  slice::layout::DeviceEntry& entry = SliceDevice(dev);
  slice::layout::ProcessSlot& slot = OwnSlot();
  const uint32_t d = uint32_t(dev);
  while (true) {
    uint64_t size = 0;
    if (LearntContextSize(entry, &size)) {
      for (int attempt = 0; attempt < 2; ++attempt) {
        if (attempt == 1)
          SliceRegion()->Sweep(slice::RealProcessProbe());  // Dead processes' memory.
        Guard guard;
        if (TryReserveContext(entry, slot, d, size, SliceLimit(dev))) {
          // A process's first context on the device is charged the learnt
          // size as it is; any other is measured after its creation.
          t->measure = g_ledger.HoldsContextOn(dev);
          t->reserved = size;
          g_ledger.AddPending(dev, size);
          return CUDA_SUCCESS;
        }
      }
      slice::CountRefusal(entry);
      GPUSLICE_LOG(kDebug, "a context of %llu bytes does not fit in slice device %d",
                   static_cast<unsigned long long>(size), dev);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const uint64_t limit = SliceLimit(dev);
    const uint64_t word = LearnerWord(int32_t(getpid()), OwnSlotIndex());
    if (ClaimLearning(entry, word)) {
      t->learner = true;
      t->learner_word = word;
      t->measure = true;
      t_learning = true;
      Guard guard;
      t->measured_before = DriverMemoryLocked(dev, /*listed=*/false, &t->driver_before);
      // The context's size is unknown: hold all the room left, so that
      // nothing else of the slice is admitted beside it whatever it takes.
      t->reserved = limit == slice::layout::kUnlimited ? 0 : ReserveHeadroom(entry, slot, d, limit);
      g_ledger.AddPending(dev, t->reserved);
      return CUDA_SUCCESS;
    }
    if (limit == slice::layout::kUnlimited) {
      t->measure = true;  // Nothing to protect: counted from NVML afterwards.
      return CUDA_SUCCESS;
    }
    if (!WaitWhileLearning(dev)) {
      slice::CountRefusal(entry);
      GPUSLICE_LOG(kWarn,
                   "the slice's first context on device %d has been in creation for %d s; "
                   "refusing this one",
                   dev, kLearnerWaitMs / 1000);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
}

// Under the guard: turns ticket `t`'s reservation into the charge of the
// context it created and returns that charge (what its destroy returns).
// `grew`: the slice now holds more for it than was reserved.
uint64_t SettleLocked(const ContextTicket& t, bool* grew) {
  slice::layout::DeviceEntry& entry = SliceDevice(t.dev);
  slice::layout::ProcessSlot& slot = OwnSlot();
  const uint32_t d = uint32_t(t.dev);
  g_ledger.SubPending(t.dev, t.reserved);
  *grew = false;
  if (t.learner) {
    uint64_t after = 0;
    // The process must be listed now: it holds a context.
    if (!t.measured_before || !DriverMemoryLocked(t.dev, /*listed=*/true, &after)) {
      // NVML cannot tell: the context is not counted (docs/SHIM.md) and
      // the size stays unknown, for the next creator to learn.
      SettleContext(entry, slot, d, t.reserved, 0);
      AbandonLearning(entry, t.learner_word);
      return 0;
    }
    const uint64_t size = after > t.driver_before ? after - t.driver_before : 0;
    SettleContext(entry, slot, d, t.reserved, size);
    PublishContextSize(entry, t.learner_word, size);
    *grew = size > t.reserved;
    return size;
  }
  if (t.measure) {
    const uint64_t before = slot.overhead_bytes[d].load(std::memory_order_relaxed);
    ResyncLocked(t.dev);  // The reservation is no longer pending: NVML shows the context.
    *grew = slot.overhead_bytes[d].load(std::memory_order_relaxed) > before;
  }
  return t.reserved;
}

}  // namespace

CUresult ReserveCreatedContext(CUdevice ordinal, ContextTicket* ticket) {
  ticket->dev = SliceDeviceForOrdinal(ordinal);
  // kNoContext: the driver is not initialised and will refuse the creation
  // itself; kRefused: a device outside the slice, which is not counted.
  if (ticket->dev < 0) return CUDA_SUCCESS;
  if (!HaveSlot()) return CUDA_ERROR_OUT_OF_MEMORY;  // A context is memory too.
  {
    Guard guard;
    if (!g_ledger.HasRoomForCreated()) {
      GPUSLICE_LOG(kWarn, "more than %d live contexts in one process; refusing another",
                   ContextLedger::kMaxCreated);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  return Reserve(ticket->dev, ticket);
}

CUresult ReservePrimaryContext(CUdevice ordinal, ContextTicket* ticket) {
  ticket->dev = SliceDeviceForOrdinal(ordinal);
  if (ticket->dev < 0) return CUDA_SUCCESS;
  if (!HaveSlot()) return CUDA_ERROR_OUT_OF_MEMORY;
  {
    Guard guard;
    if (g_ledger.primary(ordinal).dev >= 0) {
      ticket->existing = true;  // Charged already (live, or reset and still retained).
      return CUDA_SUCCESS;
    }
  }
  if (StateOfPrimary(ordinal) == PrimaryState::kActive) {
    ticket->existing = true;
    return CUDA_SUCCESS;
  }
  return Reserve(ticket->dev, ticket);
}

void CancelContext(const ContextTicket& ticket) {
  if (ticket.dev < 0 || ticket.existing) return;
  {
    Guard guard;
    g_ledger.SubPending(ticket.dev, ticket.reserved);
    ReturnContext(SliceDevice(ticket.dev), OwnSlot(), uint32_t(ticket.dev), ticket.reserved);
  }
  // After the room is back, so that a waiter wakes to find it.
  if (ticket.learner) AbandonLearning(SliceDevice(ticket.dev), ticket.learner_word);
  t_learning = false;
}

bool SettleCreatedContext(const ContextTicket& ticket, CUcontext ctx) {
  if (ticket.dev < 0) return true;
  bool grew = false;
  {
    Guard guard;
    const uint64_t charge = SettleLocked(ticket, &grew);
    // Room was checked before the creation; were the ledger full now (other
    // threads), the charge stays unrecorded and the resync after the
    // destroy returns it instead.
    (void)g_ledger.AddCreated(reinterpret_cast<uint64_t>(ctx), ticket.dev, charge);
  }
  t_learning = false;
  return !OverLimit(ticket.dev, grew);
}

bool SettlePrimaryContext(const ContextTicket& ticket, CUdevice ordinal) {
  if (ticket.dev < 0) return true;
  bool grew = false;
  {
    Guard guard;
    ContextLedger::Primary& p = g_ledger.primary(ordinal);
    ++p.refs;
    if (ticket.existing) {
      // A live context nobody charged here (retained before the shim
      // counted, or through a route it does not see): learn it.
      if (p.dev < 0) ResyncLocked(ticket.dev);
    } else if (p.dev >= 0) {
      // Another thread's retain created and charged it first.
      g_ledger.SubPending(ticket.dev, ticket.reserved);
      ReturnContext(SliceDevice(ticket.dev), OwnSlot(), uint32_t(ticket.dev), ticket.reserved);
      if (ticket.learner) AbandonLearning(SliceDevice(ticket.dev), ticket.learner_word);
    } else {
      p.bytes = SettleLocked(ticket, &grew);
      p.dev = ticket.dev;
    }
  }
  t_learning = false;
  return !OverLimit(ticket.dev, grew);
}

ContextRecord TakeCreatedContext(CUcontext ctx) {
  ContextRecord record;
  Guard guard;
  int dev = -1;
  uint64_t bytes = 0;
  if (g_ledger.TakeCreated(reinterpret_cast<uint64_t>(ctx), &dev, &bytes)) {
    record.dev = dev;
    record.bytes = bytes;
  }
  return record;
}

void RestoreCreatedContext(CUcontext ctx, const ContextRecord& record) {
  if (record.dev < 0) return;
  Guard guard;
  (void)g_ledger.AddCreated(reinterpret_cast<uint64_t>(ctx), record.dev, record.bytes);
}

void ReturnCreatedContext(const ContextRecord& record) {
  if (record.dev < 0 || !HaveSlot()) return;
  Guard guard;
  ReturnContext(SliceDevice(record.dev), OwnSlot(), uint32_t(record.dev), record.bytes);
}

void PrimaryContextReleased(CUdevice ordinal) {
  const int dev = SliceDeviceForOrdinal(ordinal);
  if (dev < 0 || !HaveSlot()) return;
  Guard guard;
  ContextLedger::Primary& p = g_ledger.primary(ordinal);
  if (p.refs > 0) --p.refs;
  // The last retain this process made is released: the driver destroys the
  // context (unless a route the shim does not see retained it too; the
  // resync below then counts it again).
  if (p.refs == 0 && p.dev >= 0) {
    ReturnContext(SliceDevice(p.dev), OwnSlot(), uint32_t(p.dev), p.bytes);
    p = ContextLedger::Primary{};
  }
  ResyncLocked(dev);
}

void PrimaryContextReset(CUdevice ordinal) {
  const int dev = SliceDeviceForOrdinal(ordinal);
  if (dev < 0 || !HaveSlot()) return;
  Guard guard;
  ContextLedger::Primary& p = g_ledger.primary(ordinal);
  // Still retained: the driver re-creates it on its next use, which no hook
  // sees, so the charge stays (UnseenLocked) until the last release.
  if (p.refs == 0 && p.dev >= 0) {
    ReturnContext(SliceDevice(p.dev), OwnSlot(), uint32_t(p.dev), p.bytes);
    p = ContextLedger::Primary{};
  }
  ResyncLocked(dev);
}

bool ResyncDriverMemory(int dev) {
  if (!HaveSlot() || dev < 0) return false;
  Guard guard;
  return ResyncLocked(dev);
}

bool WaitForContextLearner(int dev) {
  if (t_learning || dev < 0) return false;
  if (!IsLearning(SliceDevice(dev).context_learner.load(std::memory_order_acquire))) return false;
  return WaitWhileLearning(dev);
}

void ForgetContexts() {
  g_ledger.Clear();
  g_busy.store(false, std::memory_order_relaxed);
}

}  // namespace gpuslice::shim
