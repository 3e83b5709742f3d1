#include "slurm/slurm_conf.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "slurm/spank_request.h"

namespace gpuslice::slurm {

namespace {

constexpr uint32_t kNvidiaMajor = 195;
constexpr char kPluginFile[] = "libgpuslice_spank.so";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> Tokens(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i > start) out.emplace_back(line.substr(start, i - start));
  }
  return out;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    out.push_back(line);
    start = end + 1;
  }
  return out;
}

bool ParseNumber(std::string_view s, uint32_t* v) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

bool AppliesTo(const ConfLine& line, const std::string& hostname) {
  auto it = line.find("nodename");
  if (it == line.end()) return true;
  for (const std::string& name : ExpandBrackets(it->second)) {
    if (name == hostname) return true;
  }
  return false;
}

std::string Setting(const std::vector<ConfLine>& conf, const std::string& key) {
  std::string value;
  for (const ConfLine& line : conf) {
    if (auto it = line.find(key); it != line.end()) value = it->second;  // The last wins.
  }
  return value;
}

}  // namespace

std::vector<std::string> ExpandBrackets(std::string_view text) {
  const size_t open = text.find('[');
  if (open == std::string_view::npos) return {std::string(text)};
  const size_t close = text.find(']', open);
  if (close == std::string_view::npos) return {};
  const std::string prefix(text.substr(0, open));
  std::vector<std::string> rest = ExpandBrackets(text.substr(close + 1));
  std::vector<std::string> out;
  std::string_view inner = text.substr(open + 1, close - open - 1);
  while (!inner.empty()) {
    size_t comma = inner.find(',');
    std::string_view part = inner.substr(0, comma);
    inner = comma == std::string_view::npos ? std::string_view() : inner.substr(comma + 1);
    size_t dash = part.find('-');
    std::string_view lo_text = part.substr(0, dash);
    uint32_t lo = 0, hi = 0;
    if (!ParseNumber(lo_text, &lo)) return {};
    hi = lo;
    if (dash != std::string_view::npos && !ParseNumber(part.substr(dash + 1), &hi)) return {};
    if (hi < lo || hi - lo > 4096) return {};
    for (uint32_t v = lo; v <= hi; ++v) {
      // Zero padding as written ("[00-03]").
      std::string n = std::to_string(v);
      if (n.size() < lo_text.size()) n.insert(0, lo_text.size() - n.size(), '0');
      for (const std::string& r : rest) out.push_back(prefix + n + r);
    }
  }
  return out;
}

std::vector<ConfLine> ParseConfLines(std::string_view text) {
  std::vector<ConfLine> out;
  for (std::string_view raw : Lines(text)) {
    ConfLine line;
    for (const std::string& tok : Tokens(raw)) {
      size_t eq = tok.find('=');
      if (eq == std::string::npos) continue;
      line[Lower(tok.substr(0, eq))] = tok.substr(eq + 1);
    }
    if (!line.empty()) out.push_back(std::move(line));
  }
  return out;
}

