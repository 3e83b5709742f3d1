#include "client/socket_help.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>

namespace gpuslice::client {
namespace {

SocketFacts Socket(int err) {
  SocketFacts f;
  f.path = "/run/gpuslice/gpuslice.sock";
  f.connect_errno = err;
  f.exists = true;
  f.is_socket = true;
  f.owner = 0;
  f.group = 1234;
  f.mode = 0660;
  f.owner_name = "root";
  f.group_name = "gpu-users";
  f.user = "bob";
  return f;
}

// A user the socket does not let in is told so, not asked "is it running?".
TEST(SocketHelp, AUserOutsideTheSocketGroupIsToldTheGroupAndWhatToDo) {
  const std::string m = SocketHelp(Socket(EACCES));
  EXPECT_NE(m.find("srw-rw---- root:gpu-users"), std::string::npos) << m;
  EXPECT_NE(m.find("only members of group gpu-users"), std::string::npos) << m;
  EXPECT_NE(m.find("you (bob) are not one"), std::string::npos) << m;
  EXPECT_NE(m.find("usermod -aG gpu-users bob"), std::string::npos) << m;
  EXPECT_EQ(m.find("is it running"), std::string::npos) << m;
}

TEST(SocketHelp, AUserAddedToTheGroupInAnotherSessionIsToldToLogInAgain) {
  SocketFacts f = Socket(EACCES);
  f.in_group_database = true;
  const std::string m = SocketHelp(f);
  EXPECT_NE(m.find("after this session started"), std::string::npos) << m;
  EXPECT_NE(m.find("newgrp gpu-users"), std::string::npos) << m;
}

TEST(SocketHelp, ASocketOfNoUsersGroupNamesTheSettingToChange) {
  SocketFacts f = Socket(EACCES);
  f.group = 0;
  f.group_name = "root";
  const std::string m = SocketHelp(f);
  EXPECT_NE(m.find("srw-rw---- root:root"), std::string::npos) << m;
  EXPECT_NE(m.find("socket_group"), std::string::npos) << m;
}

TEST(SocketHelp, NoSocketAndNobodyListeningAreSaidApart) {
  SocketFacts missing;
  missing.path = "/run/gpuslice/gpuslice.sock";
  missing.connect_errno = ENOENT;
  const std::string m = SocketHelp(missing);
  EXPECT_NE(m.find("no socket at /run/gpuslice/gpuslice.sock"), std::string::npos) << m;
  EXPECT_NE(m.find("--socket or GPUSLICE_SOCKET"), std::string::npos) << m;
  const std::string refused = SocketHelp(Socket(ECONNREFUSED));
  EXPECT_NE(refused.find("no gpusliced listens on it"), std::string::npos) << refused;
  SocketFacts blocked;
  blocked.path = "/srv/private/gpuslice.sock";
  blocked.connect_errno = EACCES;
  blocked.blocked_dir = "/srv/private";
  blocked.user = "bob";
  EXPECT_NE(SocketHelp(blocked).find("the directory /srv/private does not let you (bob) through"),
            std::string::npos);
}

TEST(SocketHelp, TheFactsComeFromTheFileSystem) {
  char tmpl[] = "/tmp/gpuslice-sockhelp-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/s.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  chmod(path.c_str(), 0660);
  SocketFacts f = GatherSocketFacts(path, ECONNREFUSED);
  EXPECT_TRUE(f.exists);
  EXPECT_TRUE(f.is_socket);
  EXPECT_EQ(f.mode, 0660u);
  EXPECT_EQ(f.owner, getuid());
  EXPECT_TRUE(f.in_group_now);
  EXPECT_EQ(ModeText(f.mode, true), "srw-rw----");
  close(fd);
  std::filesystem::remove_all(tmpl);
  EXPECT_FALSE(GatherSocketFacts(path, ENOENT).exists);
}

}  // namespace
}  // namespace gpuslice::client
