// What large copies cost on the simulated GPU, against this machine's own
// memcpy of the same size in the same run (figures in docs/PERFORMANCE.md,
// "Simulator"). The simulated device memory is host memory, so the fair
// measure of a copy is the ratio to a host memcpy between buffers in the
// same state: both into memory touched before, and both into memory never
// touched (fresh pages, which the kernel must provide and zero).
//
//   sim_copy_bench [--sizes-mib 512,1024,2048] [--reps 5]
//
// Per size, medians of --reps:
//   memcpy          host -> host, both touched before (the bandwidth baseline)
//   HtoD DtoH DtoD  the synchronous copies, between touched buffers
//   *Async          the same on a stream, then cuStreamSynchronize
//   memcpy fresh    host -> a newly mapped host buffer (no huge-page advice,
//                   as malloc gives), the baseline of the next two
//   DtoH fresh      into a newly mapped host buffer like it
//   HtoD fresh      into newly allocated device memory
// and the ratio of each to its baseline. Exit status 1 when a copy's bytes
// are wrong. Needs about 5 x the largest size of host memory.

#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

const char* Name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

#define CU(call)                                                                \
  do {                                                                          \
    CUresult r_ = (call);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                   \
      std::fprintf(stderr, "sim_copy_bench: %s failed: %s\n", #call, Name(r_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double TimeMs(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Pageable host memory as a program gets it for a large buffer (malloc maps
// it so): no huge-page advice.
char* MapHost(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("sim_copy_bench: mmap");
    std::exit(1);
  }
  return static_cast<char*>(p);
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

struct Row {
  std::string what;
  double ms;
  double baseline_ms;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sizes = {"512", "1024", "2048"};
  int reps = 5;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--sizes-mib") {
      sizes = Split(argv[i + 1]);
    } else if (i + 1 < argc && a == "--reps") {
      reps = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: sim_copy_bench [--sizes-mib 512,1024,2048] [--reps 5]\n");
      return 2;
    }
  }
  // A simulated machine of our own.
  char dir[] = "/tmp/simcopybenchXXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string state = std::string(dir) + "/state";
  setenv("GPUSLICE_SIM_STATE", state.c_str(), 1);
  setenv("GPUSLICE_SIM_GPUS", "1xH200-141GB", 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::printf("%-8s %-14s %10s %10s %10s %8s\n", "size", "copy", "ms", "GB/s", "base_ms", "ratio");
  int failures = 0;
  for (const std::string& mib : sizes) {
    const size_t bytes = std::strtoull(mib.c_str(), nullptr, 10) << 20;
    char* a = MapHost(bytes);
    char* b = MapHost(bytes);
    for (size_t i = 0; i < bytes; i += 8) {
      uint64_t w = (i + 1) * 0x9E3779B97F4A7C15ull;
      std::memcpy(a + i, &w, std::min<size_t>(8, bytes - i));
    }
    std::memset(b, 0, bytes);
    CUdeviceptr d1, d2;
    CU(cuMemAlloc(&d1, bytes));
    CU(cuMemAlloc(&d2, bytes));
    // Touch the device memory once, so that the timed copies meet memory
    // that is there, as a GPU's is.
    CU(cuMemcpyHtoD(d1, a, bytes));
    CU(cuMemcpyDtoD(d2, d1, bytes));

    std::vector<double> base, h2d, d2h, d2d, h2da, d2ha, d2da, base_f, d2h_f, h2d_f;
    for (int r = 0; r < reps; ++r) {
      base.push_back(TimeMs([&] { std::memcpy(b, a, bytes); }));
      h2d.push_back(TimeMs([&] { CU(cuMemcpyHtoD(d1, a, bytes)); }));
      d2d.push_back(TimeMs([&] { CU(cuMemcpyDtoD(d2, d1, bytes)); }));
      d2h.push_back(TimeMs([&] { CU(cuMemcpyDtoH(b, d2, bytes)); }));
      h2da.push_back(TimeMs([&] {
        CU(cuMemcpyHtoDAsync(d1, a, bytes, stream));
        CU(cuStreamSynchronize(stream));
      }));
      d2da.push_back(TimeMs([&] {
        CU(cuMemcpyDtoDAsync(d2, d1, bytes, stream));
        CU(cuStreamSynchronize(stream));
      }));
      d2ha.push_back(TimeMs([&] {
        CU(cuMemcpyDtoHAsync(b, d2, bytes, stream));
        CU(cuStreamSynchronize(stream));
      }));
      // Into memory never touched: each against the same for memcpy.
      char* f = MapHost(bytes);
      base_f.push_back(TimeMs([&] { std::memcpy(f, a, bytes); }));
      munmap(f, bytes);
      f = MapHost(bytes);
      d2h_f.push_back(TimeMs([&] { CU(cuMemcpyDtoH(f, d2, bytes)); }));
      if (std::memcmp(f, a, bytes) != 0) ++failures;
      munmap(f, bytes);
      CUdeviceptr d3;
      CU(cuMemAlloc(&d3, bytes));
      h2d_f.push_back(TimeMs([&] { CU(cuMemcpyHtoD(d3, a, bytes)); }));
      CU(cuMemFree(d3));
    }
    if (std::memcmp(b, a, bytes) != 0) ++failures;
    const double m = Median(base), mf = Median(base_f);
    const Row rows[] = {
        {"memcpy", m, m},
        {"HtoD", Median(h2d), m},
        {"DtoH", Median(d2h), m},
        {"DtoD", Median(d2d), m},
        {"HtoDAsync", Median(h2da), m},
        {"DtoHAsync", Median(d2ha), m},
        {"DtoDAsync", Median(d2da), m},
        {"memcpy fresh", mf, mf},
        {"DtoH fresh", Median(d2h_f), mf},
        {"HtoD fresh", Median(h2d_f), mf},
    };
    for (const Row& row : rows) {
      std::printf("%-8s %-14s %10.1f %10.2f %10.1f %8.2f\n", (mib + "MiB").c_str(),
                  row.what.c_str(), row.ms, bytes / row.ms / 1e6, row.baseline_ms,
                  row.ms / row.baseline_ms);
    }
    std::fflush(stdout);
    CU(cuMemFree(d1));
    CU(cuMemFree(d2));
    munmap(a, bytes);
    munmap(b, bytes);
  }
  unlink(state.c_str());
  rmdir(dir);
  if (failures != 0) std::fprintf(stderr, "sim_copy_bench: %d copies differ\n", failures);
  return failures == 0 ? 0 : 1;
}
