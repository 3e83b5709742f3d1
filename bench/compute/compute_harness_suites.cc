// The harness's suites of scenarios run side by side (compute_harness.h).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute_harness.h"

namespace compute_harness {

void RunShortKernels(double scale, const std::string& only, nlohmann::json* all_out) {
  nlohmann::json& all = *all_out;
  // Issue 19: what a hard 30% slice gets alone, and what a 30/70 pair of
  // hard slices uses together, with 20 us, 200 us and 1 ms kernels, in a
  // launch-then-synchronise loop (sync) and free-running (a synchronise
  // every ~20 ms of work), each beside the same processes without any
  // share (their ceilings: what one such loop, and two side by side, reach
  // on this machine), in the same run. And the pair's ceiling at the 30/70
  // split: the same two processes without any share, the first keeping
  // itself to 30% of the GPU (compute_worker --pace 30). Two loops side by
  // side without shares split the GPU evenly; at 30/70 the second must fill
  // the GPU on its own most of the time, which a loop that synchronises
  // after each kernel cannot: this is what the pair can reach at the split
  // the shares ask for.
  nlohmann::json rows = nlohmann::json::array();
  for (unsigned us : {20u, 200u, 1000u}) {
    for (bool sync : {true, false}) {
      std::vector<std::string> args = {"--kernel-us", std::to_string(us)};
      if (sync) args.insert(args.end(), {"--sync-every", "1"});
      const std::string tag = std::to_string(us) + " us, " + (sync ? "sync" : "free");
      Scenario ceiling{"short kernels: ceiling, " + tag, 4, {{"a", 0, "hard", "", args}}};
      ceiling.tenants[0].target = 100;
      Scenario ceiling2{"short kernels: ceiling of two, " + tag,
                        4,
                        {{"a", 0, "hard", "", args}, {"b", 0, "hard", "", args}}};
      ceiling2.tenants[0].target = ceiling2.tenants[1].target = 50;
      std::vector<std::string> paced = args;
      paced.insert(paced.end(), {"--pace", "30"});
      Scenario split{"short kernels: ceiling at 30/70, " + tag,
                     4,
                     {{"a", 0, "hard", "", paced}, {"b", 0, "hard", "", args}}};
      split.tenants[0].target = 30;
      split.tenants[1].target = 70;
      Scenario alone{"short kernels: 30% hard alone, " + tag, 4, {{"a", 30, "hard", "", args}}};
      Scenario pair{"short kernels: 30/70 hard, " + tag,
                    4,
                    {{"a", 30, "hard", "", args}, {"b", 70, "hard", "", args}}};
      if (only.size() > std::string("short kernels").size() &&
          !std::ranges::any_of(
              std::vector<const Scenario*>{&ceiling, &ceiling2, &split, &alone, &pair},
              [&](const Scenario* sc) { return sc->name.find(only) != std::string::npos; })) {
        continue;
      }
      nlohmann::json c = RunScenario(ceiling, scale, nullptr);
      nlohmann::json c2 = RunScenario(ceiling2, scale, nullptr);
      nlohmann::json cs = RunScenario(split, scale, nullptr);
      nlohmann::json a = RunScenario(alone, scale, nullptr);
      nlohmann::json p = RunScenario(pair, scale, nullptr);
      for (const nlohmann::json* j : {&c, &c2, &cs, &a, &p}) {
        std::printf("%s\n", j->dump().c_str());
        all.push_back(*j);
      }
      const double top = c.value("aggregate_pct", 0.0);
      const double got = a.value("aggregate_pct", 0.0);
      const double both = p.value("aggregate_pct", 0.0);
      const double top2 = c2.value("aggregate_pct", 0.0);
      const double top_split = cs.value("aggregate_pct", 0.0);
      // A 30% slice is owed 30% of the GPU, or all the loop can reach if less.
      const double owed = std::min(30.0, top);
      rows.push_back({{"kernel_us", us},
                      {"loop", sync ? "sync" : "free"},
                      {"ceiling_pct", top},
                      {"alone_30_pct", got},
                      {"alone_30_of_owed", owed > 0 ? std::round(got / owed * 1000) / 1000 : 0},
                      {"ceiling_of_two_pct", top2},
                      {"pair_total_pct", both},
                      {"pair_of_ceiling", top2 > 0 ? std::round(both / top2 * 1000) / 1000 : 0},
                      {"ceiling_at_split_pct", top_split},
                      {"pair_of_split_ceiling",
                       top_split > 0 ? std::round(both / top_split * 1000) / 1000 : 0}});
      std::fflush(stdout);
    }
  }
  nlohmann::json summary = {{"scenario", "short kernels: summary (ratios to the ceiling)"},
                            {"rows", rows}};
  std::printf("%s\n", summary.dump().c_str());
  all.push_back(summary);
}

void RunPriority(double scale, nlohmann::json* all_out) {
  nlohmann::json& all = *all_out;
  // Priority: a latency-sensitive tenant (2 ms of work every 20 ms), alone
  // and then beside two best-effort tenants at low priority; 10 s runs, so
  // that the p99 is the 5th-worst of 500 requests rather than the 3rd of 250.
  std::vector<std::string> req = {"--kernel-us", "100",         "--request-us",
                                  "2000",        "--period-ms", "20"};
  Scenario alone{"priority: inference alone", 10, {{"inf", 30, "work-conserving", "high", req}}};
  Scenario shared{"priority: inference + 2 best-effort",
                  10,
                  {{"inf", 30, "work-conserving", "high", req},
                   {"be1", 35, "work-conserving", "low", {"--kernel-us", "50"}},
                   {"be2", 35, "work-conserving", "low", {"--kernel-us", "50"}}}};
  alone.tenants[0].target = 10;  // It only asks for 10% of the GPU.
  shared.tenants[0].target = 10;
  shared.tenants[1].target = 45;
  shared.tenants[2].target = 45;
  // The same beside best-effort kernels of 200 us (one kernel is then more
  // than an outranked slice's queue depth: the request waits for kernels).
  Scenario coarse = shared;
  coarse.name = "priority: inference + 2 best-effort, 200 us kernels";
  coarse.tenants[1].args = {"--kernel-us", "200"};
  coarse.tenants[2].args = {"--kernel-us", "200"};
  // The p99 of a 2 ms request on a small loaded machine moves by +-0.5 ms
  // from run to run, alone as well as shared: rounds of (alone, shared)
  // side by side, and the inflation of the medians of their p99s.
  constexpr int kRounds = 3;
  std::vector<double> p99_alone, p99_shared, p99_coarse;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<double> p99;
    nlohmann::json a = RunScenario(alone, scale, &p99);
    nlohmann::json b = RunScenario(shared, scale, &p99);
    nlohmann::json c = RunScenario(coarse, scale, &p99);
    if (p99.size() == 3 && p99[0] > 0) {
      b["p99_inflation_pct"] = std::round((p99[1] / p99[0] - 1) * 1000) / 10;
      c["p99_inflation_pct"] = std::round((p99[2] / p99[0] - 1) * 1000) / 10;
      p99_alone.push_back(p99[0]);
      p99_shared.push_back(p99[1]);
      p99_coarse.push_back(p99[2]);
    }
    for (nlohmann::json* j : {&a, &b, &c}) {
      (*j)["round"] = round + 1;
      std::printf("%s\n", j->dump().c_str());
      all.push_back(*j);
    }
    std::fflush(stdout);
  }
  if (!p99_alone.empty()) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double ma = median(p99_alone), ms = median(p99_shared), mc = median(p99_coarse);
    nlohmann::json summary = {
        {"scenario", "priority: p99 inflation over the rounds"},
        {"rounds", p99_alone.size()},
        {"p99_alone_us", p99_alone},
        {"p99_shared_us", p99_shared},
        {"p99_shared_200us_kernels_us", p99_coarse},
        {"median_p99_alone_us", ma},
        {"median_p99_shared_us", ms},
        {"median_p99_shared_200us_kernels_us", mc},
        {"p99_inflation_pct", std::round((ms / ma - 1) * 1000) / 10},
        {"p99_inflation_200us_kernels_pct", std::round((mc / ma - 1) * 1000) / 10}};
    std::printf("%s\n", summary.dump().c_str());
    all.push_back(summary);
  }
}

}  // namespace compute_harness
