// The compute-share harness: real processes (compute_worker) under
// libgpuslice.so over the simulated GPU; the simulator's per-process busy
// time is the ground truth. Each scenario runs in a fresh temporary
// directory (own simulator state, own coordination files, own regions).
//
//   compute_harness [--only NAME] [--scale X] [--json FILE] [--arbiter] [--rounds N]
//                   [--no-handoff] [--cpu-hogs N] [--trace FILE]
//   (--cpu-hogs: N processes spinning on the CPU beside every scenario;
//   --no-handoff: the arbiter without hand-off on demand, a baseline;
//   --trace: with --arbiter, the board every 0.5 ms into FILE.<ns>)
//   (NAME: part of a scenario's name; "short kernels: 30/70 hard, 20 us, sync"
//   runs that scenario's group of the short-kernel suite; N: rounds of each
//   such group, 3 unless given)
//
// --arbiter runs the tenants as the daemon runs jobs: the daemon's compute
// arbiter (src/daemon/compute/arbiter.h), in this process, decides their turns from
// a board in the scenario's directory, with the shares registered as the
// daemon's region store would; the shims follow the board and report into
// members files. Without it: standalone slices on the cooperative file.
//
// Reports per scenario: achieved vs target share per tenant, the mean
// absolute error in percentage points over 1 s and 10 s windows, aggregate
// GPU use, settling time after a live share change, give-back time when a
// tenant arrives, and the high-priority tenant's p99 latency inflation.
// --scale shortens (or lengthens) every scenario; 10 s windows need >= 10 s.

#include "compute_harness.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/compute/arbiter.h"
#include "slice/compute/coord_board.h"
#include "slice/region/limits_page.h"
#include "slice/region/region.h"
#include "sim/device_model.h"

