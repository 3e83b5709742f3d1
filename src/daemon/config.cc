#include "daemon/config.h"

#include <fstream>
#include <sstream>

#include "core/units.h"

namespace gpuslice::daemon {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

core::Result<bool> ParseBool(std::string_view key, std::string_view v) {
  if (v == "true" || v == "yes" || v == "on" || v == "1") return true;
  if (v == "false" || v == "no" || v == "off" || v == "0") return false;
  return core::InvalidArgumentError(std::string(key) + ": expected true or false, got '" +
                                    std::string(v) + "'");
}

}  // namespace

core::Status ApplyConfigValue(DaemonConfig* c, std::string_view key, std::string_view value) {
  std::string v(value);
  auto path = [&](std::string* out) -> core::Status {
    if (v.empty() || v[0] != '/') {
      return core::InvalidArgumentError(std::string(key) + ": must be an absolute path, got '" +
                                        v + "'");
    }
    *out = v;
    return core::Status::Ok();
  };
  if (key == "socket") return path(&c->socket);
  if (key == "state_dir") return path(&c->state_dir);
  if (key == "shim") return path(&c->shim);
  if (key == "sim_lib_dir") return path(&c->sim_lib_dir);
  if (key == "tcp_token_file") return path(&c->tcp_token_file);
  if (key == "socket_group") {
    c->socket_group = v;
    return core::Status::Ok();
  }
  if (key == "admin_group") {
    c->admin_group = v;
    return core::Status::Ok();
  }
  if (key == "socket_mode") {
    char* end = nullptr;
    unsigned long mode = std::strtoul(v.c_str(), &end, 8);
    if (v.empty() || *end != '\0' || mode > 0777 || (mode & 0002)) {
      return core::InvalidArgumentError("socket_mode: expected octal such as 0660, not "
                                        "world-writable, got '" + v + "'");
    }
    c->socket_mode = static_cast<uint32_t>(mode);
    return core::Status::Ok();
  }
  if (key == "tcp_listen") {
    size_t colon = v.rfind(':');
    if (!v.empty() && (colon == std::string::npos || colon + 1 == v.size())) {
      return core::InvalidArgumentError("tcp_listen: expected HOST:PORT, got '" + v + "'");
    }
    c->tcp_listen = v;
    return core::Status::Ok();
  }
  if (key == "metrics_listen") {
    size_t colon = v.rfind(':');
    if (!v.empty() && (colon == std::string::npos || colon == 0 || colon + 1 == v.size())) {
      return core::InvalidArgumentError("metrics_listen: expected HOST:PORT, got '" + v + "'");
    }
    c->metrics_listen = v;
    return core::Status::Ok();
  }
  if (key == "policy") {
    auto p = core::ParsePolicy(v);
    if (!p.ok()) return p.status().WithContext("policy");
    if (core::InfoOf(*p).needs_rng) {
      return core::InvalidArgumentError("policy: '" + v +
                                        "' is random; the daemon supports frag-aware (default), "
                                        "fgd, best-fit, dot-product, gpu-packing, gpu-clustering, "
                                        "binpack and spread");
    }
    c->policy = *p;
    return core::Status::Ok();
  }
  if (key == "backfill") {
    GPUSLICE_ASSIGN_OR_RETURN(c->backfill, ParseBool(key, v));
    return core::Status::Ok();
  }
  if (key == "gpu_source") {
    GPUSLICE_ASSIGN_OR_RETURN(c->gpu_source, ParseGpuSourceMode(v));
    return core::Status::Ok();
  }
  if (key == "kill_grace") {
    auto d = core::ParseDuration(v);
    if (!d.ok()) return d.status().WithContext("kill_grace");
    c->kill_grace_ms = d->count();
    return core::Status::Ok();
  }
  if (key == "log_level") {
    static const std::pair<const char*, LogLevel> kLevels[] = {
        {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
        {"info", LogLevel::kInfo},   {"debug", LogLevel::kDebug}};
    for (const auto& [name, level] : kLevels) {
      if (v == name) {
        c->log_level = level;
        return core::Status::Ok();
      }
    }
    return core::InvalidArgumentError("log_level: expected error, warn, info or debug, got '" +
                                      v + "'");
  }
  bool policy_key = false;
  GPUSLICE_RETURN_IF_ERROR(ApplyPolicyValue(&c->rules, key, value, &policy_key));
  if (policy_key) return core::Status::Ok();
  bool access_key = false;
  GPUSLICE_RETURN_IF_ERROR(ApplyAccessValue(&c->rules.access, key, value, &access_key));
  if (access_key) return core::Status::Ok();
  return core::InvalidArgumentError("unknown setting '" + std::string(key) +
                                    "' (see docs/CONFIG.md)");
}

core::Status ParseConfigText(std::string_view text, std::string_view file, DaemonConfig* c) {
  int line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    size_t hash = line.find('#');
    if (hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    std::string where = std::string(file) + ":" + std::to_string(line_no);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return core::InvalidArgumentError(where + ": expected 'key = value', got '" +
                                        std::string(line) + "'");
    }
    GPUSLICE_RETURN_IF_ERROR(
        ApplyConfigValue(c, Trim(line.substr(0, eq)), Trim(line.substr(eq + 1))).WithContext(where));
  }
  return core::Status::Ok();
}

core::Status LoadConfigFile(const std::string& path, DaemonConfig* c) {
  std::ifstream in(path);
  if (!in) return core::NotFoundError("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfigText(ss.str(), path, c);
}

}  // namespace gpuslice::daemon
