#pragma once

// The compute-share harness (compute_harness.cc): scenarios of tenants run
// as real processes under the shim over the simulated GPU. The suites of
// side-by-side runs (the short kernels, the priority rounds) are in
// compute_harness_suites.cc.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace compute_harness {

struct Tenant {
  std::string name;
  double share = 0;  // Percent; 0: no share.
  std::string mode = "hard";
  std::string priority;  // Empty: normal.
  std::vector<std::string> args;
  double start_s = 0;       // Arrival.
  double seconds = 0;       // How long it runs (0: the whole scenario).
  double target = -1;       // Expected share in percent (-1: = share).
  double change_at_s = -1;  // Live change of its share at this time ...
  double change_to = 0;     // ... to this.
  // Under --arbiter: a daemon slice without a share, which the daemon
  // registers with the smallest share, work-conserving, at its priority
  // (JobSetup::TakeTurnsWithoutAShare). Otherwise a tenant of share 0 is a
  // process without any slice coordination (a ceiling's reference).
  bool no_share_slice = false;
};

struct Scenario {
  std::string name;
  double seconds;
  std::vector<Tenant> tenants;
  double measure_from_s = 1.0;  // Warm-up excluded from the windows.
  bool latency = false;         // Compare tenant 0's p99 with running alone.
  // Processes that only spin on the CPU for the whole run (a data loader
  // that eats the host's CPUs): the arbiter, the gates and the launchers
  // need CPU too.
  int cpu_hogs = 0;
};

extern bool g_arbiter;            // --arbiter: the daemon's arbiter decides the turns.
extern bool g_no_handoff;         // --no-handoff: PolicyParams::handoff off (a baseline).
extern int g_cpu_hogs;            // --cpu-hogs N: spinning processes beside every scenario.
extern std::string g_trace_path;  // --trace FILE: the board every 0.5 ms (--arbiter).

// Runs one scenario in a fresh temporary directory; returns its figures
// (tenant 0's p99 latencies are appended to `p99_out` when not null).
nlohmann::json RunScenario(const Scenario& sc, double scale, std::vector<double>* p99_out);
// The fixed list of scenarios.
std::vector<Scenario> Scenarios();

// 20 us / 200 us / 1 ms kernels, synchronising and free-running,
// each beside its unshared ceilings in the same run; appends to `all`.
// `only`: empty or "short kernels" for the whole suite, else the groups
// with a scenario whose name contains it. `rounds` of each group's runs.
void RunShortKernels(double scale, const std::string& only, int rounds, nlohmann::json* all);
// A high-priority inference tenant alone and beside two best-effort ones,
// rounds side by side; appends to `all`.
void RunPriority(double scale, nlohmann::json* all);
// Bursty slices: an open-loop client (requests at a fixed rate, 30% of the
// GPU's time) and a closed-loop duty loop, each with a 30% share, alone and
// beside a busy trainer (no share; 70% hard; 70% work-conserving), at
// normal and high priority, with 20 us, 200 us and 2 ms kernels, on a quiet
// host and beside CPU hogs (`hogs` = false skips them); appends to `all`.
// `only`: empty or "bursty" for the whole suite, else the cases whose name
// contains it.
void RunBursty(double scale, const std::string& only, int rounds, nlohmann::json* all);

}  // namespace compute_harness