namespace compute_harness {

namespace fs = std::filesystem;
using gpuslice::slice::ComputeMode;
using gpuslice::slice::LimitsPage;
using gpuslice::slice::Region;

// The simulator's per-process busy time is sampled every 25 ms. Settling is
// judged over 200 ms windows and give-back over 50 ms ones; a window ends on
// a sample, so the sampling step bounds how much a figure overstates.
constexpr uint64_t kSampleNs = 25'000'000;
constexpr size_t kWin = 8;          // Samples in a 200 ms window.
constexpr size_t kGiveBackWin = 2;  // Samples in a 50 ms window.
bool g_arbiter = false;             // --arbiter.
bool g_no_handoff = false;          // --no-handoff.
int g_cpu_hogs = 0;                 // --cpu-hogs N.
std::string g_trace_path;           // --trace FILE.

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}
void SleepNs(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

// A tenant's limits page as the daemon writes it for a job (--arbiter):
// unlimited memory, the tenant's share, mode and priority.
gpuslice::slice::LimitsOptions LimitsOptionsOf(const std::string& uuid, const Tenant& t,
                                               double share) {
  gpuslice::slice::DeviceControls c;
  c.uuid = uuid;
  c.share_milli = uint32_t(share * 10);
  c.mode = t.mode == "hard" ? gpuslice::slice::ComputeMode::kHard
                            : gpuslice::slice::ComputeMode::kWorkConserving;
  c.priority = t.priority == "high"  ? gpuslice::core::Priority::kHigh
               : t.priority == "low" ? gpuslice::core::Priority::kLow
                                     : gpuslice::core::Priority::kNormal;
  gpuslice::slice::LimitsOptions o;
  o.devices = {c};
  o.mode = geteuid() == 0 ? 0644 : 0444;
  return o;
}

struct Running {
  pid_t pid = -1;
  std::string out;
  std::string region;
};

pid_t Spawn(const std::string& dir, const Tenant& t, const std::string& region, double seconds,
            const std::string& out, const std::string& limits) {
  // The child's freopen below flushes what the parent's stdout held
  // unwritten into the parent's output: every scenario printed since the
  // last flush came out once more per tenant spawned.
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("LD_PRELOAD", GPUSLICE_SHIM_PATH, 1);
  setenv("LD_LIBRARY_PATH", GPUSLICE_SIM_DIR, 1);
  setenv("GPUSLICE_SIM_STATE", (dir + "/sim.state").c_str(), 1);
  setenv("GPUSLICE_COORD_DIR", (g_arbiter ? dir + "/coord" : dir).c_str(), 1);
  // The shim finds its members file beside the limits (their directory).
  if (!limits.empty()) setenv("GPUSLICE_LIMITS", limits.c_str(), 1);
  setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  setenv("GPUSLICE_SLICE", region.c_str(), 1);
  if (t.share > 0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%", t.share);
    setenv("GPUSLICE_COMPUTE_SHARE", buf, 1);
    setenv("GPUSLICE_COMPUTE_MODE", t.mode.c_str(), 1);
    if (!t.priority.empty()) setenv("GPUSLICE_PRIORITY", t.priority.c_str(), 1);
  } else {
    setenv("GPUSLICE_MEMORY_LIMIT", "80GiB", 1);  // A slice without a share.
  }
  std::vector<std::string> args = {GPUSLICE_WORKER_PATH, "--seconds", std::to_string(seconds)};
  args.insert(args.end(), t.args.begin(), t.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (freopen(out.c_str(), "w", stdout) == nullptr) _exit(127);
  execv(argv[0], argv.data());
  _exit(127);
}

struct Sample {
  uint64_t t_ns;
  std::map<pid_t, uint64_t> busy;
};

nlohmann::json RunScenario(const Scenario& sc, double scale, std::vector<double>* p99_out) {
  char tmpl[] = "/tmp/gpuslice-harness-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  chmod(dir.c_str(), 0700);
  const double seconds = sc.seconds * scale;
  std::vector<Running> run(sc.tenants.size());
  // Open the model first so the machine is the default H100.
  setenv("GPUSLICE_SIM_STATE", (dir + "/sim.state").c_str(), 1);
  auto mo = gpuslice::sim::ModelOptionsFromEnvironment();
  if (!mo.ok()) {
    std::fprintf(stderr, "%s\n", mo.status().message().c_str());
    std::exit(1);
  }
  auto model = gpuslice::sim::DeviceModel::Open(*mo);
  if (!model.ok()) {
    std::fprintf(stderr, "cannot open the simulator state: %s\n", model.status().message().c_str());
    std::exit(1);
  }
  std::vector<Sample> samples;
  const uint64_t t0 = NowNs();
  std::vector<bool> started(sc.tenants.size(), false), changed(sc.tenants.size(), false);
  // --arbiter: the daemon's arbiter, as the daemon runs it for its jobs.
  std::unique_ptr<gpuslice::daemon::Arbiter> arbiter;
  const std::string uuid = (*model)->Device(0).uuid;
  auto limits_of = [&](size_t i, double share) {
    const Tenant& t = sc.tenants[i];
    gpuslice::daemon::SliceLimits l;
    l.job_id = i + 1;
    l.uid = geteuid();
    l.gid = getegid();
    l.uuids = {uuid};
    l.compute_milli = uint32_t(share * 10);
    l.work_conserving = t.mode != "hard";
    l.priority = t.priority == "high"  ? gpuslice::core::Priority::kHigh
                 : t.priority == "low" ? gpuslice::core::Priority::kLow
                                       : gpuslice::core::Priority::kNormal;
    return l;
  };
  if (g_arbiter) {
    gpuslice::daemon::ArbiterOptions options;
    options.coord_dir = dir + "/coord";
    options.slices_dir = dir + "/slices";
    options.board_mode = geteuid() == 0 ? 0644 : 0444;
    options.params.handoff = !g_no_handoff;
    mkdir(options.coord_dir.c_str(), 0755);
    arbiter = std::make_unique<gpuslice::daemon::Arbiter>(options);
  }
  // --trace: the board every 0.5 ms (holder, turn state, each slice's
  // reported flags and tokens), one line per sample, for the scenario's
  // first 2 s after 1 s of warm-up.
  std::atomic<bool> tracing{false};
  std::thread tracer;
  if (arbiter != nullptr && !g_trace_path.empty()) {
    tracing = true;
    tracer = std::thread([&, path = g_trace_path + "." + std::to_string(NowNs())] {
      std::unique_ptr<gpuslice::slice::BoardView> view;
      std::FILE* f = std::fopen(path.c_str(), "w");
      if (f == nullptr) return;
      std::fprintf(f, "# %s\n", sc.name.c_str());
      while (tracing) {
        const double t = double(NowNs() - t0) / 1e9;
        if (view == nullptr) {
          auto b = gpuslice::slice::BoardView::Open(arbiter->BoardPath(uuid));
          if (b.ok()) view = std::move(*b);
        }
        if (view != nullptr && t >= 1.0 && t < 3.0) {
          const auto& h = view->header();
          std::fprintf(f, "%.4f holder=%d state=%u pre=%llu", t, h.holder.load(),
                       h.turn_state.load(), (unsigned long long)h.preemptions.load());
          for (size_t i = 0; i < sc.tenants.size(); ++i) {
            const int32_t at = view->FindSlice(i + 1, -1);
            if (at < 0) continue;
            const auto& b = view->slice(uint32_t(at));
            std::fprintf(f, " | %zu@%d r=%u f=%u tok=%lld", i, at, b.reported.load(),
                         b.flags.load(), (long long)(b.tokens_ns.load() / 1000));
          }
          std::fprintf(f, "\n");
        }
        SleepNs(500'000);
      }
      std::fclose(f);
    });
  }
  std::vector<pid_t> hogs;
  for (int k = 0; k < std::max(sc.cpu_hogs, g_cpu_hogs); ++k) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      volatile uint64_t spin = 0;
      while (true) spin = spin + 1;
    }
    if (pid > 0) hogs.push_back(pid);
  }
  double change_time = -1;
  while (true) {
    const double now_s = double(NowNs() - t0) / 1e9;
    bool alive = false;
    for (size_t i = 0; i < sc.tenants.size(); ++i) {
      const Tenant& t = sc.tenants[i];
      if (!started[i] && now_s >= t.start_s * scale) {
        started[i] = true;
        run[i].region = dir + "/t" + std::to_string(i) + ".region";
        run[i].out = dir + "/t" + std::to_string(i) + ".json";
        const double len = t.seconds > 0 ? t.seconds * scale : seconds - t.start_s * scale;
        std::string limits;
        if (arbiter != nullptr && (t.share > 0 || t.no_share_slice)) {
          // A slice without a share takes turns at the smallest share,
          // work-conserving, as the daemon registers it.
          gpuslice::daemon::SliceLimits l = limits_of(i, t.share);
          if (t.share == 0) {
            l.compute_milli = 1;
            l.work_conserving = true;
            l.no_share = true;
          }
          auto st = arbiter->Register(l);
          if (!st.ok()) std::fprintf(stderr, "arbiter: %s\n", st.message().c_str());
          limits = dir + "/slices/job-" + std::to_string(i + 1) + "/limits";
          // The daemon's limits page (docs/SLICE_REGION.md): a daemon job's
          // shim takes its share from there, never from its region.
          Tenant as_registered = t;
          if (t.share == 0) as_registered.mode = "work-conserving";
          auto page = LimitsPage::Create(
              limits, LimitsOptionsOf(uuid, as_registered, t.share > 0 ? t.share : 0.1));
          if (!page.ok())
            std::fprintf(stderr, "limits page: %s\n", page.status().message().c_str());
          // And a closed region listing the GPU, as the daemon makes it (the
          // shim resolves the region's devices against the page at open).
          gpuslice::slice::RegionOptions ro;
          ro.name = "job-" + std::to_string(i + 1);
          ro.closed = true;
          ro.devices = {{uuid, gpuslice::slice::layout::kUnlimited}};
          auto region = Region::Create(run[i].region, ro);
          if (!region.ok()) std::fprintf(stderr, "region: %s\n", region.status().message().c_str());
        }
        run[i].pid = Spawn(dir, t, run[i].region, len, run[i].out, limits);
      }
      if (started[i] && !changed[i] && t.change_at_s >= 0 && now_s >= t.change_at_s * scale) {
        changed[i] = true;
        change_time = now_s;
        auto r = Region::Open(run[i].region);
        if (r.ok()) {
          auto devs = (*r)->Devices();
          if (!devs.empty()) {
            auto st = (*r)->SetComputeShare(
                devs[0].uuid, uint32_t(t.change_to * 10),
                t.mode == "hard" ? ComputeMode::kHard : ComputeMode::kWorkConserving,
                gpuslice::core::Priority::kNormal);
            if (!st.ok()) std::fprintf(stderr, "SetComputeShare: %s\n", st.message().c_str());
            if (arbiter != nullptr) {
              auto page = LimitsPage::OpenForUpdate(dir + "/slices/job-" + std::to_string(i + 1) +
                                                    "/limits");
              if (page.ok()) st = (*page)->Set(LimitsOptionsOf(uuid, t, t.change_to).devices[0]);
              if (!st.ok()) std::fprintf(stderr, "limits page: %s\n", st.message().c_str());
              st = arbiter->Update(limits_of(i, t.change_to));
              if (!st.ok()) std::fprintf(stderr, "arbiter: %s\n", st.message().c_str());
            }
          }
        }
      }
      if (!started[i]) alive = true;
      if (started[i] && run[i].pid > 0) {
        int status;
        if (waitpid(run[i].pid, &status, WNOHANG) == run[i].pid) {
          run[i].pid = -run[i].pid;
        } else {
          alive = true;
        }
      }
    }
    Sample s{NowNs() - t0, {}};
    for (const auto& p : (*model)->DeviceProcesses(0)) s.busy[p.pid] = p.busy_ns;
    samples.push_back(std::move(s));
    if (!alive) break;
    SleepNs(kSampleNs);
  }
  tracing = false;
  if (tracer.joinable()) tracer.join();
  for (pid_t pid : hogs) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  // Per-tenant busy time over [a, b) from the samples (pids stay known after exit
  // only while sampled: keep the last value seen).
  std::vector<pid_t> pids;
  for (auto& r : run) pids.push_back(r.pid < 0 ? -r.pid : r.pid);
  std::vector<std::vector<uint64_t>> busy(pids.size());  // Per sample, cumulative.
  for (size_t i = 0; i < pids.size(); ++i) {
    uint64_t last = 0;
    for (auto& s : samples) {
      auto it = s.busy.find(pids[i]);
      if (it != s.busy.end()) last = std::max(last, it->second);
      busy[i].push_back(last);
    }
  }
  auto index_at = [&](double t_s) {
    for (size_t k = 0; k < samples.size(); ++k) {
      if (double(samples[k].t_ns) / 1e9 >= t_s) return k;
    }
    return samples.size() - 1;
  };
  // Whether tenant i runs over all of [a, b) (its arrival's start-up and
  // its departure excluded).
  auto present = [&](size_t i, double a, double b) {
    const Tenant& t = sc.tenants[i];
    return t.start_s * scale <= a && (t.seconds <= 0 || (t.start_s + t.seconds) * scale >= b);
  };
  // What tenant i should get at t_s: a hard tenant its share; a
  // work-conserving one its share's part of what the hard tenants present
  // leave (alone it should get the whole GPU).
  auto target_at = [&](size_t i, double t_s) {
    const Tenant& t = sc.tenants[i];
    auto share_of = [&](size_t k) {
      const Tenant& u = sc.tenants[k];
      return u.change_at_s >= 0 && t_s >= u.change_at_s * scale ? u.change_to : u.share;
    };
    if (t.target >= 0) return t.target;
    if (t.mode == "hard") return share_of(i);
    double wc = 0, hard = 0;
    for (size_t k = 0; k < sc.tenants.size(); ++k) {
      if (sc.tenants[k].share == 0 || !present(k, t_s, t_s)) continue;
      (sc.tenants[k].mode == "hard" ? hard : wc) += share_of(k);
    }
    return wc > 0 ? share_of(i) / wc * std::max(0.0, 100.0 - hard) : share_of(i);
  };
  // Windows that hold a transition (an arrival and its start-up, a
  // departure, a live change) are left out of the error: the issue's
  // settling and give-back figures measure those.
  std::vector<std::pair<double, double>> transitions;
  for (const Tenant& t : sc.tenants) {
    if (t.start_s > 0) transitions.push_back({t.start_s * scale, t.start_s * scale + 0.5});
    if (t.seconds > 0) {
      const double end = (t.start_s + t.seconds) * scale;
      transitions.push_back({end, end + 0.3});
    }
    if (t.change_at_s >= 0) {
      transitions.push_back({t.change_at_s * scale, t.change_at_s * scale + 0.3});
    }
  }
  auto window_mae = [&](double w) {
    double sum = 0;
    int n = 0;
    for (double a = sc.measure_from_s * scale; a + w <= seconds - 0.1; a += w) {
      bool calm = true;
      for (auto [p, q] : transitions) calm &= a + w <= p || a >= q;
      if (!calm) continue;
      size_t ka = index_at(a), kb = index_at(a + w);
      const double dt = double(samples[kb].t_ns - samples[ka].t_ns);
      if (dt <= 0) continue;
      for (size_t i = 0; i < pids.size(); ++i) {
        if (sc.tenants[i].share == 0 || !present(i, a, a + w)) continue;
        const double got = 100.0 * double(busy[i][kb] - busy[i][ka]) / dt;
        sum += std::fabs(got - target_at(i, a));
        ++n;
      }
    }
    return n > 0 ? sum / n : -1.0;
  };
  nlohmann::json j;
  j["scenario"] = sc.name;
  j["seconds"] = seconds;
  if (g_arbiter) j["arbiter"] = true;
  std::unique_ptr<gpuslice::slice::BoardView> board;
  if (arbiter != nullptr) {
    auto b = gpuslice::slice::BoardView::Open(arbiter->BoardPath(uuid));
    if (b.ok()) board = std::move(*b);
  }
  const size_t ka = index_at(sc.measure_from_s * scale), kb = samples.size() - 1;
  const double dt = double(samples[kb].t_ns - samples[ka].t_ns);
  double total = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    nlohmann::json tj;
    const double got = 100.0 * double(busy[i][kb] - busy[i][ka]) / dt;
    total += got;
    tj["name"] = sc.tenants[i].name;
    tj["share"] = sc.tenants[i].share;
    tj["mode"] = sc.tenants[i].mode;
    tj["achieved_pct"] = std::round(got * 10) / 10;
    std::ifstream in(run[i].out);
    std::string line;
    if (std::getline(in, line) && !line.empty()) {
      auto w = nlohmann::json::parse(line, nullptr, false);
      if (!w.is_discarded()) {
        tj["p50_us"] = w["p50_us"];
        tj["p99_us"] = w["p99_us"];
        for (const char* k : {"requests", "offered", "delivered"}) {
          if (w.contains(k)) tj[k] = w[k];
        }
        if (i == 0 && p99_out != nullptr) p99_out->push_back(w["p99_us"].get<double>());
      }
    }
    if (board != nullptr) {
      // What the arbiter charged the slice against what the simulator saw it
      // use, over the whole run: the arbiter's accounting error.
      const int32_t at = board->FindSlice(i + 1, -1);
      if (at >= 0) {
        tj["charged_ms"] = double(board->slice(uint32_t(at)).charged_ns.load()) / 1e6;
        tj["busy_ms"] = double(busy[i].back()) / 1e6;
      }
    }
    j["tenants"].push_back(tj);
  }
  if (board != nullptr) {
    j["board"] = {{"ticks", board->header().ticks.load()},
                  {"bells", board->header().bells.load()},
                  {"turns", board->header().turns.load()},
                  {"preemptions", board->header().preemptions.load()}};
  }
  j["aggregate_pct"] = std::round(total * 10) / 10;
  j["mae_1s_pp"] = std::round(window_mae(1.0) * 100) / 100;
  if (seconds - sc.measure_from_s * scale >= 10.0) {
    j["mae_10s_pp"] = std::round(window_mae(10.0) * 100) / 100;
  }
  if (change_time >= 0) {
    // Settling: the time from the change until the end of the first 200 ms
    // window (4 samples) in which every changed tenant is within 5 pp of its
    // new target, provided that from there to the end of the run each one
    // averages within 2 pp of it (a lucky window does not count). The
    // window's length is part of the figure: it is an upper bound of the
    // true settling time by up to 200 ms. 200 ms windows of 20 ms turns are
    // noisy; `in_band_pct` says how many of the later windows stay within 5 pp.
    double settle = -1;
    const size_t kc = index_at(change_time);
    auto error_over = [&](size_t i, size_t m, size_t n) {
      const double d = double(samples[n].t_ns - samples[m].t_ns);
      return std::fabs(100.0 * double(busy[i][n] - busy[i][m]) / d - sc.tenants[i].change_to);
    };
    auto all_within = [&](size_t m, size_t n, double pp) {
      for (size_t i = 0; i < sc.tenants.size(); ++i) {
        if (sc.tenants[i].change_at_s >= 0 && error_over(i, m, n) > pp) return false;
      }
      return true;
    };
    // Steady state ends when the first tenant stops using the GPU: the
    // workers' run times start at their own start-up, so they end tens of
    // ms apart, and the tail after one ends is not the new split.
    size_t last = samples.size() - 1;
    for (size_t i = 0; i < sc.tenants.size(); ++i) {
      size_t last_use = 0;
      for (size_t k = 1; k < samples.size(); ++k) {
        if (busy[i][k] > busy[i][k - 1]) last_use = k;
      }
      if (last_use > kc + kWin) last = std::min(last, last_use - 1);
    }
    // What each changed tenant got from 300 ms after the change to the end
    // of the steady state.
    for (size_t i = 0; i < sc.tenants.size(); ++i) {
      const size_t from = index_at(change_time + 0.3);
      if (sc.tenants[i].change_at_s < 0 || from >= last) continue;
      const double d = double(samples[last].t_ns - samples[from].t_ns);
      j["after_change_pct"][sc.tenants[i].name] =
          std::round(1000.0 * double(busy[i][last] - busy[i][from]) / d) / 10.0;
    }
    size_t settled_at = 0;
    for (size_t k = kc; k + kWin <= last; ++k) {
      if (all_within(k, k + kWin, 5.0) && (k + kWin == last || all_within(k + kWin, last, 2.0))) {
        settle = double(samples[k + kWin].t_ns) / 1e9 - change_time;
        settled_at = k + kWin;
        break;
      }
    }
    if (settle >= 0) {
      int in_band = 0, windows = 0;
      for (size_t m = settled_at; m + kWin <= last; m += kWin, ++windows)
        in_band += all_within(m, m + kWin, 5.0);
      j["in_band_pct"] = windows > 0 ? std::round(100.0 * in_band / windows) : 100.0;
    }
    j["settle_ms"] = settle < 0 ? -1 : std::round(settle * 1000);
    // The shares over 200 ms windows around the change, to see how it settled.
    nlohmann::json trace = nlohmann::json::array();
    for (size_t k = index_at(change_time - 0.4);
         k + kWin < samples.size() && samples[k].t_ns < uint64_t((change_time + 1.2) * 1e9);
         k += kWin) {
      const double d = double(samples[k + kWin].t_ns - samples[k].t_ns);
      nlohmann::json row = {
          {"t_ms", std::round((double(samples[k].t_ns) / 1e9 - change_time) * 1000)}};
      for (size_t i = 0; i < sc.tenants.size(); ++i) {
        row[sc.tenants[i].name] =
            std::round(1000.0 * double(busy[i][k + kWin] - busy[i][k]) / d) / 10;
      }
      trace.push_back(row);
    }
    j["trace_200ms"] = trace;
  }
  // Give-back: when a tenant arrives, how long from its first GPU use (its
  // process start-up excluded: the simulator's busy time is the witness)
  // until it gets >= 80% of its share over a 50 ms window (kGiveBackWin).
  for (size_t i = 0; i < sc.tenants.size(); ++i) {
    if (sc.tenants[i].start_s <= 0) continue;
    size_t ks = 0;
    while (ks < samples.size() && busy[i][ks] == 0) ++ks;
    if (ks == samples.size()) continue;
    const double first_use = double(samples[ks > 0 ? ks - 1 : 0].t_ns) / 1e9;
    j["first_use_s"] = std::round(first_use * 1000) / 1000;
    for (size_t k = ks > 0 ? ks - 1 : 0; k + kGiveBackWin < samples.size(); ++k) {
      const double d = double(samples[k + kGiveBackWin].t_ns - samples[k].t_ns);
      if (100.0 * double(busy[i][k + kGiveBackWin] - busy[i][k]) / d >= 0.8 * sc.tenants[i].share) {
        j["giveback_ms"] =
            std::round((double(samples[k + kGiveBackWin].t_ns) / 1e9 - first_use) * 1000);
        break;
      }
    }
  }
  arbiter.reset();  // Its threads stop before the boards go.
  fs::remove_all(dir);
  return j;
}

