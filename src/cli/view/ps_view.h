#pragma once

// `gpuslice ps` as text: the table of jobs from the daemon's JSON list, in
// the default columns or those of `--format`, and `ps --summary` (pure, so
// that it is tested without a daemon).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::cli {

// A column of `ps`: one of the fields `--format` names (PsFieldNames), cut
// to `width` characters when that is not 0.
struct PsColumn {
  size_t field = 0;  // Index into the field table.
  size_t width = 0;
};

// "id,user,name:20,state": fields by name, each with an optional maximum
// width. Errors name the bad item and list the fields there are.
core::Result<std::vector<PsColumn>> ParsePsFormat(std::string_view format);
// The names `--format` accepts, in the table's order.
std::vector<std::string> PsFieldNames();

// One line per job of `list` (GET /v1/jobs), at `now_ms`. Default columns:
// ID USER NAME STATE REQUEST PRIO GPU [IMAGE] AGE ELAPSED POS NOTE, where
// AGE is the time since submission; ELAPSED the time the job has run (up to
// now, or to its end; "-" while it has not started); GPU what it holds ("-"
// for a suspended job, which holds none); NOTE why a queued job waits, how
// an ended one ended, or a running one's policy flags.
std::string RenderPs(const nlohmann::json& list, int64_t now_ms);
std::string RenderPs(const nlohmann::json& list, int64_t now_ms,
                     const std::vector<PsColumn>& columns);

// `ps --summary` from GET /v1/jobs/summary: the counts by state, then one
// line per group of alike jobs (ids as ranges, how many, and for a queued
// group where its first job stands and why it waits).
std::string RenderSummary(const nlohmann::json& summary);

// A job's dependencies (its "after" list) for `gpuslice show`: "1:ok
// (running, waiting), 2 (exit 3, satisfied)"; "" when it has none.
std::string DependenciesText(const nlohmann::json& job);

// "killed by SIGUSR1" for an exit code of 128 + a signal number (how an end
// by a signal is recorded), else nullptr.
const char* SignalName(int exit_code);

}  // namespace gpuslice::cli
