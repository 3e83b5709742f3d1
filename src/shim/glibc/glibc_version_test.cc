// The shim must load in the images people run (Ubuntu 22.04 PyTorch images with
// glibc 2.35, RHEL 8, Debian 11, manylinux2014's glibc 2.17), so a build that
// needs GLIBC_2.36 must fail here. This reads the built binaries' ELF version
// needs (.gnu.version_r) and NEEDED libraries, as the dynamic linker does, and
// fails on any glibc version above 2.17 or a C++ runtime it would have to find
// in the image.

#include <elf.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace gpuslice::shim {
namespace {

struct ElfNeeds {
  std::set<std::string> versions;   // "GLIBC_2.17", "GLIBCXX_3.4", ...
  std::vector<std::string> needed;  // DT_NEEDED.
  std::string error;
};

ElfNeeds ReadNeeds(const std::string& path) {
  ElfNeeds out;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    out.error = path + ": not a 64-bit ELF file";
    return out;
  }
  auto at = [&](uint64_t offset, uint64_t size) -> const char* {
    return offset + size <= bytes.size() ? bytes.data() + offset : nullptr;
  };
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i) {
    const char* p = at(eh.e_shoff + i * eh.e_shentsize, sizeof(Elf64_Shdr));
    if (p == nullptr) {
      out.error = "section header out of the file";
      return out;
    }
    std::memcpy(&sections[i], p, sizeof(Elf64_Shdr));
  }
  auto str = [&](const Elf64_Shdr& strtab, uint64_t index) -> std::string {
    const char* p = at(strtab.sh_offset + index, 1);
    return p != nullptr ? std::string(p, strnlen(p, bytes.size() - (p - bytes.data()))) : "";
  };
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strtab = sections[s.sh_link];
    if (s.sh_type == SHT_GNU_verneed) {
      uint64_t off = s.sh_offset;
      for (uint64_t n = 0; n < s.sh_info; ++n) {
        Elf64_Verneed vn;
        const char* p = at(off, sizeof vn);
        if (p == nullptr) break;
        std::memcpy(&vn, p, sizeof vn);
        uint64_t aux = off + vn.vn_aux;
        for (uint16_t k = 0; k < vn.vn_cnt; ++k) {
          Elf64_Vernaux va;
          const char* q = at(aux, sizeof va);
          if (q == nullptr) break;
          std::memcpy(&va, q, sizeof va);
          out.versions.insert(str(strtab, va.vna_name));
          aux += va.vna_next;
        }
        if (vn.vn_next == 0) break;
        off += vn.vn_next;
      }
    } else if (s.sh_type == SHT_DYNAMIC) {
      for (uint64_t off = s.sh_offset; off + sizeof(Elf64_Dyn) <= s.sh_offset + s.sh_size;
           off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        const char* p = at(off, sizeof d);
        if (p == nullptr) break;
        std::memcpy(&d, p, sizeof d);
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED) out.needed.push_back(str(strtab, d.d_un.d_val));
      }
    }
  }
  return out;
}

// "GLIBC_2.17" -> {2, 17}; other names -> {0, 0}.
std::pair<int, int> GlibcVersion(const std::string& name) {
  int major = 0, minor = 0;
  if (std::sscanf(name.c_str(), "GLIBC_%d.%d", &major, &minor) == 2) return {major, minor};
  return {0, 0};
}

// Everything that runs in other people's images: the shim, the simulated
// libcuda and libnvidia-ml (mounted into containers on machines without a
// GPU) and the demo worker (in the test images).
class ShimGlibc : public ::testing::TestWithParam<const char*> {};

TEST_P(ShimGlibc, NeedsAtMostGlibc217AndNoCxxRuntime) {
  const std::string path = GetParam();
  ElfNeeds needs = ReadNeeds(path);
  ASSERT_TRUE(needs.error.empty()) << needs.error;
  ASSERT_FALSE(needs.versions.empty()) << "no version needs read from " << path;
  for (const std::string& v : needs.versions) {
    EXPECT_LE(GlibcVersion(v), std::make_pair(2, 17))
        << path << ": " << v << " is newer than manylinux2014's glibc";
    EXPECT_EQ(v.rfind("GLIBCXX_", 0), std::string::npos) << path << ": " << v << ": libstdc++";
    EXPECT_EQ(v.rfind("CXXABI_", 0), std::string::npos) << path << ": " << v;
    EXPECT_EQ(v.rfind("GCC_", 0), std::string::npos) << path << ": " << v << ": libgcc_s";
  }
  EXPECT_TRUE(needs.versions.count("GLIBC_2.2.5") || needs.versions.count("GLIBC_2.17"));
  for (const std::string& lib : needs.needed) {
    EXPECT_EQ(lib.find("libstdc++"), std::string::npos) << path << ": " << lib;
    EXPECT_EQ(lib.find("libgcc_s"), std::string::npos) << path << ": " << lib;
  }
  // Old glibc keeps dlopen and pthread_create there (stubs since 2.34).
  EXPECT_NE(std::find(needs.needed.begin(), needs.needed.end(), "libdl.so.2"), needs.needed.end())
      << path;
  EXPECT_NE(std::find(needs.needed.begin(), needs.needed.end(), "libpthread.so.0"),
            needs.needed.end())
      << path;
}

INSTANTIATE_TEST_SUITE_P(Binaries, ShimGlibc,
                         ::testing::Values(GPUSLICE_SHIM_LIBRARY, GPUSLICE_SIM_CUDA_LIBRARY,
                                           GPUSLICE_SIM_NVML_LIBRARY, GPUSLICE_DEMO_WORKER));

// The reader itself: on this test's own binary, built against this
// machine's glibc, it finds versions newer than 2.17 (so a shim that needed
// them would fail the test above).
TEST(GlibcReader, SeesANewGlibcWhereThereIsOne) {
  ElfNeeds needs = ReadNeeds("/proc/self/exe");
  ASSERT_TRUE(needs.error.empty()) << needs.error;
  EXPECT_TRUE(needs.versions.count("GLIBCXX_3.4")) << "a C++ test links libstdc++";
  bool newer = false;
  for (const std::string& v : needs.versions)
    newer = newer || GlibcVersion(v) > std::make_pair(2, 17);
  EXPECT_TRUE(newer) << "this test binary is built on glibc >= 2.34";
}

}  // namespace
}  // namespace gpuslice::shim
