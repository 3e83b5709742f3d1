#include "daemon/launch/cdi.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "daemon/base/log.h"

namespace gpuslice::daemon {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> MigCapabilityNodes(std::string_view mig_minors, uint32_t gpu_minor,
                                            uint32_t gi, uint32_t ci) {
  const std::string gi_key =
      "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(gi) + "/access";
  const std::string ci_key = "gpu" + std::to_string(gpu_minor) + "/gi" + std::to_string(gi) +
                             "/ci" + std::to_string(ci) + "/access";
  std::vector<std::string> out;
  while (!mig_minors.empty()) {
    size_t end = mig_minors.find('\n');
    std::string_view line = mig_minors.substr(0, end);
    mig_minors.remove_prefix(end == std::string_view::npos ? mig_minors.size() : end + 1);
    size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    std::string_view key = line.substr(0, space), minor = line.substr(space + 1);
    if (key != gi_key && key != ci_key) continue;
    if (minor.empty() || minor.find_first_not_of("0123456789") != std::string_view::npos) continue;
    out.push_back(std::string(kNvidiaCapsDir) + "/nvidia-cap" + std::string(minor));
  }
  return out;
}

nlohmann::json CdiSpec(const CdiSlice& slice) {
  json nodes = json::array();
  for (const std::string& n : slice.device_nodes) nodes.push_back({{"path", n}});
  json mounts = json::array();
  for (const CdiMount& m : slice.mounts) {
    // nosuid/nodev: nothing mounted from the host can raise privileges.
    mounts.push_back({{"hostPath", m.host_path},
                      {"containerPath", m.container_path},
                      {"options", {m.read_only ? "ro" : "rw", "nosuid", "nodev", "bind"}}});
  }
  json edits = {{"env", slice.env}, {"mounts", mounts}};
  if (!nodes.empty()) edits["deviceNodes"] = nodes;
  if (!slice.additional_gids.empty()) edits["additionalGids"] = slice.additional_gids;
  return {{"cdiVersion", kCdiVersion},
          {"kind", kCdiKind},
          {"devices", {{{"name", std::to_string(slice.job_id)}, {"containerEdits", edits}}}},
          {"containerEdits", json::object()}};
}

std::optional<CdiMount> SimStateMount(const std::string& state) {
  const size_t slash = state.rfind('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  const std::string dir = state.substr(0, slash), name = state.substr(slash + 1);
  std::error_code ec;
  if (!fs::exists(state, ec)) return std::nullopt;
  std::vector<std::string> others;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename() != name) others.push_back(e.path().filename().string());
  }
  if (!ec && others.empty()) return CdiMount{dir, dir, false};
  // Never the folder of anything else: a daemon's socket or state there
  // would be every container's to write (docs/SECURITY.md).
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    LogWarn("the simulated GPU's state folder " + dir + " holds " +
            (ec ? "what cannot be listed (" + ec.message() + ")"
                : std::to_string(others.size()) + " other entries (" + others.front() + ")") +
            ": only the state file is mounted into containers, which lose the GPU if the "
            "simulator replaces it; give GPUSLICE_SIM_STATE a folder of its own");
  }
  return CdiMount{state, state, false};
}

std::string CdiSpecFileName(uint64_t job_id) {
  return "gpuslice-" + std::to_string(job_id) + ".json";
}

core::Status CdiSpecs::Write(const CdiSlice& slice) {
  if (!enabled()) return core::Status::Ok();
  auto it = written_.find(slice.job_id);
  if (it != written_.end() && it->second == slice) return core::Status::Ok();
  GPUSLICE_RETURN_IF_ERROR(CheckDir());
  const std::string path = dir_ + "/" + CdiSpecFileName(slice.job_id);
  const std::string tmp = path + ".tmp";
  const std::string text = CdiSpec(slice).dump(2) + "\n";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return core::UnavailableError("CDI spec " + tmp + ": " + std::strerror(errno));
  }
  fchmod(fd, 0644);  // Whatever the umask: engines run as other users too.
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return core::UnavailableError("CDI spec " + path + ": " + why);
  }
  written_[slice.job_id] = slice;
  return core::Status::Ok();
}

// Engines trust every spec in the folder (a spec can mount anything into
// a root container): never write into one that others can write, and make
// it 0755 whatever the umask.
core::Status CdiSpecs::CheckDir() const {
  struct stat st {};
  if (stat(dir_.c_str(), &st) != 0) {
    std::error_code ec;
    fs::create_directories(fs::path(dir_).parent_path(), ec);
    if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
      return core::UnavailableError("CDI folder " + dir_ + ": " + std::strerror(errno));
    }
    chmod(dir_.c_str(), 0755);
    if (stat(dir_.c_str(), &st) != 0) {
      return core::UnavailableError("CDI folder " + dir_ + ": " + std::strerror(errno));
    }
  }
  if (!S_ISDIR(st.st_mode)) return core::UnavailableError("CDI folder " + dir_ + ": not a folder");
  if ((st.st_mode & 0022) != 0 || st.st_uid != geteuid()) {
    return core::PermissionDeniedError("CDI folder " + dir_ +
                                       " is writable by others or not ours: no spec written "
                                       "(engines would trust what anyone puts there)");
  }
  return core::Status::Ok();
}

void CdiSpecs::Remove(uint64_t job_id) {
  if (!enabled()) return;
  unlink((dir_ + "/" + CdiSpecFileName(job_id)).c_str());
  written_.erase(job_id);
}

core::Status CdiSpecs::Sync(const std::map<uint64_t, CdiSlice>& running) {
  if (!enabled()) return core::Status::Ok();
  if (!swept_) {
    // Specs a previous daemon left for jobs that are not running now.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      uint64_t id = 0;
      char tail[8] = {};
      if (std::sscanf(name.c_str(), "gpuslice-%lu.%7s", &id, tail) == 2 &&
          std::string(tail) == "json" && running.count(id) == 0) {
        fs::remove(e.path(), ec);
      }
    }
    swept_ = true;
  }
  std::set<uint64_t> gone;
  for (const auto& [id, slice] : written_) {
    if (running.count(id) == 0) gone.insert(id);
  }
  for (uint64_t id : gone) Remove(id);
  core::Status first = core::Status::Ok();
  for (const auto& [id, slice] : running) {
    core::Status s = Write(slice);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace gpuslice::daemon
