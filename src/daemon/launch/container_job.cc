#include "daemon/launch/container_job.h"

#include <cstdio>

#include "core/terminal_text.h"

namespace gpuslice::daemon {

core::Result<ContainerEngine> ParseContainerEngine(std::string_view name) {
  if (name == "podman") return ContainerEngine::kPodman;
  if (name == "docker") return ContainerEngine::kDocker;
  return core::InvalidArgumentError("--engine: expected podman or docker, got '" +
                                    std::string(name.substr(0, 64)) + "'");
}

std::string_view ContainerEngineName(ContainerEngine engine) {
  return engine == ContainerEngine::kDocker ? "docker" : "podman";
}

namespace {

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsLower(c) || IsUpper(c) || IsDigit(c); }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The transports of containers/image (what podman's `run IMAGE` looks up
// before the word's first ':'), each of which reads a path, another store
// or a daemon rather than root's own image store.
constexpr std::string_view kTransports[] = {
    "atomic", "containers-storage", "dir",    "docker", "docker-archive", "docker-daemon",
    "oci",    "oci-archive",        "ostree", "sif",    "tarball",
};

// A path component: lower-case letters and digits, joined by '.', '_',
// "__" or a run of '-' (the reference grammar's separators).
bool IsPathComponent(std::string_view s) {
  if (s.empty() || !(IsLower(s.front()) || IsDigit(s.front()))) return false;
  if (!(IsLower(s.back()) || IsDigit(s.back()))) return false;
  for (size_t i = 0; i < s.size();) {
    if (IsLower(s[i]) || IsDigit(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && !(IsLower(s[j]) || IsDigit(s[j]))) ++j;
    const std::string_view sep = s.substr(i, j - i);
    const bool dashes = sep.find_first_not_of('-') == std::string_view::npos;
    if (!(sep == "." || sep == "_" || sep == "__" || dashes)) return false;
    i = j;
  }
  return true;
}

// A digest's algorithm: components of a letter then letters and digits,
// joined by one of '+', '.', '_' and '-' ("sha256", "multihash+base58").
bool IsDigestAlgorithm(std::string_view s) {
  bool component_start = true;
  for (char c : s) {
    if (component_start) {
      if (!IsLower(c) && !IsUpper(c)) return false;
      component_start = false;
    } else if (c == '+' || c == '.' || c == '_' || c == '-') {
      component_start = true;
    } else if (!IsAlnum(c)) {
      return false;
    }
  }
  return !s.empty() && !component_start;
}

// A registry host: DNS labels of letters, digits and '-' joined by '.',
// then an optional ":PORT".
bool IsDomain(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = s.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port) {
      if (!IsDigit(c)) return false;
    }
    s = s.substr(0, colon);
  }
  if (s.empty()) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view label =
        s.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!IsAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

}  // namespace

core::Status ValidateImageName(std::string_view image) {
  const auto refuse = [&](const std::string& reason) {
    return core::InvalidArgumentError(
        "--image: '" + core::TerminalSafe(image.substr(0, 80), false) + "' is refused: " + reason +
        "; only a plain image reference is run, name[:tag][@digest] of an image already in the "
        "engine's store, e.g. localhost/train:1 (docs/CONTAINERS.md)");
  };
  if (image.empty() || image.size() > 255) {
    return core::InvalidArgumentError("--image: an image name of 1 to 255 characters is needed");
  }
  // Checked before the characters, so that a name is refused for what it is.
  if (image[0] == '-') return refuse("it starts with '-' (an option of the engine's)");
  if (const size_t scheme = image.find("://"); scheme != std::string_view::npos) {
    return refuse("a transport prefix ('" + std::string(image.substr(0, scheme + 3)) + "')");
  }
  if (const size_t colon = image.find(':'); colon != std::string_view::npos) {
    const std::string_view prefix = image.substr(0, colon);
    for (std::string_view t : kTransports) {
      if (prefix == t) return refuse("a transport prefix ('" + std::string(t) + ":')");
    }
  }
  if (image[0] == '/') return refuse("a path (it starts with '/')");
  if (image[0] == '.' || image[0] == '~') {
    return refuse("a path (it starts with '" + std::string(1, image[0]) + "')");
  }
  for (char c : image) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-' && c != '/' && c != ':' && c != '@') {
      const unsigned char u = static_cast<unsigned char>(c);
      char shown[8];
      std::snprintf(shown, sizeof shown, u >= 0x20 && u < 0x7f ? "'%c'" : "0x%02x", u);
      return refuse(std::string("a character no image reference holds (") + shown + ")");
    }
  }
  // name[:tag][@digest]
  std::string_view rest = image;
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    const size_t colon = digest.find(':');
    bool ok = colon != std::string_view::npos && IsDigestAlgorithm(digest.substr(0, colon)) &&
              digest.size() - colon - 1 >= 32;
    for (size_t i = colon + 1; ok && i < digest.size(); ++i) ok = IsHex(digest[i]);
    if (!ok) return refuse("a digest that is not ALGORITHM:HEX (sha256:<64 hex digits>)");
  }
  const size_t last_slash = rest.rfind('/');
  const size_t tag_colon = rest.rfind(':');
  if (tag_colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || tag_colon > last_slash)) {
    const std::string_view tag = rest.substr(tag_colon + 1);
    bool ok = !tag.empty() && tag.size() <= 128 && (IsAlnum(tag[0]) || tag[0] == '_');
    for (char c : tag) ok = ok && (IsAlnum(c) || c == '_' || c == '.' || c == '-');
    if (!ok) {
      return refuse(
          "a tag that is not 1 to 128 letters, digits, '_', '.' and '-' (not starting "
          "with '.' or '-')");
    }
    rest = rest.substr(0, tag_colon);
  }
  if (rest.empty()) return refuse("no repository name");
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t slash = rest.find('/', start);
    parts.push_back(rest.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  for (std::string_view part : parts) {
    if (part.empty()) return refuse("a path (an empty component, '//')");
    if (part == "." || part == "..") {
      return refuse("a path (a '" + std::string(part) + "' component)");
    }
  }
  // The first component is a registry host when it looks like one (a '.',
  // a port, or "localhost") and more follow, as engines read it.
  size_t first = 0;
  if (parts.size() > 1 &&
      (parts[0].find_first_of(".:") != std::string_view::npos || parts[0] == "localhost")) {
    if (!IsDomain(parts[0])) {
      return refuse("a registry host that is not HOST[:PORT] ('" + std::string(parts[0]) + "')");
    }
    first = 1;
  } else if (parts[0].find(':') != std::string_view::npos) {
    return refuse("a ':' that is neither a tag's nor a registry port's");
  }
  for (size_t i = first; i < parts.size(); ++i) {
    if (IsPathComponent(parts[i])) continue;
    for (char c : parts[i]) {
      if (IsUpper(c)) {
        return refuse("upper-case letters in the repository name ('" + std::string(parts[i]) +
                      "')");
      }
    }
    return refuse("a repository name component ('" + std::string(parts[i]) +
                  "') that is not lower-case letters and digits joined by '.', '_', '__' or '-'");
  }
  return core::Status::Ok();
}