std::vector<PlugstackEntry> ParsePlugstack(std::string_view text) {
  std::vector<PlugstackEntry> out;
  for (std::string_view raw : Lines(text)) {
    std::vector<std::string> tok = Tokens(raw);
    if (tok.size() < 2) continue;
    PlugstackEntry e;
    const std::string kind = Lower(tok[0]);
    if (kind == "include") {
      e.include = true;
    } else if (kind == "required" || kind == "optional") {
      e.required = kind == "required";
    } else {
      continue;
    }
    e.path = tok[1];
    e.args.assign(tok.begin() + 2, tok.end());
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> GresDevicePaths(std::string_view gres_conf, const std::string& hostname) {
  std::vector<std::string> out;
  for (const ConfLine& line : ParseConfLines(gres_conf)) {
    if (!AppliesTo(line, hostname)) continue;
    auto file = line.find("file");
    if (file == line.end()) continue;
    for (std::string& p : ExpandBrackets(file->second)) {
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<SlurmCheck> CheckSlurm(const SlurmSetup& setup) {
  std::vector<SlurmCheck> checks;
  auto add = [&](std::string name, bool ok, std::string detail, bool note = false) {
    checks.push_back({std::move(name), ok, note, std::move(detail)});
  };
  const std::vector<ConfLine> conf = ParseConfLines(setup.slurm_conf);

  // GresTypes names gpu (and shard, for shards).
  const std::string types = Lower(Setting(conf, "grestypes"));
  std::set<std::string> type_set;
  for (const std::string& t : ExpandBrackets(types)) {
    size_t start = 0;
    while (start <= t.size()) {
      size_t comma = t.find(',', start);
      if (comma == std::string::npos) comma = t.size();
      type_set.insert(t.substr(start, comma - start));
      start = comma + 1;
    }
  }
  add("slurm_gres_types", type_set.count("gpu") > 0,
      types.empty() ? setup.slurm_conf_path + ": no GresTypes line (add GresTypes=gpu,shard)"
                    : "GresTypes=" + types +
                          (type_set.count("gpu") ? "" : ": lacks gpu (add GresTypes=gpu,shard)"));

  // The plugin's line.
  const PlugstackEntry* ours = nullptr;
  for (const PlugstackEntry& e : setup.plugstack) {
    if (!e.include && e.path.size() >= sizeof kPluginFile - 1 &&
        e.path.compare(e.path.size() - (sizeof kPluginFile - 1), std::string::npos, kPluginFile) ==
            0) {
      ours = &e;
    }
  }
  if (ours == nullptr) {
    add("slurm_plugstack", false,
        std::string("no line for ") + kPluginFile +
            " in plugstack.conf (add `required /usr/lib/gpuslice/" + kPluginFile +
            " shards_per_gpu=N` to a file in plugstack.conf.d; docs/SLURM.md)");
    return checks;
  }
  auto config = ParsePluginArgs(ours->args);
  if (!config.ok()) {
    add("slurm_plugstack", false, ours->path + ": " + config.status().message());
    return checks;
  }
  add("slurm_plugstack", true,
      std::string(ours->required ? "required " : "optional ") + ours->path +
          (ours->required ? ""
                          : " (optional: a node without the plugin file runs steps "
                            "without slices)"));
  const SocketProbe& probe = setup.socket_probe;
  if (config->socket != setup.daemon_socket) {
    add("slurm_plugin_socket", false,
        "the plugin connects to " + config->socket + " but gpusliced listens on " +
            setup.daemon_socket + " (set socket= on its plugstack.conf line)");
  } else if (!probe.checked) {
    // "reaches" is said only after a check as the user: root, which every
    // socket lets in, would pass while every user's step is refused.
    add("slurm_plugin_socket", true,
        "the plugin's socket= is " + config->socket +
            ", where gpusliced listens; whether a user's step can connect is not checked "
            "(run doctor as root to check it)",
        true);
  } else if (!probe.reachable) {
    add("slurm_plugin_socket", false,
        "a user of group " + probe.group + " cannot connect to " + config->socket + " (" +
            probe.seen + (probe.why.empty() ? "" : ": " + probe.why) +
            "): every step's slice would be refused; set socket_group in gpusliced's "
            "configuration to the group of the Slurm users (docs/SLURM.md)");
  } else {
    std::string members;
    for (const std::string& m : probe.members) members += (members.empty() ? "" : ", ") + m;
    add("slurm_plugin_socket", true,
        "a user of group " + probe.group + " (not root) connects to " + config->socket + " (" +
            probe.seen + "); the steps of its members reach gpusliced" +
            (members.empty() ? std::string(": the group lists no member by name")
                             : " (members: " + members + ")") +
            "; Slurm users outside it get their steps refused");
  }

  // gres.conf's device nodes: character devices 195:N of GPUs we know.
  const std::vector<ConfLine> gres = ParseConfLines(setup.gres_conf);
  std::vector<std::string> problems, found;
  uint32_t gpu_files = 0, shards = 0, shard_files = 0;
  for (const ConfLine& line : gres) {
    if (!AppliesTo(line, setup.hostname)) continue;
    const std::string name = Lower(line.count("name") ? line.at("name") : "");
    if (name != "gpu" && name != "shard") continue;
    std::vector<std::string> files;
    if (auto f = line.find("file"); f != line.end()) files = ExpandBrackets(f->second);
    if (name == "gpu") gpu_files += static_cast<uint32_t>(files.size());
    if (name == "shard") {
      uint32_t count = 0;
      if (auto c = line.find("count"); c != line.end()) ParseNumber(c->second, &count);
      shards += count;
      shard_files += static_cast<uint32_t>(files.size());
    }
    for (const std::string& path : files) {
      auto d = setup.devices.find(path);
      if (d == setup.devices.end() || !d->second.exists) {
        problems.push_back(path + " does not exist");
      } else if (!d->second.is_char || d->second.major != kNvidiaMajor) {
        problems.push_back(path + " is not an NVIDIA character device (195:N)");
      } else if (!setup.gpu_minors.count(d->second.minor)) {
        problems.push_back(path + " has minor " + std::to_string(d->second.minor) +
                           ", which no GPU of gpusliced's has");
      } else if (name == "gpu") {
        found.push_back(path + " = " + setup.gpu_minors.at(d->second.minor));
      }
    }
  }
  if (gpu_files == 0) {
    add("slurm_gres_devices", false,
        "gres.conf has no Name=gpu File=/dev/nvidia... line for node " + setup.hostname);
  } else {
    std::string detail;
    for (const std::string& s : problems.empty() ? found : problems) {
      detail += (detail.empty() ? "" : "; ") + s;
    }
    add("slurm_gres_devices", problems.empty(), detail);
  }
  if (shards > 0) {
    const uint32_t files = shard_files > 0 ? shard_files : gpu_files;
    const uint32_t per_gpu = files > 0 ? shards / files : 0;
    add("slurm_shards", config->shards_per_gpu == per_gpu && per_gpu > 0,
        config->shards_per_gpu == per_gpu
            ? std::to_string(per_gpu) + " shards per GPU"
            : "gres.conf gives " + std::to_string(per_gpu) +
                  " shards per GPU on this node but the plugin's shards_per_gpu is " +
                  (config->shards_per_gpu ? std::to_string(config->shards_per_gpu)
                                          : std::string("not set")));
  }

  const std::string proctrack = Lower(Setting(conf, "proctracktype"));
  if (proctrack == "proctrack/pgid") {
    add("slurm_proctrack", false,
        "ProctrackType=proctrack/pgid: a task that calls setsid leaves its step; "
        "proctrack/cgroup or proctrack/linuxproc keep it",
        true);
  }
  return checks;
}

}  // namespace gpuslice::slurm