std::vector<Scenario> Scenarios() {
  auto busy = [](unsigned us) {
    return std::vector<std::string>{"--kernel-us", std::to_string(us)};
  };
  std::vector<Scenario> s;
  s.push_back(
      {"30/70 hard", 12, {{"a", 30, "hard", "", busy(200)}, {"b", 70, "hard", "", busy(200)}}});
  s.push_back(
      {"10/90 hard", 12, {{"a", 10, "hard", "", busy(200)}, {"b", 90, "hard", "", busy(200)}}});
  s.push_back({"25/25/50 work-conserving",
               12,
               {{"a", 25, "work-conserving", "", busy(200)},
                {"b", 25, "work-conserving", "", busy(200)},
                {"c", 50, "work-conserving", "", busy(200)}}});
  s.push_back({"50% alone, hard", 6, {{"a", 50, "hard", "", busy(200)}}});
  s.push_back({"30/70 fine kernels (20 us)",
               6,
               {{"a", 30, "hard", "", busy(20)}, {"b", 70, "hard", "", busy(20)}}});
  // Controls: what one tenant without a share gets alone (the simulator and
  // the machine's load, no shim limit): the ceiling for the scenarios above.
  s.push_back({"control: 200 us kernels, no share", 4, {{"a", 0, "hard", "", busy(200)}}});
  s.push_back({"control: 20 us kernels, no share", 4, {{"a", 0, "hard", "", busy(20)}}});
  s.back().tenants[0].target = 100;
  s[s.size() - 2].tenants[0].target = 100;
  // A high-priority hard 50% slice beside a low-priority slice
  // without a share (the daemon gives it 1 per mille, work-conserving).
  s.push_back({"priority: 50% hard high beside no share (1 ms kernels)",
               6,
               {{"high", 50, "hard", "high", busy(1000)},
                {"low", 0.1, "work-conserving", "low", busy(1000)}}});
  s.back().tenants[1].target = 50;
  s.push_back({"30/70 coarse kernels (10 ms)",
               12,
               {{"a", 30, "hard", "", busy(10000)}, {"b", 70, "hard", "", busy(10000)}}});
  s.push_back({"30/70 graph launches (8 x 100 us)",
               6,
               {{"a", 30, "hard", "", {"--kernel-us", "100", "--graph", "8"}},
                {"b", 70, "hard", "", {"--kernel-us", "100", "--graph", "8"}}}});
  {
    Scenario a{"arrival and departure, work-conserving 30/70", 8, {}};
    Tenant x{"a", 30, "work-conserving", "", busy(200)};
    Tenant y{"b", 70, "work-conserving", "", busy(200)};
    y.start_s = 3;
    y.seconds = 3;
    a.tenants = {x, y};
    s.push_back(a);
  }
  {
    Scenario c{"live change 50/50 -> 20/80, hard", 6, {}};
    Tenant x{"a", 50, "hard", "", busy(200)};
    x.change_at_s = 3;
    x.change_to = 20;
    Tenant y{"b", 50, "hard", "", busy(200)};
    y.change_at_s = 3;  // Both shares change at once: 50/50 -> 20/80.
    y.change_to = 80;
    c.tenants = {x, y};
    s.push_back(c);
  }
  return s;
}

}  // namespace compute_harness

