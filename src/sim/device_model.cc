#include "sim/device_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "slice/base/pid_namespace.h"
#include "sim/process_liveness.h"
#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

using core::Status;
using layout::ProcessSlot;
using layout::ProcessUnit;
using layout::Sample;
using layout::SharedState;

// A new or freed slot: running, no request, no service thread.
void ResetCheckpointFields(ProcessSlot* s) {
  s->ckpt_state.store(layout::kCkptRunning, std::memory_order_relaxed);
  s->ckpt_request.store(0, std::memory_order_relaxed);
  s->ckpt_response.store(0, std::memory_order_relaxed);
  s->ckpt_timeout_ms = 0;
  s->ckpt_tid.store(0, std::memory_order_relaxed);
  s->ckpt_owner = 0;
  s->ckpt_owner_generation = 0;
  for (ProcessUnit& pu : s->units) pu.remap_to.store(0, std::memory_order_relaxed);
}

// A checkpointed process holds nothing on any GPU: NVML does not list it.
bool Checkpointed(const ProcessSlot& s) {
  return s.ckpt_state.load(std::memory_order_acquire) == layout::kCkptCheckpointed;
}

}  // namespace

std::string DeviceInfo::PciBusIdNvml() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08X:%02X:%02X.0", pci_domain, pci_bus, pci_device);
  return buf;
}

std::string DeviceInfo::PciBusIdCuda() const {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04X:%02X:%02X.0", pci_domain, pci_bus, pci_device);
  return buf;
}

DeviceModel::DeviceModel(std::string path, int fd, SharedState* state)
    : path_(std::move(path)), fd_(fd), state_(state), faults_(state), meter_(state) {}

DeviceModel::~DeviceModel() {
  munmap(state_, sizeof(SharedState));
  close(fd_);
}

uint32_t DeviceModel::device_count() const { return state_->header.device_count; }
uint32_t DeviceModel::unit_count() const { return state_->header.unit_count; }
uint64_t DeviceModel::quantum_ns() const { return state_->header.quantum_ns; }
uint64_t DeviceModel::context_bytes() const { return state_->header.context_bytes; }

DeviceInfo DeviceModel::Device(uint32_t device) const {
  const layout::DeviceRecord& r = state_->devices[device];
  DeviceInfo d;
  d.index = device;
  d.name = r.name;
  d.uuid = r.uuid;
  d.total_memory = r.total_memory;
  d.sm_count = r.sm_count;
  d.cc_major = r.cc_major;
  d.cc_minor = r.cc_minor;
  d.pci_domain = r.pci_domain;
  d.pci_bus = r.pci_bus;
  d.pci_device = r.pci_device;
  d.clock_khz = r.clock_khz;
  d.memory_clock_khz = r.memory_clock_khz;
  d.memory_bus_width = r.memory_bus_width;
  d.l2_cache_bytes = r.l2_cache_bytes;
  d.power_limit_mw = r.power_limit_mw;
  d.unit = r.unit;
  d.mig_capable = r.mig_capable != 0 || r.mig_count > 0;
  for (uint32_t m = 0; m < r.mig_count; ++m) {
    const layout::MigRecord& mr = r.mig[m];
    const layout::UnitRecord& u = state_->units[mr.unit];
    d.mig.push_back({m, mr.profile, u.uuid, mr.gpu_instance_id, mr.compute_instance_id,
                     u.memory_bytes, u.sm_count, mr.unit});
  }
  return d;
}

UnitInfo DeviceModel::Unit(uint32_t unit) const {
  const layout::UnitRecord& r = state_->units[unit];
  return {unit, r.device, r.mig_index, r.uuid, r.memory_bytes, r.sm_count};
}

void DeviceModel::Lock() {
  int rc = pthread_mutex_lock(&state_->header.lock);
  // The previous owner died holding the lock. Everything done under it is
  // idempotent bookkeeping (slot claim, reaping), so the state is usable.
  if (rc == EOWNERDEAD) pthread_mutex_consistent(&state_->header.lock);
}

