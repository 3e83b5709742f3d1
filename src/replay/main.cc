// gpuslice-replay: replays the openb trace through the placement core.
//
//   gpuslice-replay --nodes NODES.csv --pods PODS.csv [--policy a,b,...]
//                   [--inflate 1.3] [--seed 42] [--seeds 10] [--jobs 2]
//                   [--json] [--json-out F] [--csv F] [--plot F.png]
//
// Prints a table (or JSON with --json) of allocation ratio per 5% step of
// arrived demand, mean over the seeds seed, seed+1, ..., seed+seeds-1.

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/placement_policy.h"
#include "core/trace.h"
#include "core/version.h"
#include "replay/replay.h"
#include "replay/replay_report.h"

namespace gpuslice::replay {
namespace {

core::Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::NotFoundError("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

core::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return core::PermissionDeniedError("cannot write '" + path + "': " + std::strerror(errno));
  return core::Status::Ok();
}

core::Result<std::vector<core::Policy>> ParsePolicies(const std::string& list) {
  std::vector<core::Policy> out;
  if (list == "all") {
    for (const core::PolicyInfo& info : core::AllPolicies()) {
      if (info.policy != core::Policy::kBinpack && info.policy != core::Policy::kSpread) {
        out.push_back(info.policy);
      }
    }
    return out;
  }
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    GPUSLICE_ASSIGN_OR_RETURN(core::Policy p, core::ParsePolicy(list.substr(start, comma - start)));
    out.push_back(p);
    start = comma + 1;
  }
  return out;
}

core::Status RunPlot(const std::string& script) {
  FILE* pipe = popen("gnuplot", "w");
  if (pipe == nullptr) return core::UnavailableError("cannot start gnuplot");
  std::fwrite(script.data(), 1, script.size(), pipe);
  int rc = pclose(pipe);
  if (rc != 0) return core::UnavailableError("gnuplot failed (status " + std::to_string(rc) + ")");
  return core::Status::Ok();
}

int Main(int argc, char** argv) {
  CLI::App app{"Replay the openb GPU-sharing trace through gpuslice placement policies."};
  std::string nodes_path, pods_path, policy_list(core::PolicyName(core::kDefaultPolicy));
  std::string json_out, csv_out, plot_out;
  double inflate = 1.3, coverage = 0;
  uint64_t seed = 42;
  int seeds = 1, jobs = 1;
  bool json = false, no_shuffle = false, moves = false;
  app.add_option("--nodes", nodes_path, "node list (openb_node_list_*.csv)")->required();
  app.add_option("--pods", pods_path, "task list (openb_pod_list_*.csv)")->required();
  app.add_option("--policy", policy_list,
                 "policy or comma-separated policies, or 'all' (default: frag-aware)");
  app.add_option("--inflate", inflate, "arrived GPU demand at the end, x capacity")
      ->check(CLI::Range(0.05, 10.0));
  app.add_option("--seed", seed, "first seed");
  app.add_option("--seeds", seeds, "number of seeds (seed, seed+1, ...)")->check(CLI::Range(1, 1000));
  app.add_option("--jobs", jobs, "replays to run in parallel")->check(CLI::Range(1, 256));
  app.add_option("--coverage", coverage,
                 "profile coverage for fgd/frag-aware (default: 0.95 fgd, 1.0 frag-aware)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--no-shuffle", no_shuffle, "keep trace order (inflation draws appended)");
  app.add_flag("--moves", moves,
               "when a task does not fit, move one placed single-GPU task if that makes room "
               "(reports how many tasks a move let in)");
  app.add_flag("--json", json, "print JSON instead of the table");
  app.add_option("--json-out", json_out, "also write the JSON to this file");
  app.add_option("--csv", csv_out, "write per-step CSV to this file");
  app.add_option("--plot", plot_out, "draw allocation ratio vs arrived demand into this PNG");
  app.set_version_flag("--version", "gpuslice-replay " + std::string(core::Version()));
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const core::Status& s) {
    std::cerr << "gpuslice-replay: " << s.ToString() << "\n";
    return 1;
  };
  core::Result<std::vector<core::Policy>> policies = ParsePolicies(policy_list);
  if (!policies.ok()) return fail(policies.status());
  core::Result<std::string> nodes_text = ReadFile(nodes_path);
  if (!nodes_text.ok()) return fail(nodes_text.status());
  core::Result<std::string> pods_text = ReadFile(pods_path);
  if (!pods_text.ok()) return fail(pods_text.status());
  auto nodes = core::ParseTraceNodes(*nodes_text, nodes_path);
  if (!nodes.ok()) return fail(nodes.status());
  auto tasks = core::ParseTraceTasks(*pods_text, pods_path);
  if (!tasks.ok()) return fail(tasks.status());
  core::Result<ReplayInput> input = BuildInput(*nodes, *tasks);
  if (!input.ok()) return fail(input.status());

  std::vector<ReplayConfig> configs;
  for (core::Policy p : *policies) {
    for (int i = 0; i < seeds; ++i) {
      configs.push_back(
          {p, inflate, seed + static_cast<uint64_t>(i), !no_shuffle, 0.05, coverage, moves});
    }
  }
  std::vector<core::Result<ReplayResult>> results(configs.size(),
                                                  core::InternalError("not run"));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < configs.size(); i = next++) {
      results[i] = RunReplay(*input, configs[i]);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < jobs; ++i) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  std::vector<ReplayResult> runs;
  for (auto& r : results) {
    if (!r.ok()) return fail(r.status());
    runs.push_back(std::move(r).value());
  }
  std::vector<PolicySummary> summary = Summarize(runs);

  RunInfo info;
  for (int i = 0; i < argc; ++i) info.command += (i ? " " : "") + std::string(argv[i]);
  info.nodes_file = nodes_path;
  info.pods_file = pods_path;
  info.inflate = inflate;
  info.shuffle = !no_shuffle;
  for (int i = 0; i < seeds; ++i) info.seeds.push_back(seed + static_cast<uint64_t>(i));
  const std::string json_text = ToJson(info, runs, summary);
  if (json) {
    std::cout << json_text;
  } else {
    std::cout << FormatTable(summary);
  }
  if (!json_out.empty()) {
    core::Status s = WriteFile(json_out, json_text);
    if (!s.ok()) return fail(s);
  }
  if (!csv_out.empty()) {
    core::Status s = WriteFile(csv_out, ToCsv(runs, summary));
    if (!s.ok()) return fail(s);
  }
  if (!plot_out.empty()) {
    std::string title = "openb replay: " + pods_path.substr(pods_path.find_last_of('/') + 1) +
                        ", " + std::to_string(seeds) + " seed(s)";
    core::Status s = RunPlot(GnuplotScript(summary, plot_out, title));
    if (!s.ok()) return fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace gpuslice::replay

int main(int argc, char** argv) { return gpuslice::replay::Main(argc, argv); }
