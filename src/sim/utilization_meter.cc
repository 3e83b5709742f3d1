#include "sim/utilization_meter.h"

#include <algorithm>

#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

using layout::ProcessSlot;
using layout::ProcessUnit;
using layout::Sample;

// Sensor model: temperature and power rise linearly with utilisation.
constexpr uint32_t kIdleTemperatureC = 31;
constexpr uint32_t kFullLoadTemperatureC = 78;

void WriteSample(Sample* ring, uint32_t size, std::atomic<uint64_t>* taken, uint64_t now_us,
                 uint64_t busy) {
  uint64_t n = taken->load(std::memory_order_relaxed);
  Sample& s = ring[n % size];
  s.timestamp_us.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.busy_ns.store(busy, std::memory_order_relaxed);
  s.timestamp_us.store(now_us, std::memory_order_release);
  taken->store(n + 1, std::memory_order_release);
}

}  // namespace

// Samples are read without a lock: a sample counts only when its timestamp
// reads the same before and after its busy time (the writer clears it first).
std::vector<UtilSample> ReadSamples(const Sample* ring, uint32_t size) {
  std::vector<UtilSample> out;
  for (uint32_t i = 0; i < size; ++i) {
    uint64_t t1 = ring[i].timestamp_us.load(std::memory_order_acquire);
    if (t1 == 0) continue;
    uint64_t busy = ring[i].busy_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    uint64_t t2 = ring[i].timestamp_us.load(std::memory_order_relaxed);
    if (t1 == t2) out.push_back({t1, busy});
  }
  std::sort(out.begin(), out.end(), [](const UtilSample& a, const UtilSample& b) {
    return a.timestamp_us < b.timestamp_us;
  });
  return out;
}

uint32_t BusyPercent(uint64_t busy_ns, uint64_t window_us) {
  if (window_us == 0) return 0;
  uint64_t p = busy_ns / 10 / window_us;  // busy_ns * 100 / (window_us * 1000).
  return static_cast<uint32_t>(std::min<uint64_t>(p, 100));
}

void UtilizationMeter::MaybeSample() {
  uint64_t now = UnixMicros();
  for (uint32_t u = 0; u < state_->header.unit_count; ++u) {
    layout::UnitState& us = state_->unit_state[u];
    uint64_t due = us.next_sample_us.load(std::memory_order_relaxed);
    if (now < due) continue;
    // Whoever wins the CAS takes this round's sample; the others skip.
    if (!us.next_sample_us.compare_exchange_strong(due, now + kSampleIntervalUs,
                                                   std::memory_order_acq_rel)) {
      continue;
    }
    WriteSample(us.samples, layout::kDeviceSamples, &us.samples_taken, now,
                us.busy_ns.load(std::memory_order_relaxed));
    for (ProcessSlot& s : state_->slots) {
      if (s.state.load(std::memory_order_acquire) != layout::kSlotLive) continue;
      ProcessUnit& pu = s.units[u];
      if (pu.contexts.load(std::memory_order_relaxed) == 0 &&
          pu.busy_ns.load(std::memory_order_relaxed) == 0) {
        continue;
      }
      WriteSample(pu.samples, layout::kProcessSamples, &pu.samples_taken, now,
                  pu.busy_ns.load(std::memory_order_relaxed));
    }
  }
}

std::vector<UtilSample> UtilizationMeter::UnitSamples(uint32_t unit, uint64_t since_us) {
  MaybeSample();
  std::vector<UtilSample> all =
      ReadSamples(state_->unit_state[unit].samples, layout::kDeviceSamples);
  std::vector<UtilSample> out;
  for (const UtilSample& s : all) {
    if (s.timestamp_us > since_us) out.push_back(s);
  }
  return out;
}

uint32_t UtilizationMeter::UnitUtilizationPercent(uint32_t unit) {
  MaybeSample();
  uint64_t now = UnixMicros();
  uint64_t busy = state_->unit_state[unit].busy_ns.load(std::memory_order_relaxed);
  std::vector<UtilSample> samples =
      ReadSamples(state_->unit_state[unit].samples, layout::kDeviceSamples);
  // The newest sample at least one sampling interval old is the window start,
  // so the window spans 1/6 s to about 1 s while someone keeps sampling.
  const UtilSample* base = nullptr;
  for (const UtilSample& s : samples) {
    if (s.timestamp_us + kSampleIntervalUs <= now) base = &s;
  }
  if (base == nullptr && !samples.empty()) base = &samples.front();
  if (base == nullptr || now <= base->timestamp_us) return 0;
  uint64_t start = base->timestamp_us;
  uint64_t busy_in_window = busy - std::min(busy, base->busy_ns);
  if (now - start > kMaxUtilizationWindowUs) {
    // Nobody sampled for a while (no kernels ran, nobody asked), so the base
    // is older than NVML's window. The window is the last second, and the
    // busy time since the base cannot have accrued after the last busy
    // report: at most (last report - window start) of it falls inside.
    start = now - kMaxUtilizationWindowUs;
    uint64_t last = state_->unit_state[unit].last_busy_us.load(std::memory_order_relaxed);
    uint64_t fits_ns = last > start ? (last - start) * 1000 : 0;
    busy_in_window = std::min(busy_in_window, fits_ns);
  }
  return BusyPercent(busy_in_window, now - start);
}

uint32_t UtilizationMeter::DeviceUtilizationPercent(uint32_t device) {
  uint64_t weighted = 0, sms = 0;
  for (uint32_t u = 0; u < state_->header.unit_count; ++u) {
    if (state_->units[u].device != device) continue;
    weighted += uint64_t{UnitUtilizationPercent(u)} * state_->units[u].sm_count;
    sms += state_->units[u].sm_count;
  }
  return sms == 0 ? 0 : static_cast<uint32_t>(weighted / sms);
}

uint32_t UtilizationMeter::TemperatureC(uint32_t device) {
  const int32_t fixed = state_->header.health[device].temperature_c.load(std::memory_order_relaxed);
  if (fixed > 0) return uint32_t(fixed);
  uint32_t util = DeviceUtilizationPercent(device);
  return kIdleTemperatureC + (kFullLoadTemperatureC - kIdleTemperatureC) * util / 100;
}

uint32_t UtilizationMeter::PowerMilliwatts(uint32_t device) {
  const layout::DeviceRecord& r = state_->devices[device];
  uint32_t util = DeviceUtilizationPercent(device);
  return r.idle_power_mw +
         static_cast<uint32_t>(uint64_t{r.power_limit_mw - r.idle_power_mw} * util / 100);
}

}  // namespace gpuslice::sim
