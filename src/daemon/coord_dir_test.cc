#include "daemon/coord_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

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

TEST_F(CoordDirTest, WithoutAGroupTheDirectoryIsPrivate) {
  std::string path = dir_ + "/coord";
  ASSERT_TRUE(PrepareCoordDir(path, std::nullopt).ok());
  EXPECT_EQ(Stat(path).st_mode & 07777, 0700u);
}

TEST_F(CoordDirTest, WithAGroupTheDirectoryIsSetgidAndGroupWritable) {
  std::string path = dir_ + "/coord";
  // Our own group: a group any user may give their directories.
  ASSERT_TRUE(PrepareCoordDir(path, getegid()).ok());
  struct stat st = Stat(path);
  EXPECT_EQ(st.st_mode & 07777, 02770u);
  EXPECT_EQ(st.st_gid, getegid());
}

TEST_F(CoordDirTest, AnExistingDirectoryOpenToEveryoneIsTightened) {
  std::string path = dir_ + "/coord";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  ASSERT_EQ(chmod(path.c_str(), 0777), 0);
  ASSERT_TRUE(PrepareCoordDir(path, std::nullopt).ok());
  EXPECT_EQ(Stat(path).st_mode & 07777, 0700u);
  ASSERT_TRUE(PrepareCoordDir(path, getegid()).ok()) << "a group configured later";
  EXPECT_EQ(Stat(path).st_mode & 07777, 02770u);
}

TEST_F(CoordDirTest, ASymbolicLinkOrAFileIsRefused) {
  std::string target = dir_ + "/elsewhere";
  ASSERT_EQ(mkdir(target.c_str(), 0700), 0);
  std::string link = dir_ + "/coord";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  core::Status s = PrepareCoordDir(link, std::nullopt);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(link), std::string::npos) << s.message();
  std::string file = dir_ + "/file";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  EXPECT_FALSE(PrepareCoordDir(file, std::nullopt).ok());
}

TEST(CoordDirGroup, TheSocketGroupElseTheDaemonsGroupWhenRootElseNone) {
  EXPECT_EQ(CoordDirGroup(42u, true, 0), 42u);
  EXPECT_EQ(CoordDirGroup(42u, false, 7), 42u);
  EXPECT_EQ(CoordDirGroup(std::nullopt, true, 7), 7u);
  EXPECT_EQ(CoordDirGroup(std::nullopt, false, 7), std::nullopt);
}

}  // namespace
}  // namespace gpuslice::daemon
