#pragma once

// Accounting: who used how much GPU over a window of time, from the ledger's
// allocation rows (one row per job and GPU held). Pure: rows in, totals and
// rendered tables out; the daemon reads the rows (GET /v1/usage) and the CLI
// prints them (`gpuslice usage`). The definitions are in docs/ACCOUNTING.md;
// in short, for the part of an allocation that lies inside the window:
//
//   GPU-hours            hours x weight, where the weight of a whole GPU is 1,
//                        of a MIG instance its compute slices / 7, of a
//                        fraction its compute share (30% -> 0.3), and of a
//                        fraction without a share its memory / the GPU's.
//   memory-GiB-hours     hours x the memory limit held, in GiB.
//   compute-share-hours  hours x the compute share reserved: 1 for a whole
//                        GPU, slices / 7 for a MIG instance, the share for a
//                        fraction, 0 without one. (The same shares as the
//                        metrics' allocated compute.)
//   idle hours           the job's idle time (jobs.idle_ms) prorated to the
//                        window by the part of its run time inside it;
//                        counted once per job, not per GPU.
//   idle GPU-hours       GPU-hours x the job's idle fraction.
//   suspended hours      the job's time suspended (docs/SUSPEND.md: it holds
//                        no GPU then, so no GPU-hours), prorated like idle
//                        hours; counted once per job.
//
// An allocation not yet released counts up to `now` (never past `until`).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gpuslice::core {

// One allocation row: a job holding one GPU (or MIG instance) for a time.
struct UsageRecord {
  uint64_t job_id = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string user;
  std::string group;  // Group name; "" when unknown (then the gid is shown).
  std::string name;   // The job's name.
  // The job's `slurm_job` label (a Slurm job id; docs/SLURM.md), "" if none.
  std::string slurm_job;
  uint32_t gpu_index = 0;
  uint64_t gpu_memory_total = 0;  // Of the GPU it sits on; 0 when unknown.
  bool whole_gpu = false;
  uint64_t memory_bytes = 0;        // Memory limit held on this GPU.
  uint32_t compute_milli = 0;       // Compute share; 0: none.
  uint32_t mig_compute_slices = 0;  // A MIG instance: its compute slices; 0 otherwise.
  int64_t allocated_ms = 0;
  int64_t released_ms = 0;  // 0: still held.
  // The job's run (for prorating its idle time): start, end (0: running) and
  // the idle time accumulated so far.
  int64_t job_started_ms = 0;
  int64_t job_ended_ms = 0;
  int64_t job_idle_ms = 0;
  int64_t job_suspended_ms = 0;  // Time suspended so far.
  // Time the job was suspended inside the report's window, exactly (from
  // its transitions); -1: not known, then prorated from job_suspended_ms.
  int64_t suspended_in_window_ms = -1;
  // The record holds no allocation: it stands for a job suspended in the
  // window that held no GPU there, and adds the job and its suspended
  // hours, nothing else.
  bool suspension_only = false;
};

// Compute slices of a whole GPU in MIG mode (A100/H100: 7).
inline constexpr uint32_t kMigSlicesPerGpu = 7;

// kSlurmJob: by the Slurm job a slice served (its `slurm_job` label); jobs
// without one are left out of that report.
enum class UsageGroupBy { kUser, kGroup, kJob, kSlurmJob };
// user|group|job|slurm-job
Result<UsageGroupBy> ParseUsageGroupBy(std::string_view text);
std::string_view UsageGroupByName(UsageGroupBy by);

struct UsageTotals {
  std::string key;  // User name, group name (or gid), or job id.
  // For --by job: its owner and name; for --by slurm-job: its owner;
  // otherwise empty.
  std::string user;
  std::string name;
  uint64_t jobs = 0;
  double gpu_hours = 0;
  double memory_gib_hours = 0;
  double compute_share_hours = 0;
  double idle_hours = 0;
  double idle_gpu_hours = 0;
  double suspended_hours = 0;
};

struct UsageReport {
  int64_t since_ms = 0;
  int64_t until_ms = 0;  // Already clamped to `now`.
  UsageGroupBy by = UsageGroupBy::kUser;
  std::vector<UsageTotals> rows;  // Most GPU-hours first, then by key.
  UsageTotals total;              // key "TOTAL".
};

// The weight of one row in GPU-hours per hour, and its compute share (see
// the top of this file).
double GpuWeight(const UsageRecord& r);
double ComputeShare(const UsageRecord& r);

// Aggregates `records` over [since_ms, min(until_ms, now_ms)). Rows outside
// the window contribute nothing; a job counts once in `jobs` when any of its
// rows overlaps the window. Errors when since >= until.
Result<UsageReport> AggregateUsage(const std::vector<UsageRecord>& records, int64_t since_ms,
                                   int64_t until_ms, int64_t now_ms, UsageGroupBy by);

// A point in time typed by a user: "now", a duration back from now ("7d",
// "12h", "30m", "1h30m"), a date "2026-11-01" (00:00 UTC) or a date and time
// "2026-11-01T08:30[:00][Z]" (UTC). Errors name the token.
Result<int64_t> ParseUsageTime(std::string_view text, int64_t now_ms);

// Renderings of a report. Table: aligned columns with a TOTAL line, figures
// with two decimals. CSV: RFC 4180 (CRLF line ends, fields with a comma,
// quote, CR or LF quoted with quotes doubled), a header line, no total line,
// figures with six decimals (a short job is a tiny fraction of a GPU-hour).
std::string RenderUsageTable(const UsageReport& report);
std::string RenderUsageCsv(const UsageReport& report);
// One CSV field, quoted when RFC 4180 requires it.
std::string CsvField(std::string_view field);

}  // namespace gpuslice::core
