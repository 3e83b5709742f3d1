#pragma once

// Reports of a set of replays (policies x seeds): the per-seed means the
// paper publishes, as a text table, JSON, CSV and a gnuplot PNG.

#include <string>
#include <vector>

#include "core/status.h"
#include "replay/replay.h"

namespace gpuslice::replay {

// The mean over seeds of one policy at one step.
struct StepSummary {
  double arrived_ratio = 0;
  double alloc_ratio = 0;
  double alloc_ratio_min = 0;  // Worst seed.
  double alloc_ratio_max = 0;  // Best seed.
  double unallocated_gpus = 0;
  double fragmented_gpus = 0;
  double failed_tasks = 0;
  double moved_for = 0;  // Tasks placed after one move (--moves).
  double decision_p50_us = 0;
  double decision_p99_us = 0;
};

struct PolicySummary {
  core::Policy policy;
  bool moves = false;  // The runs looked for moves (--moves).
  int seeds = 0;
  std::vector<StepSummary> steps;
  double decision_p50_us = 0;  // Mean over seeds of the whole-run figures.
  double decision_p99_us = 0;
  double decision_max_us = 0;  // Worst over seeds.
};

// Groups `runs` by policy (in first-seen order) and averages over seeds.
// Runs of one policy must have the same steps.
std::vector<PolicySummary> Summarize(const std::vector<ReplayResult>& runs);

// What produced the results, recorded in every output.
struct RunInfo {
  std::string command;
  std::string nodes_file;
  std::string pods_file;
  double inflate = 0;
  bool shuffle = true;
  std::vector<uint64_t> seeds;
};

// A fixed-width table for the terminal: allocation ratio (%) per policy at
// every `every`-th step, then decision times.
std::string FormatTable(const std::vector<PolicySummary>& summary, int every = 4);

std::string ToJson(const RunInfo& info, const std::vector<ReplayResult>& runs,
                   const std::vector<PolicySummary>& summary);

// One row per run and step, then one "mean" row per policy and step.
std::string ToCsv(const std::vector<ReplayResult>& runs,
                  const std::vector<PolicySummary>& summary);

// A gnuplot script that draws the mean allocation ratio against arrived
// demand, one line per policy, into `png_path`. Data is inline.
std::string GnuplotScript(const std::vector<PolicySummary>& summary, const std::string& png_path,
                          const std::string& title);

}  // namespace gpuslice::replay
