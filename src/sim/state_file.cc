// DeviceModel::Open: creating, initialising and attaching to the state file,
// and reading the model's options from the environment.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/units.h"
#include "sim/device_model.h"
#include "sim/sim_clock.h"

namespace gpuslice::sim {
namespace {

using core::InvalidArgumentError;
using core::Result;
using core::Status;
using layout::SharedState;

constexpr uint64_t kAttachWaitNs = 2000000000ull;  // A creator initialises in microseconds.

Status ErrnoError(const std::string& what, int err) {
  return core::UnavailableError(what + ": " + std::strerror(err));
}

void CopyString(char* dst, size_t size, const std::string& src) {
  std::memset(dst, 0, size);
  std::memcpy(dst, src.data(), std::min(size - 1, src.size()));
}

// "MIG-" UUIDs derive from the parent GPU's UUID and the instance position.
std::string MigUuid(const std::string& gpu_uuid, uint32_t index) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : gpu_uuid + "/mig/" + std::to_string(index)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint64_t g = h * 0x9e3779b97f4a7c15ull;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "MIG-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(h >> 32),
                static_cast<unsigned>(h >> 16) & 0xffff, static_cast<unsigned>(h) & 0xffff,
                static_cast<unsigned>(g >> 48),
                static_cast<unsigned long long>(g & 0xffffffffffffull));
  return buf;
}

Status Initialise(SharedState* s, const ModelOptions& o) {
  // The file is fresh from ftruncate: all zero, which is the correct initial
  // value of every counter, so only the immutable parts need writing.
  layout::Header& h = s->header;
  h.version = layout::kStateVersion;
  h.header_size = sizeof(layout::Header);
  h.file_size = sizeof(SharedState);
  h.max_processes = layout::kMaxProcesses;
  h.quantum_ns = o.quantum_ns;
  h.context_bytes = o.context_bytes;
  h.created_unix_us = UnixMicros();
  h.config_fingerprint = o.config.Fingerprint();
  uint32_t units = 0;
  for (size_t i = 0; i < o.config.devices.size(); ++i) {
    const DeviceSpec& d = o.config.devices[i];
    layout::DeviceRecord& r = s->devices[i];
    CopyString(r.name, sizeof(r.name), d.name);
    CopyString(r.uuid, sizeof(r.uuid), d.uuid);
    r.total_memory = d.total_memory;
    r.sm_count = d.sm_count;
    r.cc_major = d.cc_major;
    r.cc_minor = d.cc_minor;
    r.pci_domain = d.pci_domain;
    r.pci_bus = d.pci_bus;
    r.pci_device = d.pci_device;
    r.clock_khz = d.clock_khz;
    r.memory_clock_khz = d.memory_clock_khz;
    r.memory_bus_width = d.memory_bus_width;
    r.l2_cache_bytes = d.l2_cache_bytes;
    r.power_limit_mw = d.power_limit_mw;
    r.idle_power_mw = d.idle_power_mw;
    r.mig_count = static_cast<uint32_t>(d.mig.size());
    r.mig_capable = d.mig_capable ? 1 : 0;
    r.unit = layout::kNoUnit;
    auto add_unit = [&](const std::string& uuid, uint64_t mem, uint32_t sms,
                        int32_t mig) -> Result<uint32_t> {
      if (units == layout::kMaxUnits) {
        return InvalidArgumentError("the configuration has more than " +
                                    std::to_string(layout::kMaxUnits) +
                                    " CUDA devices (GPUs plus MIG instances)");
      }
      layout::UnitRecord& u = s->units[units];
      CopyString(u.uuid, sizeof(u.uuid), uuid);
      u.memory_bytes = mem;
      u.sm_count = sms;
      u.device = static_cast<uint32_t>(i);
      u.mig_index = mig;
      return units++;
    };
    if (d.mig.empty()) {
      GPUSLICE_ASSIGN_OR_RETURN(r.unit, add_unit(d.uuid, d.total_memory, d.sm_count, -1));
    }
    for (size_t m = 0; m < d.mig.size(); ++m) {
      layout::MigRecord& mr = r.mig[m];
      CopyString(mr.profile, sizeof(mr.profile), d.mig[m].profile);
      // GPU-instance ids start at 1 in placement order; one compute instance
      // (id 0) spans each GPU instance.
      mr.gpu_instance_id = static_cast<uint32_t>(m) + 1;
      mr.compute_instance_id = 0;
      GPUSLICE_ASSIGN_OR_RETURN(
          mr.unit, add_unit(MigUuid(d.uuid, static_cast<uint32_t>(m)), d.mig[m].memory_bytes,
                            d.mig[m].sm_count, static_cast<int32_t>(m)));
    }
  }
  h.device_count = static_cast<uint32_t>(o.config.devices.size());
  h.unit_count = units;

  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&h.lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return ErrnoError("pthread_mutex_init", rc);
  // Publish: everything above happens-before any reader's acquire of magic.
  h.magic.store(layout::kStateMagic, std::memory_order_release);
  return Status::Ok();
}

