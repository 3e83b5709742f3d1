#pragma once

// What to tell a user whose CLI cannot connect to gpusliced's socket (issue
// 41: a user outside the socket group was asked "is it running?"). The
// facts come from the file system (GatherSocketFacts); the words from a
// pure function of them (SocketHelp), tested without a daemon.

#include <sys/types.h>

#include <string>
#include <vector>

namespace gpuslice::client {

struct SocketFacts {
  std::string path;
  int connect_errno = 0;  // What connect(2) said.
  bool exists = false;    // stat(2) of the socket succeeded.
  bool is_socket = false;
  uid_t owner = 0;
  gid_t group = 0;
  mode_t mode = 0;
  std::string owner_name;  // "" when unknown.
  std::string group_name;
  // A directory on the path this user may not pass ("" when none).
  std::string blocked_dir;
  // Who is asking: their name, whether they are in the socket's group now
  // (this process's groups) and in the system's group database.
  std::string user;
  bool in_group_now = false;
  bool in_group_database = false;
};

// Everything SocketHelp needs about `path`, for this process.
SocketFacts GatherSocketFacts(const std::string& path, int connect_errno);

// One message: what is wrong and what to do.
std::string SocketHelp(const SocketFacts& facts);

// "srw-rw----" for a socket's mode.
std::string ModeText(mode_t mode, bool is_socket);

}  // namespace gpuslice::client
