#include "slice/base/allocate_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "slice/compute/coord.h"
#include "slice/compute/coord_board.h"
#include "slice/compute/coord_board_layout.h"
#include "slice/compute/coord_layout.h"
#include "slice/region/limits_layout.h"
#include "slice/region/limits_page.h"
#include "slice/region/region.h"

namespace gpuslice::slice {
namespace {

// Every file of the region library that is written through a mapping, made
// by its creator at `path`. Returns the creation's status.
struct Maker {
  const char* what;
  uint64_t size;
  std::function<core::Status(const std::string& path)> make;
};

std::vector<Maker> Makers() {
  return {
      {"slice region", layout::kRegionSize,
       [](const std::string& path) {
         RegionOptions o;
         o.devices = {{"GPU-1", 0}};
         return Region::Create(path, o).status();
       }},
      {"limits page", layout::kLimitsPageSize,
       [](const std::string& path) {
         LimitsOptions o;
         o.devices = {{.uuid = "GPU-1"}};
         return LimitsPage::Create(path, o).status();
       }},
      {"compute board", board::kBoardSize,
       [](const std::string& path) {
         auto b = CreateOrOpenBoard(path, "GPU-1", 0644);
         if (b.ok()) munmap(*b, board::kBoardSize);
         return b.status();
       }},
      {"members file", board::kMembersSize,
       [](const std::string& path) {
         auto fd = CreateMembersFile(path, 7, getuid(), getgid());
         if (fd.ok()) close(*fd);
         return fd.status();
       }},
      {"standalone coordination file", coord::kCoordSize,
       [](const std::string& path) {
         return Coordinator::OpenOrCreate(path, "GPU-1", 0600).status();
       }},
  };
}

class AllocatedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-allocated-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  bool mounted_ = false;
};

// A sparse file's first store through a mapping faults (SIGBUS)
// once the disk is full; every block is given at creation instead.
TEST_F(AllocatedFiles, EveryFileWrittenThroughAMappingHasItsBlocksFromCreation) {
  for (const Maker& m : Makers()) {
    SCOPED_TRACE(m.what);
    const std::string path = dir_ + "/" + std::to_string(m.size) + "-" + m.what;
    core::Status s = m.make(path);
    ASSERT_TRUE(s.ok()) << s.ToString();
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(uint64_t(st.st_size), m.size);
    EXPECT_GE(uint64_t(st.st_blocks) * 512, m.size) << "sparse: " << st.st_blocks << " blocks";
  }
}

// With the disk full, the daemon must not die of SIGBUS making a slice (nor
// a job's process claiming a slot in one). Creation is where a full disk
// shows: ResourceExhausted naming it, in a child process so that
// a fault fails the test rather than ending it.
TEST_F(AllocatedFiles, OnAFullDiskCreationFailsWithNoSpaceAndNeverFaults) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  ASSERT_EQ(mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=1m"), 0) << strerror(errno);
  mounted_ = true;
  // Full: what is left is less than a page.
  {
    int fd = open((dir_ + "/fill").c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> block(4096, 'x');
    while (write(fd, block.data(), block.size()) > 0) {
    }
    close(fd);
  }
  for (const Maker& m : Makers()) {
    SCOPED_TRACE(m.what);
    const std::string path = dir_ + "/made";
    unlink(path.c_str());
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      core::Status s = m.make(path);
      const bool named = s.message().find(strerror(ENOSPC)) != std::string::npos;
      _exit(!s.ok() && s.code() == core::StatusCode::kResourceExhausted && named ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "not refused with ENOSPC";
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "a failed creation left its file";
  }
}

}  // namespace
}  // namespace gpuslice::slice
