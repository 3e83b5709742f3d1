// gpusliced: the node daemon. See docs/DAEMON.md.
//
//   gpusliced [--config FILE] [--state-dir DIR] [--socket PATH] ...

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/version.h"
#include "daemon/api.h"
#include "daemon/config.h"
#include "daemon/coord_dir.h"
#include "daemon/doctor.h"
#include "daemon/http_server.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/nvml_inventory.h"
#include "daemon/region_store.h"
#include "daemon/replicas.h"
#include "daemon/replicas_api.h"
#include "daemon/service.h"
#include "daemon/status_page.h"
#include "daemon/usage_api.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpusliced: hands out GPU compute on this machine (docs/DAEMON.md)"};
  std::string config_file;
  std::vector<std::string> sets;
  std::string state_dir, socket, tcp, tcp_token_file, admin_group, policy, gpu_source, shim,
      sim_lib_dir, log_level, socket_group, metrics_listen;
  bool no_backfill = false;
  app.add_option("--config", config_file, "Configuration file (docs/CONFIG.md)");
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
  std::string token;
  if (!config.tcp_listen.empty()) {
    std::ifstream in(config.tcp_token_file);
    if (!in || !std::getline(in, token) || token.size() < 16) {
      return Fail("tcp_listen needs tcp_token_file holding a token of 16+ characters");
    }
  }

  signal(SIGPIPE, SIG_IGN);
  std::error_code ec;
  fs::create_directories(fs::path(config.socket).parent_path(), ec);
  fs::create_directories(config.state_dir, ec);

  gd::RealClock clock;
  gd::NvmlInventory inventory(config.gpu_source, config.sim_lib_dir);
  gd::RealLauncher launcher;
  gd::ShimRegionStore regions(config.state_dir + "/slices");
  gd::ServiceOptions options;
  options.state_dir = config.state_dir;
  options.shim_path = config.shim;
  options.sim_lib_dir = config.sim_lib_dir;
  options.admin_gid = admin_gid;
  {
    std::string coord = config.state_dir + "/coord";
    auto group = gd::CoordDirGroup(socket_gid, geteuid() == 0, getegid());
    if (auto s = gd::PrepareCoordDir(coord, group); s.ok()) {
      options.coord_dir = coord;
    } else {
      // Shares still hold among one user's jobs (the shim's own directory).
      gd::LogWarn("compute shares of different users will not coordinate: " + s.message());
    }
  }
  options.policy = config.policy;
  options.backfill = config.backfill;
  options.kill_grace_ms = config.kill_grace_ms;
  options.rules = config.rules;
  options.idle_threshold_pct = config.rules.idle_threshold_pct;
  gd::Service service(options, clock, inventory, launcher, regions);
  if (auto s = service.Start(); !s.ok()) return Fail(s.message());
  // Jobs on simulated GPUs must see the same simulated machine as we do.
  if (service.inventory().simulated()) {
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

  gd::DoctorOptions doctor_options{config.shim, config.sim_lib_dir, options.job_env};
  gd::Doctor doctor(doctor_options, service.inventory());
  gd::Api api(service, doctor);
  gd::MetricsOptions metrics_options;
  metrics_options.version = GPUSLICE_VERSION;
  metrics_options.start_time_ms = clock.NowMs();
  gd::RegisterMetrics(api, service, metrics_options);
  gd::RegisterStatusPage(api, service);
  gd::RegisterUsageApi(api, service);
  // Autoscaled services (docs/SERVICES.md): replicas are ordinary jobs.
  gd::ReplicaManager replicas(service, clock);
  if (auto s = replicas.Start(); !s.ok()) gd::LogError("services unavailable: " + s.message());
  gd::RegisterServiceRoutes(api, replicas);
  boost::asio::io_context io(1);
  gd::ServerOptions server_options;
  server_options.admin_gid = admin_gid;
  server_options.tcp_token = token;
  gd::HttpServer server(io, api, server_options);
  if (auto s = server.ListenUnix(config.socket, config.socket_mode, socket_gid); !s.ok()) {
    return Fail(s.message());
  }
  if (!config.tcp_listen.empty()) {
    if (auto s = server.ListenTcp(config.tcp_listen); !s.ok()) return Fail(s.message());
  }
  const std::string metrics_addr_file = config.state_dir + "/metrics.addr";
  fs::remove(metrics_addr_file, ec);
  if (!config.metrics_listen.empty()) {
    auto bound =
        server.ListenMetrics(config.metrics_listen, {"/metrics", "/status", "/status.json"});
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
      replicas.Tick();
      on_timer();
    });
  };
  on_timer();
  // Queue plans that submissions deferred (Service::RequestSchedule).
  boost::asio::steady_timer flush_timer(io);
  std::function<void()> on_flush = [&]() {
    flush_timer.expires_after(std::chrono::milliseconds(10));
    flush_timer.async_wait([&](const boost::system::error_code& e) {
      if (e) return;
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
              (service.degraded() ? "; DEGRADED: " + service.degraded_reason() : ""));
  io.run();
  unlink(config.socket.c_str());
  if (!config.metrics_listen.empty()) fs::remove(metrics_addr_file, ec);
  return 0;
}
