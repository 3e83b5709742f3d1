#include "sim/nvml/nvml_context.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <mutex>

// The struct behind nvmlDevice_t. Declared, never defined, by nvml_abi.h;
// only this library looks inside.
struct nvmlDevice_st {
  uint32_t device;
  int32_t mig;
};

namespace gpuslice::sim {
namespace {

constexpr uint32_t kSlotsPerDevice = 1 + layout::kMaxMigPerDevice;
using HandleTable = std::array<nvmlDevice_st, layout::kMaxDevices * kSlotsPerDevice>;

constexpr HandleTable MakeHandleTable() {
  HandleTable table{};
  for (uint32_t d = 0; d < layout::kMaxDevices; ++d) {
    for (uint32_t s = 0; s < kSlotsPerDevice; ++s) {
      table[d * kSlotsPerDevice + s] = {d, static_cast<int32_t>(s) - 1};
    }
  }
  return table;
}

// Never written: const, so callers that cast the handle and write through it
// fault instead of corrupting another handle.
constexpr HandleTable kHandles = MakeHandleTable();

}  // namespace

NvmlContext& NvmlContext::Get() {
  // Leaked on purpose: entry points may run from other libraries' static
  // destructors after ours would have been destroyed.
  static NvmlContext* context = new NvmlContext();
  return *context;
}

nvmlReturn_t NvmlContext::Init() {
  std::unique_lock lock(mutex_);
  if (ref_count_ > 0) {
    ++ref_count_;
    return NVML_SUCCESS;
  }
  core::Result<ModelOptions> options = ModelOptionsFromEnvironment();
  core::Result<std::unique_ptr<DeviceModel>> model =
      options.ok() ? DeviceModel::Open(*options) : options.status();
  if (!model.ok()) {
    last_init_error_ = model.status().ToString();
    // Real NVML is silent here; one line on stderr is what makes a wrong
    // GPUSLICE_SIM_* variable findable, and Init is not a hot path.
    std::fprintf(stderr, "gpuslice simulated NVML: nvmlInit failed: %s\n",
                 last_init_error_.c_str());
    // Bad configuration is the caller's input; anything else means the
    // simulated "driver" (the state file) is unusable.
    return model.status().code() == core::StatusCode::kInvalidArgument
               ? NVML_ERROR_INVALID_ARGUMENT
               : NVML_ERROR_DRIVER_NOT_LOADED;
  }
  model_ = std::move(model).value();
  last_init_error_.clear();
  ref_count_ = 1;
  return NVML_SUCCESS;
}

nvmlReturn_t NvmlContext::Shutdown() {
  std::unique_lock lock(mutex_);
  if (ref_count_ == 0) return NVML_ERROR_UNINITIALIZED;
  if (--ref_count_ == 0) {
    model_.reset();
  }
  return NVML_SUCCESS;
}

nvmlDevice_t NvmlContext::Handle(NvmlTarget target) {
  const nvmlDevice_st& entry =
      kHandles[target.device * kSlotsPerDevice + static_cast<uint32_t>(target.mig + 1)];
  // The table is const; NVML's handle type is not. Nothing writes through it.
  return const_cast<nvmlDevice_st*>(&entry);
}

nvmlReturn_t NvmlContext::ResolveHandle(DeviceModel& model, nvmlDevice_t handle,
                                        NvmlTarget* target) {
  // Compare addresses as integers: the handle may point anywhere, and
  // pointer comparison across unrelated objects is undefined.
  const auto begin = reinterpret_cast<uintptr_t>(kHandles.data());
  const auto address = reinterpret_cast<uintptr_t>(handle);
  if (address < begin || address >= begin + sizeof(kHandles)) return NVML_ERROR_INVALID_ARGUMENT;
  if ((address - begin) % sizeof(nvmlDevice_st) != 0) return NVML_ERROR_INVALID_ARGUMENT;
  const nvmlDevice_st& entry = kHandles[(address - begin) / sizeof(nvmlDevice_st)];
  if (entry.device >= model.device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  if (entry.mig >= 0 &&
      static_cast<uint32_t>(entry.mig) >= model.state()->devices[entry.device].mig_count) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *target = {entry.device, entry.mig};
  return NVML_SUCCESS;
}

uint32_t UnitOf(DeviceModel& model, NvmlTarget target) {
  const layout::DeviceRecord& record = model.state()->devices[target.device];
  return target.is_mig() ? record.mig[target.mig].unit : record.unit;
}

std::string NvmlContext::last_init_error() const {
  std::shared_lock lock(mutex_);
  return last_init_error_;
}

}  // namespace gpuslice::sim
