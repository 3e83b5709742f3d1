// What suspending a CUDA process costs on the simulated GPU, against the
// plain copies it replaces (figures in docs/SIMULATOR.md, "Checkpoint and
// restore"). A child process holds N GiB of patterned device memory; this
// process suspends it (cuCheckpointProcessLock + Checkpoint) and resumes it
// (Restore + Unlock), `--reps` times; in the same run the child copies the
// same N GiB device -> host -> device with cuMemcpyDtoH/HtoD, into a host
// buffer touched beforehand and into a freshly mapped one. Reported:
// medians, the ratio (suspend + resume) / (D2H + H2D) (the project's target
// is <= 1.5) and the bytes that differ afterwards (must be 0).
//
//   checkpoint_bench [--sizes-gib 1,4] [--reps 5]
//                    [--transfers move,copy,copy-populate] [--to-other-gpu]
//
// --to-other-gpu: two simulated GPUs, and every restore puts the process on
// the other one (gpuPairs), as a `gpuslice move` does.
//
// A transfer is the child's GPUSLICE_SIM_CHECKPOINT_TRANSFER (how the
// driver moves contents to host memory and back; src/sim/driver/
// checkpoint.cc). Needs about 3 x N GiB of host memory.

#include <cuda.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* Name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define CU(call)                                                                  \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      std::fprintf(stderr, "checkpoint_bench: %s failed: %s\n", #call, Name(r_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

uint64_t Word(size_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }

// Host buffers get the same page size as the simulator's device memory and
// its checkpoint copies (transparent huge pages where the kernel offers them
// on request): the copies compare on equal terms.
void* MapHost(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("checkpoint_bench: mmap");
    std::exit(1);
  }
  (void)madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

// The child: holds `bytes` of patterned device memory; answers commands.
//   copy-touched | copy-fresh  -> "<d2h ms> <h2d ms>"
//   verify                     -> "<bytes that differ>"
int Child(size_t bytes) {
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUdeviceptr d;
  CU(cuMemAlloc(&d, bytes));
  auto* touched = static_cast<uint64_t*>(MapHost(bytes));
  const size_t words = bytes / sizeof(uint64_t);
  for (size_t i = 0; i < words; ++i) touched[i] = Word(i);
  CU(cuMemcpyHtoD(d, touched, bytes));
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    std::string cmd(line);
    while (!cmd.empty() && cmd.back() == '\n') cmd.pop_back();
    if (cmd == "copy-touched" || cmd == "copy-fresh") {
      void* host = cmd == "copy-touched" ? touched : MapHost(bytes);
      auto t0 = std::chrono::steady_clock::now();
      CU(cuMemcpyDtoH(host, d, bytes));
      double d2h = MsSince(t0);
      t0 = std::chrono::steady_clock::now();
      CU(cuMemcpyHtoD(d, host, bytes));
      double h2d = MsSince(t0);
      if (host != touched) munmap(host, bytes);
      std::printf("%.3f %.3f\n", d2h, h2d);
    } else if (cmd == "verify") {
      CU(cuMemcpyDtoH(touched, d, bytes));
      size_t diff = 0;
      for (size_t i = 0; i < words; ++i) {
        if (touched[i] != Word(i)) {
          uint64_t x = touched[i] ^ Word(i);
          for (int b = 0; b < 8; ++b) diff += ((x >> (8 * b)) & 0xff) != 0;
        }
      }
      std::printf("%zu\n", diff);
    }
    std::fflush(stdout);
  }
  return 0;
}

struct ChildProcess {
  pid_t pid = -1;
  FILE* in = nullptr;
  FILE* out = nullptr;

