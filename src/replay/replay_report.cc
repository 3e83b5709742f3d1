#include "replay/replay_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace gpuslice::replay {
namespace {

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

nlohmann::json StepJson(const StepStats& s) {
  return {{"arrived_pct", s.arrived_ratio * 100},
          {"arrived_gpus", s.arrived_gpus},
          {"allocated_gpus", s.allocated_gpus},
          {"alloc_ratio", s.alloc_ratio},
          {"unallocated_gpus", s.unallocated_gpus},
          {"fragmented_gpus", s.fragmented_gpus},
          {"arrived_tasks", s.arrived_tasks},
          {"failed_tasks", s.failed_tasks},
          {"moved_for", s.moved_for},
          {"decision_p50_us", s.decision_p50_us},
          {"decision_p99_us", s.decision_p99_us}};
}

}  // namespace

std::vector<PolicySummary> Summarize(const std::vector<ReplayResult>& runs) {
  std::vector<PolicySummary> out;
  for (const ReplayResult& r : runs) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const PolicySummary& s) { return s.policy == r.policy; });
    if (it == out.end()) {
      out.push_back({r.policy, r.moves, 0, {}, 0, 0, 0});
      it = out.end() - 1;
      it->steps.resize(r.steps.size());
      for (size_t i = 0; i < r.steps.size(); ++i) {
        it->steps[i].arrived_ratio = r.steps[i].arrived_ratio;
        it->steps[i].alloc_ratio_min = 1e300;
        it->steps[i].alloc_ratio_max = -1e300;
      }
    }
    ++it->seeds;
    const size_t n = std::min(it->steps.size(), r.steps.size());
    for (size_t i = 0; i < n; ++i) {
      StepSummary& s = it->steps[i];
      const StepStats& x = r.steps[i];
      s.alloc_ratio += x.alloc_ratio;
      s.alloc_ratio_min = std::min(s.alloc_ratio_min, x.alloc_ratio);
      s.alloc_ratio_max = std::max(s.alloc_ratio_max, x.alloc_ratio);
      s.unallocated_gpus += x.unallocated_gpus;
      s.fragmented_gpus += x.fragmented_gpus;
      s.failed_tasks += static_cast<double>(x.failed_tasks);
      s.moved_for += static_cast<double>(x.moved_for);
      s.decision_p50_us += x.decision_p50_us;
      s.decision_p99_us += x.decision_p99_us;
    }
    it->decision_p50_us += r.decision_p50_us;
    it->decision_p99_us += r.decision_p99_us;
    it->decision_max_us = std::max(it->decision_max_us, r.decision_max_us);
  }
  for (PolicySummary& p : out) {
    const double k = p.seeds;
    for (StepSummary& s : p.steps) {
      s.alloc_ratio /= k;
      s.unallocated_gpus /= k;
      s.fragmented_gpus /= k;
      s.failed_tasks /= k;
      s.moved_for /= k;
      s.decision_p50_us /= k;
      s.decision_p99_us /= k;
    }
    p.decision_p50_us /= k;
    p.decision_p99_us /= k;
  }
  return out;
}

std::string FormatTable(const std::vector<PolicySummary>& summary, int every) {
  if (summary.empty()) return "";
  std::string out = "GPU allocation ratio (%), mean over seeds, by arrived GPU demand\n";
  out += "policy          seeds";
  const std::vector<StepSummary>& steps = summary[0].steps;
  std::vector<size_t> cols;
  for (size_t i = 0; i < steps.size(); ++i) {
    if ((i + 1) % every == 0 || i + 1 == steps.size()) cols.push_back(i);
  }
  for (size_t i : cols) out += "  " + Fixed(steps[i].arrived_ratio * 100, 0) + "%";
  const bool moves =
      std::any_of(summary.begin(), summary.end(), [](const PolicySummary& p) { return p.moves; });
  out += "  unalloc@end  frag@end  p50us  p99us";
  out += moves ? "  failed@end  moved-for@end\n" : "\n";
  for (const PolicySummary& p : summary) {
    std::string name(core::PolicyName(p.policy));
    name.resize(16, ' ');
    out += name + std::to_string(p.seeds);
    out.append(5 - std::min<size_t>(4, std::to_string(p.seeds).size()), ' ');
    for (size_t i : cols) {
      if (i < p.steps.size()) out += " " + Fixed(p.steps[i].alloc_ratio * 100, 2);
    }
    const StepSummary& last = p.steps.back();
    out += "  " + Fixed(last.unallocated_gpus, 1) + "  " + Fixed(last.fragmented_gpus, 1) + "  " +
           Fixed(p.decision_p50_us, 1) + "  " + Fixed(p.decision_p99_us, 1);
    if (moves) out += "  " + Fixed(last.failed_tasks, 1) + "  " + Fixed(last.moved_for, 1);
    out += "\n";
  }
  return out;
}

