#include "daemon/compute/coord_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpuslice::daemon {
namespace {

namespace fs = std::filesystem;

class CoordDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-coord-dir-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  struct stat Stat(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st;
  }
  std::string dir_;
};

TEST_F(CoordDirTest, TheDirectoryIsTheDaemonsAndWritableByNobodyElse) {
  std::string path = dir_ + "/coord";
  ASSERT_TRUE(PrepareCoordDir(path).ok());
  struct stat st = Stat(path);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, geteuid());
}

// A 02770 directory of the socket's group would let any member of the group
// write every slice's coordination file.
TEST_F(CoordDirTest, AGroupWritableDirectoryAndItsSharedFilesAreTakenBack) {
  std::string path = dir_ + "/coord";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  ASSERT_EQ(chmod(path.c_str(), 02777), 0);
  std::ofstream(path + "/gpu-0000.coord") << "anyone's";
  std::ofstream(path + "/gpu-0000.coord.tmp.12") << "anyone's";
  std::ofstream(path + "/gpu-0000.board") << "kept";
  ASSERT_TRUE(PrepareCoordDir(path).ok());
  EXPECT_EQ(Stat(path).st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(path + "/gpu-0000.coord"));
  EXPECT_FALSE(fs::exists(path + "/gpu-0000.coord.tmp.12"));
  EXPECT_TRUE(fs::exists(path + "/gpu-0000.board"));
}

TEST_F(CoordDirTest, ASymbolicLinkOrAFileIsRefused) {
  std::string target = dir_ + "/elsewhere";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  std::string link = dir_ + "/coord";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  core::Status s = PrepareCoordDir(link);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(link), std::string::npos) << s.message();
  std::string file = dir_ + "/file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_FALSE(PrepareCoordDir(file).ok());
}

}  // namespace
}  // namespace gpuslice::daemon
