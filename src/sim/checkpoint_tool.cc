// gpuslice-sim-checkpoint: NVIDIA's cuda-checkpoint for the simulated GPU
// (docs/SIMULATOR.md, "Checkpoint and restore"). Suspends and resumes the
// GPU state of a CUDA process by pid through the driver's checkpoint API:
//
//   gpuslice-sim-checkpoint --pid P --get-state
//   gpuslice-sim-checkpoint --pid P --get-restore-tid
//   gpuslice-sim-checkpoint --pid P --action lock [--timeout MS]
//   gpuslice-sim-checkpoint --pid P --action checkpoint|unlock
//   gpuslice-sim-checkpoint --pid P --action restore [--device-map OLD=NEW,...]
//   gpuslice-sim-checkpoint --pid P --toggle [--timeout MS] [--device-map ...]
//
// --toggle: a running process is locked and checkpointed, a checkpointed
// one restored and unlocked. UUIDs as nvidia-smi -L prints them (GPU-... or
// MIG-...). The simulated libcuda.so.1 is loaded from ../lib/sim beside the
// program, else wherever the dynamic loader finds libcuda.so.1; the state
// file is the environment's (GPUSLICE_SIM_STATE, ...), as for any process.
//
// Exits 0 on success, 1 when the driver refuses (the message names the
// CUresult), 2 on a usage error or when the driver cannot be loaded.

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/version.h"

namespace {

// The driver's entry points this tool uses.
struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuGetErrorName) error_name = nullptr;
  decltype(&cuCheckpointProcessGetState) get_state = nullptr;
  decltype(&cuCheckpointProcessGetRestoreThreadId) get_tid = nullptr;
  decltype(&cuCheckpointProcessLock) lock = nullptr;
  decltype(&cuCheckpointProcessCheckpoint) checkpoint = nullptr;
  decltype(&cuCheckpointProcessRestore) restore = nullptr;
  decltype(&cuCheckpointProcessUnlock) unlock = nullptr;
};

struct Options {
  int pid = 0;
  std::string action;  // get-state, get-restore-tid, lock, checkpoint, restore, unlock, toggle.
  unsigned timeout_ms = 0;
  std::vector<CUcheckpointGpuPair> pairs;
};

int Usage(const char* problem) {
  if (problem != nullptr) std::fprintf(stderr, "gpuslice-sim-checkpoint: %s\n", problem);
  std::fprintf(stderr,
               "usage: gpuslice-sim-checkpoint --pid PID --get-state | --get-restore-tid\n"
               "       gpuslice-sim-checkpoint --pid PID --action lock|checkpoint|restore|unlock\n"
               "                               [--timeout MS] [--device-map OLD=NEW,...]\n"
               "       gpuslice-sim-checkpoint --pid PID --toggle [--timeout MS]"
               " [--device-map OLD=NEW,...]\n");
  return 2;
}

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string path(buf);
  return path.substr(0, path.rfind('/'));
}

