#pragma once

// `gpuslice top`'s view of the node: a model built from the daemon's JSON
// (GET /v1/status, /v1/gpus, /v1/jobs, /v1/events) and a pure rendering of it
// into lines of at most a given width. The terminal loop (top.cc) only draws
// these lines; everything shown is decided here, so it is tested without a
// terminal or a daemon (top_view_test.cc).
//
// Every string that comes from the daemon (job names, users, event messages)
// is cleaned to printable ASCII before it is shown, so nothing a user can put
// in a job can move the cursor or change the terminal.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpuslice::cli {

struct TopSlice {
  uint64_t job = 0;
  std::string user;
  std::string name;
  bool whole_gpu = false;
  uint64_t memory_limit = 0;
  int64_t memory_used = -1;    // -1: unknown (the region could not be read).
  uint32_t compute_milli = 0;  // Target share; 0: none (whole GPUs show 100%).
  double achieved_pct = -1;    // The job's GPU utilisation, 0-100; -1: unknown.
  int64_t low_use_ms = 0;      // How long it has stayed under the idle threshold.
  bool idle = false;           // The daemon flagged it idle.
  // The daemon's policy flags ("idle", "paused", "over_limit", "preempted").
  std::vector<std::string> flags;
  uint64_t refused_allocs = 0;
};

// A process on the GPU that belongs to no job (the daemon charges its
// memory to the GPU in placement).
struct TopForeign {
  uint32_t pid = 0;
  std::string user;
  uint64_t memory = 0;
};

// A process on the GPU (NVML), with the job it belongs to (0: none, a
// process outside gpuslice) and its owner.
struct TopProcess {
  uint32_t pid = 0;
  std::string user;
  uint64_t job = 0;
  uint64_t memory = 0;
  int32_t sm_pct = -1;  // Its SM use over the last sample; -1: unknown.
};

// A MIG instance of a GPU in MIG mode: whose it is, or free.
struct TopMig {
  std::string uuid;
  std::string profile;  // "1g.5gb".
  uint64_t memory_total = 0;
  uint64_t job = 0;  // 0: no job holds it.
  std::string user;
  std::string name;
  uint32_t foreign_pid = 0;  // A process outside gpuslice in it (0: none).
  std::string foreign_user;
  double utilization_pct = -1;  // Its activity (NVML GPM); -1: no figure.
};

struct TopGpu {
  uint32_t index = 0;
  std::string model;
  std::string uuid;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;
  int32_t utilization_pct = -1;  // -1: NVML gives none (MIG mode without GPM).
  int32_t temperature_c = -1;    // -1: unknown.
  double power_w = -1;         // -1: unknown.
  bool mig = false;
  std::vector<TopSlice> slices;
  std::vector<TopForeign> foreign;
  std::vector<TopProcess> processes;  // Every process on it (NVML), biggest first.
  std::vector<TopMig> instances;      // Its MIG instances (when `mig`).
  // What jobs reserved on it (their slices' limits; a whole GPU: all of it)
  // and what is left for new jobs once foreign use is charged: what placement
  // sees, beside NVML's figure of what processes use.
  uint64_t Reserved() const;
  uint64_t ForeignMemory() const;
  uint64_t FreeForJobs() const;
};

struct TopQueued {
  int position = 0;
  uint64_t job = 0;
  std::string user;
  std::string name;
  std::string request;  // "8 GiB + 30%".
  std::string priority;
  int64_t submitted_ms = 0;
  std::string waiting_for;
};

struct TopEvent {
  int64_t at_ms = 0;
  std::string kind;
  uint64_t job = 0;
  std::string user;
  std::string message;
};

struct TopModel {
  std::string host;
  std::string time_text;  // The local time of the snapshot, as the header shows it.
  int64_t now_ms = 0;
  std::string state;  // "ok" / "degraded"; "" when the daemon was not reached.
  std::string degraded_reason;
  std::string version;
  bool simulated = false;
  int running = 0;
  int queued = 0;
  std::vector<TopGpu> gpus;
  std::vector<TopQueued> queue;  // In queue order.
  // More jobs wait than `queue` holds (top fetches the first ones only).
  bool queue_truncated = false;
  std::vector<TopEvent> events;  // Oldest first.
  std::string error;  // Why the last refresh failed (shown, the rest is the last good data).
};

// Builds the model from the daemon's answers. Missing optional fields (usage,
// temperature, power) stay unknown; `events` may be null (an older daemon).
TopModel ModelFromJson(const nlohmann::json& status, const nlohmann::json& gpus,
                       const nlohmann::json& jobs, const nlohmann::json& events);

// The model as one JSON snapshot (`gpuslice top --json`).
nlohmann::json ModelToJson(const TopModel& model);

struct RenderOptions {
  size_t width = 80;  // Columns; every line fits (at least 40 are assumed).
  bool utf8 = false;  // Block-character bars and "…"; else ASCII only.
  size_t max_events = 10;
  // The job the terminal's cursor is on (0: none): its rows start with '>'.
  uint64_t selected_job = 0;
};

// The view as lines without newlines, none wider than options.width columns.
// `line_jobs`, when given, gets the job each line shows (a slice row, a
// process row, a queue row; 0 for any other line), so the terminal can
// move a selection from job to job.
std::vector<std::string> RenderTop(const TopModel& model, const RenderOptions& options,
                                   std::vector<uint64_t>* line_jobs = nullptr);

// Pieces, exposed for tests.
// A bar `width` columns wide (brackets included) filled to `fraction` (0..1).
std::string Bar(double fraction, size_t width, bool utf8);
// Columns a string takes: UTF-8 code points (all glyphs used here are one column wide).
size_t DisplayWidth(const std::string& s);
// Cut to `width` columns, marking the cut with "…" (UTF-8) or "~".
std::string Fit(const std::string& s, size_t width, bool utf8);
// Text from the daemon as every human view shows it (Shown, cli/view/table.h):
// controls and escape sequences visible, never emitted.
std::string Clean(const std::string& s);

}  // namespace gpuslice::cli
