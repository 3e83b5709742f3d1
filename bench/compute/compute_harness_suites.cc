// The harness's suites of scenarios run side by side (compute_harness.h).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute_harness.h"

namespace compute_harness {

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::ranges::sort(v);
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

void RunShortKernels(double scale, const std::string& only, int rounds, nlohmann::json* all_out) {
  nlohmann::json& all = *all_out;
  // What a hard 30% slice gets alone, and what a 30/70 pair of
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
      // Rounds of each (reference, shared) couple side by side: the
      // ceilings of 20 us loops are bound by this machine's CPU and moved
      // by up to +-25% from one 4 s run to the next (one synchronising loop:
      // 16-25% of the GPU in six runs of one hour), so a single couple's
      // ratio read 0.62-1.25. The medians of the rounds' ratios, and
      // their range.
      std::vector<double> tops, gots, tops2, tops_split, boths, alone_of_owed, pair_of_two,
          pair_of_split;
      auto print = [&](nlohmann::json j, int round) {
        j["round"] = round;
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
        all.push_back(j);
        return j.value("aggregate_pct", 0.0);
      };
      // Each round runs the pair between its two ceilings (the same two
      // processes without shares, and at the split), and every other round
      // runs in reverse order: the machine's speed drifts over seconds to
      // minutes (the split ceiling of two 20 us loops read 59.1% and 37.8% in
      // consecutive rounds), and a drift then moves both sides of a ratio
      // alike, or cancels across rounds.
      for (int round = 1; round <= rounds; ++round) {
        double top = 0, got = 0, top2 = 0, both = 0, top_split = 0;
        std::vector<std::pair<const Scenario*, double*>> order = {{&ceiling, &top},
                                                                  {&alone, &got},
                                                                  {&ceiling2, &top2},
                                                                  {&pair, &both},
                                                                  {&split, &top_split}};
        if (round % 2 == 0) std::ranges::reverse(order);
        for (auto& [scenario, result] : order) {
          *result = print(RunScenario(*scenario, scale, nullptr), round);
        }
        tops.push_back(top);
        gots.push_back(got);
        tops2.push_back(top2);
        tops_split.push_back(top_split);
        boths.push_back(both);
        // A 30% slice is owed 30% of the GPU, or all the loop can reach if less.
        const double owed = std::min(30.0, top);
        alone_of_owed.push_back(owed > 0 ? got / owed : 0);
        pair_of_two.push_back(top2 > 0 ? both / top2 : 0);
        pair_of_split.push_back(top_split > 0 ? both / top_split : 0);
      }
      auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
      auto range = [&](std::vector<double> v) {
        std::ranges::sort(v);
        return nlohmann::json::array({r3(v.front()), r3(v.back())});
      };
      rows.push_back({{"kernel_us", us},
                      {"loop", sync ? "sync" : "free"},
                      {"rounds", rounds},
                      {"ceiling_pct", Median(tops)},
                      {"alone_30_pct", Median(gots)},
                      {"alone_30_of_owed", r3(Median(alone_of_owed))},
                      {"alone_30_of_owed_range", range(alone_of_owed)},
                      {"ceiling_of_two_pct", Median(tops2)},
                      {"pair_total_pct", Median(boths)},
                      {"pair_of_ceiling", r3(Median(pair_of_two))},
                      {"pair_of_ceiling_range", range(pair_of_two)},
                      {"ceiling_at_split_pct", Median(tops_split)},
                      {"pair_of_split_ceiling", r3(Median(pair_of_split))},
                      {"pair_of_split_ceiling_range", range(pair_of_split)}});
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
    const double ma = Median(p99_alone), ms = Median(p99_shared), mc = Median(p99_coarse);
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

namespace compute_harness {

void RunBursty(double scale, const std::string& only, int rounds, nlohmann::json* all_out) {
  nlohmann::json& all = *all_out;
  // A share is a guarantee for bursty work. Slice A asks for 30%
  // of the GPU and wants 30%: an open-loop client (a request of 2 ms of
  // kernels every 6.67 ms, whatever happened to the ones before it, as an
  // inference service receives them) or a closed-loop duty loop (one
  // kernel, synchronise, idle 7/3 of what it took, as the demo's worker
  // did). Beside it a busy trainer B (kernels of the same length,
  // free-running) without a share, with a 70% hard share or a 70%
  // work-conserving one; A at normal or high priority. Each case beside
  // A alone in the same round; on a quiet host and beside two CPU hogs per
  // core.
  nlohmann::json rows = nlohmann::json::array();
  auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
  for (bool hogs : {false, true}) {
    for (const char* loop : {"open", "duty"}) {
      for (unsigned us : {20u, 200u, 2000u}) {
        std::vector<std::string> a_args = {"--kernel-us", std::to_string(us)};
        if (std::string(loop) == "open") {
          a_args.insert(a_args.end(),
                        {"--request-us", "2000", "--period-ms", "6.667", "--open-loop"});
        } else {
          a_args.insert(a_args.end(), {"--duty", "30"});
        }
        const std::vector<std::string> b_args = {"--kernel-us", std::to_string(us)};
        const std::string tag =
            std::string(loop) + ", " + std::to_string(us) + " us" + (hogs ? ", cpu hogs" : "");
        struct Case {
          std::string name;
          Scenario sc;
        };
        std::vector<Case> cases;
        auto make = [&](const std::string& what, const std::string& prio,
                        const std::vector<Tenant>& others) {
          Scenario sc{"bursty: " + tag + ": " + what, 4, {{"a", 30, "hard", prio, a_args}}};
          sc.tenants.insert(sc.tenants.end(), others.begin(), others.end());
          sc.cpu_hogs = hogs ? 4 : 0;
          cases.push_back({what, sc});
        };
        make("alone", "", {});
        for (const char* prio : {"", "high"}) {
          const std::string p = *prio ? std::string(" (A high)") : std::string();
          Tenant none{"b", 0, "hard", "", b_args};
          none.no_share_slice = true;
          make("beside no share" + p, prio, {none});
          make("beside 70% hard" + p, prio, {{"b", 70, "hard", "", b_args}});
          make("beside 70% work-conserving" + p, prio, {{"b", 70, "work-conserving", "", b_args}});
        }
        const bool wanted = only.size() <= std::string("bursty").size() ||
                            std::ranges::any_of(cases, [&](const Case& c) {
                              return c.sc.name.find(only) != std::string::npos;
                            });
        if (!wanted) continue;
        for (int round = 1; round <= rounds; ++round) {
          nlohmann::json alone;
          for (size_t k = 0; k < cases.size(); ++k) {
            // Alone first, then every pair; reversed every other round.
            const size_t at = round % 2 == 1 || k == 0 ? k : cases.size() - k;
            const Case& c = cases[at];
            if (k > 0 && only.size() > std::string("bursty").size() &&
                c.sc.name.find(only) == std::string::npos) {
              continue;
            }
            nlohmann::json j = RunScenario(c.sc, scale, nullptr);
            j["round"] = round;
            std::printf("%s\n", j.dump().c_str());
            std::fflush(stdout);
            all.push_back(j);
            const nlohmann::json& a = j["tenants"][0];
            if (k == 0) {
              alone = a;
              continue;
            }
            nlohmann::json row = {{"case", c.sc.name},
                                  {"round", round},
                                  {"a_got_pct", a.value("achieved_pct", 0.0)},
                                  {"a_alone_got_pct", alone.value("achieved_pct", 0.0)},
                                  {"a_p50_us", a.value("p50_us", 0.0)},
                                  {"a_p99_us", a.value("p99_us", 0.0)},
                                  {"a_alone_p50_us", alone.value("p50_us", 0.0)},
                                  {"a_alone_p99_us", alone.value("p99_us", 0.0)},
                                  {"total_pct", j.value("aggregate_pct", 0.0)}};
            if (j["tenants"].size() > 1)
              row["b_got_pct"] = j["tenants"][1].value("achieved_pct", 0.0);
            if (a.contains("delivered")) row["a_delivered"] = a["delivered"];
            const double alone_got = alone.value("achieved_pct", 0.0);
            if (alone_got > 0) row["a_got_of_alone"] = r3(a.value("achieved_pct", 0.0) / alone_got);
            const double alone_p99 = alone.value("p99_us", 0.0);
            if (alone_p99 > 0) row["a_p99_of_alone"] = r3(a.value("p99_us", 0.0) / alone_p99);
            rows.push_back(row);
          }
        }
      }
    }
  }
  nlohmann::json summary = {{"scenario", "bursty: summary (slice A against A alone)"},
                            {"rows", rows}};
  std::printf("%s\n", summary.dump().c_str());
  all.push_back(summary);
}

}  // namespace compute_harness