std::string ToJson(const RunInfo& info, const std::vector<ReplayResult>& runs,
                   const std::vector<PolicySummary>& summary) {
  nlohmann::json j;
  j["command"] = info.command;
  j["nodes_file"] = info.nodes_file;
  j["pods_file"] = info.pods_file;
  j["inflate"] = info.inflate;
  j["shuffle"] = info.shuffle;
  j["seeds"] = info.seeds;
  j["runs"] = nlohmann::json::array();
  for (const ReplayResult& r : runs) {
    nlohmann::json run = {{"policy", core::PolicyName(r.policy)},
                          {"moves", r.moves},
                          {"seed", r.seed},
                          {"capacity_gpus", r.capacity_gpus},
                          {"decisions", r.decisions},
                          {"decision_p50_us", r.decision_p50_us},
                          {"decision_p99_us", r.decision_p99_us},
                          {"decision_max_us", r.decision_max_us}};
    run["steps"] = nlohmann::json::array();
    for (const StepStats& s : r.steps) run["steps"].push_back(StepJson(s));
    j["runs"].push_back(run);
  }
  j["summary"] = nlohmann::json::array();
  for (const PolicySummary& p : summary) {
    nlohmann::json ps = {{"policy", core::PolicyName(p.policy)},
                         {"moves", p.moves},
                         {"seeds", p.seeds},
                         {"decision_p50_us", p.decision_p50_us},
                         {"decision_p99_us", p.decision_p99_us},
                         {"decision_max_us", p.decision_max_us}};
    ps["steps"] = nlohmann::json::array();
    for (const StepSummary& s : p.steps) {
      ps["steps"].push_back({{"arrived_pct", s.arrived_ratio * 100},
                             {"alloc_ratio", s.alloc_ratio},
                             {"alloc_ratio_min", s.alloc_ratio_min},
                             {"alloc_ratio_max", s.alloc_ratio_max},
                             {"unallocated_gpus", s.unallocated_gpus},
                             {"fragmented_gpus", s.fragmented_gpus},
                             {"failed_tasks", s.failed_tasks},
                             {"moved_for", s.moved_for},
                             {"decision_p50_us", s.decision_p50_us},
                             {"decision_p99_us", s.decision_p99_us}});
    }
    j["summary"].push_back(ps);
  }
  return j.dump(2) + "\n";
}

std::string ToCsv(const std::vector<ReplayResult>& runs,
                  const std::vector<PolicySummary>& summary) {
  std::string out =
      "policy,seed,arrived_pct,alloc_ratio,unallocated_gpus,fragmented_gpus,failed_tasks,"
      "decision_p50_us,decision_p99_us\n";
  for (const ReplayResult& r : runs) {
    for (const StepStats& s : r.steps) {
      out += std::string(core::PolicyName(r.policy)) + "," + std::to_string(r.seed) + "," +
             Fixed(s.arrived_ratio * 100, 0) + "," + Fixed(s.alloc_ratio, 6) + "," +
             Fixed(s.unallocated_gpus, 3) + "," + Fixed(s.fragmented_gpus, 3) + "," +
             std::to_string(s.failed_tasks) + "," + Fixed(s.decision_p50_us, 2) + "," +
             Fixed(s.decision_p99_us, 2) + "\n";
    }
  }
  for (const PolicySummary& p : summary) {
    for (const StepSummary& s : p.steps) {
      out += std::string(core::PolicyName(p.policy)) + ",mean," + Fixed(s.arrived_ratio * 100, 0) +
             "," + Fixed(s.alloc_ratio, 6) + "," + Fixed(s.unallocated_gpus, 3) + "," +
             Fixed(s.fragmented_gpus, 3) + "," + Fixed(s.failed_tasks, 1) + "," +
             Fixed(s.decision_p50_us, 2) + "," + Fixed(s.decision_p99_us, 2) + "\n";
    }
  }
  return out;
}

std::string GnuplotScript(const std::vector<PolicySummary>& summary, const std::string& png_path,
                          const std::string& title) {
  std::string out = "set terminal pngcairo size 1000,650 noenhanced\n";
  // Single quotes in gnuplot strings are escaped by doubling.
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += (c == '\'') ? std::string("''") : std::string(1, c);
    return q + "'";
  };
  out += "set output " + quote(png_path) + "\n";
  out += "set title " + quote(title) + "\n";
  out += "set xlabel 'arrived GPU demand (% of cluster capacity)'\n";
  out += "set ylabel 'GPU allocation ratio (%)'\n";
  out += "set key bottom right\nset grid\n";
  for (size_t i = 0; i < summary.size(); ++i) {
    out += "$d" + std::to_string(i) + " << EOD\n";
    for (const StepSummary& s : summary[i].steps) {
      out += Fixed(s.arrived_ratio * 100, 2) + " " + Fixed(s.alloc_ratio * 100, 4) + "\n";
    }
    out += "EOD\n";
  }
  out += "plot ";
  for (size_t i = 0; i < summary.size(); ++i) {
    if (i > 0) out += ", \\\n     ";
    out += "$d" + std::to_string(i) + " using 1:2 with linespoints title " +
           quote(std::string(core::PolicyName(summary[i].policy)));
  }
  out += "\n";
  return out;
}

}  // namespace gpuslice::replay
