#include "daemon/store/ledger_schema.h"

namespace gpuslice::daemon {
namespace {

constexpr const char* kMigrations[] = {
    // 1: jobs, their allocations and state transitions.
    R"sql(
CREATE TABLE jobs (
  id              INTEGER PRIMARY KEY,
  uid             INTEGER NOT NULL,
  gid             INTEGER NOT NULL,
  user            TEXT NOT NULL,
  name            TEXT NOT NULL DEFAULT '',
  kind            TEXT NOT NULL,          -- gpus | fraction | mig
  gpus_min        INTEGER NOT NULL DEFAULT 0,
  gpus_max        INTEGER NOT NULL DEFAULT 0,
  memory_bytes    INTEGER NOT NULL DEFAULT 0,
  compute_milli   INTEGER NOT NULL DEFAULT 0,
  mig             TEXT NOT NULL DEFAULT '',
  priority        TEXT NOT NULL,          -- low | normal | high
  max_runtime_ms  INTEGER,                -- NULL: none
  mode            TEXT NOT NULL,          -- run | submit | shell
  argv            TEXT NOT NULL,          -- JSON array of strings
  cwd             TEXT NOT NULL,
  env             TEXT NOT NULL,          -- JSON array of "K=V"
  state           TEXT NOT NULL,
  submitted_ms    INTEGER NOT NULL,
  started_ms      INTEGER NOT NULL DEFAULT 0,
  ended_ms        INTEGER NOT NULL DEFAULT 0,
  exit_code       INTEGER NOT NULL DEFAULT -1,
  reason          TEXT NOT NULL DEFAULT '',
  pid             INTEGER NOT NULL DEFAULT 0,
  pid_start_time  INTEGER NOT NULL DEFAULT 0,
  region_path     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_live ON jobs(state) WHERE state IN ('queued', 'running');
CREATE TABLE allocations (
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  gpu_index       INTEGER NOT NULL,
  gpu_uuid        TEXT NOT NULL,
  memory_bytes    INTEGER NOT NULL,
  compute_milli   INTEGER NOT NULL,
  allocated_ms    INTEGER NOT NULL,
  released_ms     INTEGER,                -- NULL while held
  PRIMARY KEY (job_id, gpu_index)
);
CREATE TABLE transitions (
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  from_state      TEXT NOT NULL,          -- '' for the submission
  to_state        TEXT NOT NULL,
  at_ms           INTEGER NOT NULL,
  reason          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX transitions_job ON transitions(job_id);
)sql",
    // 2: events (every decision the daemon takes), idle accounting, quotas,
    // and autoscaled services with their replica jobs.
    R"sql(
ALTER TABLE jobs ADD COLUMN idle_ms INTEGER NOT NULL DEFAULT 0;
CREATE TABLE events (
  id              INTEGER PRIMARY KEY,
  at_ms           INTEGER NOT NULL,
  kind            TEXT NOT NULL,
  job_id          INTEGER NOT NULL DEFAULT 0,   -- 0: not about one job
  user            TEXT NOT NULL DEFAULT '',
  message         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_at ON events(at_ms);
CREATE INDEX events_job ON events(job_id) WHERE job_id != 0;
CREATE TABLE quotas (
  scope           TEXT NOT NULL CHECK (scope IN ('user', 'group')),
  name            TEXT NOT NULL,
  memory_bytes    INTEGER,                -- NULL: no limit
  gpus            INTEGER,
  compute_milli   INTEGER,
  running_jobs    INTEGER,
  updated_ms      INTEGER NOT NULL,
  PRIMARY KEY (scope, name)
);
CREATE TABLE services (
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL UNIQUE,
  uid             INTEGER NOT NULL,
  gid             INTEGER NOT NULL,
  user            TEXT NOT NULL,
  replicas_min    INTEGER NOT NULL,
  replicas_max    INTEGER NOT NULL,
  desired         INTEGER NOT NULL,
  target_util_pct REAL NOT NULL,
  spec            TEXT NOT NULL,          -- JSON: request fields, windows, cool-down
  argv            TEXT NOT NULL,          -- JSON array of strings
  cwd             TEXT NOT NULL,
  env             TEXT NOT NULL,          -- JSON array of "K=V"
  created_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL,
  removed_ms      INTEGER                 -- NULL while it exists
);
CREATE TABLE service_replicas (
  service_id      INTEGER NOT NULL REFERENCES services(id),
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  PRIMARY KEY (service_id, job_id)
);
)sql",
    // 3: pools and restartable jobs; allocation rows get their own id, so a
    // job may hold a GPU again after a preemption or a resize, each stretch
    // its own row, with at most one held row per (job, GPU).
    R"sql(
ALTER TABLE jobs ADD COLUMN pool TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN restartable INTEGER NOT NULL DEFAULT 0;
CREATE TABLE allocations_v3 (
  id              INTEGER PRIMARY KEY,
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  gpu_index       INTEGER NOT NULL,
  gpu_uuid        TEXT NOT NULL,
  memory_bytes    INTEGER NOT NULL,
  compute_milli   INTEGER NOT NULL,
  allocated_ms    INTEGER NOT NULL,
  released_ms     INTEGER                 -- NULL while held
);
INSERT INTO allocations_v3 (job_id, gpu_index, gpu_uuid, memory_bytes, compute_milli,
                            allocated_ms, released_ms)
  SELECT job_id, gpu_index, gpu_uuid, memory_bytes, compute_milli, allocated_ms, released_ms
  FROM allocations ORDER BY job_id, gpu_index;
DROP TABLE allocations;
ALTER TABLE allocations_v3 RENAME TO allocations;
CREATE UNIQUE INDEX allocations_held ON allocations(job_id, gpu_index)
  WHERE released_ms IS NULL;
CREATE INDEX allocations_job ON allocations(job_id);
)sql",
    // 4: a fraction's compute mode (hard | work-conserving).
    R"sql(
ALTER TABLE jobs ADD COLUMN compute_mode TEXT NOT NULL DEFAULT 'hard';
)sql",
    // 5: host limits applied through the job's cgroup (--cpus, --host-mem);
    // 0 = none.
    R"sql(
ALTER TABLE jobs ADD COLUMN host_cpu_milli INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN host_memory_bytes INTEGER NOT NULL DEFAULT 0;
)sql",
    // 6: job dependencies (--after): the jobs a queued job waits for, as the
    // canonical list core::FormatDependencies writes ("3,4:ok"); '' = none.
    R"sql(
ALTER TABLE jobs ADD COLUMN after_jobs TEXT NOT NULL DEFAULT '';
)sql",
    // 7: container jobs (--image, --engine); '' = a host job.
    R"sql(
