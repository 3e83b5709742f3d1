// gpusliced: the node daemon. See docs/DAEMON.md.
//
//   gpusliced [--config FILE] [--state-dir DIR] [--socket PATH] ...

#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/version.h"
#include "daemon/api/api.h"
#include "daemon/api/http_server.h"
#include "daemon/api/metrics.h"
#include "daemon/api/node_state_route.h"
#include "daemon/api/status_page.h"
#include "daemon/api/usage_api.h"
#include "daemon/base/log.h"
#include "daemon/compute/arbiter.h"
#include "daemon/compute/arbiter_region_store.h"
#include "daemon/compute/coord_dir.h"
#include "daemon/compute/region_store.h"
#include "daemon/config/config.h"
#include "daemon/config/config_check.h"
#include "daemon/jobs/service.h"
#include "daemon/launch/cgroup.h"
#include "daemon/node/doctor.h"
#include "daemon/node/nvml_inventory.h"
#include "daemon/services/replicas.h"
#include "daemon/services/replicas_api.h"
#include "daemon/store/ledger.h"

namespace gd = gpuslice::daemon;
namespace fs = std::filesystem;

namespace {

std::string BinDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::optional<uint32_t> GroupId(const std::string& name, std::string* error) {
  if (name.empty()) return std::nullopt;
  struct group gr;
  struct group* found = nullptr;
  char buf[8192];
  if (getgrnam_r(name.c_str(), &gr, buf, sizeof buf, &found) != 0 || found == nullptr) {
    *error = "no such group '" + name + "'";
    return std::nullopt;
  }
  return gr.gr_gid;
}

int Fail(const std::string& message) {
  std::cerr << "gpusliced: " << message << "\n";
  return 2;
}

// Writes "HOST:PORT\n" to `path` (through a temporary file and rename, so a
// reader never sees half of it): how tests and scripts find a metrics
// listener started on port 0.
gpuslice::core::Status WriteAddressFile(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << address << "\n";
    if (!out.flush()) return gpuslice::core::InternalError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return gpuslice::core::InternalError("cannot rename " + tmp + ": " + ec.message());
  return gpuslice::core::Status::Ok();
}

// Raises the soft limit on open files to the hard limit: every connection
// and every job's log costs a descriptor, and the default soft limit (1024)
// is what 1,019 idle connections run into. Returns the new limit.
rlim_t RaiseFileLimit() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t want = rl.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : rl.rlim_max;
    struct rlimit raised = {want, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl.rlim_cur = want;
  }
  return rl.rlim_cur;
}

// `--check-config FILE`: what the configuration built from FILE (and the
// other flags) would do to the jobs the ledger holds now (config_check.h).
// Exit 0: valid (the report says what changes); 2: it is not.
int CheckConfig(const std::string& file, const gd::DaemonConfig& config) {
  gd::NvmlInventory inventory(config.gpu_source, config.sim_lib_dir);
  auto inv = inventory.Read();
  if (!inv.ok()) return Fail("--check-config: cannot read the GPUs: " + inv.status().message());
  std::vector<gpuslice::core::Job> live;
  const std::string ledger_path = config.state_dir + "/ledger.db";
  std::error_code ec;
  if (fs::exists(ledger_path, ec)) {
    auto ledger = gd::Ledger::OpenReadOnly(ledger_path);
    if (!ledger.ok()) return Fail("--check-config: " + ledger.status().message());
    auto jobs = (*ledger)->LoadJobs(/*live_only=*/true);
    if (!jobs.ok()) return Fail("--check-config: " + jobs.status().message());
    live = std::move(*jobs);
  }
  auto check = gd::CheckConfigChange(config, *inv, live);
  if (!check.ok()) return Fail(file + ": " + check.status().message());
  std::cout << gd::FormatConfigCheck(file, *check);
  return 0;
}

// On simulated GPUs every job opens the daemon's device-state file, as the
// job's user: the daemon names it to them (GPUSLICE_SIM_STATE) and, when it
// runs as root, makes it its socket group's (0660), so that every user who
// may ask for a job can run one (created 0600, it fails every other user's
// first job). GPUSLICE_SIM_STATE_MODE set by the admin wins.
void ShareSimulatorState() {
  if (getenv("GPUSLICE_SIM_STATE") == nullptr) {
    setenv("GPUSLICE_SIM_STATE", ("/dev/shm/gpuslice-sim-" + std::to_string(getuid())).c_str(), 1);
  }
  if (geteuid() == 0 && getenv("GPUSLICE_SIM_STATE_MODE") == nullptr) {
    setenv("GPUSLICE_SIM_STATE_MODE", "0660", 1);
  }
}

