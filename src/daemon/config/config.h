#pragma once

// gpusliced's configuration: a file of `key = value` lines (docs/CONFIG.md)
// with `#` comments, overridden by command-line flags. Every key has a
// sensible default, so no file is needed; unknown keys and bad values are
// errors naming the file line.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/placement/placement_policy.h"
#include "core/status.h"
#include "daemon/base/log.h"
#include "daemon/config/policy_config.h"
#include "daemon/node/nvml_inventory.h"

namespace gpuslice::daemon {

struct DaemonConfig {
  std::string socket = "/run/gpuslice/gpuslice.sock";
  std::string socket_group;        // Group that may connect; "" = the daemon's group.
  uint32_t socket_mode = 0660;     // Group-accessible.
  std::string state_dir = "/var/lib/gpuslice";
  std::string tcp_listen;          // "127.0.0.1:7420"; "" = no TCP listener.
  std::string tcp_token_file;      // Required with tcp_listen.
  // "127.0.0.1:9400": plain-HTTP listener for GET /metrics and the status
  // page only (no auth, no job submission); port 0 picks one. "" = none.
  std::string metrics_listen;
  std::string admin_group;         // Members may act on every job.
  core::Policy policy = core::kDefaultPolicy;  // frag-aware
  bool backfill = true;
  // A node whose GPUs Slurm hands out (docs/SLURM.md): users' slices come
  // only from their steps' slurmstepd; admins may still submit anything.
  bool slurm_only = false;
  GpuSourceMode gpu_source = GpuSourceMode::kAuto;
  std::string shim;                // "" = <bindir>/../lib/libgpuslice.so
  std::string sim_lib_dir;         // "" = <bindir>/../lib/sim
  // The host's NVIDIA driver root as the daemon sees it: "/" on the host; a
  // daemon in a container mounts the host's root (or a driver container's)
  // read-only elsewhere and names that here. NVML and the CUDA driver are
  // loaded from the library folders under it, and CDI specs name the
  // driver's libraries by their paths below it (the host's).
  std::string driver_root = "/";
  // Where CDI specs of running jobs are written for container engines
  // (docs/CONTAINERS.md); "" writes none.
  std::string cdi_dir = "/var/run/cdi";
  // External jobs' slices (docs/KUBERNETES.md): group base + (job id mod
  // 2^20) owns each one's region and members file, and is given to its
  // containers (CDI additionalGids). 0: none.
  uint32_t external_gid_base = 2'000'000'000;
  // Container jobs (--image, docs/CONTAINERS.md): each engine's client and
  // the admin's extra words for its `run` (e.g. "--runtime runc").
  std::string podman = "/usr/bin/podman";
  std::string docker = "/usr/bin/docker";
  std::vector<std::string> podman_args;
  std::vector<std::string> docker_args;
  int64_t kill_grace_ms = 5000;
  LogLevel log_level = LogLevel::kInfo;
  PolicyConfig rules;              // Pools, preemption, watchdog, idle reclaim.

  // Hardening (docs/CONFIG.md "Limits"). Requests: what one
  // submission may carry, so that no user can take the daemon's memory.
  uint64_t max_request_bytes = 1 << 20;       // An HTTP body.
  uint64_t max_env_bytes = 256 << 10;         // A job's environment (sum of "K=V").
  uint64_t max_argv_bytes = 256 << 10;        // A job's command line (sum of args).
  uint32_t max_queued_jobs_per_user = 500;    // Queued (not running) jobs per uid.
  // Connections: a peer is a uid on the unix socket, an IP address on TCP.
  int64_t header_timeout_ms = 10'000;   // A new connection's first request headers.
  int64_t body_timeout_ms = 30'000;     // A request body, and writing a response.
  int64_t idle_timeout_ms = 60'000;     // Keep-alive: the next request's headers.
  uint32_t max_connections = 4096;      // All listeners together.
  uint32_t max_connections_per_peer = 128;
  // A failed ledger write (disk full) is retried this often; the daemon leaves
  // degraded mode when one succeeds.
  int64_t ledger_retry_ms = 2'000;
  // How often usage is sampled (NVML, every slice's reports) and the
  // watchdog, idle reclaim and audit act on it.
  int64_t sample_interval_ms = 1'000;
  // Job cgroups (docs/DAEMON.md): on unless turned off; `<hierarchy
  // root>/<cgroup_base>/job-<id>`. One daemon per base: "" = "gpuslice" for
  // the default state_dir, else "gpuslice-<hash of state_dir>".
  bool cgroups = true;
  std::string cgroup_base;
  uint64_t max_log_bytes = 1ull << 30;  // Per job log file; 0 = no cap.
  // How long a suspension waits for a process's GPU work in flight.
  int64_t suspend_lock_timeout_ms = 10'000;
  // Slices whose work leaves the GPU mostly idle launch beside the holder of
  // the turn (docs/COMPUTE.md, "Co-running"); off: exclusive turns only.
  bool compute_corun = true;
  // Hand-off on demand (docs/COMPUTE.md, "What a share guarantees"): a
  // slice back from idle within its share takes the GPU from a busy holder
  // of its priority once the holder has had `compute_quantum_ms`.
  bool compute_handoff = true;
  int64_t compute_quantum_ms = 1;
};

// Applies `key = value` (as in the file or a --set flag) to `config`.
core::Status ApplyConfigValue(DaemonConfig* config, std::string_view key, std::string_view value);
// Parses a whole file's text; errors say "FILE:LINE: ...".
core::Status ParseConfigText(std::string_view text, std::string_view file_name,
                             DaemonConfig* config);
core::Status LoadConfigFile(const std::string& path, DaemonConfig* config);
// The cgroup base in use: cgroup_base, else derived from state_dir (above),
// so daemons with their own state directories never share job cgroups.
std::string CgroupBaseFor(const DaemonConfig& config);

}  // namespace gpuslice::daemon