  std::string Ask(const std::string& cmd) {
    std::fprintf(in, "%s\n", cmd.c_str());
    std::fflush(in);
    return ReadLine();
  }
  std::string ReadLine() {
    char buf[256];
    if (std::fgets(buf, sizeof(buf), out) == nullptr) return "";
    std::string s(buf);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  ~ChildProcess() {
    if (in != nullptr) std::fclose(in);
    if (out != nullptr) std::fclose(out);
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
};

// `one_gpu`: the child sees only GPU 0 (a job sees its own GPU), so a move
// renames its one device.
void StartChild(const char* self, size_t bytes, const std::string& transfer, bool one_gpu,
                ChildProcess* c) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) std::exit(1);
  c->pid = fork();
  if (c->pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    for (int fd : {to[0], to[1], from[0], from[1]}) close(fd);
    setenv("GPUSLICE_SIM_CHECKPOINT_TRANSFER", transfer.c_str(), 1);
    if (one_gpu) setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    std::string n = std::to_string(bytes);
    execl(self, self, "--child", n.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  c->in = fdopen(to[1], "w");
  c->out = fdopen(from[0], "r");
  if (c->ReadLine() != "ready") {
    std::fprintf(stderr, "checkpoint_bench: the child did not start\n");
    std::exit(1);
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos <= s.size();) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
    return Child(std::strtoull(argv[2], nullptr, 10));
  }
  std::vector<std::string> sizes = {"1", "4"}, transfers = {"copy", "copy-populate", "move"};
  int reps = 5;
  bool other_gpu = false;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--to-other-gpu") {
      other_gpu = true;
      --i;  // A flag: no value.
    } else if (i + 1 >= argc) {
      std::fprintf(stderr, "checkpoint_bench: %s needs a value\n", a.c_str());
      return 2;
    } else if (a == "--sizes-gib") {
      sizes = Split(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--transfers") {
      transfers = Split(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: checkpoint_bench [--sizes-gib 1,4] [--reps 5] "
                   "[--transfers move,copy,copy-populate] [--to-other-gpu]\n");
      return 2;
    }
  }
  // A simulated machine of our own.
  char dir[] = "/tmp/ckptbenchXXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string state = std::string(dir) + "/state";
  setenv("GPUSLICE_SIM_STATE", state.c_str(), 1);
  setenv("GPUSLICE_SIM_GPUS", other_gpu ? "2xH200-141GB" : "1xH200-141GB", 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  CU(cuInit(0));
  // The GPUs a move alternates between (the child starts on device 0).
  CUuuid uuids[2] = {};
  if (other_gpu) {
    for (int d = 0; d < 2; ++d) {
      CUdevice dev;
      CU(cuDeviceGet(&dev, d));
      CU(cuDeviceGetUuid_v2(&uuids[d], dev));
    }
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';

  std::printf("%-6s %-14s %11s %11s %11s | %11s %11s %11s %11s | %8s %8s | %s\n", "size",
              "transfer", "suspend_ms", "resume_ms", "total_ms", "d2h_touch", "h2d_touch",
              "d2h_fresh", "h2d_fresh", "ratio_t", "ratio_f", "diff_bytes");
  int failures = 0;
  for (const std::string& gib : sizes) {
    const size_t bytes = std::strtoull(gib.c_str(), nullptr, 10) << 30;
    double copy_touched = 0, copy_fresh = 0, d2h_t = 0, h2d_t = 0, d2h_f = 0, h2d_f = 0;
    bool have_copies = false;
    for (const std::string& transfer : transfers) {
      ChildProcess child;
      StartChild(self, bytes, transfer, other_gpu, &child);
      if (!have_copies) {
        // The copies it replaces, in the same child, before any checkpoint.
        std::vector<double> dt, ht, df, hf, st, sf;
        for (int r = 0; r < reps; ++r) {
          double a, b;
          std::sscanf(child.Ask("copy-touched").c_str(), "%lf %lf", &a, &b);
          dt.push_back(a);
          ht.push_back(b);
          st.push_back(a + b);
          std::sscanf(child.Ask("copy-fresh").c_str(), "%lf %lf", &a, &b);
          df.push_back(a);
          hf.push_back(b);
          sf.push_back(a + b);
        }
        d2h_t = Median(dt), h2d_t = Median(ht), d2h_f = Median(df), h2d_f = Median(hf);
        copy_touched = Median(st), copy_fresh = Median(sf);
        have_copies = true;
      }
      std::vector<double> suspend, resume, total;
      int on = 0;  // The GPU the child is on (--to-other-gpu).
      for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        CU(cuCheckpointProcessLock(child.pid, nullptr));
        CU(cuCheckpointProcessCheckpoint(child.pid, nullptr));
        double s = MsSince(t0);
        t0 = std::chrono::steady_clock::now();
        if (other_gpu) {
          CUcheckpointGpuPair pair;
          std::memset(&pair, 0, sizeof(pair));
          pair.oldUuid = uuids[on];
          pair.newUuid = uuids[1 - on];
          CUcheckpointRestoreArgs args;
          std::memset(&args, 0, sizeof(args));
          args.gpuPairs = &pair;
          args.gpuPairsCount = 1;
          CU(cuCheckpointProcessRestore(child.pid, &args));
          on = 1 - on;
        } else {
          CU(cuCheckpointProcessRestore(child.pid, nullptr));
        }
        CU(cuCheckpointProcessUnlock(child.pid, nullptr));
        double u = MsSince(t0);
        suspend.push_back(s);
        resume.push_back(u);
        total.push_back(s + u);
      }
      const std::string diff = child.Ask("verify");
      if (diff != "0") ++failures;
      const double t = Median(total);
      std::printf(
          "%-6s %-14s %11.2f %11.2f %11.2f | %11.2f %11.2f %11.2f %11.2f | %8.3f %8.3f | %s\n",
          (gib + "GiB").c_str(), (transfer + (other_gpu ? "+gpu" : "")).c_str(), Median(suspend),
          Median(resume), t, d2h_t, h2d_t, d2h_f, h2d_f, t / copy_touched, t / copy_fresh,
          diff.c_str());
      std::fflush(stdout);
    }
  }
  unlink(state.c_str());
  rmdir(dir);
  return failures == 0 ? 0 : 1;
}
