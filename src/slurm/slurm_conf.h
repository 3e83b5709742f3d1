#pragma once

// `gpuslice doctor` on a Slurm node (docs/SLURM.md): is Slurm set up so that
// the SPANK plugin gives each GPU step a slice? Pure: slurm_doctor.cc reads
// the files and device nodes and passes their text and facts here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::slurm {

// "prefix[0-1,3]suffix" -> {"prefix0suffix", "prefix1suffix", "prefix3suffix"}
// (gres.conf File= and hostlists); text without brackets is itself. Empty
// on a malformed range.
std::vector<std::string> ExpandBrackets(std::string_view text);

// One line's Key=Value tokens, keys lower-cased (Slurm's are not
// case-sensitive); comments (#) and blank lines give nothing.
using ConfLine = std::map<std::string, std::string>;
std::vector<ConfLine> ParseConfLines(std::string_view text);

// A plugstack.conf line: `required|optional PATH [ARGS...]`, or an
// `include PATTERN` (kept as include).
struct PlugstackEntry {
  bool include = false;
  bool required = false;
  std::string path;  // The plugin, or the include pattern.
  std::vector<std::string> args;
};
std::vector<PlugstackEntry> ParsePlugstack(std::string_view text);

// A device node as stat(2) saw it.
struct DeviceNode {
  bool exists = false;
  bool is_char = false;
  uint32_t major = 0;
  uint32_t minor = 0;
};

// Whether an ordinary user of the socket's group can connect to the
// daemon's socket, tried as such a user (the daemon's doctor runs as root,
// which any socket lets in).
struct SocketProbe {
  bool checked = false;  // False: the daemon could not try (not root).
  bool reachable = false;
  std::string seen;  // "srw-rw---- root:gpu-users"
  std::string group;
  std::string why;                   // connect(2)'s error when not reachable.
  std::vector<std::string> members;  // The group's members by name.
};

struct SlurmSetup {
  std::string slurm_conf_path;
  std::string slurm_conf;                      // Its text.
  std::string gres_conf;                       // Its text ("" when absent).
  std::vector<PlugstackEntry> plugstack;       // Includes already followed.
  std::string hostname;                        // This node's name.
  std::map<std::string, DeviceNode> devices;   // Every gres.conf File= path.
  std::string daemon_socket;                   // Where this gpusliced listens.
  std::map<uint32_t, std::string> gpu_minors;  // Device minor -> GPU UUID.
  SocketProbe socket_probe;                    // Of the plugin's socket.
};

struct SlurmCheck {
  std::string name;
  bool ok = false;
  bool note = false;  // A fact to know; does not count towards doctor's verdict.
  std::string detail;
};

// The File= paths of the gres.conf lines that apply to `hostname`.
std::vector<std::string> GresDevicePaths(std::string_view gres_conf, const std::string& hostname);

std::vector<SlurmCheck> CheckSlurm(const SlurmSetup& setup);

}  // namespace gpuslice::slurm