Result<SharedState*> Map(int fd) {
  void* p = mmap(nullptr, sizeof(SharedState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoError("mmap of the state file", errno);
  return static_cast<SharedState*>(p);
}

// Waits for the creator to publish the file, then checks it is ours.
Status CheckAttached(const std::string& path, int fd, SharedState** out) {
  uint64_t deadline = MonotonicNs() + kAttachWaitNs;
  while (true) {
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoError("fstat " + path, errno);
    if (st.st_size != 0) {  // The creator sizes the file right after creating it.
      if (static_cast<uint64_t>(st.st_size) != sizeof(SharedState)) {
        return core::FailedPreconditionError(
            "state file " + path + " has size " + std::to_string(st.st_size) + ", expected " +
            std::to_string(sizeof(SharedState)) +
            " (made by another simulator version?); remove it or set GPUSLICE_SIM_STATE");
      }
      GPUSLICE_ASSIGN_OR_RETURN(SharedState * s, Map(fd));
      while (s->header.magic.load(std::memory_order_acquire) != layout::kStateMagic) {
        if (MonotonicNs() > deadline) {
          munmap(s, sizeof(SharedState));
          return core::FailedPreconditionError(
              "state file " + path +
              " was never initialised (its creator died?); remove it or set GPUSLICE_SIM_STATE");
        }
        usleep(1000);
      }
      if (s->header.version != layout::kStateVersion ||
          s->header.header_size != sizeof(layout::Header) ||
          s->header.file_size != sizeof(SharedState)) {
        uint32_t v = s->header.version;
        munmap(s, sizeof(SharedState));
        return core::FailedPreconditionError(
            "state file " + path + " has format version " + std::to_string(v) + ", expected " +
            std::to_string(layout::kStateVersion) + "; remove it or set GPUSLICE_SIM_STATE");
      }
      *out = s;
      return Status::Ok();
    }
    if (MonotonicNs() > deadline) {
      return core::FailedPreconditionError("state file " + path +
                                           " is empty (its creator died?); remove it");
    }
    usleep(1000);
  }
}

Result<uint64_t> EnvBytes(const char* var, uint64_t fallback) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return fallback;
  Result<uint64_t> r = core::ParseBytes(v);
  if (!r.ok()) return r.status().WithContext(var);
  return r;
}

}  // namespace

Result<ModelOptions> ModelOptionsFromEnvironment() {
  ModelOptions o;
  GPUSLICE_ASSIGN_OR_RETURN(o.config, ConfigFromEnvironment(&o.explicit_config));
  if (const char* p = std::getenv("GPUSLICE_SIM_STATE"); p != nullptr && *p != '\0') {
    o.state_path = p;
  } else {
    o.state_path = "/dev/shm/gpuslice-sim-" + std::to_string(getuid());
  }
  if (const char* q = std::getenv("GPUSLICE_SIM_QUANTUM_US"); q != nullptr && *q != '\0') {
    uint64_t us = 0;
    std::string_view t(q);
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), us);
    if (ec != std::errc() || p != t.data() + t.size() || us < 50 || us > 1000000) {
      return InvalidArgumentError("GPUSLICE_SIM_QUANTUM_US: bad value '" + std::string(t) +
                                  "': expected microseconds between 50 and 1000000");
    }
    o.quantum_ns = us * 1000;
  }
  GPUSLICE_ASSIGN_OR_RETURN(o.context_bytes,
                            EnvBytes("GPUSLICE_SIM_CONTEXT_MEM", 300 * core::kMiB));
  if (const char* m = std::getenv("GPUSLICE_SIM_STATE_MODE"); m != nullptr && *m != '\0') {
    std::string_view t(m);
    unsigned mode = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), mode, 8);
    if (ec != std::errc() || p != t.data() + t.size() || (mode & ~0666u) != 0 ||
        (mode & 0600u) != 0600u) {
      return InvalidArgumentError("GPUSLICE_SIM_STATE_MODE: bad value '" + std::string(t) +
                                  "': expected octal permissions such as 0600 or 0666");
    }
    o.mode = static_cast<mode_t>(mode);
  }
  return o;
}

Result<std::unique_ptr<DeviceModel>> DeviceModel::Open(const ModelOptions& options) {
  const std::string& path = options.state_path;
  // A stale file describing another machine is replaced, but only when no
  // live process uses it; at most once, so two disagreeing live
  // configurations cannot fight forever.
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, options.mode);
    if (fd >= 0) {
      // Created: size it, initialise, publish. open()'s mode is filtered by
      // the umask; the requested mode is what the user asked for.
      if (fchmod(fd, options.mode) != 0 || ftruncate(fd, sizeof(SharedState)) != 0) {
        Status s = ErrnoError("creating state file " + path, errno);
        unlink(path.c_str());
        close(fd);
        return s;
      }
      Result<SharedState*> s = Map(fd);
      if (s.ok()) {
        Status init = Initialise(*s, options);
        if (init.ok()) {
          return std::unique_ptr<DeviceModel>(new DeviceModel(path, fd, *s));
        }
        munmap(*s, sizeof(SharedState));
        s = init;
      }
      unlink(path.c_str());
      close(fd);
      return s.status();
    }
    if (errno != EEXIST) return ErrnoError("opening state file " + path, errno);
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // Removed meanwhile: create it.
      return ErrnoError("opening state file " + path, errno);
    }
    SharedState* state = nullptr;
    Status attached = CheckAttached(path, fd, &state);
    if (!attached.ok()) {
      close(fd);
      return attached;
    }
    auto model = std::unique_ptr<DeviceModel>(new DeviceModel(path, fd, state));
    if (!options.explicit_config ||
        state->header.config_fingerprint == options.config.Fingerprint()) {
      return model;
    }
    model->Reap();
    bool in_use = false;
    for (const auto& slot : state->slots) {
      in_use |= slot.state.load(std::memory_order_acquire) == layout::kSlotLive;
    }
    if (in_use || attempt == 1) {
      return core::FailedPreconditionError(
          "the GPUs configured by GPUSLICE_SIM_GPUS/GPUSLICE_SIM_CONFIG differ from those in "
          "state file " +
          path + ", which live processes use; set GPUSLICE_SIM_STATE to another path");
    }
    model.reset();
    unlink(path.c_str());
  }
  return core::InternalError("could not create state file " + path);
}

}  // namespace gpuslice::sim
