// gpuslice-replay: replays the openb trace through the placement core.
//
//   gpuslice-replay --nodes NODES.csv --pods PODS.csv [--policy a,b,...]
//                   [--inflate 1.3] [--seed 42] [--seeds 10] [--jobs 2]
//                   [--json] [--json-out F] [--csv F] [--plot F.png]
//   gpuslice-replay --queue --nodes NODES.csv --pods PODS.csv [--arrival-scale 2]
//                   [--user-mix 40,30,20,10] [--variants today,all-on,...] [--jobs 2]
//                   [--from 115d] [--window 7d]
//                   [--json] [--json-out F]
//
// Prints a table (or JSON with --json) of allocation ratio per 5% step of
// arrived demand, mean over the seeds seed, seed+1, ..., seed+seeds-1.

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/placement/placement_policy.h"
#include "core/placement/trace.h"
#include "core/units.h"
#include "core/version.h"
#include "replay/queue_replay.h"
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
  if (!out)
    return core::PermissionDeniedError("cannot write '" + path + "': " + std::strerror(errno));
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
  app.add_option("--seeds", seeds, "number of seeds (seed, seed+1, ...)")
      ->check(CLI::Range(1, 1000));
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
  bool queue = false;
  double arrival_scale = 1.0;
  std::string user_mix = "40,30,20,10", variants = "all", half_life = "7d", max_age = "1d",
              default_runtime = "1h", from = "0s", window = "0s", task_max_runtime = "0s",
              reserve_after = "0s";
  uint32_t max_moves = 2;
  app.add_flag(
      "--queue", queue,
      "replay arrivals and departures (creation and deletion times) through the "
      "daemon's queue: waits, allocation over time, moves, fair share (docs/PLACEMENT.md)");
  app.add_option("--arrival-scale", arrival_scale,
                 "--queue: arrivals at creation time / this (above 1: more load)")
      ->check(CLI::Range(0.01, 1000.0));
  app.add_option("--user-mix", user_mix,
                 "--queue: how the tasks are shared out among users, as weights (40,30,20,10)");
  app.add_option(
      "--variants", variants,
      "--queue: today, all-on, no-defragment, no-fair-share, no-estimates, no-packing, quotas, or "
      "all");
  app.add_option("--half-life", half_life, "--queue: fair share's half-life (7d)");
  app.add_option("--max-age", max_age, "--queue: the wait at which aging stops growing (1d)");
  app.add_option("--default-runtime", default_runtime, "--queue: the run-time estimate (1h)");
  app.add_option("--reserve-after", reserve_after,
                 "--queue: the head's reservation counts estimates once it waited this long (0s)");
  app.add_option("--from", from,
                 "--queue: start the replay this far into the trace (e.g. 115d), empty; earlier "
                 "tasks are left out");
  app.add_option("--window", window,
                 "--queue: replay only the tasks created within this long after --from (e.g. 7d: "
                 "a week of trace; default: to the end)");
  app.add_option("--task-max-runtime", task_max_runtime,
                 "--queue: a task runs at most this long (e.g. 12h; default: its whole lifetime)");
  app.add_option("--max-moves", max_moves, "--queue: moves for one waiting task, at most (2)")
      ->check(CLI::Range(1, 64));
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
  if (queue) {
    QueueReplayConfig base;
    base.policy = policies->front();
    base.seed = seed;
    base.arrival_scale = arrival_scale;
    base.max_moves = max_moves;
    base.user_mix.clear();
    for (size_t at = 0; at <= user_mix.size();) {
      const size_t comma = std::min(user_mix.find(',', at), user_mix.size());
      double w = 0;
      auto [end, ec] = std::from_chars(user_mix.data() + at, user_mix.data() + comma, w);
      if (comma == at || ec != std::errc() || end != user_mix.data() + comma || !(w > 0)) {
        return fail(core::InvalidArgumentError("--user-mix '" + user_mix +
                                               "': expected positive weights such as 40,30,20,10"));
      }
      base.user_mix.push_back(w);
      at = comma + 1;
    }
    int64_t from_ms = 0, window_ms = 0;
    for (auto [text, out] :
         {std::pair{&half_life, &base.half_life_ms}, std::pair{&max_age, &base.max_age_ms},
          std::pair{&default_runtime, &base.default_runtime_ms}, std::pair{&from, &from_ms},
          std::pair{&window, &window_ms}, std::pair{&task_max_runtime, &base.max_runtime_ms},
          std::pair{&reserve_after, &base.reserve_after_ms}}) {
      // 0 is these options' "off" (their defaults), which ParseDuration,
      // made for settings that must be positive, refuses.
      if (*text == "0" || *text == "0s") {
        *out = 0;
        continue;
      }
      auto d = core::ParseDuration(*text);
      if (!d.ok()) return fail(d.status().WithContext("--queue"));
      *out = d->count();
    }
    base.from_s = from_ms / 1000;
    if (window_ms > 0) base.until_s = base.from_s + std::max<int64_t>(window_ms / 1000, 1);
    std::vector<QueueReplayConfig> runs;
    for (const QueueReplayConfig& v : QueueReplayVariants(base)) {
      if (variants == "all" ||
          ("," + variants + ",").find("," + v.label + ",") != std::string::npos) {
        runs.push_back(v);
      }
    }
    if (runs.empty())
      return fail(core::InvalidArgumentError("--variants '" + variants +
                                             "': none of today, all-on, "
                                             "no-defragment, no-fair-share, "
                                             "no-estimates"));
    std::vector<core::Result<QueueReplayResult>> out(runs.size(), core::InternalError("not run"));
    std::atomic<size_t> next_run{0};
    auto run_one = [&] {
      for (size_t i = next_run++; i < runs.size(); i = next_run++) {
        out[i] = RunQueueReplay(*input, *tasks, runs[i]);
      }
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < jobs; ++i) threads.emplace_back(run_one);
    for (std::thread& t : threads) t.join();
    std::vector<QueueReplayResult> done;
    for (auto& r : out) {
      if (!r.ok()) return fail(r.status());
      done.push_back(std::move(r).value());
    }
    std::string command;
    for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
    const std::string json_text = QueueResultsJson(done, command);
    std::cout << (json ? json_text : FormatQueueTable(done));
    if (!json_out.empty()) {
      core::Status s = WriteFile(json_out, json_text);
      if (!s.ok()) return fail(s);
    }
    return 0;
  }

  std::vector<ReplayConfig> configs;
  for (core::Policy p : *policies) {
    for (int i = 0; i < seeds; ++i) {
      configs.push_back(
          {p, inflate, seed + static_cast<uint64_t>(i), !no_shuffle, 0.05, coverage, moves});
    }
  }
  std::vector<core::Result<ReplayResult>> results(configs.size(), core::InternalError("not run"));
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