core::Result<std::vector<std::string>> ContainerSliceFlags(const CdiSlice& slice) {
  return core::PlainContainerFlags(slice.device_nodes, slice.mounts, slice.env);
}

std::string ContainerName(std::string_view cgroup_parent) {
  std::string name;
  for (char c : cgroup_parent) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    if (name.empty() && !ok) continue;  // Engines want a letter or digit first.
    name += ok ? c : '-';
  }
  return name.empty() ? "gpuslice-job" : name;
}

std::vector<std::string> ContainerCommand(const ContainerRun& run) {
  std::vector<std::string> a = {run.engine_path};
  const bool podman = run.engine == ContainerEngine::kPodman;
  // Podman's systemd manager takes a slice name, not a path: cgroupfs puts
  // the container exactly below the job's cgroup.
  if (podman) a.insert(a.end(), {"--cgroup-manager", "cgroupfs"});
  a.insert(a.end(), {"run", "--rm"});
  // Only an image already in root's store: never a pull (a registry of the
  // user's choosing, root's credentials, root's disk).
  if (podman) {
    a.push_back("--pull=never");
  } else {
    a.insert(a.end(), {"--pull", "never"});
  }
  // A restarted (requeued) job may meet its earlier container, left by a
  // daemon that was killed; podman replaces it.
  if (podman) a.push_back("--replace");
  a.insert(a.end(), {"--name", ContainerName(run.cgroup_parent)});
  if (!run.cgroup_parent.empty()) a.insert(a.end(), {"--cgroup-parent", run.cgroup_parent});
  a.insert(a.end(), {"--user", std::to_string(run.uid) + ":" + std::to_string(run.gid)});
  for (uint32_t g : run.groups) {
    if (g != run.gid) a.insert(a.end(), {"--group-add", std::to_string(g)});
  }
  if (run.uid != 0) {
    // The caller, not root: no capability, and no setuid file in the image
    // may give one (the mounted directory is reached with the caller's
    // rights only, and the limits page stays read-only).
    a.insert(a.end(), {"--cap-drop", "all", "--security-opt", "no-new-privileges"});
  }
  a.insert(a.end(), {"-v", run.cwd + ":" + run.cwd, "-w", run.cwd});
  a.insert(a.end(), run.engine_args.begin(), run.engine_args.end());
  a.insert(a.end(), run.slice_flags.begin(), run.slice_flags.end());
  a.push_back(run.image);
  a.insert(a.end(), run.command.begin(), run.command.end());
  return a;
}

}  // namespace gpuslice::daemon