ALTER TABLE jobs ADD COLUMN image TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN engine TEXT NOT NULL DEFAULT '';
)sql",
    // 8: labels (a JSON object of strings; the device plugin's namespace,
    // pod and container) and external jobs (mode 'external', no new column).
    R"sql(
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
)sql",
    // 9: an external job bound to the process that asked for it (a Slurm
    // step's slurmstepd): its pid and start time; 0 = not bound.
    R"sql(
ALTER TABLE jobs ADD COLUMN holder_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN holder_start_time INTEGER NOT NULL DEFAULT 0;
)sql",
    // 10: suspension (state 'suspended'): when the current one began (0:
    // not suspended), the time spent suspended before it, and whether the
    // daemon resumes it once it fits (a preemption victim). The live-jobs
    // index covers the new live state.
    R"sql(
ALTER TABLE jobs ADD COLUMN suspended_since_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN suspended_total_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN resume_when_fits INTEGER NOT NULL DEFAULT 0;
DROP INDEX jobs_live;
CREATE INDEX jobs_live ON jobs(state) WHERE state IN ('queued', 'running', 'suspended');
)sql",
    // 11: a queued job held by `gpuslice hold` ('user': its owner's hold,
    // 'admin': an admin's, which only an admin releases); '' = not held.
    R"sql(
ALTER TABLE jobs ADD COLUMN hold TEXT NOT NULL DEFAULT '';
)sql",
    // 12: scheduling: the GPU models a job may run on (--gpu-model,
    // core::FormatGpuModels: "a100|h100"; '' = any) and its exemption from
    // idle reclaim (--no-idle-reclaim).
    R"sql(
ALTER TABLE jobs ADD COLUMN gpu_models TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN no_idle_reclaim INTEGER NOT NULL DEFAULT 0;
)sql",
};

}  // namespace

std::span<const char* const> LedgerMigrations() { return kMigrations; }

}  // namespace gpuslice::daemon