bool Load(Driver* d, std::string* error) {
  void* h = dlopen((SelfDir() + "/../lib/sim/libcuda.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *error = std::string("cannot load libcuda.so.1: ") + dlerror();
    return false;
  }
  struct Symbol {
    const char* name;
    void** slot;
  };
  const Symbol symbols[] = {
      {"cuInit", reinterpret_cast<void**>(&d->init)},
      {"cuGetErrorName", reinterpret_cast<void**>(&d->error_name)},
      {"cuCheckpointProcessGetState", reinterpret_cast<void**>(&d->get_state)},
      {"cuCheckpointProcessGetRestoreThreadId", reinterpret_cast<void**>(&d->get_tid)},
      {"cuCheckpointProcessLock", reinterpret_cast<void**>(&d->lock)},
      {"cuCheckpointProcessCheckpoint", reinterpret_cast<void**>(&d->checkpoint)},
      {"cuCheckpointProcessRestore", reinterpret_cast<void**>(&d->restore)},
      {"cuCheckpointProcessUnlock", reinterpret_cast<void**>(&d->unlock)},
  };
  for (const Symbol& s : symbols) {
    *s.slot = dlsym(h, s.name);
    if (*s.slot == nullptr) {
      *error = std::string("libcuda.so.1 has no ") + s.name + " (a driver older than CUDA 12.8)";
      return false;
    }
  }
  return true;
}

// "GPU-3f2a..." / "MIG-..." -> the 16 bytes cuDeviceGetUuid gives.
bool ParseUuid(const std::string& text, CUuuid* out) {
  if (text.rfind("GPU-", 0) != 0 && text.rfind("MIG-", 0) != 0) return false;
  std::memset(out->bytes, 0, sizeof(out->bytes));
  int n = 0;
  for (size_t i = 4; i < text.size(); ++i) {
    char c = text[i];
    if (c == '-') continue;
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v < 0 || n >= 32) return false;
    out->bytes[n / 2] = static_cast<char>(out->bytes[n / 2] | (v << ((n % 2) ? 0 : 4)));
    ++n;
  }
  return n == 32;
}

// "OLD=NEW,OLD=NEW"; false with *error naming the bad part.
bool ParsePairs(const std::string& text, std::vector<CUcheckpointGpuPair>* out,
                std::string* error) {
  for (size_t pos = 0; pos <= text.size();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string pair = text.substr(pos, comma - pos);
    size_t eq = pair.find('=');
    CUcheckpointGpuPair p{};
    if (eq == std::string::npos || !ParseUuid(pair.substr(0, eq), &p.oldUuid) ||
        !ParseUuid(pair.substr(eq + 1), &p.newUuid)) {
      *error = "--device-map: '" + pair + "' is not OLD_UUID=NEW_UUID";
      return false;
    }
    out->push_back(p);
    pos = comma + 1;
  }
  return true;
}

const char* StateName(CUprocessState s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING:
      return "running";
    case CU_PROCESS_STATE_LOCKED:
      return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED:
      return "checkpointed";
    case CU_PROCESS_STATE_FAILED:
      return "failed";
  }
  return "unknown";
}

class Tool {
 public:
  Tool(const Driver& d, const Options& o) : d_(d), o_(o) {}

  int Run() {
    struct Action {
      const char* name;
      int (Tool::*run)();
    };
    static constexpr Action kActions[] = {
        {"get-state", &Tool::GetState}, {"get-restore-tid", &Tool::GetTid},
        {"lock", &Tool::Lock},          {"checkpoint", &Tool::Checkpoint},
        {"restore", &Tool::Restore},    {"unlock", &Tool::Unlock},
        {"toggle", &Tool::Toggle},
    };
    for (const Action& a : kActions) {
      if (o_.action == a.name) return (this->*a.run)();
    }
    return Usage(("unknown action '" + o_.action + "'").c_str());
  }

