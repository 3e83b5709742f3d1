#include "slurm/slurm_doctor.h"

#include <errno.h>
#include <glob.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "slurm/slurm_conf.h"

namespace gpuslice::slurm {

namespace {

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// plugstack.conf with its includes followed (relative patterns are relative
// to the including file's folder, as Slurm reads them), at most 8 deep.
void ReadPlugstack(const std::string& path, int depth, std::vector<PlugstackEntry>* out) {
  auto text = ReadText(path);
  if (!text || depth > 8) return;
  for (PlugstackEntry& e : ParsePlugstack(*text)) {
    if (!e.include) {
      out->push_back(std::move(e));
      continue;
    }
    std::string pattern = e.path[0] == '/' ? e.path : DirOf(path) + "/" + e.path;
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) ReadPlugstack(g.gl_pathv[i], depth + 1, out);
    }
    globfree(&g);
  }
}

// Connects to `path` as an ordinary user of the socket's group (nobody,
// with that group only), in a child that drops root first: what a Slurm
// user's slurmstepd, privileges dropped, meets.
SocketProbe ProbeSocketAsGroupMember(const std::string& path) {
  SocketProbe p;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    p.checked = geteuid() == 0;
    p.why = strerror(errno);
    p.group = "?";
    p.seen = "no socket";
    return p;
  }
  std::string mode = S_ISSOCK(st.st_mode) ? "s" : "-";
  for (int i = 0; i < 9; ++i) mode += (st.st_mode & (0400 >> i)) ? "rwxrwxrwx"[i] : '-';
  struct passwd* owner = getpwuid(st.st_uid);
  struct group* gr = getgrgid(st.st_gid);
  p.group = gr != nullptr ? gr->gr_name : std::to_string(st.st_gid);
  p.seen =
      mode + " " + (owner != nullptr ? owner->pw_name : std::to_string(st.st_uid)) + ":" + p.group;
  if (gr != nullptr) {
    for (char** m = gr->gr_mem; *m != nullptr; ++m) p.members.push_back(*m);
  }
  if (geteuid() != 0) return p;  // Cannot become another user.
  p.checked = true;
  if (st.st_gid == 0) {
    // Group root: no ordinary user is in it.
    p.why = "it belongs to group root";
    return p;
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    p.why = "path too long";
    return p;
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const gid_t gid = st.st_gid;
  const uid_t nobody = 65534;
  pid_t child = fork();
  if (child == 0) {
    // Only system calls here: the caller may have threads.
    if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(nobody) != 0) _exit(100);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) _exit(101);
    _exit(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno & 0x7f);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
    p.checked = false;
    return p;
  }
  const int code = WEXITSTATUS(status);
  p.reachable = code == 0;
  if (code >= 100) {
    p.checked = false;  // Could not become that user here.
  } else if (code != 0) {
    p.why = strerror(code);
  }
  return p;
}

}  // namespace

nlohmann::json SlurmDoctorChecks(const std::string& daemon_socket,
                                 const std::map<uint32_t, std::string>& gpu_minors) {
  nlohmann::json checks = nlohmann::json::array();
  const char* env = std::getenv("SLURM_CONF");
  const std::string conf_path = env != nullptr && *env != '\0' ? env : "/etc/slurm/slurm.conf";
  auto conf = ReadText(conf_path);
  if (!conf) return checks;
  SlurmSetup s;
  s.slurm_conf_path = conf_path;
  s.slurm_conf = *conf;
  const std::string dir = DirOf(conf_path);
  s.gres_conf = ReadText(dir + "/gres.conf").value_or("");
  std::string plugstack = dir + "/plugstack.conf";
  for (const ConfLine& line : ParseConfLines(*conf)) {
    if (auto it = line.find("plugstackconfig"); it != line.end()) plugstack = it->second;
  }
  ReadPlugstack(plugstack, 0, &s.plugstack);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  s.hostname = host;
  s.hostname = s.hostname.substr(0, s.hostname.find('.'));
  for (const std::string& path : GresDevicePaths(s.gres_conf, s.hostname)) {
    struct stat st;
    DeviceNode d;
    if (stat(path.c_str(), &st) == 0) {
      d.exists = true;
      d.is_char = S_ISCHR(st.st_mode);
      d.major = major(st.st_rdev);
      d.minor = minor(st.st_rdev);
    }
    s.devices[path] = d;
  }
  s.daemon_socket = daemon_socket;
  s.socket_probe = ProbeSocketAsGroupMember(daemon_socket);
  s.gpu_minors = gpu_minors;
  for (const SlurmCheck& c : CheckSlurm(s)) {
    nlohmann::json j = {{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}};
    if (c.note) j["note"] = true;
    checks.push_back(std::move(j));
  }
  return checks;
}

}  // namespace gpuslice::slurm