void DeviceModel::Unlock() { pthread_mutex_unlock(&state_->header.lock); }

bool DeviceModel::SlotAlive(int slot) const {
  const ProcessSlot& s = state_->slots[slot];
  if (s.state.load(std::memory_order_acquire) != layout::kSlotLive) return false;
  if (s.pid_ns != 0 && s.pid_ns != slice::OwnPidNamespace()) {
    // A process of another PID namespace (a container, or the host seen from
    // one): alive unless the reader can see it is gone.
    return slice::LivenessOf(s.pid_ns, s.pid, s.start_time) != slice::Liveness::kDead;
  }
  return ProcessAlive(s.pid, s.start_time);
}

pid_t DeviceModel::VisiblePidOf(const ProcessSlot& s) const {
  if (s.pid_ns == 0 || s.pid_ns == slice::OwnPidNamespace()) return s.pid;
  // NVML names processes by the reader's pids (the real driver: the host's).
  pid_t visible = slice::VisiblePid(s.pid_ns, s.pid, s.start_time);
  return visible != 0 ? visible : s.pid;
}

void DeviceModel::FreeSlotLocked(int slot) {
  ProcessSlot& s = state_->slots[slot];
  for (uint32_t u = 0; u < unit_count(); ++u) {
    ProcessUnit& pu = s.units[u];
    uint64_t used = pu.used_bytes.exchange(0, std::memory_order_acq_rel);
    state_->unit_state[u].used_bytes.fetch_sub(used, std::memory_order_acq_rel);
    pu.context_bytes.store(0, std::memory_order_relaxed);
    pu.contexts.store(0, std::memory_order_relaxed);
    layout::Arbiter& a = state_->unit_state[u].arbiter;
    a.waiting[slot / 64].fetch_and(~(1ull << (slot % 64)), std::memory_order_acq_rel);
    uint32_t holder = static_cast<uint32_t>(slot) + 1;
    if (a.holder.compare_exchange_strong(holder, 0, std::memory_order_acq_rel)) {
      a.handoffs.fetch_add(1, std::memory_order_relaxed);
      // Waiters poll with a timeout, so they notice without a futex wake.
    }
  }
  ResetCheckpointFields(&s);
  s.state.store(layout::kSlotFree, std::memory_order_release);
}

Status DeviceModel::Register() {
  if (slot_ >= 0) return Status::Ok();
  pid_t pid = getpid();
  uint64_t start = slice::OwnStartTime();  // Right in a container too (its /proc).
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) Reap();
    Lock();
    for (int i = 0; i < static_cast<int>(layout::kMaxProcesses); ++i) {
      ProcessSlot& s = state_->slots[i];
      if (s.state.load(std::memory_order_acquire) != layout::kSlotFree) continue;
      s.pid = pid;
      s.start_time = start;
      s.pid_ns = slice::OwnPidNamespace();
      ResetCheckpointFields(&s);
      for (uint32_t u = 0; u < layout::kMaxUnits; ++u) {
        ProcessUnit& pu = s.units[u];
        pu.used_bytes.store(0, std::memory_order_relaxed);
        pu.context_bytes.store(0, std::memory_order_relaxed);
        pu.busy_ns.store(0, std::memory_order_relaxed);
        pu.launches.store(0, std::memory_order_relaxed);
        pu.contexts.store(0, std::memory_order_relaxed);
        pu.samples_taken.store(0, std::memory_order_relaxed);
        for (Sample& smp : pu.samples) smp.timestamp_us.store(0, std::memory_order_relaxed);
      }
      s.generation.fetch_add(1, std::memory_order_relaxed);
      s.state.store(layout::kSlotLive, std::memory_order_release);
      Unlock();
      slot_ = i;
      registered_pid_ = pid;
      return Status::Ok();
    }
    Unlock();
  }
  return core::ResourceExhaustedError("all " + std::to_string(layout::kMaxProcesses) +
                                      " process slots of the simulated GPU are in use");
}