int main(int argc, char** argv) {
  std::string only, json_path;
  double scale = 1.0;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--scale" && i + 1 < argc)
      scale = std::atof(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--arbiter")
      compute_harness::g_arbiter = true;
    else if (a == "--no-handoff")
      compute_harness::g_no_handoff = true;
    else if (a == "--cpu-hogs" && i + 1 < argc && std::atoi(argv[i + 1]) >= 0)
      compute_harness::g_cpu_hogs = std::atoi(argv[++i]);
    else if (a == "--trace" && i + 1 < argc)
      compute_harness::g_trace_path = argv[++i];
    else if (a == "--rounds" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
      rounds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: compute_harness [--only NAME] [--scale X] [--json FILE] [--arbiter] "
                   "[--no-handoff] [--cpu-hogs N] [--trace FILE] [--rounds N (> 0)]\n");
      return 2;
    }
  }
  nlohmann::json all = nlohmann::json::array();
  for (const compute_harness::Scenario& sc : compute_harness::Scenarios()) {
    if (!only.empty() && sc.name.find(only) == std::string::npos) continue;
    nlohmann::json j = compute_harness::RunScenario(sc, scale, nullptr);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    all.push_back(j);
  }
  // The short-kernel suite runs whole, or only the groups (one kernel
  // length and loop, with their ceilings) whose scenarios `only` names.
  if (only.empty() || only.starts_with("short kernels")) {
    compute_harness::RunShortKernels(scale, only, rounds, &all);
  }
  if (only.empty() || std::string("priority").find(only) != std::string::npos) {
    compute_harness::RunPriority(scale, &all);
  }
  if (only.empty() || only.starts_with("bursty")) {
    compute_harness::RunBursty(scale, only, rounds, &all);
  }
  if (!json_path.empty()) std::ofstream(json_path) << all.dump(2) << "\n";
  return 0;
}
