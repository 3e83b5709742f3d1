#include "shim/hooks/proc_address.h"

#include <cstring>

#include <gtest/gtest.h>

namespace gpuslice::shim {
namespace {

const char* SymbolOf(ProcMatch m) { return m.hook == kHookCount ? "" : kHooks[m.hook].symbol; }

TEST(ProcAddress, VersionPicksTheNewestHookNotAboveIt) {
  const struct {
    const char* name;
    int version;
    uint64_t flags;
    const char* symbol;
  } kCases[] = {
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      // Hooks newer than the header are absent: the newest older one answers.
#if CUDA_VERSION >= 12050
      {"cuCtxCreate", 12080, 0, "cuCtxCreate_v4"},
#else
      {"cuCtxCreate", 12080, 0, "cuCtxCreate_v3"},
#endif
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuDevicePrimaryCtxRelease", 12000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemAllocAsync_ptsz"},
      {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuLaunchKernel_ptsz"},
      {"cuLaunchKernel", 4000, 0, "cuLaunchKernel"},
      {"cuMemGetInfo", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemGetInfo_v2"},
  };
  for (const auto& k : kCases) {
    ProcMatch m = MatchProc(k.name, k.version, k.flags);
    EXPECT_STREQ(SymbolOf(m), k.symbol) << k.name << "@" << k.version << " flags " << k.flags;
    EXPECT_FALSE(m.deny);
  }
}

TEST(ProcAddress, PreCuda32AllocatorsAreDenied) {
  for (const char* name : {"cuMemAlloc", "cuMemAllocPitch", "cuArrayCreate", "cuArray3DCreate"}) {
    ProcMatch m = MatchProc(name, 2000, 0);
    EXPECT_EQ(m.hook, kHookCount) << name;
    EXPECT_TRUE(m.deny) << name;
  }
  // An old query or context call is passed through, not denied.
  EXPECT_FALSE(MatchProc("cuMemGetInfo", 2000, 0).deny);
  EXPECT_FALSE(MatchProc("cuCtxCreate", 2000, 0).deny);
}

TEST(ProcAddress, UnhookedNamesMatchNothing) {
  EXPECT_EQ(MatchProc("cuMemcpyHtoD", 12000, 0).hook, kHookCount);
  EXPECT_FALSE(MatchProc("cuMemcpyHtoD", 12000, 0).deny);
  EXPECT_EQ(MatchProc(nullptr, 12000, 0).hook, kHookCount);
}

TEST(ProcAddress, PerThreadTwinsExistForEveryStreamHook) {
  for (int i = 0; i < kHookCount; ++i) {
    if (kHooks[i].stream != StreamFlavor::kLegacyStream) continue;
    ProcMatch m = MatchProc(kHooks[i].proc_name, 13000,
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ASSERT_NE(m.hook, kHookCount) << kHooks[i].symbol;
    EXPECT_EQ(kHooks[m.hook].stream, StreamFlavor::kPerThreadStream) << kHooks[i].symbol;
  }
}

TEST(ProcAddress, HooksNewerThanTheHeaderAreAbsent) {
  EXPECT_EQ(FindHookBySymbol("cuLibraryLoadData") != kHookCount, CUDA_VERSION >= 12000);
  EXPECT_EQ(FindHookBySymbol("cuCtxCreate_v4") != kHookCount, CUDA_VERSION >= 12050);
  // Asked for a library at any version, an old build matches no hook.
  EXPECT_EQ(MatchProc("cuLibraryLoadData", 13000, 0).hook != kHookCount, CUDA_VERSION >= 12000);
}

// Pre-12.0 headers lack its types, yet CUDA 12+ runtimes reach
// everything through it, so the hook exists in every build.
TEST(ProcAddress, CuGetProcAddressV2IsHookedWhateverTheHeader) {
  HookId v2 = FindHookBySymbol("cuGetProcAddress_v2");
  ASSERT_NE(v2, kHookCount);
  EXPECT_STREQ(kHooks[v2].proc_name, "cuGetProcAddress");
  EXPECT_EQ(kHooks[v2].version, 12000);
}

TEST(ProcAddress, SymbolLookupFindsHooksAndRejectsOthersCheaply) {
  EXPECT_EQ(FindHookBySymbol("cuMemAlloc_v2"), kHook_cuMemAlloc_v2);
  EXPECT_EQ(FindHookBySymbol("nvmlDeviceGetMemoryInfo_v2"), kHook_nvmlDeviceGetMemoryInfo_v2);
  EXPECT_EQ(FindHookBySymbol("cuMemAlloc"), kHookCount);  // The legacy 32-bit symbol.
  EXPECT_EQ(FindHookBySymbol("malloc"), kHookCount);
  EXPECT_EQ(FindHookBySymbol(nullptr), kHookCount);
}

}  // namespace
}  // namespace gpuslice::shim