void DeviceModel::Unregister() {
  if (slot_ < 0) return;
  if (registered_pid_ != getpid()) {  // Forked child: the slot is the parent's.
    slot_ = -1;
    return;
  }
  Lock();
  FreeSlotLocked(slot_);
  Unlock();
  slot_ = -1;
}

int DeviceModel::Reap() {
  int reaped = 0;
  Lock();
  for (int i = 0; i < static_cast<int>(layout::kMaxProcesses); ++i) {
    if (state_->slots[i].state.load(std::memory_order_acquire) != layout::kSlotLive) continue;
    if (i == slot_ || SlotAlive(i)) continue;
    FreeSlotLocked(i);
    ++reaped;
  }
  Unlock();
  return reaped;
}

Status DeviceModel::ReserveMemory(uint32_t unit, uint64_t bytes) {
  if (slot_ < 0) return core::FailedPreconditionError("process not registered");
  layout::UnitState& us = state_->unit_state[unit];
  const uint64_t total = state_->units[unit].memory_bytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    uint64_t cur = us.used_bytes.load(std::memory_order_relaxed);
    while (bytes <= total && cur <= total - bytes) {
      if (us.used_bytes.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel)) {
        state_->slots[slot_].units[unit].used_bytes.fetch_add(bytes, std::memory_order_acq_rel);
        return Status::Ok();
      }
    }
    if (attempt == 0 && Reap() == 0) break;  // Nothing to reclaim: really full.
  }
  return core::ResourceExhaustedError("out of device memory");
}

void DeviceModel::ReleaseMemory(uint32_t unit, uint64_t bytes) {
  if (slot_ < 0) return;
  state_->slots[slot_].units[unit].used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
  state_->unit_state[unit].used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
}

