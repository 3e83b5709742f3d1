// doctor on a Slurm node: reads slurm.conf, gres.conf, plugstack.conf (and
// the files it includes) and stats gres.conf's device nodes; the verdicts
// are slurm::CheckSlurm's (src/slurm/slurm_conf.h). A machine without a
// slurm.conf is not a Slurm node: no checks.

#include <glob.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "daemon/node/doctor.h"
#include "slurm/slurm_conf.h"

namespace gpuslice::daemon {

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
void ReadPlugstack(const std::string& path, int depth, std::vector<slurm::PlugstackEntry>* out) {
  auto text = ReadText(path);
  if (!text || depth > 8) return;
  for (slurm::PlugstackEntry& e : slurm::ParsePlugstack(*text)) {
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

}  // namespace

nlohmann::json SlurmDoctorChecks(const DoctorOptions& options, const InventorySnapshot& inv) {
  nlohmann::json checks = nlohmann::json::array();
  const char* env = std::getenv("SLURM_CONF");
  const std::string conf_path = env != nullptr && *env != '\0' ? env : "/etc/slurm/slurm.conf";
  auto conf = ReadText(conf_path);
  if (!conf) return checks;
  slurm::SlurmSetup s;
  s.slurm_conf_path = conf_path;
  s.slurm_conf = *conf;
  const std::string dir = DirOf(conf_path);
  s.gres_conf = ReadText(dir + "/gres.conf").value_or("");
  std::string plugstack = dir + "/plugstack.conf";
  for (const slurm::ConfLine& line : slurm::ParseConfLines(*conf)) {
    if (auto it = line.find("plugstackconfig"); it != line.end()) plugstack = it->second;
  }
  ReadPlugstack(plugstack, 0, &s.plugstack);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  s.hostname = host;
  s.hostname = s.hostname.substr(0, s.hostname.find('.'));
  for (const std::string& path : slurm::GresDevicePaths(s.gres_conf, s.hostname)) {
    struct stat st;
    slurm::DeviceNode d;
    if (stat(path.c_str(), &st) == 0) {
      d.exists = true;
      d.is_char = S_ISCHR(st.st_mode);
      d.major = major(st.st_rdev);
      d.minor = minor(st.st_rdev);
    }
    s.devices[path] = d;
  }
  s.daemon_socket = options.daemon_socket;
  for (const GpuInfo& g : inv.gpus) {
    if (g.minor >= 0) s.gpu_minors[static_cast<uint32_t>(g.minor)] = g.uuid;
  }
  for (const slurm::SlurmCheck& c : slurm::CheckSlurm(s)) {
    nlohmann::json j = {{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}};
    if (c.note) j["note"] = true;
    checks.push_back(std::move(j));
  }
  return checks;
}

}  // namespace gpuslice::daemon
