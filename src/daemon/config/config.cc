#include "daemon/config/config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/units.h"
#include "daemon/launch/job_log.h"

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
  if (key == "driver_root") {
    GPUSLICE_RETURN_IF_ERROR(path(&c->driver_root));
    while (c->driver_root.size() > 1 && c->driver_root.back() == '/') c->driver_root.pop_back();
    return core::Status::Ok();
  }
  if (key == "cdi_dir") {
    if (v.empty()) {  // No CDI specs.
      c->cdi_dir.clear();
      return core::Status::Ok();
    }
    return path(&c->cdi_dir);
  }
  if (key == "tcp_token_file") return path(&c->tcp_token_file);
  if (key == "podman") return path(&c->podman);
  if (key == "docker") return path(&c->docker);
  if (key == "podman_args" || key == "docker_args") {
    // Words split on white space (no quoting: an engine's flags need none).
    std::vector<std::string>* out = key == "podman_args" ? &c->podman_args : &c->docker_args;
    out->clear();
    std::istringstream words(v);
    for (std::string w; words >> w;) out->push_back(w);
    return core::Status::Ok();
  }
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
  if (key == "external_gid_base") {
    // Each external job's slice gets the group base + (id mod 2^20): a range
    // no real group may use. 0: none (its files are root's alone).
    char* end = nullptr;
    errno = 0;
    const unsigned long long base = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || (base != 0 && base < 65536) ||
        base + (1ull << 20) >= 0xffffffffull) {
      return core::InvalidArgumentError(
          "external_gid_base: expected 0 or a group id from 65536 to " +
          std::to_string(0xffffffffull - (1ull << 20) - 1) + ", got '" + v + "'");
    }
    c->external_gid_base = static_cast<uint32_t>(base);
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
  if (key == "slurm_only") {
    GPUSLICE_ASSIGN_OR_RETURN(c->slurm_only, ParseBool(key, v));
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
  if (key == "compute_corun") {
    GPUSLICE_ASSIGN_OR_RETURN(c->compute_corun, ParseBool(key, v));
    return core::Status::Ok();
  }
  if (key == "compute_handoff") {
    GPUSLICE_ASSIGN_OR_RETURN(c->compute_handoff, ParseBool(key, v));
    return core::Status::Ok();
  }
  if (key == "compute_quantum") {
    auto d = core::ParseDuration(v);
    if (!d.ok()) return d.status().WithContext("compute_quantum");
    // Below a millisecond a hand-over costs more than the turn it serves;
    // above the longest turn (20 ms) there is no hand-off left.
    if (d->count() < 1 || d->count() > 20) {
      return core::InvalidArgumentError("compute_quantum: from 1ms to 20ms, got '" + v + "'");
    }
    c->compute_quantum_ms = d->count();
    return core::Status::Ok();
  }
  if (key == "cgroups") {
    GPUSLICE_ASSIGN_OR_RETURN(c->cgroups, ParseBool(key, v));
    return core::Status::Ok();
  }
  if (key == "cgroup_base") {
    // One path component per level, relative to each hierarchy's root.
    bool ok = !v.empty() && v[0] != '/' && v.back() != '/' && v.find("..") == std::string::npos &&
              v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-_./") == std::string::npos;
    if (!ok) {
      return core::InvalidArgumentError(
          "cgroup_base: a relative path of letters, digits, '-', '_', '.' and '/', got '" + v +
          "'");
    }
    c->cgroup_base = v;
    return core::Status::Ok();
  }
  if (key == "max_log_size") {
    auto bytes = core::ParseBytes(v);
    if (!bytes.ok()) return bytes.status().WithContext("max_log_size");
    if (*bytes != 0 && *bytes < kMinLogCap) {
      return core::InvalidArgumentError("max_log_size: at least 64 KiB (or 0: no cap)");
    }
    c->max_log_bytes = *bytes;
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
  auto bytes = [&](uint64_t* out, uint64_t min) -> core::Status {
    auto b = core::ParseBytes(v);
    if (!b.ok()) return b.status().WithContext(std::string(key));
    if (*b < min) {
      return core::InvalidArgumentError(std::string(key) + ": at least " +
                                        core::FormatBytes(min) + ", got '" + v + "'");
    }
    *out = *b;
    return core::Status::Ok();
  };
  auto count = [&](uint32_t* out, uint32_t min) -> core::Status {
    char* end = nullptr;
    unsigned long n = std::strtoul(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < min || n > 1'000'000) {
      return core::InvalidArgumentError(std::string(key) + ": expected a number from " +
                                        std::to_string(min) + " to 1000000, got '" + v + "'");
    }
    *out = static_cast<uint32_t>(n);
    return core::Status::Ok();
  };
  auto duration = [&](int64_t* out) -> core::Status {
    auto d = core::ParseDuration(v);
    if (!d.ok()) return d.status().WithContext(std::string(key));
    if (d->count() <= 0) {
      return core::InvalidArgumentError(std::string(key) + ": must be positive, got '" + v + "'");
    }
    *out = d->count();
    return core::Status::Ok();
  };
  if (key == "max_request_bytes") return bytes(&c->max_request_bytes, 4096);
  if (key == "max_env_bytes") return bytes(&c->max_env_bytes, 1024);
  if (key == "max_argv_bytes") return bytes(&c->max_argv_bytes, 1024);
  if (key == "max_queued_jobs_per_user") return count(&c->max_queued_jobs_per_user, 1);
  if (key == "max_connections") return count(&c->max_connections, 16);
  if (key == "max_connections_per_peer") return count(&c->max_connections_per_peer, 2);
  if (key == "header_timeout") return duration(&c->header_timeout_ms);
  if (key == "body_timeout") return duration(&c->body_timeout_ms);
  if (key == "idle_timeout") return duration(&c->idle_timeout_ms);
  if (key == "ledger_retry") return duration(&c->ledger_retry_ms);
  if (key == "sample_interval") {
    GPUSLICE_RETURN_IF_ERROR(duration(&c->sample_interval_ms));
    if (c->sample_interval_ms < 100 || c->sample_interval_ms > 60'000) {
      return core::InvalidArgumentError("sample_interval: from 100ms to 1m, got '" + v + "'");
    }
    return core::Status::Ok();
  }
  if (key == "suspend_lock_timeout") {
    GPUSLICE_RETURN_IF_ERROR(duration(&c->suspend_lock_timeout_ms));
    if (c->suspend_lock_timeout_ms > 3'600'000) {
      return core::InvalidArgumentError("suspend_lock_timeout: at most 1h, got '" + v + "'");
    }
    return core::Status::Ok();
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

std::string CgroupBaseFor(const DaemonConfig& c) {
  if (!c.cgroup_base.empty()) return c.cgroup_base;
  if (c.state_dir == DaemonConfig().state_dir) return "gpuslice";
  // FNV-1a: the same state directory maps to the same base in every build,
  // so a restarted (or upgraded) daemon finds its jobs' cgroups again.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : c.state_dir) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("gpuslice-") + hex;
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
