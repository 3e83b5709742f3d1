#pragma once

// What the e2e tests with a real container engine share: podman (Debian
// 12's 4.3) with runc (crun fails on these machines' hybrid cgroups), and an
// image imported from the Debian 11 root file system scripts/test-rootfs.sh
// builds (glibc 2.31; no registry is reachable here).

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace gpuslice::e2e {

inline constexpr char kRootfs[] = "/var/cache/gpuslice/bullseye-rootfs";
inline constexpr char kImage[] = "localhost/gpuslice-e2e:bullseye";
// What every `podman run` here needs besides runc: these machines deny
// raising rlimits (no CAP_SYS_RESOURCE), and runc otherwise sets podman's
// defaults. Also the daemon's podman_args in the tests of container jobs.
inline constexpr char kPodmanRunArgs[] =
    "--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024";

struct Ran {
  int code = -1;
  std::string out;
};

// Runs `cmd` with sh, stdout and stderr together.
inline Ran Sh(const std::string& cmd) {
  Ran r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// Skips without root (rootful podman); fails when podman or the root file
// system is missing; imports the image once.
class PodmanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "rootful podman needs root (CI runs as root)";
    ASSERT_EQ(Sh("podman --version").code, 0) << "podman is missing: scripts/setup.sh installs it";
    ASSERT_TRUE(std::filesystem::exists(std::string(kRootfs) + "/bin/sh"))
        << kRootfs << " is missing: scripts/test-rootfs.sh builds it with debootstrap";
    if (Sh(std::string("podman image exists ") + kImage).code != 0) {
      Ran imported = Sh(std::string("tar -C ") + kRootfs + " -c . | podman import - " + kImage);
      ASSERT_EQ(imported.code, 0) << imported.out;
    }
  }
};

}  // namespace gpuslice::e2e
