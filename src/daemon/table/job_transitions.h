#pragma once

// How the daemon's components change a job: through the one place that
// refuses an illegal change, sets the state, writes the ledger and records
// the event (jobs/service.h implements it). A component that ends, persists
// or re-plans a job holds a JobTransitions&, never the coordinator itself,
// so that it sees these verbs and nothing else of it.

#include <cstdint>
#include <optional>
#include <string>

#include "core/jobs/job.h"

namespace gpuslice::daemon {

class JobTransitions {
 public:
  virtual ~JobTransitions() = default;

  // Changes `job` to state `to` (false, nothing changed, when the change is
  // illegal; false also when the ledger write failed: degraded, retried),
  // then records the event `kind` with `message` ("": none). Set the job's
  // other fields (its reason first) before calling.
  virtual bool ChangeState(core::Job& job, core::JobState to, std::string kind,
                           std::string message) = 0;
  // Writes a change of `job`'s fields, its state unchanged from `from`.
  virtual bool Persist(const core::Job& job, std::optional<core::JobState> from) = 0;
  // Ends a live job: releases what it holds, then the change and its event.
  virtual void FinishJob(core::Job& job, core::JobState state, int exit_code,
                         std::string reason) = 0;
  // An event not tied to a change of state (docs/DAEMON.md lists the kinds).
  virtual void RecordEvent(std::string kind, uint64_t job_id, std::string user,
                           std::string message) = 0;
  // Plans the queue now (Schedule), or soon when planning now would be
  // costly (RequestSchedule: batched until the event loop's next Flush).
  virtual void Schedule() = 0;
  virtual void RequestSchedule() = 0;
};

}  // namespace gpuslice::daemon
