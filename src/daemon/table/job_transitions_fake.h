#pragma once

// A JobTransitions for the components' unit tests: it applies a change of
// state to the job (nothing refused, nothing written) and records what was
// asked, so that a test can check which jobs were written, which events
// told of them and how often the queue was to be planned.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/table/job_transitions.h"

namespace gpuslice::daemon {

class FakeTransitions : public JobTransitions {
 public:
  struct Event {
    std::string kind;
    uint64_t job_id = 0;
    std::string user;
    std::string message;
  };

  bool ChangeState(core::Job& job, core::JobState to, std::string kind,
                   std::string message) override {
    job.state = to;
    if (!kind.empty()) events.push_back({std::move(kind), job.id, job.user, std::move(message)});
    return true;
  }
  bool Persist(const core::Job& job, std::optional<core::JobState> from) override {
    persisted.push_back({job.id, from});
    return persist_ok;
  }
  void FinishJob(core::Job& job, core::JobState state, int exit_code, std::string reason) override {
    job.state = state;
    job.exit_code = exit_code;
    job.reason = std::move(reason);
    finished.push_back(job.id);
  }
  void RecordEvent(std::string kind, uint64_t job_id, std::string user,
                   std::string message) override {
    events.push_back({std::move(kind), job_id, std::move(user), std::move(message)});
  }
  void Schedule() override { ++schedules; }
  void RequestSchedule() override { ++requested; }

  // The ids of the jobs written, in order.
  std::vector<uint64_t> PersistedIds() const {
    std::vector<uint64_t> ids;
    for (const auto& [id, from] : persisted) ids.push_back(id);
    return ids;
  }
  // Each event as "kind: message".
  std::vector<std::string> EventTexts() const {
    std::vector<std::string> out;
    for (const Event& e : events) out.push_back(e.kind + ": " + e.message);
    return out;
  }
  // Plans asked for, now or batched.
  int plans() const { return schedules + requested; }

  bool persist_ok = true;  // What Persist answers (false: a failed ledger write).
  std::vector<std::pair<uint64_t, std::optional<core::JobState>>> persisted;
  std::vector<Event> events;
  std::vector<uint64_t> finished;  // The jobs ended, in order.
  int schedules = 0;
  int requested = 0;
};

}  // namespace gpuslice::daemon
