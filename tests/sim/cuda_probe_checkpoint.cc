// cuda_probe's checkpoint modes (docs/SIMULATOR.md, "Checkpoint and
// restore"): ckpt-target, a process whose GPU state is checkpointed, and
// ckpt-control, the requester that locks, checkpoints, restores and unlocks
// it as the node daemon would. sim_checkpoint_test drives both.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_probe.h"

namespace probe {
namespace {

// One line of stdin without the newline; false at EOF.
bool ReadCommand(std::string* line) {
  line->clear();
  char c;
  while (read(0, &c, 1) == 1) {
    if (c == '\n') return true;
    *line += c;
  }
  return !line->empty();
}

void Say(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

unsigned char Pattern(size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131 + (i >> 13) * 7 + seed) & 0xff);
}

// "GPU-3f2a..." (or the 32 hex digits) -> CUuuid.
bool ParseUuid(const std::string& text, CUuuid* out) {
  std::memset(out->bytes, 0, sizeof(out->bytes));
  int n = 0;
  for (size_t i = text.rfind("GPU-", 0) == 0 || text.rfind("MIG-", 0) == 0 ? 4 : 0; i < text.size();
       ++i) {
    char c = text[i];
    if (c == '-') continue;
    int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (v < 0 || n >= 32) return false;
    out->bytes[n / 2] = static_cast<char>(out->bytes[n / 2] | (v << ((n % 2) ? 0 : 4)));
    ++n;
  }
  return n == 32;
}

}  // namespace