Status DeviceModel::AddContext(uint32_t unit) {
  uint64_t bytes = context_bytes();
  GPUSLICE_RETURN_IF_ERROR(ReserveMemory(unit, bytes));
  ProcessUnit& pu = state_->slots[slot_].units[unit];
  pu.context_bytes.fetch_add(bytes, std::memory_order_relaxed);
  pu.contexts.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void DeviceModel::RemoveContext(uint32_t unit) {
  if (slot_ < 0) return;
  uint64_t bytes = context_bytes();
  ProcessUnit& pu = state_->slots[slot_].units[unit];
  pu.context_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  pu.contexts.fetch_sub(1, std::memory_order_relaxed);
  ReleaseMemory(unit, bytes);
}

void DeviceModel::AddBusy(uint32_t unit, uint64_t ns) {
  if (slot_ < 0) return;
  state_->unit_state[unit].busy_ns.fetch_add(ns, std::memory_order_relaxed);
  state_->slots[slot_].units[unit].busy_ns.fetch_add(ns, std::memory_order_relaxed);
  // Relaxed: a reader needs only a recent value, not one ordered with busy_ns.
  state_->unit_state[unit].last_busy_us.store(UnixMicros(), std::memory_order_relaxed);
}

void DeviceModel::ForgetUnit(uint32_t unit) {
  if (slot_ < 0) return;
  ProcessUnit& pu = state_->slots[slot_].units[unit];
  pu.busy_ns.store(0, std::memory_order_relaxed);
  pu.launches.store(0, std::memory_order_relaxed);
  for (Sample& smp : pu.samples) smp.timestamp_us.store(0, std::memory_order_relaxed);
  pu.samples_taken.store(0, std::memory_order_release);
}

void DeviceModel::CountLaunch(uint32_t unit) {
  if (slot_ < 0) return;
  state_->unit_state[unit].launches.fetch_add(1, std::memory_order_relaxed);
  state_->slots[slot_].units[unit].launches.fetch_add(1, std::memory_order_relaxed);
}

MemoryInfo DeviceModel::UnitMemory(uint32_t unit) {
  Reap();
  MemoryInfo m;
  m.total = state_->units[unit].memory_bytes;
  m.used = std::min(m.total, state_->unit_state[unit].used_bytes.load(std::memory_order_acquire));
  m.free = m.total - m.used;
  return m;
}

MemoryInfo DeviceModel::DeviceMemory(uint32_t device) {
  Reap();
  MemoryInfo m;
  m.total = state_->devices[device].total_memory;
  for (uint32_t u = 0; u < unit_count(); ++u) {
    if (state_->units[u].device != device) continue;
    m.used += state_->unit_state[u].used_bytes.load(std::memory_order_acquire);
  }
  m.used = std::min(m.used, m.total);
  m.free = m.total - m.used;
  return m;
}

std::vector<ProcessUsage> DeviceModel::UnitProcesses(uint32_t unit) {
  Reap();
  std::vector<ProcessUsage> out;
  for (const ProcessSlot& s : state_->slots) {
    if (s.state.load(std::memory_order_acquire) != layout::kSlotLive || Checkpointed(s)) continue;
    const ProcessUnit& pu = s.units[unit];
    ProcessUsage p;
    p.pid = VisiblePidOf(s);
    p.used_bytes = pu.used_bytes.load(std::memory_order_relaxed);
    p.context_bytes = pu.context_bytes.load(std::memory_order_relaxed);
    p.contexts = pu.contexts.load(std::memory_order_relaxed);
    p.busy_ns = pu.busy_ns.load(std::memory_order_relaxed);
    p.launches = pu.launches.load(std::memory_order_relaxed);
    if (p.used_bytes == 0 && p.contexts == 0 && p.busy_ns == 0) continue;
    out.push_back(p);
  }
  return out;
}

std::vector<ProcessUsage> DeviceModel::DeviceProcesses(uint32_t device) {
  std::map<pid_t, ProcessUsage> by_pid;
  for (uint32_t u = 0; u < unit_count(); ++u) {
    if (state_->units[u].device != device) continue;
    for (const ProcessUsage& p : UnitProcesses(u)) {
      ProcessUsage& sum = by_pid[p.pid];
      sum.pid = p.pid;
      sum.used_bytes += p.used_bytes;
      sum.context_bytes += p.context_bytes;
      sum.contexts += p.contexts;
      sum.busy_ns += p.busy_ns;
      sum.launches += p.launches;
    }
  }
  std::vector<ProcessUsage> out;
  for (auto& [pid, p] : by_pid) out.push_back(p);
  return out;
}

uint64_t DeviceModel::UnitBusyNs(uint32_t unit) const {
  return state_->unit_state[unit].busy_ns.load(std::memory_order_relaxed);
}

uint64_t DeviceModel::UnitLaunches(uint32_t unit) const {
  return state_->unit_state[unit].launches.load(std::memory_order_relaxed);
}

std::vector<ProcessUtilization> DeviceModel::ProcessUtilizationSince(uint32_t unit,
                                                                     uint64_t since_us) {
  Reap();
  meter_.MaybeSample();
  std::vector<ProcessUtilization> out;
  for (const ProcessSlot& s : state_->slots) {
    if (s.state.load(std::memory_order_acquire) != layout::kSlotLive || Checkpointed(s)) continue;
    std::vector<UtilSample> samples = ReadSamples(s.units[unit].samples, layout::kProcessSamples);
    if (samples.size() < 2 || samples.back().timestamp_us <= since_us) continue;
    const UtilSample* base = &samples.front();
    for (const UtilSample& smp : samples) {
      if (smp.timestamp_us <= since_us) base = &smp;
    }
    const UtilSample& last = samples.back();
    if (base == &last) continue;
    uint64_t window = last.timestamp_us - base->timestamp_us;
    out.push_back({VisiblePidOf(s), last.timestamp_us,
                   BusyPercent(last.busy_ns - std::min(last.busy_ns, base->busy_ns), window),
                   window});
  }
  return out;
}

}  // namespace gpuslice::sim