void GiveSimulatorStateToGroup(std::optional<uint32_t> socket_gid) {
  const char* path = getenv("GPUSLICE_SIM_STATE");
  if (path == nullptr || geteuid() != 0) return;
  struct stat st;
  if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) return;
  const gid_t gid = socket_gid ? *socket_gid : getegid();
  const char* mode_text = getenv("GPUSLICE_SIM_STATE_MODE");
  const mode_t mode =
      mode_text != nullptr ? static_cast<mode_t>(std::strtoul(mode_text, nullptr, 8)) : 0660;
  // A file an older daemon left 0600 is fixed too.
  if ((st.st_gid != gid && chown(path, static_cast<uid_t>(-1), gid) != 0) ||
      ((st.st_mode & 0777) != mode && chmod(path, mode) != 0)) {
    gd::LogWarn(std::string("simulated GPU state ") + path + ": cannot give it to group " +
                std::to_string(gid) + " mode " + (mode_text ? mode_text : "0660") + ": " +
                std::strerror(errno) + "; other users' jobs may fail to open it");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpusliced: hands out GPU compute on this machine (docs/DAEMON.md)"};
  std::string config_file;
  std::vector<std::string> sets;
  std::string state_dir, socket, tcp, tcp_token_file, admin_group, policy, gpu_source, shim,
      sim_lib_dir, log_level, socket_group, metrics_listen;
  bool no_backfill = false;
  std::string check_config;
  app.add_option("--config", config_file, "Configuration file (docs/CONFIG.md)");
  app.add_option("--check-config", check_config,
                 "Check FILE as the configuration (with the other flags) and say what a restart "
                 "with it would do to the running and queued jobs; starts nothing");
  app.add_option("--state-dir", state_dir, "Ledger, logs and slices (default /var/lib/gpuslice)");
  app.add_option("--socket", socket, "Unix socket (default /run/gpuslice/gpuslice.sock)");
  app.add_option("--socket-group", socket_group, "Group allowed to connect to the socket");
  app.add_option("--tcp", tcp, "Also listen on HOST:PORT (needs --tcp-token-file)");
  app.add_option("--tcp-token-file", tcp_token_file, "File holding the TCP bearer token");
  app.add_option("--metrics-listen", metrics_listen,
                 "Serve GET /metrics and the status page over plain HTTP on HOST:PORT "
                 "(no auth; port 0 picks one, see <state_dir>/metrics.addr)");
  app.add_option("--admin-group", admin_group, "Group whose members may act on all jobs");
  app.add_option("--policy", policy,
                 "Placement policy: frag-aware (default), fgd, binpack, spread, ... (docs/PLACEMENT.md)");
  app.add_option("--gpu-source", gpu_source, "auto (default), nvml or simulated");
  app.add_option("--shim", shim, "Path of libgpuslice.so preloaded into jobs");
  app.add_option("--sim-lib-dir", sim_lib_dir, "Directory of the simulated libcuda/libnvidia-ml");
  app.add_option("--log-level", log_level, "error, warn, info (default) or debug");
  app.add_option("--set", sets, "Any config setting as key=value (repeatable)");
  app.add_flag("--no-backfill", no_backfill, "Start jobs strictly in queue order");
  app.set_version_flag("--version", "gpusliced " + std::string(gpuslice::core::Version()));
  CLI11_PARSE(app, argc, argv);

  gd::DaemonConfig config;
  if (!check_config.empty()) {
    if (!config_file.empty()) return Fail("--check-config FILE replaces --config: give one");
    config_file = check_config;
  }
  if (!config_file.empty()) {
    auto s = gd::LoadConfigFile(config_file, &config);
    if (!s.ok()) return Fail(s.message());
  }
  std::vector<std::pair<std::string, std::string>> flags = {
      {"state_dir", state_dir}, {"socket", socket},         {"tcp_listen", tcp},
      {"tcp_token_file", tcp_token_file}, {"admin_group", admin_group}, {"policy", policy},
      {"gpu_source", gpu_source}, {"shim", shim},           {"sim_lib_dir", sim_lib_dir},
      {"log_level", log_level}, {"socket_group", socket_group},
      {"metrics_listen", metrics_listen}};
  for (const std::string& kv : sets) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return Fail("--set expects key=value, got '" + kv + "'");
    flags.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (auto& [key, value] : flags) {
    if (value.empty()) continue;
    if (key == "state_dir" || key == "socket" || key == "shim" || key == "sim_lib_dir" ||
        key == "tcp_token_file") {
      value = fs::absolute(value).lexically_normal().string();
    }
    auto s = gd::ApplyConfigValue(&config, key, value);
    if (!s.ok()) return Fail(s.message());
  }
  if (no_backfill) config.backfill = false;
  gd::SetLogLevel(config.log_level);

  std::string bin = BinDir();
  if (config.shim.empty()) config.shim = fs::weakly_canonical(bin + "/../lib/libgpuslice.so");
  if (config.sim_lib_dir.empty()) config.sim_lib_dir = fs::weakly_canonical(bin + "/../lib/sim");
  std::string error;
  auto admin_gid = GroupId(config.admin_group, &error);
  if (!error.empty()) return Fail("admin_group: " + error);
  auto socket_gid = GroupId(config.socket_group, &error);
  if (!error.empty()) return Fail("socket_group: " + error);
  if (!check_config.empty()) return CheckConfig(check_config, config);
  std::string token;
  if (!config.tcp_listen.empty()) {
    std::ifstream in(config.tcp_token_file);
    if (!in || !std::getline(in, token) || token.size() < 16) {
      return Fail("tcp_listen needs tcp_token_file holding a token of 16+ characters");
    }
  }

  signal(SIGPIPE, SIG_IGN);
  {
    // Room for the connections the caps allow and the daemon's own files:
    // two descriptors a connection (a unix-socket caller's process is held
    // by a pidfd, peer_process.h).
    const rlim_t files = RaiseFileLimit();
    const rlim_t headroom = 256;
    if (files < 2 * rlim_t{config.max_connections} + headroom) {
      const uint32_t fit =
          files > 2 * headroom ? static_cast<uint32_t>((files - headroom) / 2) : 16;
      gd::LogWarn("open-file limit " + std::to_string(files) + " is below 2 x max_connections + " +
                  std::to_string(headroom) + ": max_connections lowered to " + std::to_string(fit));
      config.max_connections = fit;
    }
  }
  std::error_code ec;
  fs::create_directories(fs::path(config.socket).parent_path(), ec);
  fs::create_directories(config.state_dir, ec);

  gd::RealClock clock;
  if (config.gpu_source != gd::GpuSourceMode::kNvml) ShareSimulatorState();
  gd::NvmlInventory inventory(config.gpu_source, config.sim_lib_dir, config.driver_root);
  // Jobs are tracked by cgroup when the machine lets us (docs/DAEMON.md).
  gd::SysCgroups cgroups({gd::CgroupBaseFor(config), "/proc/self/mountinfo", config.cgroups});
  gd::RealLauncher launcher({&cgroups, config.max_log_bytes});
  if (cgroups.available()) {
    gd::LogInfo("job tracking: " + cgroups.Describe());
  } else {
    gd::LogWarn("job tracking: " + launcher.Tracking());
  }
  gd::ShimRegionStore shim_regions(config.state_dir + "/slices");
  // Compute shares are arbitrated here (docs/COMPUTE.md, "Arbitration by the
  // daemon"): the arbiter learns every slice from the region store it wraps,
  // and takes back the slices of jobs that outlived a previous daemon.
  gd::ArbiterOptions arbiter_options;
  arbiter_options.coord_dir = config.state_dir + "/coord";
  arbiter_options.slices_dir = config.state_dir + "/slices";
  arbiter_options.board_mode = geteuid() == 0 ? 0644 : 0444;
  arbiter_options.params.corun = config.compute_corun;
  arbiter_options.params.handoff = config.compute_handoff;
  arbiter_options.params.quantum_ns = uint64_t(config.compute_quantum_ms) * 1'000'000;
  const gpuslice::core::Status coord_dir = gd::PrepareCoordDir(arbiter_options.coord_dir);
  if (!coord_dir.ok()) {
    // Without boards no share can be enforced: jobs that ask for one fail
    // to start (the arbiter refuses them), and the daemon says why.
    gd::LogWarn("compute shares will not be enforced: " + coord_dir.message());
    arbiter_options.coord_dir.clear();
  }
  gd::Arbiter arbiter(arbiter_options);
  gd::ArbiterRegionStore regions(shim_regions, arbiter);
  gd::ServiceOptions options;
  options.state_dir = config.state_dir;
  options.shim_path = config.shim;
  options.sim_lib_dir = config.sim_lib_dir;
  options.cdi_dir = config.cdi_dir;
  options.external_gid_base = config.external_gid_base;
  options.podman = config.podman;
  options.docker = config.docker;
  options.podman_args = config.podman_args;
  options.docker_args = config.docker_args;
  options.admin_gid = admin_gid;
  if (coord_dir.ok()) {
    options.coord_dir = arbiter_options.coord_dir;
    if (auto r = arbiter.Recover(); !r.ok()) gd::LogWarn("compute arbiter: " + r.message());
  }
  options.policy = config.policy;
  options.backfill = config.backfill;
  options.slurm_only = config.slurm_only;
  options.kill_grace_ms = config.kill_grace_ms;
  options.rules = config.rules;
  options.idle_threshold_pct = config.rules.idle_threshold_pct;
  options.max_queued_jobs_per_user = config.max_queued_jobs_per_user;
  options.max_env_bytes = config.max_env_bytes;
  options.max_argv_bytes = config.max_argv_bytes;
  options.ledger_retry_ms = config.ledger_retry_ms;
  options.sample_interval_ms = config.sample_interval_ms;
  options.suspend_lock_timeout_ms = static_cast<uint32_t>(config.suspend_lock_timeout_ms);
  // Suspend and resume: the CUDA driver jobs use (the simulated one on
  // simulated GPUs), loaded on first use, once the GPUs are known.
  gd::Service* service_ptr = nullptr;
  options.checkpointer =
      gd::MakeDriverCheckpointer([&service_ptr, sim_lib_dir = config.sim_lib_dir] {
        bool simulated = service_ptr != nullptr && service_ptr->inventory().simulated();
        if (simulated && !sim_lib_dir.empty()) return sim_lib_dir + "/libcuda.so.1";
        // Under a driver root: the CUDA driver beside the NVML that was found.
        if (service_ptr != nullptr && !service_ptr->inventory().host_library.empty()) {
          const std::string& nvml = service_ptr->inventory().library;
          return nvml.substr(0, nvml.rfind('/')) + "/libcuda.so.1";
        }
        return std::string("libcuda.so.1");
      });
  gd::Service service(options, clock, inventory, launcher, regions);
  service_ptr = &service;
  if (auto s = service.Start(); !s.ok()) return Fail(s.message());
  // Jobs on simulated GPUs must see the same simulated machine as we do.
  if (service.inventory().simulated()) {
    GiveSimulatorStateToGroup(socket_gid);
    std::vector<std::string> sim_env;
    for (const char* k : {"GPUSLICE_SIM_GPUS", "GPUSLICE_SIM_CONFIG", "GPUSLICE_SIM_STATE",
                          "GPUSLICE_SIM_CONTEXT_MEM", "GPUSLICE_SIM_QUANTUM_US",
                          "GPUSLICE_SIM_STATE_MODE"}) {
      if (const char* v = getenv(k)) sim_env.push_back(std::string(k) + "=" + v);
    }
    options.job_env = sim_env;
    service.set_job_env(sim_env);
    gd::LogWarn("no NVIDIA driver found: running on the SIMULATED GPU (" +
                service.inventory().library + ")");
  }

  gd::DoctorOptions doctor_options{config.shim, config.sim_lib_dir, options.job_env,
                                   launcher.Tracking(), launcher.UsesCgroups()};
  gd::Doctor doctor(doctor_options, service.inventory());
  gd::Api api(service, doctor);
  gd::MetricsOptions metrics_options;
  metrics_options.version = GPUSLICE_VERSION;
  metrics_options.start_time_ms = clock.NowMs();
  gd::RegisterMetrics(api, service, metrics_options);
  gd::RegisterStatusPage(api, service);
  gd::RegisterNodeStateRoute(api, service);
  gd::RegisterUsageApi(api, service);
  // Autoscaled services (docs/SERVICES.md): replicas are ordinary jobs.
  gd::ReplicaManager replicas(service, clock);
  if (auto s = replicas.Start(); !s.ok()) gd::LogError("services unavailable: " + s.message());
  gd::RegisterServiceRoutes(api, replicas);
  boost::asio::io_context io(1);
  gd::ServerOptions server_options;
  server_options.admin_gid = admin_gid;
  server_options.tcp_token = token;
  server_options.body_limit = config.max_request_bytes;
  server_options.header_timeout = std::chrono::milliseconds(config.header_timeout_ms);
  server_options.body_timeout = std::chrono::milliseconds(config.body_timeout_ms);
  server_options.idle_timeout = std::chrono::milliseconds(config.idle_timeout_ms);
  server_options.max_connections = config.max_connections;
  server_options.max_connections_per_peer = config.max_connections_per_peer;
  gd::HttpServer server(io, api, server_options);
  if (auto s = server.ListenUnix(config.socket, config.socket_mode, socket_gid); !s.ok()) {
    return Fail(s.message());
  }
  const std::string tcp_addr_file = config.state_dir + "/tcp.addr";
  fs::remove(tcp_addr_file, ec);
  if (!config.tcp_listen.empty()) {
    auto bound = server.ListenTcp(config.tcp_listen);
    if (!bound.ok()) return Fail(bound.status().message());
    // Port 0 picks a free port: this file says which (as metrics.addr).
    if (auto s = WriteAddressFile(tcp_addr_file, *bound); !s.ok()) return Fail(s.message());
  }
  const std::string metrics_addr_file = config.state_dir + "/metrics.addr";
  fs::remove(metrics_addr_file, ec);
  if (!config.metrics_listen.empty()) {
    auto bound = server.ListenMetrics(config.metrics_listen,
                                      {"/metrics", "/status", "/status.json", gd::kNodeStatePath});
    if (!bound.ok()) return Fail(bound.status().message());
    if (auto s = WriteAddressFile(metrics_addr_file, *bound); !s.ok()) return Fail(s.message());
    gd::LogInfo("metrics and status page on http://" + *bound + "/metrics (no authentication)");
  }

  // Housekeeping: on every child exit and every 100 ms (the latter catches
  // processes that are not our children, e.g. re-adopted jobs).
  boost::asio::signal_set child(io, SIGCHLD);
  std::function<void()> on_child = [&]() {
    child.async_wait([&](const boost::system::error_code& e, int) {
      if (e) return;
      service.Tick();
      on_child();
    });
  };
  on_child();
  boost::asio::steady_timer timer(io);
  std::function<void()> on_timer = [&]() {
    timer.expires_after(std::chrono::milliseconds(100));
    timer.async_wait([&](const boost::system::error_code& e) {
      if (e) return;
      service.Tick();
      service.MaintainLedger();
      replicas.Tick();
      on_timer();
    });
  };
  on_timer();
  // Queue plans that submissions deferred (Service::RequestSchedule), and
  // suspended jobs that ask to be resumed (resume on demand: a CUDA call
  // waits for it, so it is noticed within 10 ms rather than at the next
  // 100 ms tick).
  boost::asio::steady_timer flush_timer(io);
  std::function<void()> on_flush = [&]() {
    flush_timer.expires_after(std::chrono::milliseconds(10));
    flush_timer.async_wait([&](const boost::system::error_code& e) {
      if (e) return;
      service.WatchResumeRequests();
      service.Flush();
      on_flush();
    });
  };
  on_flush();
  boost::asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](const boost::system::error_code&, int sig) {
    gd::LogInfo("stopping on signal " + std::to_string(sig) +
                "; running jobs keep running and are re-adopted on restart");
    io.stop();
  });
  gd::LogInfo("listening on " + config.socket + " (state in " + config.state_dir + ")" +
              (service.degraded_mode().degraded()
                   ? "; DEGRADED: " + service.degraded_mode().reason()
                   : ""));
  io.run();
  unlink(config.socket.c_str());
  if (!config.metrics_listen.empty()) fs::remove(metrics_addr_file, ec);
  if (!config.tcp_listen.empty()) fs::remove(tcp_addr_file, ec);
  return 0;
}