// A process whose GPU state is checkpointed. Commands on stdin, one answer
// line each:
//   fill BYTES   device memory (BYTES), managed, pool (in use and one
//                cached block), an array and a VMM allocation, filled with
//                a pattern                                   -> "filled"
//   verify       reads back all of it                        -> "diff N"
//   memcpy BYTES the fastest of 5 host memcpys of BYTES between
//                buffers in memory, in ms                    -> "memcpy MS"
//   launch       a kernel, synchronised                      -> "launched"
//   alloc        allocates and frees 2 MiB                   -> "allocated"
//   sleep US     queues a US-microsecond kernel              -> "queued"
//   busy MS      MS of kernels, synchronised                 -> "busy"
//   uuid         device 0's UUID (cuDeviceGetUuid_v2) and total memory
//                                                            -> "uuid GPU-... BYTES"
int CheckpointTarget() {
  Setup s = Init();
  struct Region {
    CUdeviceptr ptr;
    size_t size;
    unsigned seed;
  };
  std::vector<Region> regions;
  std::string line;
  auto fill = [&](CUdeviceptr p, size_t n, unsigned seed) {
    std::vector<unsigned char> buf(std::min<size_t>(n, 64u << 20));
    for (size_t off = 0; off < n; off += buf.size()) {
      size_t len = std::min(buf.size(), n - off);
      for (size_t i = 0; i < len; ++i) buf[i] = Pattern(off + i, seed);
      CU(cuMemcpyHtoD(p + off, buf.data(), len));
    }
    regions.push_back({p, n, seed});
  };
  while (ReadCommand(&line)) {
    const std::string cmd = line.substr(0, line.find(' '));
    const std::string arg =
        line.find(' ') == std::string::npos ? "" : line.substr(line.find(' ') + 1);
    if (cmd == "fill") {
      CUdeviceptr dev, managed, pooled, cached;
      size_t bytes = std::strtoull(arg.c_str(), nullptr, 10);
      CU(cuMemAlloc(&dev, bytes));
      fill(dev, bytes, 1);
      CU(cuMemAllocManaged(&managed, 3u << 20, CU_MEM_ATTACH_GLOBAL));
      fill(managed, 3u << 20, 2);
      CUmemoryPool pool;
      CU(cuDeviceGetDefaultMemPool(&pool, 0));
      cuuint64_t keep = ~0ull;  // Freed blocks stay cached in the pool.
      CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
      CU(cuMemAllocAsync(&pooled, 5u << 20, nullptr));
      CU(cuMemAllocAsync(&cached, 4u << 20, nullptr));
      CU(cuMemFreeAsync(cached, nullptr));
      CU(cuCtxSynchronize());
      fill(pooled, 5u << 20, 3);
      CUarray array;
      CUDA_ARRAY_DESCRIPTOR desc{};
      desc.Width = 1024;
      desc.Height = 1024;
      desc.Format = CU_AD_FORMAT_FLOAT;
      desc.NumChannels = 1;
      CU(cuArrayCreate(&array, &desc));
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = 0;
      CUmemGenericAllocationHandle h;
      CU(cuMemCreate(&h, 2u << 20, &prop, 0));
      CUdeviceptr va;
      CU(cuMemAddressReserve(&va, 2u << 20, 0, 0, 0));
      CU(cuMemMap(va, 2u << 20, 0, h, 0));
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CU(cuMemSetAccess(va, 2u << 20, &access, 1));
      fill(va, 2u << 20, 4);
      Say("filled");
    } else if (cmd == "verify") {
      size_t diff = 0;
      std::vector<unsigned char> buf;
      for (const Region& r : regions) {
        buf.resize(std::min<size_t>(r.size, 64u << 20));
        for (size_t off = 0; off < r.size; off += buf.size()) {
          size_t len = std::min(buf.size(), r.size - off);
          CU(cuMemcpyDtoH(buf.data(), r.ptr + off, len));
          for (size_t i = 0; i < len; ++i) diff += buf[i] != Pattern(off + i, r.seed);
        }
      }
      Say("diff " + std::to_string(diff));
    } else if (cmd == "memcpy") {
      // The machine's bandwidth: host -> host between buffers in memory.
      size_t bytes = std::strtoull(arg.c_str(), nullptr, 10);
      std::vector<unsigned char> a(bytes, 1), b(bytes, 2);
      double best = 1e300;
      for (int round = 0; round < 5; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        best = std::min(
            best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count());
      }
      Say("memcpy " + std::to_string(best));
    } else if (cmd == "launch") {
      CU(cuLaunchKernel(s.saxpy, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
      CU(cuCtxSynchronize());
      Say("launched");
    } else if (cmd == "alloc") {
      CUdeviceptr p;
      CU(cuMemAlloc(&p, 2u << 20));
      CU(cuMemFree(p));
      Say("allocated");
    } else if (cmd == "sleep") {
      Sleep(s, static_cast<unsigned>(std::strtoul(arg.c_str(), nullptr, 10)), nullptr);
      Say("queued");
    } else if (cmd == "busy") {
      int ms = std::atoi(arg.c_str());
      for (int i = 0; i < ms; ++i) Sleep(s, 1000, nullptr);
      CU(cuCtxSynchronize());
      Say("busy");
    } else if (cmd == "uuid") {
      CUuuid u;
      CU(cuDeviceGetUuid_v2(&u, 0));
      size_t total = 0;
      CU(cuDeviceTotalMem(&total, 0));
      char hex[33];
      for (int i = 0; i < 16; ++i) {
        std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(u.bytes[i]));
      }
      Say(std::string("uuid ") + hex + " " + std::to_string(total));
    } else {
      Say("unknown " + cmd);
    }
  }
  return 0;
}

#if CUDA_VERSION >= 12080  // The checkpoint API (older headers lack it).
// A checkpoint requester, as the node daemon would be (no
// CUDA_VISIBLE_DEVICES needed). Commands on stdin, answered with the
// CUresult's name (and a value):
//   state PID | tid PID | lock PID [TIMEOUT_MS] | checkpoint PID |
//   restore PID [OLD=NEW,...] | unlock PID
//   uninit-state PID   cuCheckpointProcessGetState before cuInit
int CheckpointControl() {
  std::string line;
  bool initialised = false;
  while (ReadCommand(&line)) {
    std::vector<std::string> w;
    for (size_t pos = 0; pos <= line.size();) {
      size_t sp = line.find(' ', pos);
      if (sp == std::string::npos) sp = line.size();
      if (sp > pos) w.push_back(line.substr(pos, sp - pos));
      pos = sp + 1;
    }
    if (w.size() < 2) {
      Say("usage");
      continue;
    }
    if (w[0] != "uninit-state" && !initialised) {
      CU(cuInit(0));
      initialised = true;
    }
    const int pid = std::atoi(w[1].c_str());
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::string value;
    if (w[0] == "state" || w[0] == "uninit-state") {
      CUprocessState st = CU_PROCESS_STATE_FAILED;
      r = cuCheckpointProcessGetState(pid, &st);
      const char* names[] = {"running", "locked", "checkpointed", "failed"};
      if (r == CUDA_SUCCESS) value = names[st];
    } else if (w[0] == "tid") {
      int tid = 0;
      r = cuCheckpointProcessGetRestoreThreadId(pid, &tid);
      value = std::to_string(tid);
    } else if (w[0] == "lock") {
      CUcheckpointLockArgs args{};
      args.timeoutMs = w.size() > 2 ? static_cast<unsigned>(std::atoi(w[2].c_str())) : 0;
      r = cuCheckpointProcessLock(pid, &args);
    } else if (w[0] == "checkpoint") {
      r = cuCheckpointProcessCheckpoint(pid, nullptr);
    } else if (w[0] == "unlock") {
      r = cuCheckpointProcessUnlock(pid, nullptr);
    } else if (w[0] == "restore") {
      std::vector<CUcheckpointGpuPair> pairs;
      bool ok = true;
      for (size_t pos = 0; w.size() > 2 && pos <= w[2].size();) {
        size_t comma = w[2].find(',', pos);
        if (comma == std::string::npos) comma = w[2].size();
        std::string pair = w[2].substr(pos, comma - pos);
        size_t eq = pair.find('=');
        CUcheckpointGpuPair p{};
        ok &= eq != std::string::npos && ParseUuid(pair.substr(0, eq), &p.oldUuid) &&
              ParseUuid(pair.substr(eq + 1), &p.newUuid);
        pairs.push_back(p);
        pos = comma + 1;
      }
      if (!ok) {
        Say("bad pairs");
        continue;
      }
      CUcheckpointRestoreArgs args{};
      args.gpuPairs = pairs.data();
      args.gpuPairsCount = static_cast<unsigned>(pairs.size());
      r = cuCheckpointProcessRestore(pid, pairs.empty() ? nullptr : &args);
    }
    Say(std::string(Name(r)) + (value.empty() ? "" : " " + value));
  }
  return 0;
}
#endif  // CUDA_VERSION >= 12080

}  // namespace probe