 private:
  // 0, or 1 after a message naming the call, the pid and the CUresult.
  int Check(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return 0;
    const char* name = nullptr;
    d_.error_name(r, &name);
    std::string hint;
    if (r == CUDA_ERROR_INVALID_VALUE) hint = " (no CUDA process with that pid, or bad arguments)";
    if (r == CUDA_ERROR_ILLEGAL_STATE) hint = " (the process is not in a state that allows it)";
    if (r == CUDA_ERROR_NOT_READY) hint = " (the lock timed out; the process keeps running)";
    if (r == CUDA_ERROR_NOT_PERMITTED) hint = " (run as root or as the process's user)";
    if (r == CUDA_ERROR_OUT_OF_MEMORY) hint = " (no room on the GPU; still checkpointed)";
    std::fprintf(stderr, "gpuslice-sim-checkpoint: %s of pid %d failed: %s%s\n", what, o_.pid,
                 name ? name : "unknown error", hint.c_str());
    return 1;
  }
  int GetState() {
    CUprocessState s;
    if (int rc = Check(d_.get_state(o_.pid, &s), "get-state")) return rc;
    std::printf("%s\n", StateName(s));
    return 0;
  }
  int GetTid() {
    int tid = 0;
    if (int rc = Check(d_.get_tid(o_.pid, &tid), "get-restore-tid")) return rc;
    std::printf("%d\n", tid);
    return 0;
  }
  int Lock() {
    CUcheckpointLockArgs args{};
    args.timeoutMs = o_.timeout_ms;
    return Check(d_.lock(o_.pid, &args), "lock");
  }
  int Checkpoint() { return Check(d_.checkpoint(o_.pid, nullptr), "checkpoint"); }
  int Restore() {
    CUcheckpointRestoreArgs args{};
    args.gpuPairs = const_cast<CUcheckpointGpuPair*>(o_.pairs.data());
    args.gpuPairsCount = static_cast<unsigned>(o_.pairs.size());
    return Check(d_.restore(o_.pid, o_.pairs.empty() ? nullptr : &args), "restore");
  }
  int Unlock() { return Check(d_.unlock(o_.pid, nullptr), "unlock"); }
  int Toggle() {
    CUprocessState s;
    if (int rc = Check(d_.get_state(o_.pid, &s), "get-state")) return rc;
    if (s == CU_PROCESS_STATE_RUNNING) {
      if (int rc = Lock()) return rc;
      return Checkpoint();
    }
    if (s == CU_PROCESS_STATE_CHECKPOINTED) {
      if (int rc = Restore()) return rc;
      return Unlock();
    }
    std::fprintf(stderr,
                 "gpuslice-sim-checkpoint: pid %d is %s: --toggle needs running or "
                 "checkpointed\n",
                 o_.pid, StateName(s));
    return 1;
  }

  const Driver& d_;
  const Options& o_;
};

bool Number(const char* text, unsigned long* out) {
  char* end = nullptr;
  if (text[0] < '0' || text[0] > '9') return false;
  *out = std::strtoul(text, &end, 10);
  return *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    unsigned long n = 0;
    if (a == "--version") {
      std::printf("gpuslice-sim-checkpoint %s\n", std::string(gpuslice::core::Version()).c_str());
      return 0;
    } else if (a == "--help" || a == "-h") {
      Usage(nullptr);
      return 0;
    } else if (a == "--pid") {
      const char* v = value();
      if (v == nullptr || !Number(v, &n) || n == 0 || n > INT_MAX) {
        return Usage("--pid needs a process id");
      }
      o.pid = static_cast<int>(n);
    } else if (a == "--get-state" || a == "--get-restore-tid" || a == "--toggle") {
      o.action = a.substr(2);
    } else if (a == "--action") {
      const char* v = value();
      if (v == nullptr) return Usage("--action needs lock, checkpoint, restore or unlock");
      o.action = v;
    } else if (a == "--timeout") {
      const char* v = value();
      if (v == nullptr || !Number(v, &n) || n > UINT_MAX) {
        return Usage("--timeout needs milliseconds");
      }
      o.timeout_ms = static_cast<unsigned>(n);
    } else if (a == "--device-map") {
      const char* v = value();
      std::string error = "--device-map needs OLD_UUID=NEW_UUID,...";
      if (v == nullptr || !ParsePairs(v, &o.pairs, &error)) return Usage(error.c_str());
    } else {
      return Usage(("unknown argument '" + a + "'").c_str());
    }
  }
  if (o.pid == 0) return Usage("--pid is required");
  if (o.action.empty()) return Usage("say what to do: --get-state, --action or --toggle");
  Driver d;
  std::string error;
  if (!Load(&d, &error)) {
    std::fprintf(stderr, "gpuslice-sim-checkpoint: %s\n", error.c_str());
    return 2;
  }
  if (CUresult r = d.init(0); r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.error_name(r, &name);
    std::fprintf(stderr, "gpuslice-sim-checkpoint: cuInit failed: %s\n", name ? name : "?");
    return 2;
  }
  return Tool(d, o).Run();
}
