// Checks that the simulated libcuda.so.1 has every entry point of cuda.h:
// the implemented ones (entry_points.def) and, for all others, a stub that
// returns CUDA_ERROR_NOT_SUPPORTED, through both routes a program can take
// (the exported symbol and cuGetProcAddress). Run by sim_driver_test.
//
// Usage: cuda_stub_probe <path of cuda.h>. Exit 0: every check passed;
// otherwise the failures are printed on stderr.
//
// It reads cuda.h itself (not the list the build generated), so a name the
// build's parsing misses is caught here.

#include <cuda.h>
#include <dlfcn.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

// The symbols the simulator implements, with the same guards as the build.
const std::set<std::string>& Implemented() {
  static const std::set<std::string> names = {
#define CU_ENTRY(name, version, symbol) #symbol,
#define CU_PTDS(name, version, symbol) #symbol,
#include "sim/driver/entry_points.def"
#undef CU_ENTRY
#undef CU_PTDS
  };
  return names;
}

bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Names declared as `CUresult CUDAAPI name(`, whitespace (newlines too)
// allowed between the parts.
std::set<std::string> DeclaredNames(const std::string& text) {
  std::set<std::string> out;
  const std::string kCallConv = "CUDAAPI";
  for (size_t at = text.find(kCallConv); at != std::string::npos;
       at = text.find(kCallConv, at + 1)) {
    size_t before = at;
    while (before > 0 && std::isspace(static_cast<unsigned char>(text[before - 1]))) --before;
    if (before < 8 || text.compare(before - 8, 8, "CUresult") != 0) continue;
    size_t p = at + kCallConv.size();
    while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
    size_t start = p;
    while (p < text.size() && IsIdentChar(text[p])) ++p;
    std::string name = text.substr(start, p - start);
    while (p < text.size() && std::isspace(static_cast<unsigned char>(text[p]))) ++p;
    if (name.rfind("cu", 0) == 0 && p < text.size() && text[p] == '(') out.insert(name);
  }
  return out;
}

// cuGetProcAddress's name for a symbol: no _ptds/_ptsz, no _vN.
std::string BaseName(std::string s) {
  for (const char* suffix : {"_ptds", "_ptsz"}) {
    if (s.size() > 5 && s.compare(s.size() - 5, 5, suffix) == 0) s.resize(s.size() - 5);
  }
  size_t v = s.rfind("_v");
  if (v != std::string::npos && v + 2 < s.size() &&
      s.find_first_not_of("0123456789", v + 2) == std::string::npos) {
    s.resize(v);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> declared = DeclaredNames(text.str());
  if (declared.size() < 300) {
    std::fprintf(stderr, "%s: only %zu declarations found\n", argv[1], declared.size());
    return 1;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return 1;
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress"));
  if (get == nullptr) return 1;

  // Names the simulator implements under some symbol: cuGetProcAddress of
  // those keeps its version rules (tested by cuda_probe proc-address).
  std::set<std::string> implemented_bases;
  for (const std::string& s : Implemented()) implemented_bases.insert(BaseName(s));

  int failures = 0, stubs = 0;
  for (const std::string& name : declared) {
    void* sym = dlsym(lib, name.c_str());
    if (sym == nullptr) {
      std::fprintf(stderr, "%s: not exported\n", name.c_str());
      ++failures;
      continue;
    }
    if (Implemented().count(name) != 0) continue;
    ++stubs;
    // A stub ignores its arguments, so calling it without any is fine.
    CUresult r = reinterpret_cast<CUresult (*)()>(sym)();
    if (r != CUDA_ERROR_NOT_SUPPORTED) {
      std::fprintf(stderr, "%s: returned %d, expected CUDA_ERROR_NOT_SUPPORTED\n", name.c_str(),
                   static_cast<int>(r));
      ++failures;
    }
    std::string base = BaseName(name);
    if (implemented_bases.count(base) != 0) continue;
    void* pfn = nullptr;
    r = get(base.c_str(), &pfn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
    if (r != CUDA_SUCCESS || pfn == nullptr ||
        reinterpret_cast<CUresult (*)()>(pfn)() != CUDA_ERROR_NOT_SUPPORTED) {
      std::fprintf(stderr, "cuGetProcAddress(%s): %d, pfn %p\n", base.c_str(), static_cast<int>(r),
                   pfn);
      ++failures;
    }
  }
  if (stubs < 100) {
    std::fprintf(stderr, "only %d stubs checked\n", stubs);
    ++failures;
  }

  // A program linked against an entry point the simulator lacks loads and
  // gets the error (before stubs it failed with an unresolved symbol).
  CUipcMemHandle handle;
  CUresult r = cuIpcGetMemHandle(&handle, 0);
  if (r != CUDA_ERROR_NOT_SUPPORTED) {
    std::fprintf(stderr, "cuIpcGetMemHandle: %d\n", static_cast<int>(r));
    ++failures;
  }
  void* direct = dlsym(lib, "cuIpcGetMemHandle");
  void* pfn = nullptr;
  if (get("cuIpcGetMemHandle", &pfn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT) != CUDA_SUCCESS ||
      pfn != direct) {
    std::fprintf(stderr, "cuGetProcAddress(cuIpcGetMemHandle) is not the exported stub\n");
    ++failures;
  }
  std::printf("%zu declared, %d stubs\n", declared.size(), stubs);
  return failures == 0 ? 0 : 1;
}
